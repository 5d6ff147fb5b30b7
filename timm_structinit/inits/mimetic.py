""" Mimetic initialization of self-attention.

Trockman & Kolter, "Mimetic Initialization of Self-Attention Layers", ICML 2023, https://arxiv.org/abs/2305.09828

Pre-trained ViTs have W_q W_k^T close to a positive multiple of the identity and W_v W_proj close to a negative one.
Mimetic init writes those products in closed form, per block, for width D, h heads, head dim k = D / h:

    Q/K, per head:  A = a1 Z + s_qk b1 I,  Z ~ N(0, I / D) (D x D),  A = U S V^T,
                    W_q = U_k S_k^1/2,  W_k = V_k S_k^1/2   ->  W_q W_k^T = best rank-k approximation of A
    V/proj:         B = a2 Z' + s_vp b2 I,  W_v = U S^1/2,  W_proj = S^1/2 V^T   ->  W_v W_proj = B exactly

with a1 = b1 = 0.7, a2 = b2 = 0.4, s_qk = +1, s_vp = -1 by default (the vision pattern; the paper's language models
show the opposite signs). Public ports differ from this in ways this module does not copy: some write V and proj
untransposed (so the math product becomes (R L)^T, not B), swap the two constant pairs, or draw Z uniformly;
`noise_dist='uniform'` reproduces the last one (variance 1 / D, as in the structured-init authors' baseline).

The factorizations (`truncated_factors`, `balanced_factors`) are exact for batches of square matrices. A ViT-T model
needs 48 factorizations of 192 x 192 matrices (ViT-B 156 of 768 x 768), the main cost of a mimetic init. The right
singular vectors V come from the symmetric eigendecomposition of the Gram matrix A^T A, which costs less than an SVD
(docs/benchmarks.md has the timings). At full rank (V/proj) every vector is kept and the product is A V V^T = A for
any orthonormal V, but the factors themselves are the network's weights: a float32 eigendecomposition mixes the
eigenvectors of close singular values at the 1e-5 to 1e-3 level, differently on each kernel path, so the float64 one
is used. A truncation (Q/K) needs only the top k = D / h: there a float32 eigendecomposition gives the top k + 8,
and a float64 Rayleigh-Ritz step on their span separates the top k to float64 accuracy (each product within ~6e-7 of
the exact rank-k truncation, for less than a float64 eigendecomposition costs). Every eigenspace then takes its
canonical basis (`canonical.canonical_basis`: signs, and a repeated value's basis, the same on every kernel path;
an exactly repeated value at the cut, as in a noise-free A = b I, takes every vector first). The factors are then
built so that they are right whatever the precision of the small eigenvalues:

    A V = U S                      (column i has norm s_i, measured, not taken from the eigenvalue)
    left  = A V / sqrt(|A v_i|)    = U S^1/2, each column of norm sqrt(s_i)
    right = V * sqrt(|A v_i|)      = V S^1/2, each column of norm sqrt(s_i)

so left @ right^T = A V V^T, the exact rank-r truncation (all of A at full rank), and neither factor can carry the
other's scale. Dividing by the square root of an *eigenvalue* instead fails when a singular value of A is close to
zero: in float32 the Gram matrix squares A's condition number, the small eigenvalue comes out as 0 (clamped) and
the left factor gets columns of ~1e33 while the matching right column is 0, a product that still looks right.
"""
import math
from dataclasses import dataclass, field, replace
from functools import partial
from itertools import groupby
from typing import Any, Dict, List, Tuple

import torch
from torch import nn

from .canonical import CLUSTER_RTOL, _reference, balance_, canonical_basis
from .heads import layout_of
from .layouts import AttentionLayout
from .threads import parallel_map

__all__ = [
    'MimeticCfg', 'draw_mimetic_targets', 'mimetic_init_', 'mimetic_vproj_init_', 'truncated_factors', 'balanced_factors',
]


_NONNEG = {'range': (0.0, float('inf'))}
_SIGN = {'choices': (1, -1)}


