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

Each solver lives in its own module beside this registry (`impulse_solver_fast`, `impulse_solver_adam`,
`impulse_solver_svd`), the maps and statistics they share in `impulse_maps`; the names they export are importable
from here too.
"""
from typing import Any, Dict, Tuple

from .impulse_maps import (  # noqa: F401  the maps and statistics, importable from the registry too
    TASK_ELEMENTS, _tasks, attention_logits, attention_maps, dense_target, impulse_objective, map_metrics, map_stats)
from .impulse_solver_adam import solve_adam
from .impulse_solver_fast import WARM_START, fast_evaluations, solve_fast
from .impulse_solver_svd import solve_svd

__all__ = [
    'dense_target', 'attention_logits', 'attention_maps', 'impulse_objective', 'map_metrics', 'map_stats', 'solve_adam',
    'solve_fast', 'solve_svd',
    'SOLVERS',
]


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
