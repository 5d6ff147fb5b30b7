""" Solvers for impulse Q/K: find per-head W_q, W_k (D x k) whose attention map on the pseudo input is the target.

The 2024 problem, per head with target map H (N x N) and pseudo input X (N x D):

    min_{Q, K}  mean((H - softmax(s X Q K^T X^T))^2),   s = k^-1/2,
    each column of Q and each row of K held at norm nq (the mean column norm of the random start)

The norm cap bounds the logits, so the solution is a soft map (about 20% of the mass on the target for ViT-T):
the scale at which the authors trained. Three solvers share this module's interface
`solve(x, targets, head_dim, generator, **options) -> (wq, wk, info)` with wq, wk (heads, D, k) in math layout:

* `adam`: the authors' 2024 procedure, kept as the reference: Adam lr 1e-4 for 10,000 iterations from a uniform start
  in +-sqrt(1 / (k h)), Q's columns and K's rows rescaled to nq before iteration 0 and every 100 iterations.
* `fast` (default): the same problem and cap, solved by projected Adam in the pseudo input's row space (see
  `solve_fast`), batched over every head of every layer.
* `svd`: the 2025 closed form (noisy scaled target, rank-k pseudo-inverse, per-head SVD, factors at Frobenius
  norm 7). It solves a different, unconstrained least-squares problem; its maps are much sharper.
"""
import math
from typing import Any, Dict, Tuple

import torch
import torch.nn.functional as F


__all__ = [
    'dense_target', 'attention_logits', 'attention_maps', 'impulse_objective', 'map_metrics', 'solve_adam', 'solve_fast', 'solve_svd',
    'SOLVERS',
]