@dataclass(frozen=True)
class MimeticCfg:
    """ Hyperparameters of mimetic init; names follow the roles of a1, b1, a2, b2 in the paper. """
    qk_noise: float = field(default=0.7, metadata=_NONNEG)         # a1
    qk_identity: float = field(default=0.7, metadata=_NONNEG)      # b1
    # sign of the identity in A: +1 vision, -1 the paper's language-model pattern
    qk_sign: int = field(default=1, metadata=_SIGN)
    vproj_noise: float = field(default=0.4, metadata=_NONNEG)      # a2
    vproj_identity: float = field(default=0.4, metadata=_NONNEG)   # b2
    vproj_sign: int = field(default=-1, metadata=_SIGN)            # sign of the identity in B: -1 vision, +1 language
    noise_dist: str = field(default='normal', metadata={'choices': ('normal', 'uniform')})  # uniform: variance 1 / D
    vproj: bool = True  # also write V/proj (False: Q/K only)
    qk: bool = True  # also write Q/K (False: V/proj only, a transmission control for other Q/K inits)

    def validate(self) -> None:
        if not (self.qk or self.vproj):
            raise ValueError('MimeticCfg.qk=False with vproj=False writes nothing; set at least one to True')


def standard_normal(shape, generator: torch.Generator, scale: float = 1.0) -> torch.Tensor:
    """ Float32 N(0, scale^2) draws by the inverse CDF, sqrt(2) erfinv(v), of one uniform draw v per value: the same
    bits on every kernel path, where torch's `normal_` gives others in the last bits under the scalar kernels than
    under AVX2 or AVX-512 (its vectorized Box-Muller), which the singular vectors of close singular values amplify.

    v is the midpoint of one of 2^24 equal cells of (-1, 1): `torch.rand` gives u = m 2^-24, and 2u - 1 + 2^-24 is
    exact in float32, never +-1, so every value is finite; the draws are normal up to the float32 grid, with no value
    beyond 5.4 standard deviations (a normal has one in 1.5e7 there). """
    v = torch.rand(shape, generator=generator).mul_(2).add_(2.0 ** -24 - 1)  # exact: (2m + 1 - 2^24) 2^-24
    return v.erfinv_().mul_(math.sqrt(2.0) * scale)


def _scaled_noise_plus_identity(shape, dim: int, dist: str, noise: float, identity: float,
                                generator: torch.Generator) -> torch.Tensor:
    """ noise * Z + identity * I over the last two dims, Z with variance 1 / D per entry ('normal': N(0, 1 / D);
    'uniform': on +-sqrt(3 / D)), in place on one buffer (a ViT-B's Q/K targets are 340 MB). """
    if dist == 'normal':
        out = standard_normal(shape, generator, noise / math.sqrt(dim))
    else:
        out = torch.rand(shape, generator=generator).mul_(2).sub_(1).mul_(noise * math.sqrt(3 / dim))
    out.diagonal(dim1=-2, dim2=-1).add_(identity)
    return out


# top right singular vectors a truncated factorization takes from the float32 eigendecomposition beyond the `rank`
# it keeps: the float64 Rayleigh-Ritz step then separates the kept ones from these, which float32 alone mixes
_RITZ_EXTRA = 8


