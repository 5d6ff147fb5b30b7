""" How a run ends when something stops it: signals, and one process of a distributed run failing.

* SIGTERM, SIGHUP and SIGUSR1 (what `timeout`, SLURM, Docker and Kubernetes send; SLURM's `--signal=USR1@SECONDS`
  and other schedulers warn of a pre-emption with SIGUSR1) stop a run as Ctrl-C does: the epoch in progress is
  abandoned, the last finished epoch's checkpoint is kept, a new run that finished no epoch removes what it wrote, and
  the resume line is printed; the exit status is 128 + the signal's number. `--stop-signals` names the set
  (`STOP_SIGNALS` is the default; `stop_signal` reads one name).
* A stop that comes while an epoch's results are written (its summary row, then its checkpoint: timm's CheckpointSaver
  deletes last.pth.tar and then renames the new one into its place) is raised once they are written whole, so that a
  stop never lands between the deletion and the rename, and the run resumes at the epoch just finished
  (`stops_held`).
* The data loader's workers take no part in a stop. A stop sent to the whole process group (Ctrl-C in a terminal,
  `timeout`, SLURM, a closing terminal) ends them silently, and torch's SIGCHLD handler, which would report each as a
  failed worker while the run is already ending, is set aside until the run returns. A stop that comes while the
  loader forks its workers is raised once it is done (see `stops_held`), and one that comes while the run stops is
  the same stop, not raised again (torchrun under SLURM passes on the SIGTERM that SLURM sends every process).
* In a distributed run, the process that fails posts its one-line error in the launcher's key-value store (the one
  `torchrun` serves at MASTER_ADDR:MASTER_PORT) and exits. torchrun then stops the others; the process of rank 0
  prints the first posted line (its own or another rank's), every other process prints nothing, and none prints a
  traceback for a collective operation that failed because a peer was gone.
"""
import multiprocessing
import os
import signal
import sys
import traceback
from contextlib import contextmanager
from datetime import timedelta
from multiprocessing.context import ForkContext, ForkProcess
from typing import Callable, Dict, Optional, Sequence, Tuple, Union

from timm_structinit_cli.arg_types import STOP_SIGNALS, STOPPABLE, stop_signal

from ..errors import RunStopped

__all__ = [
    'RunStopped', 'STOP_SIGNALS', 'STOPPABLE', 'stop_signal', 'stop_on_signals', 'stops_held', 'quiet_worker_starts',
    'post_failure',
    'posted_failure', 'rank', 'world_size',
]

_KEY = 'timm_structinit/failure'


def _stop(signum: int) -> KeyboardInterrupt:
    _Stops.stopped = True
    return KeyboardInterrupt() if signum == signal.SIGINT else RunStopped(signum)


class _Stops:
    """ The process's stop state: while `depth` > 0 (inside `stops_held`) a stop signal is recorded in `pending`
    instead of raised; `sigchld` is SIGCHLD's handler from before a stop set the children aside; `signums` are the
    signals the run takes as a stop, which its loader workers end on quietly; `stopped`, a stop has been raised, and
    the stop signals that come after it are the same stop (torchrun passes on the SIGTERM that SLURM also sends each of
    its processes): raised again, they would cut short what the run does to stop (say what it kept, wait for a peer's
    failure). """
    depth = 0
    stopped = False
    pending: Optional[int] = None
    sigchld: object = None
    signums: Tuple[int, ...] = tuple(getattr(signal, name) for name in ('SIGINT', *STOP_SIGNALS))


_SIGCHLD = getattr(signal, 'SIGCHLD', None)


def _children_ignored(signum, frame) -> None:
    """ SIGCHLD's handler once the run stops. A Python function, not SIG_DFL: Python reports a signal that came
    while its handler was a Python function and is no longer one when it checks ("Signal 17 ignored due to race
    condition"). """


