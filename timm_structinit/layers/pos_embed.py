""" Fixed 2D sin-cos position embeddings, and the position-table scale a model keeps.

Both papers use a fixed (not learned) 2D sin-cos absolute position embedding. The table is timm's own
`build_sincos2d_pos_embed` (per position: sin(h w_f), sin(w w_f), cos(h w_f), cos(w w_f) over D/4 frequencies),
so the embedding our models add is the one the structured-init authors' code builds; the inits' float64 pseudo
input is the same table computed in float64.
"""
from typing import Optional, Sequence

import torch
from torch import nn
from timm.layers import build_sincos2d_pos_embed

__all__ = ['sincos_pos_embed', 'check_sincos_dim', 'set_pos_embed_scale_']


def check_sincos_dim(embed_dim: int) -> None:
    if embed_dim % 4 != 0:
        raise ValueError(
            f'pos_embed="sincos" needs embed_dim divisible by 4 (sin and cos of both axes), got embed_dim={embed_dim}')


def _sincos2d_float64(grid_size: Sequence[int], embed_dim: int, temperature: float,
                      device: Optional[torch.device]) -> torch.Tensor:
    """ timm's `build_sincos2d_pos_embed` table (same layout and frequencies), every step in float64. timm computes
    in float32, where the vectorized sines of one kernel path differ from another's in the last bits; the inits'
    pseudo input, LayerNormed in float64 and rounded to float32 from this table, is the same bits on every path. """
    bands = 1.0 / temperature ** (torch.arange(embed_dim // 4, dtype=torch.float64, device=device) / (embed_dim // 4))
    grid = torch.stack(torch.meshgrid(
        [torch.arange(s, dtype=torch.float64, device=device) for s in grid_size], indexing='ij')).flatten(1).T
    angles = grid.unsqueeze(-1) * bands  # (H * W, 2, D / 4): h then w
    return torch.stack([angles.sin(), angles.cos()], dim=1).flatten(1)


def sincos_pos_embed(
        grid_size: Sequence[int],
        embed_dim: int,
        num_prefix_tokens: int = 0,
        temperature: float = 10000.,
        dtype: torch.dtype = torch.float32,
        device: Optional[torch.device] = None,
) -> torch.Tensor:
    """ The (1, prefix + H * W, D) sin-cos table for a patch grid, row-major over (h, w).

    Prefix rows (class and register tokens) are zero: a prefix token carries no position, as in MAE's
    sin-cos table. Returns a new tensor; a model keeps it as a buffer (`StructVisionTransformer`).
    """
    check_sincos_dim(embed_dim)
    if dtype == torch.float64:
        table = _sincos2d_float64(list(grid_size), embed_dim, temperature, device)
    else:
        table = build_sincos2d_pos_embed(list(grid_size), dim=embed_dim, temperature=temperature, device=device)
    table = table.to(dtype)
    if num_prefix_tokens:
        table = torch.cat([table.new_zeros(num_prefix_tokens, embed_dim), table], dim=0)
    return table.unsqueeze(0)


@torch.no_grad()
def set_pos_embed_scale_(model: nn.Module, scale: float) -> None:
    """ Make the model's position table carry `scale` times its unscaled values, once: not compounding.

    The model keeps the scale as `model.pos_embed_scale` (1 when unset). A model that rebuilds a fixed table
    (`StructVisionTransformer` with `pos_embed='sincos'`, on `set_input_size` and under `dynamic_img_size`) builds
    it at that scale; a learned table is multiplied by scale / the scale it already carries, so applying an init
    twice leaves it at `scale`, and interpolating it for another grid keeps the scale.
    """
    if getattr(model, 'pos_embed', None) is None:
        raise ValueError(f'pos_embed_scale={scale} needs a model with a position embedding')
    current = float(getattr(model, 'pos_embed_scale', 1.0))
    model.pos_embed_scale = float(scale)
    if getattr(model, 'sincos_pos_embed', False):
        model._reset_sincos()  # a fixed table is rebuilt exactly at the new scale
    elif scale != current:
        model.pos_embed.mul_(scale / current)
