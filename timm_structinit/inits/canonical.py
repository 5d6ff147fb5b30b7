""" One basis per eigenspace: factorizations whose output is a function of their input alone.

An eigendecomposition or an SVD defines each vector only up to its sign, and the vectors of a repeated eigenvalue
(or singular value) only up to a rotation within their eigenspace. Which of them a solver returns follows its
kernel path: the same matrix gives other signs under AVX2, AVX-512, the scalar kernels or CUDA, and so the same seed
gave other weights on another machine. The products the papers define (W_q W_k^T, W_v W_proj) do not change; the
factors, which the network trains from, do.

`canonical_basis` fixes both ambiguities with one rule. Each eigenspace, a run of values equal within `rtol` of the
largest, gets the orthonormal basis of itself closest to a fixed reference: the columns of a fixed pseudo-random
matrix at the same positions (orthogonal Procrustes: the basis E of the space spanned by Q with E^T R symmetric
positive definite, E = Q W Z^T from the SVD Q^T R = W S Z^T). For a simple value that is the sign that gives the
vector a positive dot product with its reference column. The rule depends on the space only, not on the basis a
solver returned, and it is continuous in the space: a vector computed a little differently on another kernel path
comes out a little different, never flipped. (The largest-magnitude-entry rule of scikit-learn's `svd_flip` would
flip the structured vectors of a sin-cos pseudo input, whose largest entries come in pairs of equal magnitude.)
"""
from functools import lru_cache
from typing import Tuple

import torch

__all__ = [
    'canonical_basis', 'canonical_svd', 'canonical_gram_svd', 'canonical_row_space', 'balance_',
    'CLUSTER_RTOL', 'FACTOR_RULE',
]

# how an init's weights follow from its seed since release 0.2.0, named in every init record ('factor_rule'): this
# module's rule for every factorization, and the inputs it is given the same on every kernel path (normal noise by
# the inverse CDF, the sin-cos pseudo input in float64, the impulse solves in float64)
FACTOR_RULE = ('canonical eigenspaces (0.2.0): every eigenspace in the basis closest to a fixed reference, float64 '
               'factorizations and solves, normal noise by the inverse CDF')

# values within this fraction of the largest are one eigenspace: the inputs are float32, so values equal to float32
# precision are equal as far as the input can tell (a sin-cos pseudo input's pairs, split ~1e-8 by its rounding); a
# random spectrum (mimetic's noise) seldom has a gap this small, and where it has, taking the pair as one space
# changes the factors' product by about the gap, well inside float32
CLUSTER_RTOL = 1e-6

_REFERENCE_SEED = 20230509  # any fixed seed: the reference only has to be the same everywhere


@lru_cache(maxsize=16)
def _reference(dim: int, count: int) -> torch.Tensor:
    """ (dim, count) float64 reference columns from a fixed seed of torch's CPU generator: the same on every machine
    up to a last bit, which the rule, continuous in the reference, turns into a last-bit difference of its output. """
    generator = torch.Generator().manual_seed(_REFERENCE_SEED)
    return torch.randn(max(dim, 1), max(count, 1), generator=generator, dtype=torch.float64)[:dim, :count]


def _clusters(values: torch.Tensor, rtol: float):
    """ (start, stop) of each run of more than one value (in their order) equal within rtol of the largest. """
    if values.numel() < 2:
        return []
    tol = rtol * float(values.abs().max())
    close = ((values[1:] - values[:-1]).abs() <= tol).tolist()
    runs, start = [], None
    for i, same in enumerate(close):
        if same and start is None:
            start = i
        elif not same and start is not None:
            runs.append((start, i + 1))
            start = None
    if start is not None:
        runs.append((start, len(close) + 1))
    return runs


