""" Thread-count-independent init math.

Linear algebra on CPU gives different bits for different thread counts (MKL splits the work differently), and
torchrun runs one thread per process: `one_thread()` runs the init math on one thread, so the same seed gives the
same weights whatever `torch.get_num_threads()` says, and `parallel_map` spreads fixed chunks of a batch over the
caller's threads, each chunk on one thread, to keep the speed without changing the bits.
"""
import contextlib
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator, Tuple

import torch

__all__ = ['one_thread', 'parallel_map']


_caller_threads = 0  # the thread count outside `one_thread`, 0 outside it


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """ Run the enclosed torch CPU work on one thread (restoring the caller's count), for thread-count-independent
    results. `parallel_map` may still spread independent pieces over the caller's threads. """
    global _caller_threads
    threads, outer = torch.get_num_threads(), _caller_threads
    _caller_threads = outer or threads
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        _caller_threads = outer


def parallel_map(fn: Callable[[torch.Tensor], Tuple[torch.Tensor, ...]], batch: torch.Tensor, chunk: int = 4):
    """ fn over fixed chunks of `batch`, each on one thread, spread over the caller's thread count; results are
    concatenated. The chunks do not depend on the thread count, so neither do the bits of the result. """
    with one_thread():
        chunks = batch.split(chunk)
        workers = min(_caller_threads, len(chunks))
        if workers > 1:
            with ThreadPoolExecutor(workers) as pool:  # torch releases the GIL inside its kernels
                parts = list(pool.map(fn, chunks))
        else:
            parts = [fn(c) for c in chunks]
    return tuple(torch.cat(p) for p in zip(*parts))
