""" The `svd` impulse solver: the 2025 closed form (a noisy scaled target through the rank-k pseudo-inverse of the
pseudo input, factored per head by an SVD). It solves an unconstrained least-squares problem, not the 2024 capped
one, so its maps are much sharper. """
import math
from typing import Any, Dict, Tuple

import torch
import torch.nn.functional as F

from .canonical import balance_, canonical_gram_svd, canonical_row_space
from .impulse_maps import _finish

__all__ = ['solve_svd']


def _trunc_normal(shape: Tuple[int, ...], std: float, a: float, b: float, generator: torch.Generator) -> torch.Tensor:
    """ Float32 draws of N(0, std^2) cut to [a, b] as timm's `trunc_normal_` makes them (the authors' noise): the
    inverse normal CDF of one uniform draw per value, so the cost is one pass whatever the cut (torch's
    `nn.init.trunc_normal_` redraws the whole tensor while any value falls outside), and a `generator` is used. """
    if std == 0:  # noise_std=0: no noise (the cut's CDF would divide by zero)
        return torch.zeros(shape)

    def cdf(v: float) -> float:  # timm's arithmetic, step for step, so the same stream gives the same bits
        return (1. + math.erf((v / std) / math.sqrt(2.))) / 2.
    out = torch.empty(shape).uniform_(2 * cdf(a) - 1, 2 * cdf(b) - 1, generator=generator)
    return out.erfinv_().mul_(std * math.sqrt(2.)).clamp_(min=a, max=b)


def solve_svd(
        x: torch.Tensor,
        targets: torch.Tensor,
        head_dim: int,
        num_heads: int,
        generator: torch.Generator,
        target_scale: float = 1000.0,
        noise_std: float = 0.6,
        noise_scale: float = 3.0,
        factor_norm: float = 7.0,
        rtol: float = 0.1,
) -> Tuple[torch.Tensor, torch.Tensor, Dict[str, Any]]:
    """ The 2025 closed form. targets (B, N).

    Per head: T = target_scale * H + noise_scale * n off the impulse, n ~ truncated normal (std noise_std, cut at
    +-2, in float32, drawn as timm's `trunc_normal_` draws it: the same bits from the same generator state);
    A = X+ T X+^T with X+ the rank-k truncated pseudo-inverse (rank capped at X's numerical rank, which matters for
    the low-rank sin-cos pseudo input); W_q = U_k S_k^1/2, W_k = V_k S_k^1/2, each scaled to Frobenius norm
    `factor_norm`. Since X+ = V_k S_k^-1 U_k^T, A = V_k (S_k^-1 U_k^T T U_k S_k^-1) V_k^T and the per-head SVD is
    of that k x k core: the same factors as an SVD of the D x D matrix, at a fraction of the cost. X's directions
    and each core's SVD come from float64 eigendecompositions of Gram matrices (`canonical_row_space`,
    `canonical_gram_svd`: the vectors `canonical_svd` gives, at about half its cost).

    `rtol`: singular values of X below rtol * the largest are left out of the pseudo-inverse. A learned table (the
    2025 setup, random at init) has a flat spectrum and keeps all k; a LayerNormed sin-cos table has a steep one
    (on an 8 x 8 grid at width 128: 78, 26, 25, 18, 18, 9.7, 9.5, 3.1, ..., 2.6e-3), and inverting its tail
    amplifies directions the input hardly has by up to 1e5, so after the factor-norm scaling the useful part is
    gone and every map is uniform (1/N on the target). At rtol 0.1 the same solve puts ~0.85 on the target.
    """
    n = targets.shape[-1]
    y, s, v = canonical_row_space(x, rtol)  # Y = X V = U S over the directions above rtol x the largest
    rank = min(head_dim, s.shape[0])
    pinv_t = y[:, :rank] / s[:rank].square()  # U_k S_k^-1 = (X+)^T
    # A's core S_k^-1 U_k^T T U_k S_k^-1, T = target_scale on each row's impulse and the scaled noise (float32
    # draws, as the authors') elsewhere, in float64 throughout: the singular values of a scaled impulse map come in
    # near-equal clusters, whose vectors a float32 product's last bits would turn
    noise = _trunc_normal((*targets.shape, n), noise_std, -2.0, 2.0, generator)
    scaled = noise.double().mul_(noise_scale)
    rows = torch.nonzero(targets >= 0, as_tuple=True)
    scaled[(*rows, targets[rows])] = target_scale
    inner = (pinv_t.T @ scaled) @ pinv_t  # (B, rank, rank)
    # its SVD per head, as U S^1/2 and V S^1/2
    us, _, right = canonical_gram_svd(inner)
    c, e = balance_(us, right)
    if rank < head_dim:  # a rank-r solution in a k-wide head: the remaining columns are zero
        pad = (0, head_dim - rank)
        c, e = F.pad(c, pad), F.pad(e, pad)
    # V_k has orthonormal columns: V_k C has C's Frobenius norm, so the scaling is done on the small factors
    c = factor_norm * c / c.norm(dim=(-2, -1), keepdim=True)
    e = factor_norm * e / e.norm(dim=(-2, -1), keepdim=True)
    v_k = v[:, :rank]
    wq, wk = (v_k @ c).to(x.dtype), (v_k @ e).to(x.dtype)
    # the maps' statistics from the rank-k coordinates: X W_q = (X V_k) C, at a fraction of the D-wide product
    _, _, info = _finish(y[:, :rank].to(x.dtype), c.to(x.dtype), e.to(x.dtype), targets, rank=rank)
    return wq, wk, info
