""" Thread-count-independent init math.

Linear algebra on CPU gives different bits for different thread counts (MKL splits the work differently), and
torchrun runs one thread per process: `one_thread()` runs the init math on one thread, so the same seed gives the
same weights whatever `torch.get_num_threads()` says, and `parallel_tasks` / `parallel_map` spread fixed pieces of
the work over the caller's threads, each piece on one thread, to keep the speed without changing the bits.
"""
import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, Iterator, List, Sequence, Tuple, TypeVar

import torch

__all__ = ['one_thread', 'denormals_flushed', 'parallel_tasks', 'parallel_map']

T = TypeVar('T')
R = TypeVar('R')

_caller_threads = 0  # the thread count outside `one_thread`, 0 outside it
_pools: Dict[int, ThreadPoolExecutor] = {}  # kept between calls: a solver maps its tasks once per step
_pools_lock = threading.Lock()
_in_worker = threading.local()


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """ Run the enclosed torch CPU work on one thread (restoring the caller's count), for thread-count-independent
    results. `parallel_tasks` may still spread independent pieces over the caller's threads. """
    global _caller_threads
    threads, outer = torch.get_num_threads(), _caller_threads
    _caller_threads = outer or threads
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        _caller_threads = outer


@contextlib.contextmanager
def denormals_flushed() -> Iterator[None]:
    """ Flush denormal floats to zero in the enclosed CPU work of this thread (and of the `parallel_tasks` it runs),
    restoring the caller's setting. A softmax over wide logits fills its tails with denormals, which the CPU
    handles up to ~100x slower; as zeros they change nothing the inits compute. """
    previous = _flushing_denormals()
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(previous)


def _flushing_denormals() -> bool:
    # the smallest float32 normal is 1.2e-38: 1e-39 survives an operation only if denormals are kept
    return bool((torch.full((1,), 1e-39) * 1.0).item() == 0.0)


def _pool(workers: int) -> ThreadPoolExecutor:
    with _pools_lock:
        if workers not in _pools:
            _pools[workers] = ThreadPoolExecutor(workers, initializer=_mark_worker)
        return _pools[workers]


def _mark_worker() -> None:
    _in_worker.active = True


def parallel_tasks(fn: Callable[[T], R], tasks: Sequence[T]) -> List[R]:
    """ [fn(task) for task in tasks], each call on one thread, the calls spread over the caller's thread count.

    The caller fixes the tasks, so they must not depend on the thread count; then neither do the bits of the
    results. A call from inside a task runs its tasks in place. """
    with one_thread():
        workers = min(_caller_threads, len(tasks))
        if workers > 1 and not getattr(_in_worker, 'active', False):
            flush = _flushing_denormals()

            def as_caller(task):  # a worker computes as the caller would: one thread, the caller's denormal mode
                torch.set_flush_denormal(flush)
                return fn(task)
            return list(_pool(workers).map(as_caller, tasks))  # torch releases the GIL inside its kernels
        return [fn(task) for task in tasks]


def parallel_map(fn: Callable[[torch.Tensor], Tuple[torch.Tensor, ...]], batch: torch.Tensor, chunk: int = 4):
    """ fn over fixed chunks of `batch`, each on one thread, spread over the caller's thread count; results are
    concatenated. The chunks do not depend on the thread count, so neither do the bits of the result. """
    parts = parallel_tasks(fn, batch.split(chunk))
    return tuple(torch.cat(p) for p in zip(*parts))
