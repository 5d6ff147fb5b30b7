""" The impulse problem's maps and their statistics, which every solver shares: per-head attention maps
softmax(s X W_q W_k^T X^T) of the pseudo input, the 2024 objective mean((H - A)^2) against a one-hot target map H, the
share of rows whose argmax is the target and the mass on it, the authors' random start and the norm cap. Batches of
N x N maps are handled in fixed pieces (`_tasks`), so that memory stays bounded and the bits do not depend on the
thread count. """
import math
from typing import Any, Dict, List, Tuple

import torch

from .threads import denormals_flushed, parallel_tasks

__all__ = ['dense_target', 'attention_logits', 'attention_maps', 'impulse_objective', 'map_metrics', 'map_stats',
           'TASK_ELEMENTS']


# elements of the N x N maps one task of the fast solver holds at a time (1 MB in float64, a core's L2 cache: twice
# as many made a 16 x 16 grid's evaluation ~7% slower): the solve's memory does not grow with the grid beyond this and
# the (N, r) pseudo input, and the tasks spread over the caller's threads
TASK_ELEMENTS = 2 ** 17


def _tasks(count: int, n: int) -> List[Tuple[int, int, int, int]]:
    """ Fixed (first solve, last solve, first query, last query) pieces of the batch of maps, TASK_ELEMENTS each:
    several whole maps per piece on small grids, a band of query rows of one map on large ones. """
    if n * n <= TASK_ELEMENTS:
        per = TASK_ELEMENTS // (n * n)
        return [(i, min(i + per, count), 0, n) for i in range(0, count, per)]
    rows = max(1, TASK_ELEMENTS // n)
    return [(i, i + 1, q, min(q + rows, n)) for i in range(count) for q in range(0, n, rows)]


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
