""" What an impulse solve sees: the pseudo input (LayerNorm of a position table, the prefix tokens' rows, the content
directions projected out), and the table a model must carry for the solve to hold in its forward pass (the sin-cos
table the 2024 solve assumes, written into a learned one). """
from typing import Any, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from ..layers.pos_embed import sincos_pos_embed

__all__ = ['pseudo_input', 'layer_normed', 'content_dims', 'write_sincos_table_', 'learned_table']


def pseudo_input(grid_size: Tuple[int, int], embed_dim: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """ LayerNorm (no affine, eps 1e-5) of the grid's sin-cos table: (H * W, D), the 2024 impulse pseudo input.

    This is what a block's pre-attention LayerNorm sees at step 0 for a blank image whose patch embedding is
    zero, so an attention map solved on it is the map the model starts from on the position signal alone.
    """
    table = sincos_pos_embed(grid_size, embed_dim, dtype=torch.float64)[0]
    return F.layer_norm(table, (embed_dim,), eps=1e-5).to(dtype)


def content_dims(model: nn.Module) -> Optional[int]:
    """ How many directions patch content can give a token before LayerNorm (the rank of `_content_basis`), or None
    for a model without a linear patch embedding. """
    proj = getattr(getattr(model, 'patch_embed', None), 'proj', None)
    if not isinstance(getattr(proj, 'weight', None), torch.Tensor) or proj.weight.is_meta:
        return None
    return int(_content_basis(model).shape[1])


def learned_table(model: nn.Module) -> bool:
    """ The model's position table is a learned one (not the fixed sin-cos table of this package's models). """
    return isinstance(getattr(model, 'pos_embed', None), torch.Tensor) and not getattr(model, 'sincos_pos_embed', False)


def _patch_rows(model: nn.Module) -> int:
    """ Index of the first patch row of model.pos_embed: class / register rows come first unless no_embed_class. """
    table = model.pos_embed
    prefix = int(getattr(model, 'num_prefix_tokens', 0))
    if getattr(model, 'no_embed_class', False) or table.shape[1] == model.patch_embed.num_patches:
        return 0
    return prefix


@torch.no_grad()
def write_sincos_table_(model: nn.Module, scale: float) -> None:
    """ Put the grid's 2D sin-cos table, times `scale`, into a learned position table: the table the 2024 solve
    assumes, which its paper's ViT carries, with zero rows for the class and register tokens (as this package's
    fixed tables and MAE's: a prefix token carries no position). The table stays a learned parameter: it starts at
    sin-cos and trains as before. """
    grid = tuple(model.patch_embed.grid_size)
    table = sincos_pos_embed(grid, model.pos_embed.shape[-1], dtype=torch.float64)[0] * scale
    first = _patch_rows(model)
    model.pos_embed[0, :first] = 0
    model.pos_embed[0, first:first + table.shape[0]] = table.to(model.pos_embed)
    model.pos_embed_scale = float(scale)


def _position_table(model: nn.Module, embed_dim: int, cfg: Any) -> torch.Tensor:
    """ (N, D) position signal of the patch tokens before LayerNorm: the grid's sin-cos table in float64, unscaled
    (`pseudo_input='sincos'`; LayerNorm removes the scale), or the model's own patch position embedding as it is
    now (`'pos_embed'`, float32). """
    if cfg.pseudo_input == 'sincos':
        return sincos_pos_embed(tuple(model.patch_embed.grid_size), embed_dim, dtype=torch.float64)[0]
    table = model.pos_embed.detach().cpu().float()[0]  # the init computes on the CPU wherever the model lives
    first = _patch_rows(model)
    return table[first:first + model.patch_embed.num_patches]


def _prefix_rows(model: nn.Module, cfg: Any) -> torch.Tensor:
    """ (P, D) what the model's prefix tokens (class, register) carry into the first block on a blank image, before
    LayerNorm: their learned token plus their row of the position table. (0, D) when the solve leaves them out:
    without prefix tokens, and for the 2025 closed form, whose authors' code drops the class token's row. """
    dim = model.pos_embed.shape[-1]
    if cfg.solver == 'svd':
        return torch.zeros(0, dim)
    tokens = [t.detach().cpu().float().reshape(-1, dim) for t in
              (getattr(model, 'cls_token', None), getattr(model, 'reg_token', None)) if isinstance(t, torch.Tensor)]
    if not tokens:
        return torch.zeros(0, dim)
    rows = torch.cat(tokens)
    if _patch_rows(model):
        rows = rows + model.pos_embed.detach().cpu().float()[0, :rows.shape[0]]
    return rows


def _content_basis(model: nn.Module) -> torch.Tensor:
    """ (D, c) orthonormal basis of every direction a patch's content can give a token before LayerNorm: the patch
    embedding's weight range and bias, and the all-ones direction LayerNorm subtracts. """
    proj = model.patch_embed.proj
    weight = proj.weight.detach().cpu().double().flatten(1)  # (D, C * p * p): a conv patch embedding is linear per patch
    columns = [weight, torch.ones(weight.shape[0], 1, dtype=torch.float64)]
    if getattr(proj, 'bias', None) is not None:
        columns.append(proj.bias.detach().cpu().double()[:, None])
    u, s, _ = torch.linalg.svd(torch.cat(columns, 1), full_matrices=False)
    return u[:, s > 1e-6 * s[0]]


def _token_table(model: nn.Module, embed_dim: int, cfg: Any) -> Tuple[torch.Tensor, int]:
    """ (P + N, D) the tokens the solve sees before LayerNorm (prefix rows first, then the patch grid's position
    table), with the content directions projected out for `content='orthogonal'`, and P. """
    prefix = _prefix_rows(model, cfg)
    table = torch.cat([prefix.to(torch.float64), _position_table(model, embed_dim, cfg).double()])
    if cfg.content == 'orthogonal':
        basis = _content_basis(model)
        table = table - (table @ basis) @ basis.T
    return table, prefix.shape[0]


def layer_normed(model: nn.Module, embed_dim: int, cfg: Any, prefix: bool = False) -> torch.Tensor:
    """ (N, D) LayerNorm (no affine) of the tokens the solve of `cfg` (an `ImpulseCfg`) sees: the position table of
    its `pseudo_input`, the content directions projected out with `content='orthogonal'`, and with `prefix` the rows
    of the prefix tokens the solve also sees first ((P + N, D)). """
    table, count = _token_table(model, embed_dim, cfg)
    if not prefix:
        table = table[count:]
    # in float64: the float32 result is then the same bits whatever kernels (vector widths) computed the statistics
    return F.layer_norm(table, (embed_dim,), eps=1e-5).float()