def _set_children_aside() -> None:
    """ Workers stopped by the same signal are not failures: without torch's SIGCHLD handler, which would report
    each as a failed worker, the loader joins them quietly when the epoch in progress is abandoned. Done again when
    a held stop is raised, since torch installs that handler when a loader's first iterator is made. """
    if _SIGCHLD is None:
        return
    current = signal.getsignal(_SIGCHLD)
    if current is not _children_ignored:
        if _Stops.sigchld is None:
            _Stops.sigchld = current
        signal.signal(_SIGCHLD, _children_ignored)


def stop_on_signals(signums: Sequence[Union[int, str]] = STOP_SIGNALS) -> Callable[[], None]:
    """ Make each of `signums` (numbers or names) raise RunStopped in the main thread, and SIGINT KeyboardInterrupt
    as Python does; returns a function putting the previous handlers back (SIGCHLD's too, which a stop sets aside). """
    from ..utils.startup import command_started
    command_started()
    signums = tuple(getattr(signal, s) if isinstance(s, str) else int(s) for s in signums)
    _Stops.signums, _Stops.stopped = (signal.SIGINT, *signums), False
    previous: Dict[int, object] = {}

    def handler(signum, frame):
        _set_children_aside()
        if _Stops.stopped:
            return
        if _Stops.depth:
            _Stops.pending = _Stops.pending or signum
            return
        raise _stop(signum)

    for signum in (signal.SIGINT, *signums):
        try:
            previous[signum] = signal.signal(signum, handler)
        except (ValueError, OSError):  # not the main thread, or a platform without that signal
            pass

    def restore() -> None:
        _Stops.stopped = False
        for signum, old in previous.items():
            signal.signal(signum, old)
        if _Stops.sigchld is not None:
            signal.signal(_SIGCHLD, _Stops.sigchld)
            _Stops.sigchld = None
    return restore


@contextmanager
def stops_held():
    """ A stop signal that comes in the enclosed code is raised when it ends, not inside it: around what must not be
    left half-done. Python runs a fork's at-fork hooks with the exceptions they raise swallowed ("Exception ignored in
    ... _releaseLock"), which would lose the stop, and torch's loader iterator stopped half-made fails in its __del__
    on attributes its __init__ did not reach; an epoch's checkpoint stopped between timm's deletion of last.pth.tar
    and its rename of the new one would leave no last.pth.tar at all. (Blocking the signals would not do: another
    thread of the process may receive them.) """
    _Stops.depth += 1
    try:
        yield
    finally:
        _Stops.depth -= 1
        if not _Stops.depth and _Stops.pending is not None:
            signum, _Stops.pending = _Stops.pending, None
            _set_children_aside()
            raise _stop(signum)


def _end_worker(signum, frame) -> None:
    """ A stop signal in a loader worker: end it by the signal, as the default action does, without a word. """
    signal.signal(signum, signal.SIG_DFL)
    signal.raise_signal(signum)


def _quiet_resource_sharer(excepthook):
    """ `excepthook` (sys.excepthook, which multiprocessing's resource sharer calls for its errors) except for a
    connection that the main process closed while this worker handed it a tensor's file descriptor: the main
    process is stopping, there is nothing to report. """
    def hook(exc_type, exc, tb):
        frames = traceback.extract_tb(tb) if tb is not None else []
        if issubclass(exc_type, (ConnectionError, EOFError)) and \
                any(f.filename.endswith(os.path.join('multiprocessing', 'resource_sharer.py')) for f in frames):
            return
        excepthook(exc_type, exc, tb)
    return hook


class _QuietWorkerProcess(ForkProcess):
    """ A data loader worker that takes no part in stopping the run: a stop signal sent to it (with the whole
    process group) ends it silently, and the main process stopping in the middle of receiving a batch from it is not
    reported as the worker's error. It is forked with the stops held (see `_quiet_start_class`). """

    def run(self) -> None:
        # The fork copied the main process's handlers, which would raise KeyboardInterrupt or RunStopped here and
        # print the worker's traceback. torch's loader then replaces SIGTERM's with its own, which also ends it.
        for signum in _Stops.signums:
            signal.signal(signum, _end_worker)
        if _Stops.pending is not None:  # a stop that reached this process between the fork and now
            _end_worker(_Stops.pending, None)
        sys.excepthook = _quiet_resource_sharer(sys.excepthook)
        super().run()


