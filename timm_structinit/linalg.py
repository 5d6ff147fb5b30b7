""" Exact low-rank and balanced factorizations of batches of square matrices, and thread-independent math.

A ViT-T model needs 48 factorizations of 192 x 192 matrices, the main cost of a mimetic init. The right singular
vectors V come from the symmetric eigendecomposition of the Gram matrix A^T A in float64 (cheaper than an SVD:
for ViT-T's 48 matrices on one thread, 217 ms against 494 ms for a float64 SVD; 175 ms in float32, which mixes the
eigenvectors of close singular values at the 1e-5 level). The factors are then built so that they are right
whatever the precision of the small eigenvalues:

    A V = U S                      (column i has norm s_i, measured, not taken from the eigenvalue)
    left  = A V / sqrt(|A v_i|)    = U S^1/2, each column of norm sqrt(s_i)
    right = V * sqrt(|A v_i|)      = V S^1/2, each column of norm sqrt(s_i)

so left @ right^T = A V V^T, the exact rank-r truncation (all of A at full rank), and neither factor can carry the
other's scale. Dividing by the square root of an *eigenvalue* instead fails when a singular value of A is close to
zero: in float32 the Gram matrix squares A's condition number, the small eigenvalue comes out as 0 (clamped) and
the left factor gets columns of ~1e33 while the matching right column is 0, a product that still looks right.

Linear algebra on CPU gives different bits for different thread counts (MKL splits the work differently), and
torchrun runs one thread per process: `one_thread()` runs the init math on one thread, so the same seed gives the
same weights whatever `torch.get_num_threads()` says, and `parallel_map` spreads fixed chunks of a batch over the
caller's threads, each chunk on one thread, to keep the speed without changing the bits.
"""
import contextlib
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Callable, Iterator, Tuple

import torch

__all__ = ['truncated_factors', 'balanced_factors', 'one_thread', 'parallel_map']


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


def _top_factors(a: torch.Tensor, rank: int) -> Tuple[torch.Tensor, torch.Tensor]:
    a64 = a.double()  # float64 keeps the eigenvectors of close singular values apart (float32 mixes them at ~1e-5)
    _, evecs = torch.linalg.eigh(a64.mT @ a64)
    v = evecs[..., -rank:].flip(-1)  # top right singular vectors, descending
    us = a64 @ v  # U_r S_r
    root = us.norm(dim=-2, keepdim=True).sqrt()  # S_r^1/2, from the columns themselves
    left = us / root.clamp_min(torch.finfo(torch.float64).tiny)  # an exactly zero column stays zero
    return left.to(a.dtype), (v * root).to(a.dtype)


def truncated_factors(a: torch.Tensor, rank: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """ Balanced rank-`rank` factors of a batch of square matrices a (B, D, D).

    Returns left, right (B, D, rank) with left @ right^T the best rank-`rank` approximation of a (Eckart-Young),
    left = U_r S_r^1/2 and right = V_r S_r^1/2 as in the mimetic paper; column i of both has norm sqrt(s_i).
    """
    return parallel_map(partial(_top_factors, rank=rank), a)


def balanced_factors(b: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """ Full-rank factors of b (B, D, D): left = U S^1/2, right = S^1/2 V^T, left @ right = b. """
    left, right = truncated_factors(b, b.shape[-1])
    return left, right.mT
