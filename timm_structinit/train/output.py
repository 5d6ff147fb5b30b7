""" The run's output folder: chosen without overwriting another run's files, claimed by one run at a time, cleaned
when a run leaves nothing to resume, and its summary drawn to a figure. """
import argparse
import csv
import os
import shutil
import socket
import time
from contextlib import contextmanager
from datetime import datetime
from typing import Iterator, List, Optional, Tuple

from ..figures import new_figure, save_figure
from .checks import resume_path
from .config import ConfigError

# files this entry point writes into an output directory; --overwrite removes exactly these
_OUTPUT_FILES = ('summary.csv', 'summary.png', 'target_mass.csv', 'target_mass.png', 'args.yaml', 'last.pth.tar',
                 'model_best.pth.tar', 'tmp.pth.tar')
# the file that says which process runs in a folder (created exclusively: one run at a time)
LOCK_NAME = '.timm-structinit.lock'
# how torch.save reports a write of its zip container that the file system refused (a full disk, an I/O error)
_TORCH_WRITE_FAILURES = ('unexpected pos', 'failed writing', 'file write failed')


class OutputWriteError(RuntimeError):
    """ The output folder refused a file of the run (a full or read-only file system): the run stops with one line,
    keeping the last checkpoint that was written whole. """


@contextmanager
def writing_output(folder: str) -> Iterator[None]:
    """ Turn a refused write into `folder` (an OSError, or torch.save's RuntimeError for its zip container) into an
    OutputWriteError that says what was refused and how much room is left; a checkpoint half-written in the attempt
    is removed. """
    started = time.time()
    try:
        yield
    except OSError as e:
        reason = e.strerror or str(e)
        target = e.filename
    except RuntimeError as e:
        if isinstance(e, OutputWriteError) or not any(text in str(e) for text in _TORCH_WRITE_FAILURES):
            raise
        reason, target = 'the write failed', None
    else:
        return
    _remove_partial_checkpoints(folder, started)
    try:
        free = shutil.disk_usage(folder).free
        room = (f'{free / 2 ** 20:.1f} MiB free there' if free >= 2 ** 20
                else f'its file system is full ({free} bytes free)')
    except OSError:
        room = 'the folder cannot be read'
    last = os.path.join(folder, 'last.pth.tar')
    resume = (f'; the last finished epoch is in {last} (continue with --resume {last} once there is room)'
              if os.path.exists(last) else '')
    raise OutputWriteError(f'cannot write {target or "a checkpoint"} in the output folder {os.path.abspath(folder)}: '
                           f'{reason}, {room}{resume}') from None


def _remove_partial_checkpoints(folder: str, since: float) -> None:
    """ Remove the checkpoints of `folder` a failed save may have left half-written: its temporary file, and any
    copy of last.pth.tar made since `since` that does not match it in size. """
    last = os.path.join(folder, 'last.pth.tar')
    size = os.path.getsize(last) if os.path.exists(last) else None
    for name in os.listdir(folder) if os.path.isdir(folder) else ():
        path = os.path.join(folder, name)
        copy = name == 'model_best.pth.tar' or _is_epoch_checkpoint(name)
        if name == 'tmp.pth.tar' or (copy and os.path.getmtime(path) >= since and os.path.getsize(path) != size):
            os.remove(path)


def _content(path: str) -> List[str]:
    return [name for name in os.listdir(path) if name != LOCK_NAME] if os.path.isdir(path) else []


def output_dir(args: argparse.Namespace) -> Tuple[str, bool]:
    """ Decide the output folder; returns (path, continuing) and refuses to write into a used folder. """
    root = args.output or './output/train'
    resume_dir = os.path.dirname(os.path.abspath(resume_path(args.resume))) if args.resume else None
    if args.experiment:
        path = os.path.join(root, args.experiment)
    elif resume_dir is not None:
        path = resume_dir  # continue in the folder of the checkpoint
    else:
        path = os.path.join(root, '-'.join([datetime.now().strftime('%Y%m%d-%H%M%S'), args.model.replace('/', '_')]))
    continuing = resume_dir is not None and os.path.abspath(path) == resume_dir
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


def _process_start(pid: int) -> str:
    """ When process `pid` started (clock ticks since boot, from /proc), '' where that is not known: with the pid it
    names one process, even after the pid is reused. """
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().rsplit(')', 1)[1].split()[19]
    except (OSError, IndexError):
        return ''


