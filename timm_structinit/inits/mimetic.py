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
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Dict, List, Tuple

import torch
from torch import nn

from .canonical import CLUSTER_RTOL, balance_, canonical_basis
from .heads import head_dim_of, write_qk_, write_vproj_, zero_attention_bias_
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
    """ ValueError, before any work, when the model's attention does not keep the products mimetic writes. """
    if cfg.vproj and geometry.get('inner_norm'):
        raise ValueError(f"mimetic init writes the product W_v W_proj, but this model's attention normalizes the "
                         f"heads' output ({geometry['inner_norm']}) between them; build it without that norm "
                         f"(scale_attn_norm=False, EVA: scale_attn_inner=False), or pass vproj=False")


def mimetic_init_(attns: List[nn.Module], cfg: MimeticCfg, generator: torch.Generator) -> Dict[str, Any]:
    """ Write mimetic Q/K (and V/proj) weights into fused-qkv attention modules of equal width; zero their biases.

    One batched factorization covers every head of every layer. Returns a record of what was written.
    """
    dim, heads = attns[0].qkv.in_features, attns[0].num_heads
    if any(a.qkv.in_features != dim or a.num_heads != heads for a in attns):
        raise ValueError('mimetic_init_ expects attention modules of equal width and head count')
    k = head_dim_of(attns[0])
    record = {'num_layers': len(attns), 'num_heads': heads, 'head_dim': k}
    if not cfg.qk:
        mimetic_vproj_init_(attns, cfg, generator)
        return record
    targets = draw_mimetic_targets(dim, heads, len(attns), cfg, generator)
    wq, wk = truncated_factors(targets['qk'].reshape(-1, dim, dim), k)
    wq, wk = wq.reshape(len(attns), heads, dim, k), wk.reshape(len(attns), heads, dim, k)
    if cfg.vproj:
        wv, wproj = balanced_factors(targets['vproj'])
    for i, attn in enumerate(attns):
        dtype = attn.qkv.weight.dtype
        write_qk_(attn, wq[i].to(dtype), wk[i].to(dtype))
        if cfg.vproj:
            write_vproj_(attn, wv[i].to(dtype), wproj[i].to(dtype))
        zero_attention_bias_(attn, qk=True, vproj=cfg.vproj)
    return record


@torch.no_grad()
def mimetic_vproj_init_(attns: List[nn.Module], cfg: MimeticCfg, generator: torch.Generator) -> None:
    """ Write only the mimetic V/proj product B = a2 Z' + s_vp b2 I (the 2025 impulse init does this). """
    dim = attns[0].qkv.in_features
    wv, wproj = balanced_factors(_scaled_noise_plus_identity(
        (len(attns), dim, dim), dim, cfg.noise_dist, cfg.vproj_noise, cfg.vproj_sign * cfg.vproj_identity, generator))
    for i, attn in enumerate(attns):
        write_vproj_(attn, wv[i].to(attn.qkv.weight.dtype), wproj[i].to(attn.qkv.weight.dtype))
        zero_attention_bias_(attn, qk=False, vproj=True)