class _QuietWorkerContext(ForkContext):
    Process = _QuietWorkerProcess


def _quiet_start_class(loader_class: type) -> type:
    """ `loader_class` whose iterator, which forks the workers, is made with the stops held (`stops_held`): a stop
    that comes meanwhile is raised once the iterator is whole. """
    def __iter__(self):
        with stops_held():
            return loader_class.__iter__(self)
    return type(f'QuietStart{loader_class.__name__}', (loader_class,), {'__iter__': __iter__})


def quiet_worker_starts(loader):
    """ Make `loader`'s workers (timm's PrefetchLoader unwrapped) start with the stops held and take no part in a
    stop. A loader with no workers, its own start method or a start method other than fork (which does not copy
    the handlers) is left as it is. Returns `loader`. """
    inner = getattr(loader, 'loader', loader)
    method = multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]
    if getattr(inner, 'num_workers', 0) > 0 and getattr(inner, 'multiprocessing_context', None) is None \
            and method == 'fork':
        inner.multiprocessing_context = _QuietWorkerContext()
        inner.__class__ = _quiet_start_class(type(inner))  # the same instance: timm's wrappers keep it
    return loader


def _launched() -> bool:
    """ A launcher (torchrun) started this process as one of several: WORLD_SIZE > 1, a RANK below it and the
    store's address (`checks.check_launch_environment` refuses anything else before any work). """
    size, rank_text = os.environ.get('WORLD_SIZE', ''), os.environ.get('RANK', '0') or '0'
    return (size.isdigit() and int(size) > 1 and rank_text.isdigit() and int(rank_text) < int(size)
            and bool(os.environ.get('MASTER_ADDR') and os.environ.get('MASTER_PORT')))


def rank() -> int:
    """ This process's rank in a launched run, else 0 (a RANK left in the environment does not count). """
    text = os.environ.get('RANK', '')
    return int(text) if _launched() and text.isdigit() else 0


def world_size() -> int:
    return int(os.environ['WORLD_SIZE']) if _launched() else 1


def _store():
    """ A client of the launcher's store, or None outside a torchrun launch (or when it cannot be reached). """
    host, port = os.environ.get('MASTER_ADDR'), os.environ.get('MASTER_PORT')
    if world_size() < 2 or not host or not port:
        return None
    try:
        import torch.distributed as dist
        return dist.TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=5),
                             wait_for_workers=False)
    except Exception:  # the launcher is gone: nobody to tell
        return None


def _key(of_rank: int) -> str:
    # a launch's restarts share the store: keys of an earlier attempt are not this one's
    return f'{_KEY}/{os.environ.get("TORCHELASTIC_RUN_ID", "")}/{os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)}/' \
           f'{of_rank}'


def post_failure(status: int, line: str) -> None:
    """ Record this process's failure (exit status and one-line message) for the others. """
    store = _store()
    if store is not None:
        try:
            store.set(_key(rank()), f'{status}\t{line}')
        except Exception:
            pass


def posted_failure(wait: float = 2.0) -> Optional[Tuple[int, int, str]]:
    """ (rank, exit status, line) of a failure another process posted, the lowest rank first; waits up to `wait`
    seconds for one to appear (a peer's failure and its post race the collective error that reports it here). """
    store = _store()
    if store is None:
        return None
    import time
    deadline = time.monotonic() + wait
    while True:
        for other in range(world_size()):
            try:
                if other != rank() and store.check([_key(other)]):
                    status, line = store.get(_key(other)).decode().split('\t', 1)
                    return other, int(status), line
            except Exception:
                return None
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.1)
