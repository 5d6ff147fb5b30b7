""" The run's output folder: chosen without overwriting another run's files, claimed by one run at a time, cleaned
when a run leaves nothing to resume, and its summary drawn to a figure. """
import argparse
import csv
import os
import socket
import time
from contextlib import contextmanager
from datetime import datetime
from typing import Dict, Iterator, List, Optional, Tuple

from filelock import FileLock, Timeout

from ..errors import ConfigError, OutputWriteError
from ..utils.figures import epoch_axis, new_figure, save_figure
from ..utils.run_folder import holds_finished_epoch, is_epoch_checkpoint
from ..utils.write_failures import is_write_failure, path_too_long, write_failure_reason
from .inputs import resume_file
from .resume import continues_in_folder

# files this entry point writes into an output directory; --overwrite removes exactly these
_OUTPUT_FILES = ('summary.csv', 'summary.png', 'target_mass.csv', 'target_mass.png', 'args.yaml', 'last.pth.tar',
                 'model_best.pth.tar', 'tmp.pth.tar')
# the file whose OS lock says a run is in a folder (one run at a time); it names the last holder, and stays
LOCK_NAME = '.timm-structinit.lock'
_HELD: Dict[str, FileLock] = {}  # the locks this process holds, by folder


@contextmanager
def writing_output(folder: str) -> Iterator[None]:
    """ Turn a refused write into `folder` (an OSError, torch.save's RuntimeError for its zip container, whatever
    `is_write_failure` takes for one) into an OutputWriteError naming the file and the operating system's reason
    (`write_failure_reason`); a checkpoint half-written in the attempt is removed, the last whole one kept. """
    started = time.time()
    try:
        yield
    except (OSError, RuntimeError) as e:
        if isinstance(e, OutputWriteError) or not is_write_failure(e):
            raise
        target = getattr(e, 'filename', None)
        reason = write_failure_reason(e, target or os.path.join(folder, 'last.pth.tar'))
    else:
        return
    try:
        _remove_partial_checkpoints(folder, started)
    except OSError:  # a file system that turned read-only keeps them; the message below still says why
        pass
    last = os.path.join(folder, 'last.pth.tar')
    resume = (f'; the last finished epoch is in {last} (continue with --resume {last} once there is room)'
              if os.path.exists(last) else '')
    raise OutputWriteError(f'cannot write {target or "a checkpoint"} in the output folder {os.path.abspath(folder)}: '
                           f'{reason}{resume}') from None


def _remove_partial_checkpoints(folder: str, since: float) -> None:
    """ Remove the checkpoints of `folder` a failed save may have left half-written: its temporary file, and any
    copy of last.pth.tar made since `since` that does not match it in size. (timm's CheckpointSaver, which wrote them,
    leaves them where a save fails, and knows nothing of the others.) """
    last = os.path.join(folder, 'last.pth.tar')
    size = os.path.getsize(last) if os.path.exists(last) else None
    for name in os.listdir(folder) if os.path.isdir(folder) else ():
        path = os.path.join(folder, name)
        copy = name == 'model_best.pth.tar' or is_epoch_checkpoint(name)
        if name == 'tmp.pth.tar' or (copy and os.path.getmtime(path) >= since and os.path.getsize(path) != size):
            os.remove(path)


def _content(path: str) -> List[str]:
    return [name for name in os.listdir(path) if name != LOCK_NAME] if os.path.isdir(path) else []


def output_dir(args: argparse.Namespace) -> Tuple[str, bool]:
    """ Decide the output folder; returns (path, continuing) and refuses to write into a used folder. """
    root = args.output or './output/train'
    # the folder of the run the checkpoint belongs to, by its real path (a link elsewhere is followed to it); a
    # checkpoint of another name is a start point, not a run to continue in its folder
    resume_dir = os.path.dirname(resume_file(args.resume)) if args.resume and continues_in_folder(args.resume) \
        else None
    if args.experiment:
        path = os.path.join(root, args.experiment)
    elif resume_dir is not None:
        path = resume_dir  # continue in the folder of the checkpoint
    else:
        path = os.path.join(root, '-'.join([datetime.now().strftime('%Y%m%d-%H%M%S'), args.model.replace('/', '_')]))
    # absolute from here on: a working folder deleted under the run then fails as that folder, not as every path
    path = os.path.abspath(path)
    continuing = resume_dir is not None and os.path.realpath(path) == resume_dir
    _check_writable_folder(path, args.output)
    _refuse_used(path, continuing, args.overwrite)
    return path, continuing


