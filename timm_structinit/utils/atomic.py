""" Writing files and folders so that a reader never sees them half-written.

Everything the package writes (figures, CSVs, exports, checkpoints it converts) is written under a staging name
next to its target and renamed into place when complete; on failure the staging copy is removed. Staging names are
`.<target>.<pid>-<hex>.tmp` (and `.old` for a folder being replaced), so a later write can tell the leftovers of a
killed process from those of one still running.
"""
import glob
import logging
import os
import re
import secrets
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Union

__all__ = ['atomic_file', 'atomic_dir', 'remove_stale_staging', 'write_refused']

_logger = logging.getLogger(__name__)

# the pid is left out by older versions of the package
_STAGING_RE = r'\.{name}\.(?:(?P<pid>\d+)-)?[0-9a-f]{{8}}\.(?:tmp|old)(?:\..*)?'


def _sibling(target: Path, kind: str) -> Path:
    # a sibling, so the final rename stays on one file system; the target's suffix is kept last, so tools that
    # pick a format by extension (matplotlib's savefig) write the right one
    return target.with_name(f'.{target.name}.{os.getpid()}-{secrets.token_hex(4)}.{kind}{target.suffix}')


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()


def write_refused(message: str, cause: BaseException) -> OSError:
    """ An OSError saying `message` (what could not be written, and why) that keeps `cause`'s errno for callers, out
    of the message (`OSError(errno, message)` would print it as '[Errno N] ...'). """
    error = OSError(message)
    error.errno = getattr(cause, 'errno', None)
    return error


@contextmanager
def atomic_file(target: Union[str, Path]) -> Iterator[Path]:
    """ Yield a staging path next to `target`; when the block succeeds it replaces `target`, else it is removed. A
    write refused on the staging path (or its rename) is raised as the same error naming `target`: the file the
    user knows, not its staging name. """
    target = Path(target)
    staging = _sibling(target, 'tmp')
    try:
        yield staging
        os.replace(staging, target)
    except OSError as e:
        if e.errno is None or str(staging) not in (e.filename, e.filename2):
            raise
        raise OSError(e.errno, e.strerror, str(target)) from None  # OSError picks the subclass of its errno
    finally:
        if staging.exists():
            _remove(staging)


def _process_alive(pid: Optional[str]) -> bool:
    if pid is None or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # someone else's process (or a pid this system cannot hold): leave its folder alone
    return True


def remove_stale_staging(target: Path) -> None:
    """ Delete the staging folders a killed writer left next to `target`; those of a running one stay. """
    pattern = re.compile(_STAGING_RE.format(name=re.escape(target.name)))
    for path in target.parent.glob(f'.{glob.escape(target.name)}.*'):
        match = pattern.fullmatch(path.name)
        if match and path.is_dir() and not _process_alive(match.group('pid')):
            _logger.info(f'Removing {path}, left by an interrupted write')
            shutil.rmtree(path, ignore_errors=True)


@contextmanager
def atomic_dir(target: Union[str, Path], before_replace: Optional[Callable[[Path], None]] = None) -> Iterator[Path]:
    """ Yield a fresh folder next to `target`; on success it replaces `target` by renames, on failure it goes.

    The old content is removed only after the new one is complete and in place. `before_replace(target)` runs just
    before the swap (to check again that the target may be replaced). Leftovers of killed writers are removed first.
    """
    target = Path(target)
    made = _missing_parents(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_staging(target)
        staging = _sibling(target, 'tmp')
        staging.mkdir()  # mkdir (not mkdtemp) keeps the usual permissions
    except BaseException:
        _remove_made(made)
        raise
    try:
        yield staging
        if before_replace is not None:
            before_replace(target)
        backup = None
        if target.exists():
            backup = _sibling(target, 'old')
            os.rename(target, backup)
        try:
            os.rename(staging, target)
        except BaseException:
            if backup is not None:
                os.rename(backup, target)
            raise
        if backup is not None:
            shutil.rmtree(backup)
    except BaseException:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
        _remove_made(made)  # the folders made for a write that failed go too: nothing half-written is left
        raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _missing_parents(target: Path) -> List[Path]:
    """ The folders above `target` that do not exist yet, innermost first. """
    missing, folder = [], target.absolute().parent
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


def _remove_made(folders: List[Path]) -> None:
    """ Remove the folders a failed write made (innermost first), each only while it is empty. """
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # not made after all, or someone else's content meanwhile
            break
