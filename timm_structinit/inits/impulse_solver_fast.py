""" The `fast` impulse solver (the default): the 2024 problem under the reference's norm cap, solved by L-BFGS in the
pseudo input's row space with the cap built into the variables, from a closed-form warm start, one solve per distinct
target (a target and its grid transpose sharing one). `solve_fast` says why each part makes it fast. """
import math
import threading
from functools import partial
from typing import Any, Dict, Optional, Tuple

import torch
import torch.nn.functional as F

from .canonical import canonical_basis, canonical_svd
from .impulse_maps import _tasks, _uniform_start, map_stats
from .lbfgs import minimize
from .threads import denormals_flushed, parallel_tasks

__all__ = ['solve_fast', 'fast_evaluations', 'WARM_START']


def _row_space(x: torch.Tensor, rtol: float = 1e-3, prefix: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """ X ~ Y V^T with V (D, r) orthonormal over the directions of X whose singular values are above rtol x the
    largest; Y = X V has orthogonal columns of norm s_1 >= s_2 >= ... (Y = U S).

    A direction of singular value s moves the logits X Q K^T X^T by s^2 per unit of weight, so one below 1e-3 of
    the largest moves them by under 1e-6 of what the largest does: the solve leaves those to the start (for the
    LayerNormed sin-cos table, whose spectrum falls in pairs, r = 17 at every width on a 16 x 16 grid; the
    objective on X and on Y V^T then agree to 4 digits, and the N x N work is 20% less than at 1e-5, r = 21-23).
    From the float64 eigendecomposition of the smaller Gram matrix (X^T X or X X^T), a fraction of an SVD of X.

    With `prefix`, the first rows (a model's class and register tokens) do not enter the eigendecomposition: the
    basis is that of the other rows (the grid's position table), and the prefix rows are taken in it (Y = X V for
    every row). A prefix row mixed into a sin-cos table's equal pairs would split them slightly, and their
    eigenvectors would then turn with the kernels' last bits; the prefix tokens the solve sees carry no position
    (their key is about 0 at timm's init), so their part outside the grid's directions is nothing to solve on. """
    if prefix:
        _, v = _row_space(x[prefix:], rtol)
        return (x.double() @ v.double()).to(x.dtype), v
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
    # the sin-cos table's spectrum falls in pairs of equal values: each pair's plane, and every sign, in its
    # canonical basis, so that the coordinates the solve works in are the same on every kernel path. (Not
    # `canonical_row_space`, which judges eigenspaces on singular values: judged here on their squares, values
    # near the cut form one eigenspace, whose basis the preconditioned solve is not indifferent to; the recorded
    # weights are this rule's.)
    v = canonical_basis(v, evals)[0]
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
    u, s, vh = canonical_svd(m.double())
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


def _value_and_grad_rows(
        y: torch.Tensor, y_ones_t: torch.Tensor, m: torch.Tensor, index: torch.Tensor, on_key_t: torch.Tensor,
        valid: torch.Tensor, rows: slice, maps: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """ For query rows `rows` of the maps A = softmax(y M y^T) of a batch m (B, r, r) (the logit scale folded in)
    against one-hot targets at key `index` (B, N) where `valid`: the rows' part of sum((A - H)^2) - #targets, and
    its gradient with respect to M. y_ones_t is [y, 1]^T (r + 1, N), on_key_t (B, r, N) the target key's token.

    Through the softmax, d/dZ sum((A - H)^2) = 2 A * (G - <G, A>_row) with G = A - H, so with P = A * A, s = the row
    sums of P and t = A at the target: dZ / 2 = P - (s - t) A - t H, and dZ Y needs A Y and P [Y, 1] only. Those
    are taken transposed, (A Y)^T = Y^T A^T: a product whose output is R wide, not r (~21), runs ~3x faster.
    `maps`: a (B, R, N) buffer the maps are computed in, or None for a new one. """
    y_rows = y[rows]
    attn = torch.matmul(y_rows @ m, y.mT, out=maps)  # (B, R, N)
    attn = torch.softmax(attn, -1, out=attn)
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

    # each thread's maps in one buffer, reused by every task and evaluation: glibc hands a fresh megabyte back to
    # the system when it is freed, so a new one per task and evaluation was paid again in page faults
    buffers = threading.local()

    def task_value_and_grad(m: torch.Tensor, task: Tuple[int, int, int, int]):
        first, last, query, stop = task
        size = (last - first) * (stop - query) * n
        if getattr(buffers, 'maps', None) is None or buffers.maps.numel() < size:
            buffers.maps = torch.empty(size, dtype=y.dtype)
        maps = buffers.maps[:size].view(last - first, stop - query, n)
        return _value_and_grad_rows(y, y_ones_t, m[first:last], index[first:last], on_key_t[first:last],
                                    valid[first:last], slice(query, stop), maps)

    def value_and_grad(m: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        m = scale * m
        tasks = _tasks(m.shape[0], n)
        parts = parallel_tasks(partial(task_value_and_grad, m), tasks)
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
                 warm_start: float = 0.0, prefix: int = 0):
        self.y, self.v = _row_space(x, prefix=prefix)
        self.nq = nq
        c, e = self.v.T @ wq, self.v.T @ wk
        self.q_perp = wq - self.v @ c
        self.q_perp_sq = self.q_perp.square().sum(-2, keepdim=True)   # (B, 1, k)
        self.k_perp = wk - self.v @ e
        # per-row quantities of W_k are kept as (B, 1, D) rows and D x r ones as (B, r, D): a float64 product with
        # a D-wide output ran 1.7-2x faster on one core than the same product with an r-wide one (r = 17, D = 384)
        self.k_perp_sq = self.k_perp.square().sum(-1)[:, None]         # (B, 1, D)
        self.v_t = self.v.T.contiguous()                               # (r, D)
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

    def _row_norms(self, e: torch.Tensor) -> torch.Tensor:
        """ (B, 1, D) norms of the rows of V e + K_perp, from (B, r, D) products: |V_i e|^2 + 2 V_i e . P_i +
        |P_i|^2 with V_i e . P_i = V_i (P e^T)_i^T (no (B, D, k) tensor per evaluation). """
        v_t = self.v_t
        square = (((e @ e.mT) @ v_t + 2 * (e @ self.k_perp.mT)) * v_t).sum(-2, keepdim=True) + self.k_perp_sq
        return square.clamp_min(0).sqrt()

    def weights(self, z: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        c, e = self._unpack(z)
        q_norm = ((c * c).sum(-2, keepdim=True) + self.q_perp_sq).sqrt()     # column norms of V c + Q_perp
        k_full = self.v @ e + self.k_perp
        return self.nq * (self.v @ c + self.q_perp) / q_norm, self.nq * k_full / k_full.norm(dim=-1, keepdim=True)

    def value_and_grad(self, z: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """ The objective and its gradient in (c, e). W_k = nq (V e + P) / n (P = K_perp, n its row norms) enters
        through V^T W_k = nq (A e + B), A = V^T diag(1/n) V, B = V^T diag(1/n) P; and with G the gradient with
        respect to V^T W_k, the gradient in e is nq A G - V^T diag(t) (V e + P), t = nq s / n^3, s_i the dot product
        of row i of V e + P with row i of V G. Every product is (B, r, D) or smaller, but the four with P. """
        c, e = self._unpack(z)
        nq, v, v_t, p = self.nq, self.v, self.v_t, self.k_perp
        q_norm = ((c * c).sum(-2, keepdim=True) + self.q_perp_sq).sqrt()     # column norms of V c + Q_perp
        q_seen = nq * c / q_norm                                             # V^T W_q
        n = self._row_norms(e)
        v_n = v_t / n                                                        # (B, r, D): V^T diag(1/n)
        a = v_n @ v
        k_seen = nq * (a @ e + v_n @ p)                                      # V^T W_k
        value, grad_m = self.objective(q_seen @ k_seen.mT)
        grad_q = grad_m @ k_seen
        g = grad_m.mT @ q_seen                                               # (B, r, k)
        s = (((g @ e.mT) @ v_t + g @ p.mT) * v_t).sum(-2, keepdim=True)     # (V e + P)_i . (V G)_i
        v_s = v_t * (nq * s / n.pow(3))                                      # V^T diag(t)
        grad_e = nq * (a @ g) - (v_s @ v) @ e - v_s @ p
        # through the column normalization of W_q: the gradient of a unit vector's direction, times nq / norm
        grad_c = (grad_q - c * (c * grad_q).sum(-2, keepdim=True) / q_norm.square()) * (nq / q_norm)
        return value, torch.cat([grad_c.flatten(1), grad_e.flatten(1)], 1)


def fast_evaluations(dim: int, tokens: int) -> int:
    """ The fast solver's default number of evaluations for width `dim` and `tokens` N: 10 x max(1, D / 192) x
    (1 + 64 / N), so 12 on ViT-T's 16 x 16 grid, 13 on 14 x 14, 20 on an 8 x 8 one, 25 for ViT-S on 16 x 16, 53 for
    ViT-B on 14 x 14. Under the cap the logits can grow with the width (the pseudo input's rows have norm sqrt(D),
    W_k has D rows of norm nq), the maps get sharper and the problem stiffer; a small grid, more of it border, is
    stiffer too. At these counts the solve reaches a lower objective than the reference's 10,000 Adam steps, every
    argmax on its target (docs/benchmarks.md, `benchmarks/impulse_solver.py`). """
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
        prefix: int = 0,
) -> Tuple[torch.Tensor, torch.Tensor, Dict[str, Any]]:
    """ The 2024 problem under the same cap, solved over 400x faster than the reference.
    targets (B, N); `prefix`: the first rows of x are prefix tokens (keys with no target, `_row_space`).

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
    solved, inverse, source, flipped, features = _solves(x, targets, reuse_solutions)
    count = solved.shape[0]
    wq, wk = _uniform_start(count, x.shape[-1], head_dim, num_heads, generator)
    # in float64: L-BFGS carries the kernels' last bits into its steps (in float32 two kernel paths gave ViT-B weights
    # 7e-2 of the largest apart, ViT-S 1.3e-4, width 32 5e-5; in float64 within 3.9e-6: docs/benchmarks.md)
    wq, wk = wq.double(), wk.double()
    nq = wq.norm(dim=-2).mean()  # as the reference: the mean initial column norm over the batch's starts
    with denormals_flushed():
        problem = _CappedProblem(x.double(), solved, wq, wk, nq, warm_start, prefix)
        z, _ = minimize(problem.value_and_grad, problem.start, iters, precond=problem.precond)
        wq, wk = problem.weights(z)
        wq, wk = wq.to(x.dtype), wk.to(x.dtype)
        stats = map_stats(x, wq, wk, solved)
    perm, signs = _signed_permutation(targets.shape[0], head_dim, generator) if reuse_solutions else (None, None)
    wq, wk = (_per_head(w, inverse, source, flipped, features, perm, signs) for w in (wq, wk))
    info = {key: value[source][inverse] for key, value in stats.items()}
    return wq, wk, dict(info, nq=[float(nq)], iters=iters, solves=count, warm_start=warm_start)


def _per_head(w: torch.Tensor, inverse, source, flipped, features, perm=None, signs=None) -> torch.Tensor:
    """ Each head's weights (heads, D, k) from the solves' (solves, D, k), as `_solves` maps them: its target's
    solve, with the h and w features swapped where the target is that solve's grid transpose, and with `perm`
    and `signs` (heads, k) its head dimensions permuted and signed (`_signed_permutation`). One gather: every
    head's copy is read from the solves directly. """
    heads, (dim, width) = inverse.shape[0], w.shape[1:]
    solve = source[inverse]
    rows = torch.arange(dim).expand(heads, dim)
    if flipped is not None:
        rows = torch.where(flipped[inverse][:, None], features, rows)
    cols = torch.arange(width).expand(heads, width) if perm is None else perm
    out = w[solve[:, None, None], rows[:, :, None], cols[:, None, :]]
    return out if signs is None else out.mul_(signs)


def _solves(x: torch.Tensor, targets: torch.Tensor, reuse_solutions: bool):
    """ The targets to solve and how each head's target maps to them: (solved, for each head its distinct target,
    for each distinct target its solve, whether that solve is its grid transpose or None, the features a transpose
    swaps or None). Without `reuse_solutions` every head is solved on its own. """
    if reuse_solutions:
        unique, inverse = torch.unique(targets, dim=0, return_inverse=True)
    else:
        unique, inverse = targets, torch.arange(targets.shape[0])
    solved, source, flipped, features = unique, torch.arange(unique.shape[0]), None, None
    symmetry = _grid_transpose(x) if reuse_solutions else None
    if symmetry is not None:
        tokens, features = symmetry
        solved, source, flipped = _transpose_pairs(unique, tokens)
    return solved, inverse, source, flipped, features


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