def _refuse_used(path: str, continuing: bool, overwrite: bool) -> None:
    if _content(path) and not continuing and not overwrite:
        last = os.path.join(path, 'last.pth.tar')
        resume = f'pass --resume {last} to continue that run, ' if os.path.isfile(last) else (
            'it holds no checkpoint, so there is nothing to resume; ')
        raise ConfigError(f'output folder {os.path.abspath(path)} already exists and is not empty; {resume}pass '
                          f'--overwrite to replace its files, or another --experiment')


def _write_owner(fd: int) -> None:
    """ `filelock`'s on_acquired: write who holds the lock into its file, for the message a second run gets (filelock
    records no holder; on_acquired is its hook for writing one). """
    os.ftruncate(fd, 0)
    os.write(fd, f'{socket.gethostname()} {os.getpid()}'.encode())


def _lock_owner(lock: str) -> str:
    """ 'process PID on HOST' as the lock file says, '' where it cannot be read. """
    try:
        with open(lock) as f:
            host, pid = (f.read().split() + ['', ''])[:2]
    except OSError:
        return ''
    return f'process {pid} on {host}' if host and pid.isdigit() else ''


def claim_output_dir(path: str, continuing: bool, overwrite: bool) -> Optional[str]:
    """ Make `path` and claim it for this run with an OS lock on its lock file (`filelock`: flock, which the kernel
    releases when the process ends however it ends, so no lock outlives its run), so that of two runs started into
    one folder exactly one goes on. The lock file stays in the folder after the run, as filelock advises (a file
    removed while another process has it open would let two runs each lock a file of that name); every check of the
    folder's content passes it over. The folder is checked again once claimed (another run may have filled it since
    `output_dir`). Returns the outermost folder made. """
    created = first_missing(path)
    lock_path = os.path.join(path, LOCK_NAME)
    try:
        os.makedirs(path, exist_ok=True)
        lock = FileLock(lock_path, timeout=0, preserve_lock_file=True, on_acquired=_write_owner)
        lock.acquire()
    except Timeout:
        owner = f' ({_lock_owner(lock_path)})' if _lock_owner(lock_path) else ''
        raise ConfigError(f'output folder {os.path.abspath(path)} is in use by another run{owner}, which holds its '
                          f'lock file {os.path.abspath(lock_path)}; wait for it to finish, or choose another '
                          f'--experiment') from None
    except OSError as e:
        # what the permission check before cannot foresee: a read-only or full file system, a pseudo file system
        # such as /proc, one out of inodes; the folders made here go again, once the reason is read
        reason = write_failure_reason(e, e.filename or path)
        _remove_empty_folders(path, created)
        raise ConfigError(f'cannot create the output folder {os.path.abspath(path)}: {reason}; choose another '
                          f'--output') from None
    _HELD[os.path.abspath(path)] = lock
    try:
        _refuse_used(path, continuing, overwrite)
    except ConfigError:
        release_output_dir(path)
        raise
    if overwrite and not continuing:
        for file in _run_files(path):
            os.remove(file)
    return created


def release_output_dir(path: str) -> None:
    """ Release this process's lock on `path` (its file stays, for the next run to lock); a lock of another process
    is left alone. """
    lock = _HELD.pop(os.path.abspath(path), None)
    if lock is not None:
        try:
            lock.release()
        except OSError:  # a file system that failed under the run: the lock itself ends with the process
            pass


