""" The `svd` impulse solver: the 2025 closed form (a noisy scaled target through the rank-k pseudo-inverse of the
pseudo input, factored per head by an SVD). It solves an unconstrained least-squares problem, not the 2024 capped
one, so its maps are much sharper. """
import math
from typing import Any, Dict, Tuple

import torch
import torch.nn.functional as F

from .canonical import canonical_svd
from .impulse_maps import _finish

__all__ = ['solve_svd']


def _trunc_normal(shape: Tuple[int, ...], std: float, a: float, b: float, generator: torch.Generator) -> torch.Tensor:
    """ Float32 draws of N(0, std^2) cut to [a, b] as timm's `trunc_normal_` makes them (the authors' noise): the
    inverse normal CDF of one uniform draw per value, so the cost is one pass whatever the cut (torch's
    `nn.init.trunc_normal_` redraws the whole tensor while any value falls outside), and a `generator` is used. """
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
    +-2, in float32, drawn as timm's `trunc_normal_` draws it: the same bits from the same generator state); A = X+ T X+^T with X+ the rank-k truncated pseudo-inverse (rank capped at X's numerical rank, which
    matters for the low-rank sin-cos pseudo input); W_q = U_k S_k^1/2, W_k = V_k S_k^1/2, each scaled to
    Frobenius norm `factor_norm`. Since X+ = V_k S_k^-1 U_k^T, A = V_k (S_k^-1 U_k^T T U_k S_k^-1) V_k^T and the
    per-head SVD is of a k x k matrix: the same factors as an SVD of the D x D matrix, at a fraction of the cost.

    `rtol`: singular values of X below rtol * the largest are left out of the pseudo-inverse. A learned table (the
    2025 setup, random at init) has a flat spectrum and keeps all k; a LayerNormed sin-cos table has a steep one
    (on an 8 x 8 grid at width 128: 78, 26, 25, 18, 18, 9.7, 9.5, 3.1, ..., 2.6e-3), and inverting its tail
    amplifies directions the input hardly has by up to 1e5, so after the factor-norm scaling the useful part is
    gone and every map is uniform (1/N on the target). At rtol 0.1 the same solve puts ~0.85 on the target.
    """
    n = targets.shape[-1]
    u, s, vh = canonical_svd(x.double())
    rank = min(head_dim, int((s > rtol * s[0]).sum()))
    u_k, s_k, v_k = u[:, :rank], s[:rank], vh[:rank].T
    # U_k^T T U_k without forming T: the noise part (float32 draws, as the authors') as one float64 product, then on
    # each row's impulse the noise swapped for target_scale: T = s n + sum_q c_q e_q e_t(q)^T with c_q = target_scale
    # - s n[q, t(q)] (0 for a row without a target). Float64 throughout: the singular values of a scaled impulse map
    # come in near-equal clusters, whose vectors a float32 product's last bits would turn
    noise = _trunc_normal((*targets.shape, n), noise_std, -2.0, 2.0, generator)
    inner = noise_scale * ((u_k.T @ noise.double()) @ u_k)
    index = targets.clamp_min(0)
    swap = (target_scale - noise_scale * noise.gather(-1, index[..., None])[..., 0].double()) * (targets >= 0)
    inner += (u_k * swap[..., None]).mT @ u_k[index]
    inner = inner / (s_k.view(-1, 1) * s_k.view(1, -1))  # (B, rank, rank)
    a_u, a_s, a_vh = canonical_svd(inner)
    root = a_s.sqrt().unsqueeze(-2)
    wq = v_k @ (a_u * root)
    wk = v_k @ (a_vh.mT * root)
    if rank < head_dim:  # a rank-r solution in a k-wide head: the remaining columns are zero
        pad = (0, head_dim - rank)
        wq, wk = F.pad(wq, pad), F.pad(wk, pad)
    wq = factor_norm * wq / wq.norm(dim=(-2, -1), keepdim=True)
    wk = factor_norm * wk / wk.norm(dim=(-2, -1), keepdim=True)
    return _finish(x, wq.to(x.dtype), wk.to(x.dtype), targets, rank=rank)
