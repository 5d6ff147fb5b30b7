""" Solvers for impulse Q/K: find per-head W_q, W_k (D x k) whose attention map on the pseudo input is the target.

The 2024 problem, per head with target map H (N x N) and pseudo input X (N x D):

    min_{Q, K}  mean((H - softmax(s X Q K^T X^T))^2),   s = k^-1/2,
    each column of Q and each row of K held at norm nq (the mean column norm of the random start)

The norm cap bounds the logits, so the solution is a soft map (about 20% of the mass on the target for ViT-T):
the scale at which the authors trained. Three solvers share this module's interface
`solve(x, targets, head_dim, generator, **options) -> (wq, wk, info)` with wq, wk (heads, D, k) in math layout:

* `adam`: the authors' 2024 procedure, kept as the reference: Adam lr 1e-4 for 10,000 iterations from a uniform start
  in +-sqrt(1 / (k h)), Q's columns and K's rows rescaled to nq before iteration 0 and every 100 iterations.
* `fast` (default): the same problem and cap, solved by L-BFGS in the pseudo input's row space with the cap built
  into the variables (see `solve_fast`), batched over the distinct targets of every layer.
* `svd`: the 2025 closed form (noisy scaled target, rank-k pseudo-inverse, per-head SVD, factors at Frobenius
  norm 7). It solves a different, unconstrained least-squares problem; its maps are much sharper.
"""
import math
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

from .lbfgs import minimize
from .threads import denormals_flushed, parallel_tasks


