""" How a run ends when something stops it: signals, and one process of a distributed run failing.

* SIGTERM and SIGHUP (what `timeout`, SLURM, Docker and Kubernetes send) stop a run as Ctrl-C does: the epoch in
  progress is abandoned, a new run that finished no epoch removes what it wrote, and the resume line is printed;
  the exit status is 128 + the signal's number.
* In a distributed run, the process that fails posts its one-line error in the launcher's key-value store (the one
  `torchrun` serves at MASTER_ADDR:MASTER_PORT) and exits. torchrun then stops the others; the process of rank 0
  prints the first posted line (its own or another rank's), every other process prints nothing, and none prints a
  traceback for a collective operation that failed because a peer was gone.
"""
import os
import signal
from datetime import timedelta
from typing import Callable, Dict, Optional, Tuple

__all__ = ['RunStopped', 'stop_on_signals', 'post_failure', 'posted_failure', 'rank', 'world_size']

_KEY = 'timm_structinit/failure'


class RunStopped(KeyboardInterrupt):
    """ A stop signal, handled as Ctrl-C is (KeyboardInterrupt), carrying the signal's number. """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def stop_on_signals(signums=(signal.SIGTERM, signal.SIGHUP)) -> Callable[[], None]:
    """ Make each of `signums` raise RunStopped in the main thread; returns a function putting the previous
    handlers back. """
    def handler(signum, frame):
        raise RunStopped(signum)

    previous: Dict[int, object] = {}
    for signum in signums:
        try:
            previous[signum] = signal.signal(signum, handler)
        except (ValueError, OSError):  # not the main thread, or a platform without that signal
            pass
    return lambda: [signal.signal(s, h) for s, h in previous.items()]


def rank() -> int:
    return int(os.environ.get('RANK', '0') or 0)


def world_size() -> int:
    return int(os.environ.get('WORLD_SIZE', '1') or 1)


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