def canonical_basis(vectors: torch.Tensor, values: torch.Tensor, *partners: torch.Tensor,
                    rtol: float = CLUSTER_RTOL, of_count: int = 0) -> Tuple[torch.Tensor, ...]:
    """ The canonical basis of the eigenspaces of `vectors` (..., D, m), orthonormal columns ordered as `values`
    (..., m): each column's sign, and within a run of values equal to `rtol` of the largest the basis of their
    span, fixed by the reference rule above. Every `partner` (..., P, m) (the left vectors of an SVD, say) gets the
    same signs and rotations, so that a product such as U S V^T keeps its value. `of_count`: the leading columns
    of a factorization of that many vectors, which take the reference columns the whole one would (default: the
    vectors' own count). Returns (vectors, *partners). """
    batch_shape = vectors.shape[:-2]
    dim, count = vectors.shape[-2:]
    flat = vectors.reshape(-1, dim, count)
    flat_values = values.reshape(-1, count)
    flat_partners = [p.reshape(-1, p.shape[-2], count) for p in partners]
    reference = _reference(dim, max(count, of_count))[:, :count].to(vectors.dtype)
    # the sign of every column, one batched dot product
    signs = torch.where((flat * reference).sum(-2) < 0, -1.0, 1.0).to(vectors.dtype)
    flat = flat * signs[:, None, :]
    flat_partners = [p * signs[:, None, :] for p in flat_partners]
    for b in range(flat.shape[0]):
        for start, stop in _clusters(flat_values[b], rtol):
            span = flat[b, :, start:stop]
            w, _, zh = torch.linalg.svd(span.mT @ reference[:, start:stop])
            rotation = w @ zh  # the Procrustes rotation: span @ rotation is the basis closest to the reference
            flat[b, :, start:stop] = span @ rotation
            for p in flat_partners:
                p[b, :, start:stop] = p[b, :, start:stop] @ rotation
    out = (flat.reshape(*batch_shape, dim, count),)
    return out + tuple(p.reshape(*batch_shape, p.shape[-2], count) for p in flat_partners)


def canonical_svd(a: torch.Tensor, rtol: float = CLUSTER_RTOL) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ `torch.linalg.svd(a, full_matrices=False)` with the canonical basis of every singular subspace (the right
    vectors by the reference rule, the left ones with them): U, S, Vh with U S Vh = a as the solver gives it, and
    the same factors whichever kernels computed them. """
    u, s, vh = torch.linalg.svd(a, full_matrices=False)
    v, u = canonical_basis(vh.mT, s, u, rtol=rtol)
    return u, s, v.mT


def canonical_gram_svd(a: torch.Tensor, rtol: float = CLUSTER_RTOL) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ The SVD of a batch of matrices a (..., m, n), m >= n, as (A V, S, V): the right vectors V (..., n, n) in
    their canonical basis (clusters judged on the singular values S, as `canonical_svd` judges them) and A V = U S,
    from the float64 eigendecomposition of the Gram matrix A^T A, about half an SVD's cost.

    The Gram matrix squares A's condition number, so a singular value far below the largest (~1e-8 of it in
    float64) loses its relative accuracy; the factors built on A V stay right regardless: A V V^T = A for the
    orthonormal V, whatever the precision of the small values. """
    a64 = a.double()
    values, vectors = torch.linalg.eigh(a64.mT @ a64)
    s = values.flip(-1).clamp_min(0).sqrt()
    v = canonical_basis(vectors.flip(-1), s, rtol=rtol)[0]
    return a64 @ v, s, v


def balance_(us: torch.Tensor, v: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """ (U S^1/2, V S^1/2) from A V = U S and V (..., D, r), in place of both: S^1/2 is taken from the columns of
    U S themselves, so that left @ right^T = A V V^T whatever the precision of the small singular values, and
    neither factor carries the other's scale; an exactly zero column stays zero. """
    root = us.norm(dim=-2, keepdim=True).sqrt()
    return us.div_(root.clamp_min(torch.finfo(us.dtype).tiny)), v.mul_(root)


def canonical_row_space(x: torch.Tensor, rtol: float) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ The directions of one matrix x (m, n) whose singular values are above rtol x the largest: (X V, S, V), V
    (n, r) orthonormal, descending, in float64, the leading r of what `canonical_svd` gives. From the
    eigendecomposition of the smaller Gram matrix (X^T X, or X X^T with V = X^T U S^-1), a fraction of an SVD. """
    x64 = x.double()
    m, n = x64.shape
    values, vectors = torch.linalg.eigh(x64.mT @ x64 if n <= m else x64 @ x64.mT)
    keep = values > (rtol ** 2) * values[-1]
    vectors, s = vectors[:, keep].flip(-1), values[keep].flip(-1).sqrt()
    v = vectors if n <= m else (x64.mT @ vectors) / s
    v = canonical_basis(v, s, of_count=min(m, n))[0]
    return x64 @ v, s, v