__all__ = [
    'dense_target', 'attention_logits', 'attention_maps', 'impulse_objective', 'map_metrics', 'map_stats', 'solve_adam',
    'solve_fast', 'solve_svd',
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


def map_stats(x: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, targets: torch.Tensor) -> Dict[str, torch.Tensor]:
    """ Per head, on the maps softmax(s X W_q W_k^T X^T): the objective mean((H - A)^2) and `map_metrics`,
    computed in the fixed pieces of `_tasks` (no N x N map of the whole batch is ever held). """
    n = x.shape[-2]
    queries, keys = (x @ wq) * wq.shape[-1] ** -0.5, x @ wk      # (B, N, k)
    valid = targets >= 0
    index = targets.clamp_min(0)

    def piece(task):
        first, last, q0, q1 = task
        attn = (queries[first:last, q0:q1] @ keys[first:last].mT).softmax(-1)
        idx, ok = index[first:last, q0:q1], valid[first:last, q0:q1]
        on_target = attn.gather(-1, idx.unsqueeze(-1)).squeeze(-1) * ok
        hits = ((attn.argmax(-1) == idx) & ok).sum(-1)
        return torch.stack([attn.square().sum((-1, -2)), on_target.sum(-1), hits.to(attn.dtype)], -1)

    tasks = _tasks(targets.shape[0], n)
    sums = []
    for (_, _, query, _), part in zip(tasks, parallel_tasks(piece, tasks)):
        if query == 0:
            sums.append(part)
        else:
            sums[-1] = sums[-1] + part
    square, mass, hits = torch.cat(sums).unbind(-1)
    count = valid.sum(-1)
    return {
        'objective': (square - 2 * mass + count) / (n * n),
        'hit_rate': hits / count.clamp_min(1),
        'target_mass': mass / count.clamp_min(1),
    }


def _finish(x, wq, wk, targets, **info) -> Tuple[torch.Tensor, torch.Tensor, Dict[str, Any]]:
    with torch.no_grad(), denormals_flushed():
        info.update(map_stats(x, wq, wk, targets))
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


def _row_space(x: torch.Tensor, rtol: float = 1e-3) -> Tuple[torch.Tensor, torch.Tensor]:
    """ X ~ Y V^T with V (D, r) orthonormal over the directions of X whose singular values are above rtol x the
    largest; Y = X V has orthogonal columns of norm s_1 >= s_2 >= ... (Y = U S).

    A direction of singular value s moves the logits X Q K^T X^T by s^2 per unit of weight, so one below 1e-3 of
    the largest moves them by under 1e-6 of what the largest does: the solve leaves those to the start (for the
    LayerNormed sin-cos table, whose spectrum falls in pairs, r = 17 at every width on a 16 x 16 grid; the
    objective on X and on Y V^T then agree to 4 digits, and the N x N work is 20% less than at 1e-5, r = 21-23).
    From the float64 eigendecomposition of the smaller Gram matrix (X^T X or X X^T), a fraction of an SVD of X. """
    x64 = x.double()
    n, dim = x64.shape
    gram = x64.mT @ x64 if dim <= n else x64 @ x64.mT
    evals, evecs = torch.linalg.eigh(gram)
    keep = evals > (rtol ** 2) * evals[-1]
    evecs, evals = evecs[:, keep].flip(-1), evals[keep].flip(-1)
    if dim <= n:
        v = evecs
    else:  # evecs are U: V = X^T U S^-1
        v = (x64.mT @ evecs) / evals.sqrt()
    return (x64 @ v).to(x.dtype), v.to(x.dtype)


# the closed-form start's Frobenius norm against the random start's (see `_closed_form_start`)
WARM_START = 0.75


def _closed_form_start(y: torch.Tensor, targets: torch.Tensor, head_dim: int, rtol: float = 0.1) -> torch.Tensor:
    """ Row-space coordinates (B, r, k) of W_q and of W_k whose logits Y M Y^T fit the target maps best, M = c e^T:
    the least-squares M* = Y+ H Y+^T over the directions of Y above rtol x the largest (as the 2025 closed form cuts
    a sin-cos table's steep spectrum), split as c = P S^1/2, e = R S^1/2 from its SVD (top k), each at Frobenius
    norm 1. It has the target's pattern at no particular scale; the capped solve then finds the scale and shape
    the cap allows, in about half the evaluations it takes from the random start alone. """
    sv = y.norm(dim=0)
    keep = (sv >= rtol * sv[0]).to(y.dtype)
    pinv = y * (keep / sv.square())                                   # (Y^T Y)^-1 Y^T, transposed: (N, r)
    valid = (targets >= 0).to(y.dtype)[..., None]
    m = pinv.mT @ (pinv[targets.clamp_min(0)] * valid)               # sum over rows q of pinv_q^T pinv_t(q)
    u, s, vh = torch.linalg.svd(m.double())
    rank = min(head_dim, s.shape[-1])
    root = s[..., :rank].sqrt().unsqueeze(-2)
    c, e = u[..., :rank] * root, vh.mT[..., :rank] * root
    if rank < head_dim:
        c, e = F.pad(c, (0, head_dim - rank)), F.pad(e, (0, head_dim - rank))
    c, e = (w / w.norm(dim=(-2, -1), keepdim=True).clamp_min(torch.finfo(w.dtype).tiny) for w in (c, e))
    return c.to(y.dtype), e.to(y.dtype)


def _signed_permutation(count: int, size: int, generator: torch.Generator) -> Tuple[torch.Tensor, torch.Tensor]:
    perm = torch.stack([torch.randperm(size, generator=generator) for _ in range(count)])
    signs = torch.randint(0, 2, (count, 1, size), generator=generator).mul_(2).sub_(1).float()
    return perm, signs


# elements of the N x N maps one task of the fast solver holds at a time (a few MB): the solve's memory does not grow
# with the grid beyond this and the (N, r) pseudo input, and the tasks spread over the caller's threads
TASK_ELEMENTS = 2 ** 18


def _tasks(count: int, n: int) -> List[Tuple[int, int, int, int]]:
    """ Fixed (first solve, last solve, first query, last query) pieces of the batch of maps, TASK_ELEMENTS each:
    several whole maps per piece on small grids, a band of query rows of one map on large ones. """
    if n * n <= TASK_ELEMENTS:
        per = TASK_ELEMENTS // (n * n)
        return [(i, min(i + per, count), 0, n) for i in range(0, count, per)]
    rows = max(1, TASK_ELEMENTS // n)
    return [(i, i + 1, q, min(q + rows, n)) for i in range(count) for q in range(0, n, rows)]


def _value_and_grad_rows(
        y: torch.Tensor, y_ones_t: torch.Tensor, m: torch.Tensor, index: torch.Tensor, on_key_t: torch.Tensor,
        valid: torch.Tensor, rows: slice,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """ For query rows `rows` of the maps A = softmax(y M y^T) of a batch m (B, r, r) (the logit scale folded in)
    against one-hot targets at key `index` (B, N) where `valid`: the rows' part of sum((A - H)^2) - #targets, and
    its gradient with respect to M. y_ones_t is [y, 1]^T (r + 1, N), on_key_t (B, r, N) the target key's token.

    Through the softmax, d/dZ sum((A - H)^2) = 2 A * (G - <G, A>_row) with G = A - H, so with P = A * A, s = the row
    sums of P and t = A at the target: dZ / 2 = P - (s - t) A - t H, and dZ Y needs A Y and P [Y, 1] only. Those
    are taken transposed, (A Y)^T = Y^T A^T: a product whose output is R wide, not r (~21), runs ~3x faster. """
    y_rows = y[rows]
    attn = ((y_rows @ m) @ y.mT).softmax(-1)      # (B, R, N)
    on_target = attn.gather(-1, index[:, rows, None])[..., 0] * valid[:, rows]
    y_t = y_ones_t[:-1]
    attn_y_t = y_t @ attn.mT                       # (A Y)^T: (B, r, R)
    square_y_t = y_ones_t @ attn.mul_(attn).mT     # (P [Y, 1])^T: P Y and the row sums of P
    row_sums = square_y_t[:, -1]
    value = row_sums.sum(-1) - 2 * on_target.sum(-1)
    dz_y_t = square_y_t[:, :-1] - (row_sums - on_target)[:, None] * attn_y_t - on_target[:, None] * on_key_t[..., rows]
    return value, (dz_y_t @ y_rows).mT


def _capped_value_and_grad(y, targets, scale):
    """ value_and_grad(m) of the 2024 objective mean((A - H)^2), A = softmax(scale y M y^T), for a batch of M (B, r,
    r), the N x N work in fixed tasks (`_tasks`) spread over the caller's threads, their parts summed in a fixed
    order. """
    n = y.shape[0]
    valid = (targets >= 0).to(y.dtype)
    index = targets.clamp_min(0)
    on_key_t = (y[index] * valid[..., None]).mT.contiguous()
    y_ones_t = torch.cat([y, torch.ones(n, 1, dtype=y.dtype)], 1).mT.contiguous()
    count_targets = valid.sum(-1)

    def value_and_grad(m: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        m = scale * m
        tasks = _tasks(m.shape[0], n)
        parts = parallel_tasks(
            lambda t: _value_and_grad_rows(y, y_ones_t, m[t[0]:t[1]], index[t[0]:t[1]], on_key_t[t[0]:t[1]],
                                           valid[t[0]:t[1]], slice(t[2], t[3])), tasks)
        values, grads = [], []
        for (first, _, query, _), (value, grad) in zip(tasks, parts):
            if query == 0:
                values.append(value), grads.append(grad)
            else:  # another band of rows of the same map: added in task order
                values[-1], grads[-1] = values[-1] + value, grads[-1] + grad
        value = (torch.cat(values) + count_targets) / (n * n)
        return value, torch.cat(grads) * (2 * scale / (n * n))
    return value_and_grad


class _CappedProblem:
    """ The capped problem in the pseudo input's row space, unconstrained: X = Y V^T, and

        W_q = nq (V c + Q_perp) / column norms,   W_k = nq (V e + K_perp) / row norms,

    with c, e (r, k) the variables and Q_perp, K_perp the start's parts outside the row space, which the objective
    never sees (they only share the cap with the parts it sees). Every (c, e) is on the cap, and the objective
    depends on it through M = (V^T W_q)(V^T W_k)^T alone: the N x N work is on r-dimensional tokens. With
    `warm_start`, c and e start from the start's plus `_closed_form_start` at that fraction of its norm. """

    def __init__(self, x: torch.Tensor, targets: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, nq: torch.Tensor,
                 warm_start: float = 0.0):
        self.y, self.v = _row_space(x)
        self.nq = nq
        c, e = self.v.T @ wq, self.v.T @ wk
        self.q_perp = wq - self.v @ c
        self.q_perp_sq = self.q_perp.square().sum(-2, keepdim=True)   # (B, 1, k)
        self.k_perp = wk - self.v @ e
        if warm_start:  # the closed form's pattern added in the row space, at `warm_start` x the start's norm
            c0, e0 = _closed_form_start(self.y, targets, wq.shape[-1])
            c = c + c0 * (warm_start * wq.norm(dim=(-2, -1), keepdim=True))
            e = e + e0 * (warm_start * wk.norm(dim=(-2, -1), keepdim=True))
        self.shape = c.shape
        self.start = torch.cat([c.flatten(1), e.flatten(1)], 1)
        self.objective = _capped_value_and_grad(self.y, targets, wq.shape[-1] ** -0.5)
        # the logits move with direction i of the row space in proportion to its singular value s_i: steps
        # scaled by 1 / s_i (at most 10x the largest's) start every direction at a comparable pace
        sv = self.y.norm(dim=0)
        pace = sv[0] / sv.clamp_min(0.1 * sv[0])
        self.precond = pace[:, None].expand(self.shape[1:]).flatten().repeat(2)

    def _unpack(self, z):
        c, e = z.split(z.shape[1] // 2, dim=1)
        return c.view(self.shape), e.view(self.shape)

    def _factors(self, c, e):
        q_norm = ((c * c).sum(-2, keepdim=True) + self.q_perp_sq).sqrt()     # column norms of V c + Q_perp
        k_full = self.v @ e + self.k_perp
        k_norm = k_full.norm(dim=-1, keepdim=True)                          # row norms of V e + K_perp
        return q_norm, k_full, k_norm

    def weights(self, z: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        c, e = self._unpack(z)
        q_norm, k_full, k_norm = self._factors(c, e)
        return self.nq * (self.v @ c + self.q_perp) / q_norm, self.nq * k_full / k_norm

    def value_and_grad(self, z: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        c, e = self._unpack(z)
        nq, v = self.nq, self.v
        q_norm, k_full, k_norm = self._factors(c, e)
        q_seen = nq * c / q_norm                       # V^T W_q
        w_k = nq * k_full / k_norm
        k_seen = v.T @ w_k                             # V^T W_k
        value, grad_m = self.objective(q_seen @ k_seen.mT)
        grad_q = grad_m @ k_seen
        grad_k = v @ (grad_m.mT @ q_seen)
        # through the normalizations: the gradient of a unit vector's direction, times nq / norm
        grad_c = (grad_q - c * (c * grad_q).sum(-2, keepdim=True) / q_norm.square()) * (nq / q_norm)
        grad_k = (grad_k - w_k * (w_k * grad_k).sum(-1, keepdim=True) / nq.square()) * (nq / k_norm)
        return value, torch.cat([grad_c.flatten(1), (v.T @ grad_k).flatten(1)], 1)


def fast_evaluations(dim: int, tokens: int) -> int:
    """ The fast solver's default number of evaluations for width `dim` and `tokens` N: 10 x max(1, D / 192) x
    (1 + 64 / N), so 12 on ViT-T's 16 x 16 grid, 13 on 14 x 14, 20 on an 8 x 8 one, 25 for ViT-S on 16 x 16, 53 for
    ViT-B on 14 x 14. Under the cap the logits can grow with the width (the pseudo input's rows have norm sqrt(D),
    W_k has D rows of norm nq), the maps get sharper and the problem stiffer; a small grid, more of it border, is
    stiffer too. Measured from the closed-form warm start (3x3 offsets, seed 0), against the reference's 10,000
    Adam steps: objective 0.00187 against 0.00207 on ViT-T's 16 x 16 grid (25 evaluations from the random start
    alone: 0.00175), 0.00028 against 0.00040 for ViT-S, 0.0046 against 0.0063 at width 128 on 8 x 8, every argmax on
    its target. """
    return round(10 * max(1.0, dim / 192) * (1 + 64 / tokens))


def solve_fast(
        x: torch.Tensor,
        targets: torch.Tensor,
        head_dim: int,
        num_heads: int,
        generator: torch.Generator,
        iters: int = 0,
        reuse_solutions: bool = True,
        warm_start: float = WARM_START,
) -> Tuple[torch.Tensor, torch.Tensor, Dict[str, Any]]:
    """ The 2024 problem under the same cap, solved three orders of magnitude faster than the reference.
    targets (B, N).

    Why it is fast:
    * The objective sees Q and K only through X Q and X K, and the LayerNormed sin-cos pseudo input has low
      effective rank (17 directions above 1e-3 of the largest on a 16 x 16 grid at any width, `_row_space`), so
      with X ~ Y V^T the logits are Y (V^T Q)(V^T K)^T Y^T: the N x N work
      is on r-dimensional tokens, and the gradient is written out (softmax and squared-error backward fused).
    * The cap is built into the variables (`_CappedProblem`): every point is on it, so the problem is smooth and
      unconstrained, and L-BFGS (`lbfgs.minimize`, a batch of independent problems) with steps scaled to the row
      space's singular values reaches a lower objective in `iters` evaluations (default `fast_evaluations`: 12
      for ViT-T on a 16 x 16 grid) than the reference in 10,000 Adam steps (benchmarks/impulse_solver.py).
    * It starts where the answer's pattern already is (`warm_start`, 0 for the reference's start alone): the
      reference's random start plus, inside the pseudo input's row space, the least-squares logits of the target
      (`_closed_form_start`) at `warm_start` x the start's norm. The parts outside the row space and nq stay the
      random start's; it needs about half the evaluations for the same objective.
    * With `reuse_solutions`, heads whose targets coincide (across layers, for a 3x3 window at most 9 distinct
      targets) share one solve; each head's copy gets its own random signed permutation of the k head
      dimensions, which keeps both the cap and the product W_q W_k^T, so the heads differ in their factors and
      have the same map, as the authors' shared-across-layers default has. A target and its transpose (offsets
      (dy, dx) and (dx, dy)) share one too when the pseudo input transposes with the grid (`_grid_transpose`: a
      square sin-cos grid does, exactly): the solution of one is the other's with the h and w features swapped.
      That leaves 6 solves for a 3x3 window and 15 for a 5x5.
    * The N x N maps are handled in fixed pieces of TASK_ELEMENTS (`_tasks`), spread over the caller's threads:
      memory does not grow with the grid beyond one piece per thread, and the bits do not depend on the threads.
    The start is the reference's (uniform in +-sqrt(1 / (k h)), nq the mean column norm), one per solve. The
    returned weights meet the cap exactly.
    """
    iters = iters or fast_evaluations(x.shape[-1], x.shape[-2])
    if reuse_solutions:
        unique, inverse = torch.unique(targets, dim=0, return_inverse=True)
    else:
        unique, inverse = targets, torch.arange(targets.shape[0])
    solved, source, flipped, features = unique, torch.arange(unique.shape[0]), None, None
    symmetry = _grid_transpose(x) if reuse_solutions else None
    if symmetry is not None:
        tokens, features = symmetry
        solved, source, flipped = _transpose_pairs(unique, tokens)
    count = solved.shape[0]
    wq, wk = _uniform_start(count, x.shape[-1], head_dim, num_heads, generator)
    nq = wq.norm(dim=-2).mean()  # as the reference: the mean initial column norm over the batch's starts
    with denormals_flushed():
        problem = _CappedProblem(x, solved, wq, wk, nq, warm_start)
        z, _ = minimize(problem.value_and_grad, problem.start, iters, precond=problem.precond)
        wq, wk = problem.weights(z)
        stats = map_stats(x, wq, wk, solved)
    wq, wk = wq[source], wk[source]
    if flipped is not None:  # the transposed grid's solution: the same weights with the h and w features swapped
        wq = torch.where(flipped[:, None, None], wq[:, features], wq)
        wk = torch.where(flipped[:, None, None], wk[:, features], wk)
    wq, wk = wq[inverse], wk[inverse]
    if reuse_solutions:
        perm, signs = _signed_permutation(targets.shape[0], head_dim, generator)
        wq, wk = (w.gather(-1, perm.unsqueeze(1).expand_as(w)) * signs for w in (wq, wk))
    info = {key: value[source][inverse] for key, value in stats.items()}
    return wq, wk, dict(info, nq=[float(nq)], iters=iters, solves=count, warm_start=warm_start)


def _grid_transpose(x: torch.Tensor) -> Optional[Tuple[torch.Tensor, torch.Tensor]]:
    """ (tokens, features) when the pseudo input of a square grid transposes by a permutation of its features:
    x[tokens] = x[:, features], tokens[q] the token at q's transposed position. A sin-cos table does (timm's layout
    is [sin h, sin w, cos h, cos w], so swapping h and w swaps those blocks, and LayerNorm commutes with it); any
    other pseudo input is checked the same way and gets None unless it passes. """
    n, dim = x.shape
    side = math.isqrt(n)
    if side * side != n or dim % 4:
        return None
    tokens = torch.arange(n).view(side, side).T.flatten()
    quarter = torch.arange(dim // 4)
    features = torch.cat([quarter + dim // 4, quarter, quarter + 3 * dim // 4, quarter + dim // 2])
    if not torch.allclose(x[tokens], x[:, features], rtol=0, atol=1e-6 * float(x.abs().max())):
        return None
    return tokens, features


def _transpose_pairs(unique: torch.Tensor, tokens: torch.Tensor):
    """ Pair each target with its transpose among `unique`: (the targets to solve, for each unique target the index
    of its solve, whether it is that solve's transpose). Transposing the grid maps query tokens[q] to key
    tokens[t(q)]; the objective and the cap are the same on both grids, so a pair shares one solve. """
    transposed = torch.full_like(unique, -1)
    transposed[:, tokens] = torch.where(unique >= 0, tokens[unique.clamp_min(0)], -1)
    row = {tuple(t.tolist()): i for i, t in enumerate(unique)}
    partner = [row.get(tuple(t.tolist()), i) for i, t in enumerate(transposed)]
    keep = [i for i in range(len(partner)) if i <= partner[i]]  # one of each pair (a symmetric target is its own)
    solve_of = {i: n for n, i in enumerate(keep)}
    source = torch.tensor([solve_of[i] if i in solve_of else solve_of[partner[i]] for i in range(len(partner))])
    flipped = torch.tensor([i not in solve_of for i in range(len(partner))])
    return unique[keep], source, flipped


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
    u, s, vh = torch.linalg.svd(x.double(), full_matrices=False)
    rank = min(head_dim, int((s > rtol * s[0]).sum()))
    u_k, s_k, v_k = u[:, :rank], s[:rank], vh[:rank].T
    # U_k^T T U_k without forming T: the noise part as one float32 product (the noise is float32, as the authors'),
    # then on each row's impulse the noise swapped for target_scale, in float64: T = s n + sum_q c_q e_q e_t(q)^T
    # with c_q = target_scale - s n[q, t(q)] (0 for a row without a target)
    noise = _trunc_normal((*targets.shape, n), noise_std, -2.0, 2.0, generator)
    u32 = u_k.float()
    inner = (noise_scale * ((u32.T @ noise) @ u32)).double()
    index = targets.clamp_min(0)
    swap = (target_scale - noise_scale * noise.gather(-1, index[..., None])[..., 0].double()) * (targets >= 0)
    inner += (u_k * swap[..., None]).mT @ u_k[index]
    inner = inner / (s_k.view(-1, 1) * s_k.view(1, -1))  # (B, rank, rank)
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


def solve_cost(solver: str, tokens: int, dim: int, head_dim: int, num_heads: int, maps: int, distinct: int,
               rank: int, options: Dict[str, Any]) -> Tuple[float, float]:
    """ (peak bytes, multiply-adds) a solve is estimated to take, from its sizes alone: `tokens` N, width `dim`,
    `maps` target maps handed to the solver (`num_heads` per layer), at most `distinct` of them different, the
    pseudo input of rank at most `rank`. For an impulse init to refuse a grid before doing any of the work.

    fast: each evaluation runs three N x N x r products and a softmax per distinct solve (about 3 r + 12
    multiply-adds per map entry), its maps in pieces of TASK_ELEMENTS; adam: per layer, autograd over the heads'
    N x N maps, 10,000 times; svd: float32 N x N noise for every map. """
    n2 = float(tokens) ** 2
    table = 20.0 * tokens * dim + 16.0 * min(tokens, dim) ** 2       # sin-cos table and its LayerNorm, Gram
    if solver == 'fast':
        evals = options.get('iters') or fast_evaluations(dim, tokens)
        solves = distinct if options.get('reuse_solutions', True) else maps
        memory = table + 4.0 * solves * (tokens * (rank + 2 * head_dim) + 40 * dim * head_dim) \
            + 4.0 * 4 * TASK_ELEMENTS * 2
        work = evals * solves * n2 * (3 * rank + 12) + solves * n2 * (head_dim + 12) + tokens * dim * min(tokens, dim)
    elif solver == 'adam':
        layers = max(1, maps // num_heads)
        memory = table + 4.0 * 10 * num_heads * n2
        work = options.get('iters', 10000) * layers * num_heads * (n2 * (6 * head_dim + 30) + 6 * tokens * dim * head_dim)
    else:  # the float32 noise of every map and one product of it
        memory = table + 8.0 * maps * n2
        work = maps * n2 * (2 * min(rank, head_dim) + 10) + tokens * dim * min(tokens, dim)
    return memory, work


SOLVERS = {'fast': solve_fast, 'adam': solve_adam, 'svd': solve_svd}
