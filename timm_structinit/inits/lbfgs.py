""" Batched L-BFGS: many independent smooth problems minimized at once, one batched evaluation per step.

Nocedal & Wright, "Numerical Optimization" (2006), algorithm 7.4 (the two-loop recursion) and 3.1 (backtracking).
Every problem (row of the batch) keeps its own curvature pairs, step length and line search, so a row's trajectory
depends on its own values only, never on which other problems share the batch: a pair that fails the curvature
test, or a step the line search rejects, leaves a slot with zero weight, which the recursion skips. The number of
evaluations is fixed, so the work, and the bits of the result, do not depend on how fast any row converges.

The two loops of the recursion are each a triangular system in the pair coefficients (`_direction`), solved for
the whole history at once: a few batched products per step instead of a handful of small operations per pair.
"""
from typing import Callable, Optional, Tuple

import torch

__all__ = ['minimize']


def _direction(g: torch.Tensor, s: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, h0: torch.Tensor,
               order: torch.Tensor) -> torch.Tensor:
    """ -H g for the L-BFGS inverse Hessian H of pairs s, y (B, m, P) in the slots `order` lists oldest first,
    weights 1 / (s . y) (B, m), 0 for a skipped pair, and initial inverse Hessian diag(h0) (B, P).

    First loop, newest to oldest: a_j = w_j s_j . (q - sum_{i > j} a_i y_i), q = -g; second loop, oldest to newest:
    b_j = w_j y_j . r_j, r_{j+1} = r_j + (a_j - b_j) s_j, r_0 = h0 * (q - sum_i a_i y_i). With the Gram matrix
    G = S Y^T these are (I + diag(w) triu(G, 1)) a = w * S q and (I + diag(w) tril(G^T, -1)) b = w * (Y r_0 +
    tril(G^T, -1) a), in age order; the (B, m, P) pairs stay in their slots (sums over pairs need no order) and
    only the m x m systems are put in age order. """
    q = -g
    gram = (s @ y.mT)[:, order][:, :, order]                          # (B, m, m): s_j . y_i, oldest first
    w = weight[:, order]
    eye = torch.eye(s.shape[1], dtype=g.dtype)
    later = torch.triu(gram, 1) * w[:, :, None]
    # the vector products as row vector @ matrix: a batched matrix @ column vector is ~10x slower on CPU
    a = torch.linalg.solve_triangular(eye + later, (w * (q[:, None] @ s.mT)[:, 0, order])[..., None], upper=True)
    in_slots = torch.argsort(order)
    r = h0 * (q - (a[:, in_slots].mT @ y)[:, 0])
    earlier = torch.tril(gram.mT, -1)
    rhs = w[:, :, None] * ((r[:, None] @ y.mT).mT[:, order] + earlier @ a)
    b = torch.linalg.solve_triangular(eye + earlier * w[:, :, None], rhs, upper=False)
    return r + ((a - b)[:, in_slots].mT @ s)[:, 0]


def minimize(
        value_and_grad: Callable[[torch.Tensor], Tuple[torch.Tensor, torch.Tensor]],
        z: torch.Tensor,
        evals: int,
        history: int = 8,
        precond: Optional[torch.Tensor] = None,
        first_step: float = 0.05,
        armijo: float = 1e-4,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """ Minimize B independent functions of z (B, P) with `evals` batched calls of value_and_grad(z) -> (f (B,), g
    (B, P)); returns the last accepted z and its f.

    precond (P,): a fixed diagonal scaling of the initial inverse Hessian (the step of each coordinate before the
    curvature pairs say more). The first step moves each row by `first_step` times its norm (or by `first_step`, from
zero) along -precond * g; a
    step is accepted when it decreases f by at least `armijo` times the predicted decrease, and otherwise retried on
    the next evaluation with a step shortened by quadratic interpolation (to 0.1-0.5 of the previous one).
    """
    tiny = torch.finfo(z.dtype).tiny
    scale = torch.ones(z.shape[-1], dtype=z.dtype) if precond is None else precond
    f, g = value_and_grad(z)
    # the last `history` pairs in a ring of slots, written in place rather than the whole history copied every
    # step (2 MB for ViT-S's 14 solves); `order` lists the slots oldest first
    pairs_s = torch.zeros(z.shape[0], history, z.shape[1], dtype=z.dtype)
    pairs_y = torch.zeros_like(pairs_s)
    weight = torch.zeros(z.shape[0], history, dtype=z.dtype)  # 1 / (s . y); 0 for an empty or skipped slot
    slots = torch.arange(history)
    size = z.norm(dim=-1)
    gamma = first_step * torch.where(size > 0, size, 1.0) / (g * scale).norm(dim=-1).clamp_min(tiny)
    alpha = torch.ones(z.shape[0], dtype=z.dtype)
    for step in range(evals - 1):
        order = (slots + step) % history
        d = _direction(g, pairs_s, pairs_y, weight, gamma[:, None] * scale, order)
        slope = (g * d).sum(-1)
        trial = torch.addcmul(z, alpha[:, None], d)
        f_trial, g_trial = value_and_grad(trial)
        accepted = f_trial <= f + armijo * alpha * slope  # False for a non-finite value
        s, y = trial - z, g_trial - g
        sy = (s * y).sum(-1)
        curved = accepted & (sy > 1e-10 * s.norm(dim=-1) * y.norm(dim=-1))
        newest = step % history  # order[0]: the oldest slot takes the new pair
        # a pair left out is zeros, not the pair times 0: a refused step's gradient may be NaN or infinite, and
        # NaN * 0 would poison every later direction of its row
        pairs_s[:, newest] = torch.where(curved[:, None], s, 0.0)
        pairs_y[:, newest] = torch.where(curved[:, None], y, 0.0)
        weight[:, newest] = curved.to(z.dtype) / torch.where(curved, sy, 1.0)
        gamma = torch.where(curved, sy / (y * y * scale).sum(-1).clamp_min(tiny), gamma)
        # a rejected step is retried shorter: the minimum of the quadratic through f(0), f'(0) and f(alpha)
        curvature = (f_trial - f - alpha * slope).clamp_min(tiny)
        shorter = (-slope * alpha ** 2 / (2 * curvature)).nan_to_num(0.0)
        alpha = torch.where(accepted, 1.0, torch.minimum(torch.maximum(shorter, 0.1 * alpha), 0.5 * alpha))
        z = torch.where(accepted[:, None], trial, z)
        f = torch.where(accepted, f_trial, f)
        g = torch.where(accepted[:, None], g_trial, g)
    return z, f
