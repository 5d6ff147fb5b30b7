""" Impulse targets: the window offsets each head is given (drawn `distinct`, `random`, or in the 2025 paper's `fixed`
order) and the target map an offset (dy, dx) makes, query patch (r, c) attending to key patch (r + dy, c + dx).

A target is stored as an index vector: `target[q]` is the key index query q attends to, or -1 for a query whose
key falls off the grid under `border='zero'` (the authors' choice: that row of the map is all zero).
`border='circular'` wraps around instead, so every row has a target.
"""
from typing import List, Sequence, Tuple

import torch

__all__ = ['window_offsets', 'fixed_order', 'draw_offsets', 'draw_offsets_cycled', 'impulse_target',
           'OFFSET_POLICIES', 'BORDERS']


OFFSET_POLICIES = ('distinct', 'random', 'fixed')
BORDERS = ('zero', 'circular')
# sign pattern (sign dy, sign dx) -> rank: centre, up, right, left, down, then the diagonals row-major. Sorting a
# 3x3 window by distance then this rank gives the 2025 paper's order 4, 1, 5, 3, 7, 0, 2, 6, 8.
_DIRECTION_RANK = {(0, 0): 0, (-1, 0): 1, (0, 1): 2, (0, -1): 3, (1, 0): 4, (-1, -1): 5, (-1, 1): 6, (1, -1): 7, (1, 1): 8}


def _sign(v: int) -> int:
    return (v > 0) - (v < 0)


def window_offsets(kernel_size: int) -> List[Tuple[int, int]]:
    """ The f*f offsets (dy, dx) of a window, row-major: index i is (i // f - f // 2, i % f - f // 2). """
    half = kernel_size // 2
    return [(i // kernel_size - half, i % kernel_size - half) for i in range(kernel_size * kernel_size)]


def fixed_order(kernel_size: int) -> List[int]:
    """ Deterministic window order for the `fixed` policy: nearest offsets first.

    Sorted by squared distance from the centre, then by direction (centre, up, right, left, down, up-left,
    up-right, down-left, down-right), then row-major. For 3x3 this is the 2025 paper's 4, 1, 5, 3, 7, 0, 2, 6, 8;
    for 5x5 it continues with the distance-2 axis offsets, then the knight moves, then the corners.
    """
    offsets = window_offsets(kernel_size)
    def key(i):
        dy, dx = offsets[i]
        return dy * dy + dx * dx, _DIRECTION_RANK[(_sign(dy), _sign(dx))], dy, dx
    return sorted(range(len(offsets)), key=key)


def draw_offsets(
        num_heads: int,
        kernel_size: int,
        policy: str,
        generator: torch.Generator,
) -> List[Tuple[int, int]]:
    """ One window offset per head.

    distinct: without replacement (heads <= f*f), so a layer's filters are linearly independent, which
        Proposition 1 of the 2024 paper asks for; the default.
    random: with replacement, as the authors' 2024 code does (`torch.randint`).
    fixed: head i takes entry i mod f*f of `fixed_order` (the 2025 paper's order for 3x3); draws nothing.
    """
    window = window_offsets(kernel_size)
    if policy == 'distinct':
        if num_heads > len(window):
            raise ValueError(
                f"offsets='distinct' needs num_heads <= kernel_size**2, got num_heads={num_heads} with "
                f"kernel_size={kernel_size}; use offsets='random' or 'fixed', or a larger kernel_size")
        index = torch.randperm(len(window), generator=generator)[:num_heads].tolist()
    elif policy == 'random':
        index = torch.randint(0, len(window), (num_heads,), generator=generator).tolist()
    elif policy == 'fixed':
        order = fixed_order(kernel_size)
        index = [order[i % len(order)] for i in range(num_heads)]
    else:
        raise ValueError(f'offsets={policy!r} is not valid; choose one of {list(OFFSET_POLICIES)}')
    return [window[i] for i in index]


def draw_offsets_cycled(
        count: int,
        kernel_size: int,
        policy: str,
        generator: torch.Generator,
) -> List[Tuple[int, int]]:
    """ `count` offsets where there may be more heads (or blocks) than window offsets: `distinct` takes a fresh
    permutation of the window for every f*f of them; the other policies are `draw_offsets`'. """
    if policy != 'distinct':
        return draw_offsets(count, kernel_size, policy, generator)
    offsets: List[Tuple[int, int]] = []
    while len(offsets) < count:
        offsets += draw_offsets(min(kernel_size ** 2, count - len(offsets)), kernel_size, policy, generator)
    return offsets


def impulse_target(grid_size: Sequence[int], offset: Tuple[int, int], border: str = 'zero') -> torch.Tensor:
    """ (N,) long: the key each query attends to under `offset`, -1 where `border='zero'` leaves the row empty. """
    height, width = grid_size
    dy, dx = offset
    rows = torch.arange(height).view(-1, 1).expand(height, width)
    cols = torch.arange(width).view(1, -1).expand(height, width)
    key_r, key_c = rows + dy, cols + dx
    if border == 'circular':
        return ((key_r % height) * width + key_c % width).flatten()
    if border != 'zero':
        raise ValueError(f'border={border!r} is not valid; choose one of {list(BORDERS)}')
    inside = (key_r >= 0) & (key_r < height) & (key_c >= 0) & (key_c < width)
    return torch.where(inside, key_r * width + key_c, torch.full_like(key_r, -1)).flatten()


def _odd_kernel(where: str, value: int) -> None:
    if value < 1 or value % 2 == 0:
        raise ValueError(f'{where}={value} must be an odd window size (1, 3, 5, ...): the impulse needs a centre')
