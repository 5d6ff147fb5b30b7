""" What an impulse solve is estimated to cost (peak memory, multiply-adds) from a model's geometry alone, and the
fixed budget above which an impulse init refuses the model's grid before any work, naming the grids that fit. """
import functools
from typing import Any, Dict, Optional, Sequence

import torch

from ..layers.pos_embed import sincos_pos_embed
from .impulse_solvers import solve_cost

__all__ = ['impulse_solve_cost', 'check_solve_budget', 'SOLVE_MEMORY_BUDGET', 'SOLVE_WORK_BUDGET']
# What an impulse solve may take before the init refuses the grid: the solve's work grows with the square of the
# token count (every head's N x N map), so a large img_size or a small patch_size can ask for hours or terabytes.
# Fixed numbers, not a share of this machine, so that a model builds or not the same way everywhere.
SOLVE_MEMORY_BUDGET = 4 * 2 ** 30   # bytes
SOLVE_WORK_BUDGET = 2e12            # multiply-adds: about a minute on one loaded core of the machine it was measured on


def _pseudo_input_rank(grid: Sequence[int], dim: int, cfg: Any) -> int:
    """ An upper bound on the numerical rank of the pseudo input, from the grid alone: a sin-cos table's columns
    each depend on one axis, so its rank is at most the ranks of the per-axis tables plus one for LayerNorm's
    centring; any other pseudo input is taken at full rank. """
    tokens = grid[0] * grid[1]
    if cfg.pseudo_input != 'sincos' or cfg.content != 'ignore' or cfg.layer_inputs != 'same':
        return min(tokens, dim)
    return min(1 + _axis_rank(grid[0], dim) + _axis_rank(grid[1], dim), tokens, dim)


@functools.lru_cache(maxsize=64)
def _axis_rank(size: int, dim: int) -> int:
    """ Numerical rank of the sin-cos table of a size x 1 grid: one axis's columns (the other's are constant). """
    # on the CPU explicitly: a model built on the meta device (a dry build) checks its budget too
    table = sincos_pos_embed((size, 1), dim, dtype=torch.float64, device=torch.device('cpu'))[0]
    return int(torch.linalg.matrix_rank(table, rtol=1e-5))


def impulse_solve_cost(cfg: Any, geometry: Dict[str, Any], grid: Optional[Sequence[int]] = None):
    """ (peak bytes, multiply-adds) the impulse solve of a model of this geometry is estimated to take (see
    `impulse_solvers.solve_cost`), on its own grid or on `grid`. """
    grid = tuple(grid or geometry['grid_size'])
    dim, heads, layers = geometry['embed_dim'], geometry['num_heads'], geometry.get('num_layers', 1)
    head_dim = dim // heads
    solved_layers = 1 if cfg.share_layers or cfg.layer_inputs == 'propagated' else layers
    maps = heads * solved_layers
    distinct = min(maps, cfg.kernel_size ** 2)
    memory, work = solve_cost(cfg.solver, grid[0] * grid[1], dim, head_dim, heads, maps, distinct,
                              _pseudo_input_rank(grid, dim, cfg), cfg.solver_options())
    if cfg.layer_inputs == 'propagated':  # one solve per layer, one after the other
        work *= layers
    return memory, work


def check_solve_budget(cfg: Any, geometry: Dict[str, Any]) -> None:
    memory, work = impulse_solve_cost(cfg, geometry)
    if memory <= SOLVE_MEMORY_BUDGET and work <= SOLVE_WORK_BUDGET:
        return
    grid = tuple(geometry['grid_size'])
    low, high = 0, max(grid)  # the largest square grid within both budgets, by bisection
    while low < high:
        side = (low + high + 1) // 2
        memory_side, work_side = impulse_solve_cost(cfg, geometry, (side, side))
        low, high = (side, high) if memory_side <= SOLVE_MEMORY_BUDGET and work_side <= SOLVE_WORK_BUDGET else \
            (low, side - 1)
    side = low
    img, patch = geometry.get('img_size'), geometry.get('patch_size')
    where = f'img_size={_pair(img)} / patch_size={_pair(patch)}' if img and patch else 'img_size / patch_size'
    fits = f'grids up to {side} x {side} tokens fit' if side else 'no grid fits at this width with this solver'
    if img and patch and side:
        fits += (f' (img_size={side * patch[0]} at patch_size={_pair(patch)}, or patch_size='
                 f'{-(-max(img) // side)} at img_size={_pair(img)})')
    raise ValueError(
        f'impulse init: the patch grid {grid[0]} x {grid[1]} ({where}) has {grid[0] * grid[1]} tokens, and its '
        f"solve (solver={cfg.solver!r}, width {geometry['embed_dim']}) is estimated at {work:.2g} multiply-adds and "
        f'{memory / 2 ** 30:.3g} GiB, above the budget of {SOLVE_WORK_BUDGET:.2g} multiply-adds and '
        f'{SOLVE_MEMORY_BUDGET / 2 ** 30:.3g} GiB (each head is solved on its N x N attention map); {fits}')


def _pair(value) -> str:
    value = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    return str(value[0]) if value[0] == value[1] else f'{value}'