def _check_writable_folder(path: str, output: str) -> None:
    """ Refuse an output folder that is a file, or lies in a folder this process cannot write. """
    flag = f'--output {output!r}' if output else f'output folder {path}'
    missing = first_missing(path)
    existing = os.path.dirname(missing) if missing else os.path.abspath(path)
    if not os.path.isdir(existing):
        raise ConfigError(f'{flag}: {existing} is a file, not a folder')
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f'{flag}: no permission to write in {existing}')
    too_long = path_too_long(os.path.join(path, 'model_best.pth.tar'))  # the longest name a run writes there
    if too_long:
        raise ConfigError(f'{flag}: the output folder {os.path.abspath(path)[:120]}... cannot be made: {too_long}; '
                          f'choose a shorter --output or --experiment')


def first_missing(path: str) -> Optional[str]:
    """ The outermost folder of `path` that does not exist yet (None if `path` exists): what a run made, and may
    remove again (os.makedirs does not say what it made). """
    missing, path = None, os.path.abspath(path)
    while not os.path.exists(path):
        missing, path = path, os.path.dirname(path)
    return missing


def _run_files(path: str) -> List[str]:
    """ The files of `path` this entry point writes. """
    return [os.path.join(path, name) for name in os.listdir(path)
            if name in _OUTPUT_FILES or is_epoch_checkpoint(name)]


def remove_unfinished_run(path: str, created: Optional[str]) -> None:
    """ A new run that stopped before its first epoch finished: remove the files it wrote, and the folders it made
    (their lock file with them, while the lock is still held: a run that opened it meanwhile finds it locked, not
    gone), then release the lock. A folder that holds anything of a finished epoch (`holds_finished_epoch`) is left
    whole. """
    if not os.path.isdir(path):
        return
    try:
        if holds_finished_epoch(path):
            return
        for file in _run_files(path):
            os.remove(file)
        _remove_empty_folders(path, created)
    finally:
        release_output_dir(path)


def _remove_empty_folders(path: str, created: Optional[str]) -> None:
    """ Remove `path` and its parents up to `created` (the outermost folder a run made) while they are empty but for
    a lock file. (os.removedirs would go on past `created`, into folders the run did not make, and stop at a lock
    file.) """
    path = os.path.abspath(path)
    while created is not None and os.path.commonpath([path, created]) == created:
        if os.path.isdir(path):  # a folder not made (one a failed makedirs did not reach) is passed over
            if _content(path):
                break
            if os.path.exists(os.path.join(path, LOCK_NAME)):
                os.remove(os.path.join(path, LOCK_NAME))
            os.rmdir(path)
        path = os.path.dirname(path)


def plot_summary(summary_csv: str, png_path: str) -> str:
    """ Draw training/eval loss and eval accuracy per epoch from a summary CSV into a PNG; returns the PNG path. """
    with open(summary_csv, newline='') as f:
        rows = [r for r in csv.DictReader(f) if r.get('epoch') not in (None, '', 'epoch')]
    if not rows:
        raise ValueError(f'{summary_csv} has no epochs to plot')
    epochs = [int(r['epoch']) + 1 for r in rows]  # counted from 1, as the log prints them
    fig = new_figure(figsize=(10, 4), dpi=100)
    ax_loss, ax_acc = fig.subplots(1, 2)
    curves = ((ax_loss, 'train_loss', 'train'), (ax_loss, 'eval_loss', 'eval'),
              (ax_loss, 'eval_ema_loss', 'eval (EMA)'), (ax_acc, 'eval_top1', 'top-1'), (ax_acc, 'eval_top5', 'top-5'),
              (ax_acc, 'eval_ema_top1', 'top-1 (EMA)'))
    for ax, name, label in curves:
        if name in rows[0]:
            ax.plot(epochs, [float(r[name]) for r in rows], marker='.', label=label)
    ax_loss.set(ylabel='loss', title='loss')
    ax_acc.set(ylabel='accuracy (%)', title='eval accuracy')
    for ax in (ax_loss, ax_acc):
        epoch_axis(ax)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(os.path.basename(os.path.dirname(os.path.abspath(summary_csv))), fontsize=9)
    save_figure(fig, png_path)
    return png_path
