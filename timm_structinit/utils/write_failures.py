""" Why a write failed, in words a user can act on: the one place every write of the package (checkpoints through
timm's saver, exports, push's staging, figures, CSVs, the commands' own output streams) turns a failure into one line.

The layers report a failure differently, and the reason is taken from the operating system's error number wherever
there is one: Python raises OSError with its errno; safetensors a SafetensorError printing Rust's io::Error, which
gives it ('... (os error 28)'); torch.save, given a path, a RuntimeError from its C++ zip writer that keeps none (its
words, 'unexpected pos', 'file write failed', change between torch releases and are not read). Such an error is known
as a write failure by where it was raised (inside torch.save), and its cause is asked of the folder written in:
gone, read-only, full, not writable, or this process's file-size limit (`_probe`). The errno itself hides causes a
user must tell apart: ENOSPC on a file system with free bytes but no free inodes, EFBIG from this process's file-size
limit, ENAMETOOLONG from one name or the whole path being longer than the system allows.

Hand-written, as no library says these in words: `errno`/`os.strerror` give the errno's name and its one line, and
`shutil.disk_usage`/`os.statvfs` the numbers read here.
"""
import errno
import os
import re
import shutil
import traceback
from typing import Optional

__all__ = ['is_write_failure', 'write_failure_reason', 'file_size_limit', 'path_too_long']


def is_write_failure(error: BaseException) -> bool:
    """ Whether `error`, raised by a write, is the file system refusing it (not a bug or a bad value): an OSError,
    safetensors' error, or a RuntimeError raised inside torch.save (its zip writer's, which carries no errno). """
    if isinstance(error, OSError) or type(error).__name__ == 'SafetensorError':
        return True
    if not isinstance(error, RuntimeError) or error.__traceback__ is None:
        return False
    serialization = os.path.join('torch', 'serialization.py')
    return any(f.filename.endswith(serialization) for f in traceback.extract_tb(error.__traceback__))


def _errno_of(error: BaseException) -> Optional[int]:
    """ The operating system's error number `error` carries: an OSError's, or the one Rust's io::Error prints in
    safetensors' message; None for torch's zip writer, which keeps none. """
    code = getattr(error, 'errno', None)
    if isinstance(code, int):
        return code
    match = re.search(r'\(os error (\d+)\)', str(error))
    return int(match.group(1)) if match else None


def file_size_limit() -> Optional[int]:
    """ This process's file-size limit in bytes (`ulimit -f`), None when there is none. """
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    except (ImportError, OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY else soft


def _existing_folder(path: str) -> str:
    """ `path` when it is a folder, else the nearest folder above it that exists. """
    folder = os.path.abspath(path)
    while folder != os.path.dirname(folder) and not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    return folder


def path_too_long(path: str) -> Optional[str]:
    """ Why `path` cannot exist on its file system (a name longer than NAME_MAX, the path longer than PATH_MAX),
    or None. """
    folder = _existing_folder(path)
    try:
        name_max, path_max = os.pathconf(folder, 'PC_NAME_MAX'), os.pathconf(folder, 'PC_PATH_MAX')
    except (OSError, ValueError, AttributeError):
        name_max, path_max = 255, 4096
    absolute = os.fsencode(os.path.abspath(path))
    longest = max(absolute.split(b'/'), key=len)
    if len(longest) > name_max:
        return (f'the name {os.fsdecode(longest[:40])}... has {len(longest)} bytes, more than the {name_max} its file '
                f'system allows for one name')
    if len(absolute) >= path_max:
        return f'the path has {len(absolute)} bytes, more than the {path_max - 1} the system allows'
    return None


def _no_room(folder: str) -> str:
    """ ENOSPC in words: no free inodes (the errno says 'no space' though bytes are free), or the bytes left. """
    try:
        st = os.statvfs(folder)
        free = shutil.disk_usage(folder).free
    except (OSError, AttributeError):
        return 'No space left on device'
    if st.f_files and not st.f_favail:
        return (f'no free inodes left on its file system (every file entry is used; {free / 2 ** 20:.1f} MiB are '
                f'still free): delete files there or write elsewhere')
    return 'No space left on device, ' + (f'{free / 2 ** 20:.1f} MiB' if free >= 2 ** 20 else f'{free:,} bytes') + \
        ' free there'


def _probe(folder: str) -> Optional[int]:
    """ The likely errno of a failure reported without one: what the folder itself says now. """
    if not os.path.isdir(folder):
        return errno.ENOENT
    try:
        st = os.statvfs(folder)
        if st.f_flag & os.ST_RDONLY:
            return errno.EROFS
        if not st.f_bavail or (st.f_files and not st.f_favail):
            return errno.ENOSPC
    except (OSError, AttributeError):
        pass
    if not os.access(folder, os.W_OK | os.X_OK):
        return errno.EACCES
    return errno.EFBIG if file_size_limit() is not None else None


def write_failure_reason(error: BaseException, path: str) -> str:
    """ The operating system's reason `error` gives for a write at `path` (the file, or the folder written in), in
    words that name its cause. Called where the write failed, before anything is cleaned up: the file system's state
    (its free inodes) is then the one the write met. """
    path = os.path.abspath(path)
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    code = _errno_of(error)
    if code is None and not isinstance(error, OSError):
        code = _probe(folder)
    if code == errno.ENOSPC:
        return _no_room(_existing_folder(folder))
    if code == errno.EFBIG:
        limit = file_size_limit()
        return ('File too large: ' + (f"a file may not exceed this process's file-size limit of {limit:,} bytes "
                                      f"(ulimit -f)" if limit is not None
                                      else 'the file exceeds the largest file its file system allows'))
    if code == errno.ENAMETOOLONG:
        return f'File name too long: {path_too_long(path) or "a name or the path is longer than the system allows"}'
    if code == errno.ENOENT and not os.path.isdir(folder):
        return f'its folder {folder} no longer exists (deleted while the command ran?)'
    if code is not None:
        return os.strerror(code)
    return ' '.join(str(error).split())[:300] or type(error).__name__