def _lock_owner_alive(text: str) -> bool:
    host, pid, start = (text.split() + ['', '', ''])[:3]
    if host != socket.gethostname() or not pid.isdigit():
        return bool(host)  # another machine's run (a shared file system): assumed alive
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, another user's
    return not start or _process_start(int(pid)) in ('', start)


def claim_output_dir(path: str, continuing: bool, overwrite: bool) -> Optional[str]:
    """ Make `path` and claim it for this run with an exclusively created lock file, so that of two runs started
    into one folder exactly one goes on; a lock left by a process that is gone is taken over. The folder is checked
    again once claimed (another run may have filled it since `output_dir`). Returns the outermost folder made. """
    created = first_missing(path)
    lock = os.path.join(path, LOCK_NAME)
    me = f'{socket.gethostname()} {os.getpid()} {_process_start(os.getpid())}'
    for _ in range(2):
        try:
            os.makedirs(path, exist_ok=True)
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                with open(lock) as f:
                    owner = f.read()
            except FileNotFoundError:
                continue  # released meanwhile
            if _lock_owner_alive(owner):
                host, pid = (owner.split() + ['?', '?'])[:2]
                raise ConfigError(f'output folder {os.path.abspath(path)} is in use by another run (process {pid} '
                                  f'on {host}); wait for it to finish, or choose another --experiment') from None
            try:  # the owner is gone: its lock goes aside (only one of several takers can move it), then retry
                os.replace(lock, f'{lock}.stale-{os.getpid()}')
                os.remove(f'{lock}.stale-{os.getpid()}')
            except FileNotFoundError:
                pass
            continue
        except OSError as e:
            # what the permission check before cannot foresee: a read-only or full file system, a pseudo file
            # system such as /proc; the folders made here go again
            _remove_empty_folders(path, created)
            raise ConfigError(f'cannot create the output folder {os.path.abspath(path)}: '
                              f'{e.strerror or e}; choose another --output') from None
        try:
            with os.fdopen(fd, 'w') as f:
                f.write(me)
        except OSError as e:
            os.remove(lock)
            _remove_empty_folders(path, created)
            raise ConfigError(f'cannot write in the output folder {os.path.abspath(path)}: '
                              f'{e.strerror or e}; choose another --output') from None
        break
    else:
        raise ConfigError(f'output folder {os.path.abspath(path)} is being claimed by another run; try again')
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
    """ Remove this process's lock from `path` (a lock of another process is left alone). """
    lock = os.path.join(path, LOCK_NAME)
    try:
        with open(lock) as f:
            mine = f.read().split()[1:2] == [str(os.getpid())]
        if mine:
            os.remove(lock)
    except (FileNotFoundError, IndexError):
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


def first_missing(path: str) -> Optional[str]:
    """ The outermost folder of `path` that does not exist yet (None if `path` exists). """
    missing, path = None, os.path.abspath(path)
    while not os.path.exists(path):
        missing, path = path, os.path.dirname(path)
    return missing


def _run_files(path: str) -> List[str]:
    """ The files of `path` this entry point writes. """
    return [os.path.join(path, name) for name in os.listdir(path)
            if name in _OUTPUT_FILES or _is_epoch_checkpoint(name)]


def _is_epoch_checkpoint(name: str) -> bool:
    """ A `checkpoint-N.pth.tar` of timm's CheckpointSaver. """
    return name.startswith('checkpoint-') and name.endswith('.pth.tar')


def remove_unfinished_run(path: str, created: Optional[str]) -> None:
    """ A new run that stopped before its first checkpoint: remove the files it wrote, and the folders it made. """
    if not os.path.isdir(path):
        return
    release_output_dir(path)
    for file in _run_files(path):
        os.remove(file)
    _remove_empty_folders(path, created)


def _remove_empty_folders(path: str, created: Optional[str]) -> None:
    """ Remove `path` and its parents up to `created` (the outermost folder a run made) while they are empty. """
    path = os.path.abspath(path)
    while (created is not None and os.path.commonpath([path, created]) == created and os.path.isdir(path)
           and not os.listdir(path)):
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
    ax_loss.set(xlabel='epoch', ylabel='loss', title='loss')
    ax_acc.set(xlabel='epoch', ylabel='accuracy (%)', title='eval accuracy')
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(os.path.basename(os.path.dirname(os.path.abspath(summary_csv))), fontsize=9)
    save_figure(fig, png_path)
    return png_path