def _full_eigenvectors(a: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """ Every right singular vector of a (B, D, D), descending, with their squared singular values: the float64
    eigendecomposition of the Gram matrix, each eigenspace in its canonical basis (`canonical_basis`). """
    a64 = a.double()
    values, vectors = torch.linalg.eigh(a64.mT @ a64)
    values, vectors = values.flip(-1), vectors.flip(-1)
    return canonical_basis(vectors, values)[0], values


def _top_factors(a: torch.Tensor, rank: int) -> Tuple[torch.Tensor, torch.Tensor]:
    dim = a.shape[-1]
    width = rank + _RITZ_EXTRA
    if width < dim:
        # a truncation: the top `width` eigenvectors of the float32 Gram matrix span the top `rank` right singular
        # vectors up to ~1e-6 (float32 mixes eigenvectors of close singular values at ~1e-5, but only with their
        # neighbours); Rayleigh-Ritz in float64 on that span then finds them to float64 accuracy
        _, evecs = torch.linalg.eigh(a.float().mT @ a.float())
        basis = torch.linalg.qr(evecs[..., -width:].double())[0]
        projected = a.double() @ basis
        values, ritz = torch.linalg.eigh(projected.mT @ projected)
        values, ritz = values.flip(-1), ritz.flip(-1)
        # right singular vectors V (descending) and A V = U S, their canonical bases together
        v, us = canonical_basis(basis @ ritz, values, projected @ ritz)
        v, us = v[..., :rank], us[..., :rank]
        # an eigenvalue repeated across the cut (a noise-free target: A = b I) leaves the truncation to a choice
        # within its eigenspace, which needs all of that space: those matrices take every vector
        tol = CLUSTER_RTOL * values[..., :1].abs()
        split = ((values[..., rank - 1:rank] - values[..., rank:rank + 1]).abs() <= tol)[..., 0]
        if bool(split.any()):
            v, us = v.clone(), us.clone()
            v[split] = _full_eigenvectors(a[split])[0][..., :rank]
            us[split] = a[split].double() @ v[split]
    else:
        # every vector, or nearly: the float64 eigendecomposition keeps the eigenvectors of close singular values
        # apart, so that each factor, not only their product, is the same on every kernel path
        a64 = a.double()
        v = _full_eigenvectors(a64)[0][..., :rank]
        us = a64 @ v  # U_r S_r
    left, right = balance_(us, v)  # in place: us and v are this function's own
    return left.to(a.dtype), right.to(a.dtype)


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


def draw_mimetic_targets(
        dim: int,
        num_heads: int,
        num_layers: int,
        cfg: MimeticCfg,
        generator: torch.Generator,
) -> Dict[str, torch.Tensor]:
    """ The matrices mimetic init factorizes, in float32: 'qk' (layers, heads, D, D) A, 'vproj' (layers, D, D) B.

    All Q/K draws come first, then all V/proj draws, so the same generator state always gives the same targets;
    tests rebuild them from a model's seed to check the written products.
    """
    out = {'qk': _scaled_noise_plus_identity((num_layers, num_heads, dim, dim), dim, cfg.noise_dist, cfg.qk_noise,
                                             cfg.qk_sign * cfg.qk_identity, generator)}
    if cfg.vproj:
        out['vproj'] = _scaled_noise_plus_identity((num_layers, dim, dim), dim, cfg.noise_dist, cfg.vproj_noise,
                                                   cfg.vproj_sign * cfg.vproj_identity, generator)
    return out


@torch.no_grad()
def check_mimetic_model(cfg: MimeticCfg, geometry: Dict[str, Any]) -> None:
    """ Mimetic init is defined per attention, whatever its layout or width (`layouts`): nothing to refuse here. """


def isometry(rows: int, cols: int) -> torch.Tensor:
    """ (rows, cols) float64 with orthonormal rows (rows <= cols), the same everywhere: the QR of the fixed
    pseudo-random reference `canonical` uses, each column's sign set by R's diagonal. It draws nothing from an init's
    generator, so the targets an init draws do not depend on which layers need one. """
    q, r = torch.linalg.qr(_reference(cols, rows))
    return (q * torch.where(r.diagonal() < 0, -1.0, 1.0)).T


def _widened(left: torch.Tensor, right: torch.Tensor, width: int):
    """ Factors left (B, D, r) and right (B, D, r) of a product left right^T, carried to `width` > r columns by an
    isometry R (r x width, R R^T = I): (left R, right R), whose product is the same. A wider space than the product's
    rank gets every column used (zero columns would stay zero under training: their gradients are 0). """
    if left.shape[-1] >= width:
        return left, right
    iso = isometry(left.shape[-1], width)
    return (left.double() @ iso).to(left.dtype), (right.double() @ iso).to(right.dtype)


def _vproj_factors(targets: torch.Tensor, inner: int):
    """ W_v (B, D, inner) and W_proj (B, inner, D) with W_v W_proj the best rank-min(D, inner) approximation of each
    target (all of it when inner >= D), balanced as U S^1/2 and S^1/2 V^T. """
    dim = targets.shape[-1]
    if inner >= dim:
        left, right = balanced_factors(targets)
        left, right = _widened(left, right.mT, inner)
        return left, right.mT
    left, right = truncated_factors(targets, inner)
    return left, right.mT


def _groups(layouts: List[AttentionLayout]) -> List[List[AttentionLayout]]:
    """ Consecutive attentions of one shape (a stage of a hierarchical model, all of a ViT's), written in one batch. """
    return [list(group) for _, group in groupby(layouts, key=lambda a: a.shape())]


@torch.no_grad()
def _mimetic_group_(layouts: List[AttentionLayout], cfg: MimeticCfg, generator: torch.Generator) -> Dict[str, Any]:
    first = layouts[0]
    dim, heads, k, inner = first.dim_in, first.heads, first.qk_dim, first.heads * first.v_dim
    vproj = cfg.vproj and first.square
    record: Dict[str, Any] = {'num_layers': len(layouts), 'num_heads': heads, 'head_dim': k}
    if inner != dim or first.dim_out != dim:
        record.update(value_dim=first.v_dim, dim_in=dim, dim_out=first.dim_out)
    if cfg.vproj and not vproj:
        # the paper's -I maps a token to itself; an attention that changes the width (a stage transition) has none
        record['vproj'] = f'kept: the attention maps width {first.v.in_features} to {first.dim_out}'
    if not cfg.qk:
        if vproj:
            _write_vproj_(layouts, _draw_vproj(dim, len(layouts), cfg, generator), inner)
        return record
    targets = draw_mimetic_targets(dim, heads, len(layouts), replace(cfg, vproj=vproj), generator)
    wq, wk = truncated_factors(targets['qk'].reshape(-1, dim, dim), min(k, dim))
    wq, wk = _widened(wq, wk, k)
    wq, wk = wq.reshape(len(layouts), heads, dim, k), wk.reshape(len(layouts), heads, dim, k)
    if vproj:
        wv, wproj = _vproj_factors(targets['vproj'], inner)
    for i, layout in enumerate(layouts):
        layout.write_qk_(wq[i], wk[i])
        if vproj:
            layout.write_vproj_(wv[i], wproj[i])
        layout.zero_bias_(qk=True, vproj=vproj)
    return record


def mimetic_layouts_(layouts: List[AttentionLayout], cfg: MimeticCfg, generator: torch.Generator) -> Dict[str, Any]:
    """ Write mimetic Q/K (and V/proj) into attentions of any layout and width, zeroing the biases of what is written.

    Consecutive attentions of one shape are one batch (a ViT's all, a hierarchical model's stages), each batch drawing
    its Q/K targets and then its V/proj ones, in forward order. Q/K per head: the best rank-k approximation of
    A = a1 Z + s b1 I (D_in x D_in); V/proj: W_v W_proj = B = a2 Z' + s b2 I where the value path maps a token's width
    to itself (the best rank-h d_v approximation when h d_v < D); an attention that changes the width keeps its V/proj
    and the record says so. A value space wider than D (h d_v > D) gets the D x D factors through a fixed isometry
    (`isometry`), so that every channel starts in use. Returns the record of what was written (per stage when there are several).
    """
    records = [_mimetic_group_(group, cfg, generator) for group in _groups(layouts)]
    return records[0] if len(records) == 1 else {'stages': records}


def mimetic_init_(attns: List[nn.Module], cfg: MimeticCfg, generator: torch.Generator) -> Dict[str, Any]:
    """ `mimetic_layouts_` on attention modules (each read by `layout_of`). """
    return mimetic_layouts_([layout_of(a) for a in attns], cfg, generator)


def _draw_vproj(dim: int, layers: int, cfg: MimeticCfg, generator: torch.Generator) -> torch.Tensor:
    return _scaled_noise_plus_identity((layers, dim, dim), dim, cfg.noise_dist, cfg.vproj_noise,
                                       cfg.vproj_sign * cfg.vproj_identity, generator)


def _write_vproj_(layouts: List[AttentionLayout], targets: torch.Tensor, inner: int):
    wv, wproj = _vproj_factors(targets, inner)
    for i, layout in enumerate(layouts):
        layout.write_vproj_(wv[i], wproj[i])
        layout.zero_bias_(qk=False, vproj=True)


@torch.no_grad()
def mimetic_vproj_init_(attns: List[Any], cfg: MimeticCfg, generator: torch.Generator) -> None:
    """ Write only the mimetic V/proj product B = a2 Z' + s_vp b2 I (the 2025 impulse init does this), stage by
    stage, into every attention whose value path maps a token's width to itself. """
    layouts = [a if isinstance(a, AttentionLayout) else layout_of(a) for a in attns]
    for group in _groups(layouts):
        if group[0].square:
            _write_vproj_(group, _draw_vproj(group[0].dim_in, len(group), cfg, generator),
                          group[0].heads * group[0].v_dim)