def dense_target(target: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """ (..., N) index targets -> (..., N, N) 0/1 maps with all-zero rows where the index is -1. """
    n = target.shape[-1]
    dense = torch.zeros(*target.shape, n + 1, dtype=dtype)
    dense.scatter_(-1, torch.where(target < 0, n, target).unsqueeze(-1), 1.0)
    return dense[..., :n]


def attention_logits(x: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor) -> torch.Tensor:
    """ s X W_q W_k^T X^T per head: x (N, D), wq / wk (heads, D, k) -> (heads, N, N). """
    scale = wq.shape[-1] ** -0.5
    return scale * (x @ wq) @ (x @ wk).transpose(-1, -2)


def attention_maps(x: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor) -> torch.Tensor:
    return attention_logits(x, wq, wk).softmax(-1)


def _sq_error(attn: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """ Per-head mean((H - attn)^2) over the N x N map, without building H. """
    n = attn.shape[-1]
    hit = attn.gather(-1, targets.clamp_min(0).unsqueeze(-1)).squeeze(-1) * (targets >= 0)
    # sum (A - H)^2 = sum A^2 - 2 sum_{rows with a target} A[r, t_r] + (#rows with a target)
    total = attn.square().sum((-1, -2)) - 2 * hit.sum(-1) + (targets >= 0).sum(-1)
    return total / (n * n)


def impulse_objective(x: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """ Per-head objective of the 2024 problem: mean((H - softmax(s X W_q W_k^T X^T))^2). """
    return _sq_error(attention_maps(x, wq, wk), targets)


def map_metrics(attn: torch.Tensor, targets: torch.Tensor) -> Dict[str, torch.Tensor]:
    """ Per head: share of non-empty rows whose argmax is the target key, and mean attention mass on it. """
    valid = targets >= 0
    hit = attn.argmax(-1) == targets
    mass = attn.gather(-1, targets.clamp_min(0).unsqueeze(-1)).squeeze(-1)
    count = valid.sum(-1).clamp_min(1)
    return {
        'hit_rate': (hit & valid).sum(-1) / count,
        'target_mass': (mass * valid).sum(-1) / count,
    }


def _uniform_start(count: int, dim: int, head_dim: int, num_heads: int, generator: torch.Generator):
    """ The authors' start: Q (count, D, k) then K (count, k, D) uniform in +-sqrt(1 / (k h)), h = heads per layer. """
    bound = math.sqrt(1.0 / (head_dim * num_heads))
    wq = (torch.rand(count, dim, head_dim, generator=generator) * 2 - 1) * bound
    wk_t = (torch.rand(count, head_dim, dim, generator=generator) * 2 - 1) * bound
    return wq, wk_t.transpose(-1, -2).contiguous()


@torch.no_grad()
def _cap_(wq: torch.Tensor, wk: torch.Tensor, nq: torch.Tensor) -> None:
    """ Rescale each column of W_q (over D) and each row of W_k (over k) to norm nq (math layout). """
    wq.mul_(nq / wq.norm(dim=-2, keepdim=True))
    wk.mul_(nq / wk.norm(dim=-1, keepdim=True))


def _finish(x, wq, wk, targets, **info) -> Tuple[torch.Tensor, torch.Tensor, Dict[str, Any]]:
    with torch.no_grad():
        attn = attention_maps(x, wq, wk)
        info.update(objective=_sq_error(attn, targets), **map_metrics(attn, targets))
    return wq, wk, info


def solve_adam(
        x: torch.Tensor,
        targets: torch.Tensor,
        head_dim: int,
        num_heads: int,
        generator: torch.Generator,
        iters: int = 10000,
        lr: float = 1e-4,
        norm_every: int = 100,
) -> Tuple[torch.Tensor, torch.Tensor, Dict[str, Any]]:
    """ The authors' 2024 solver, kept as the reference. targets (B, N) with B a multiple of num_heads.

    Each group of `num_heads` targets (one layer) is solved jointly as in the authors' code: one Adam over the
    mean loss of the group, nq the mean initial column norm of the group's Q. The returned weights are the last
    iterate, up to `norm_every - 1` steps after the last rescale, so their norms sit a little above nq, as the
    authors' weights do.
    """
    with torch.enable_grad():  # a model's init_weights runs under no_grad; this solver needs autograd
        return _solve_adam(x, targets, head_dim, num_heads, generator, iters, lr, norm_every)


def _solve_adam(x, targets, head_dim, num_heads, generator, iters, lr, norm_every):
    dim = x.shape[-1]
    out_q, out_k, nqs = [], [], []
    for group in targets.split(num_heads):
        wq, wk = _uniform_start(group.shape[0], dim, head_dim, num_heads, generator)
        nq = wq.norm(dim=-2).mean()
        wq.requires_grad_(True), wk.requires_grad_(True)
        dense = dense_target(group, x.dtype)
        optimizer = torch.optim.Adam([wq, wk], lr=lr)
        for step in range(iters):
            if step % norm_every == 0:
                _cap_(wq, wk, nq)
            optimizer.zero_grad(set_to_none=True)
            F.mse_loss(attention_maps(x, wq, wk), dense).backward()
            optimizer.step()
        out_q.append(wq.detach()), out_k.append(wk.detach()), nqs.append(float(nq))
    return _finish(x, torch.cat(out_q), torch.cat(out_k), targets, nq=nqs, iters=iters, lr=lr)


def _row_space(x: torch.Tensor, rtol: float = 1e-5) -> Tuple[torch.Tensor, torch.Tensor]:
    """ X = Y V^T with V (D, r) orthonormal, r the numerical rank of X. """
    u, s, vh = torch.linalg.svd(x.double(), full_matrices=False)
    rank = int((s > rtol * s[0]).sum())
    return (u[:, :rank] * s[:rank]).to(x.dtype), vh[:rank].T.to(x.dtype)


def _signed_permutation(count: int, size: int, generator: torch.Generator) -> Tuple[torch.Tensor, torch.Tensor]:
    perm = torch.stack([torch.randperm(size, generator=generator) for _ in range(count)])
    signs = torch.randint(0, 2, (count, 1, size), generator=generator).mul_(2).sub_(1).float()
    return perm, signs


def solve_fast(
        x: torch.Tensor,
        targets: torch.Tensor,
        head_dim: int,
        num_heads: int,
        generator: torch.Generator,
        iters: int = 200,
        lr_scale: float = 3.0,
        reuse_solutions: bool = True,
) -> Tuple[torch.Tensor, torch.Tensor, Dict[str, Any]]:
    """ The 2024 problem under the same cap, solved about 300x faster than the reference. targets (B, N).

    Why it is fast:
    * The objective sees Q and K only through X Q and X K, and the LayerNormed sin-cos pseudo input has low rank
      (21 for a 16 x 16 grid at any width), so with X = Y V^T the logits are Y (V^T Q)(V^T K)^T Y^T: an r x r
      product instead of D x k factors in the N x N step.
    * The gradient is written out (softmax and squared-error backward fused over the N x N maps), and every head
      of every layer is one batch.
    * Adam's step starts at lr_scale / D (1.6e-2 for D = 192, 160x the reference's) and decays to zero on a cosine;
      the cap is applied at every step, a projection onto the same set the reference returns to every 100 steps.
      The step shrinks with D because the logits grow with it (the pseudo input's rows have norm sqrt(D)): a
      fixed step that suits D = 192 diverges at D = 768. 200 steps reach a lower objective than the reference's
      10,000 (benchmarks/impulse_solver.py).
    * With `reuse_solutions`, heads whose targets coincide (across layers, for a 3x3 window at most 9 distinct
      targets) share one solve; each head's copy gets its own random signed permutation of the k head
      dimensions, which keeps both the cap and the product W_q W_k^T, so the heads differ in their factors and
      have the same map, as the authors' shared-across-layers default has.
    The start is the reference's (uniform in +-sqrt(1 / (k h)), nq the mean column norm), one per solve. The
    returned weights meet the cap exactly (last step is the projection).
    """
    dim, n = x.shape[-1], x.shape[-2]
    if reuse_solutions:
        unique, inverse = torch.unique(targets, dim=0, return_inverse=True)
    else:
        unique, inverse = targets, torch.arange(targets.shape[0])
    count = unique.shape[0]
    wq, wk = _uniform_start(count, dim, head_dim, num_heads, generator)
    nq = wq.norm(dim=-2).mean()  # as the reference: the mean initial column norm over the batch's starts
    y, v = _row_space(x)
    valid = (unique >= 0).unsqueeze(-1).to(x.dtype)
    index = unique.clamp_min(0).unsqueeze(-1)
    scale = head_dim ** -0.5
    grad_scale = 2 * scale / (n * n)
    lr = lr_scale / dim
    state = [torch.zeros_like(wq), torch.zeros_like(wq), torch.zeros_like(wk), torch.zeros_like(wk)]
    for step in range(1, iters + 1):
        _cap_(wq, wk, nq)
        c, e = v.T @ wq, v.T @ wk                      # (count, r, k): the parts of Q, K the objective sees
        d_m = _objective_grad(y, c @ e.mT, index, valid, scale, grad_scale)
        step_lr = lr * 0.5 * (1 + math.cos(math.pi * (step - 1) / iters))  # cosine decay to ~0
        _adam_step_(wq, v @ (d_m @ e), state[0], state[1], step, step_lr)
        _adam_step_(wk, v @ (d_m.mT @ c), state[2], state[3], step, step_lr)
    _cap_(wq, wk, nq)
    wq, wk = wq[inverse], wk[inverse]
    if reuse_solutions:
        perm, signs = _signed_permutation(targets.shape[0], head_dim, generator)
        wq, wk = (w.gather(-1, perm.unsqueeze(1).expand_as(w)) * signs for w in (wq, wk))
    return _finish(x, wq, wk, targets, nq=[float(nq)], iters=iters, lr=lr, solves=count)


def _objective_grad(
        y: torch.Tensor, m: torch.Tensor, index: torch.Tensor, valid: torch.Tensor, scale: float, grad_scale: float,
) -> torch.Tensor:
    """ The gradient of mean((A - H)^2) with respect to M (count, r, r), where A = softmax(scale y M y^T) and H is
    one-hot at `index` (rows whose target is `valid`). """
    attn = ((y @ (scale * m)) @ y.T).softmax(-1)
    # d/dZ of mean((A - H)^2) through the softmax: A * (G - <G, A>_row), G = 2 (A - H) / N^2
    on_target = attn.gather(-1, index) * valid
    work = attn - (attn.square().sum(-1, keepdim=True) - on_target)
    work.scatter_add_(-1, index, -valid)
    return y.T @ (attn.mul_(work) @ y) * grad_scale


def _adam_step_(
        param: torch.Tensor, grad: torch.Tensor, avg: torch.Tensor, sq: torch.Tensor, step: int, lr: float,
        beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
) -> None:
    """ One bias-corrected Adam update of `param` in place, for a batch of heads at once. """
    avg.lerp_(grad, 1 - beta1)
    sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    denom = (sq / (1 - beta2 ** step)).sqrt_().add_(eps)
    param.addcdiv_(avg, denom, value=-lr / (1 - beta1 ** step))


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
    +-2); A = X+ T X+^T with X+ the rank-k truncated pseudo-inverse (rank capped at X's numerical rank, which
    matters for the low-rank sin-cos pseudo input); W_q = U_k S_k^1/2, W_k = V_k S_k^1/2, each scaled to
    Frobenius norm `factor_norm`. Since X+ = V_k S_k^-1 U_k^T, A = V_k (S_k^-1 U_k^T T U_k S_k^-1) V_k^T and the
    per-head SVD is of a k x k matrix: the same factors as an SVD of the D x D matrix, at a fraction of the cost.

    `rtol`: singular values of X below rtol * the largest are left out of the pseudo-inverse. A learned table (the
    2025 setup, random at init) has a flat spectrum and keeps all k; a LayerNormed sin-cos table has a steep one
    (on an 8 x 8 grid at width 128: 78, 26, 25, 18, 18, 9.7, 9.5, 3.1, ..., 2.6e-3), and inverting its tail
    amplifies directions the input hardly has by up to 1e5, so after the factor-norm scaling the useful part is
    gone and every map is uniform (1/N on the target). At rtol 0.1 the same solve puts ~0.85 on the target.
    """
    dense = dense_target(targets, torch.float64)
    noise = torch.nn.init.trunc_normal_(
        torch.empty(dense.shape, dtype=torch.float64), std=noise_std, a=-2.0, b=2.0, generator=generator)
    t = target_scale * dense + noise_scale * noise * (dense == 0)
    u, s, vh = torch.linalg.svd(x.double(), full_matrices=False)
    rank = min(head_dim, int((s > rtol * s[0]).sum()))
    u_k, s_k, v_k = u[:, :rank], s[:rank], vh[:rank].T
    inner = (u_k.T @ t @ u_k) / (s_k.view(-1, 1) * s_k.view(1, -1))  # (B, rank, rank)
    a_u, a_s, a_vh = torch.linalg.svd(inner)
    root = a_s.sqrt().unsqueeze(-2)
    wq = v_k @ (a_u * root)
    wk = v_k @ (a_vh.mT * root)
    if rank < head_dim:  # a rank-r solution in a k-wide head: the remaining columns are zero
        pad = (0, head_dim - rank)
        wq, wk = F.pad(wq, pad), F.pad(wk, pad)
    wq = factor_norm * wq / wq.norm(dim=(-2, -1), keepdim=True)
    wk = factor_norm * wk / wk.norm(dim=(-2, -1), keepdim=True)
    return _finish(x, wq.to(x.dtype), wk.to(x.dtype), targets, rank=rank)


SOLVERS = {'fast': solve_fast, 'adam': solve_adam, 'svd': solve_svd}
