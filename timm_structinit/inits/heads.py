""" A model's attentions, and the per-head math matrices of each, read and written through its `AttentionLayout`.

`model_layouts` finds every attention of a model in forward order (`timm_attention` reads each of timm's layouts, or
says what a class computes that an init cannot write); the functions below read and write one attention module's
W_q, W_k (heads, D, k), W_v and W_proj in the papers' math form (x W), whatever layout holds them. Every init in this
package writes through these, and the tests read back through their own code, so the transposition convention
lives in `layouts` alone.
"""
from typing import List, Tuple

import torch
from torch import nn

from .layouts import AttentionLayout, PositionBias
from .timm_attention import NOT_TOKEN_ATTENTION, POOLING_HEADS, kind_of, read_layout

__all__ = [
    'model_layouts', 'layout_of', 'find_attention', 'head_dim_of', 'read_qk', 'write_qk_', 'read_vproj',
    'write_vproj_', 'zero_attention_bias_', 'written_tensors', 'attention_refusals', 'NoAttentionError',
]


class NoAttentionError(ValueError):
    """ The model has no attention an init could write. """


def attention_refusals(model: nn.Module) -> List[Tuple[str, str, str]]:
    """ (module name, class, what it computes) of every attention of `model` an init cannot write. """
    out = []
    for name, module in model.named_modules():
        layout, why = read_layout(module)
        if layout is None and why is not None:
            out.append((name, kind_of(module), why))
    return out


def _shared_position(model: nn.Module):
    """ A relative position bias the model keeps once for every attention (BEiT's `rel_pos_bias`, a relpos ViT's
    `shared_rel_pos`), as a `PositionBias`, or None. """
    shared = getattr(model, 'rel_pos_bias', None)
    if shared is not None and hasattr(shared, 'relative_position_bias_table'):  # BEiT
        size = shared.relative_position_index.shape[0]
        return PositionBias(shared.relative_position_bias_table, shared.relative_position_index.reshape(size, size),
                            tuple(shared.window_size), 1, shared=True, owner=shared,
                            index_name='relative_position_index')
    shared = getattr(model, 'shared_rel_pos', None)
    if shared is not None and type(shared).__name__ == 'RelPosBias':
        size = shared.relative_position_index.numel()
        side = int(round(size ** 0.5))
        return PositionBias(shared.relative_position_bias_table, shared.relative_position_index.reshape(side, side),
                            tuple(shared.window_size), shared.prefix_tokens, shared=True, owner=shared,
                            index_name='relative_position_index')
    return None


def model_layouts(model: nn.Module) -> List[AttentionLayout]:
    """ Every attention of `model` an init can write, in forward order, each named as `named_modules` names it.

    ValueError in one line, before any work, when some attention is one an init cannot write (naming the first and
    what it computes), and `NoAttentionError` when there is none. Attention-pooling heads are not token mixing and
    are left out. """
    refused = attention_refusals(model)
    if refused:
        name, kind, why = refused[0]
        more = f' (and {len(refused) - 1} more)' if len(refused) > 1 else ''
        raise ValueError(f'{type(model).__name__} has attention an init cannot write: {name or kind} ({kind}) is '
                         f'{why}{more}; no struct_init fits it (each writes the per-head softmax(q k^T) attention '
                         f'of every layer)')
    layouts, shared = [], _shared_position(model)
    for name, module in model.named_modules():
        layout, _ = read_layout(module)
        if layout is not None:
            layout.name = name
            if layout.position is None and shared is not None and hasattr(module, 'qkv'):
                layout.position = shared
            layouts.append(layout)
    if not layouts:
        pooling = sorted({kind_of(m) for m in model.modules() if kind_of(m) in POOLING_HEADS})
        others = sorted({NOT_TOKEN_ATTENTION[kind_of(m)] for m in model.modules()
                         if kind_of(m) in NOT_TOKEN_ATTENTION})
        extra = f' (only an attention-pooling head: {", ".join(pooling)})' if pooling else \
            f' (its token mixing is {"; ".join(others)})' if others else ''
        raise NoAttentionError(
            f'{type(model).__name__} has no attention layer{extra}: the structured inits write the per-head '
            f'softmax(q k^T) attention of transformers (timm ViTs, Swin, PiT, Twins, MaxViT, ...; docs/zoo.md lists '
            f'every timm family)')
    return layouts


def layout_of(attn: nn.Module) -> AttentionLayout:
    """ The layout of one attention module; ValueError for a module that is not one an init can write. """
    if isinstance(attn, AttentionLayout):
        return attn
    layout, why = read_layout(attn)
    if layout is None:
        raise ValueError(f'{type(attn).__name__} is not an attention an init can write' + (f': {why}' if why else ''))
    return layout


def find_attention(model: nn.Module) -> List[nn.Module]:
    """ The model's attention modules an init can write, in forward order (`model_layouts`). """
    return [layout.module for layout in model_layouts(model)]


def head_dim_of(attn: nn.Module) -> int:
    return layout_of(attn).qk_dim


def read_qk(attn: nn.Module) -> Tuple[torch.Tensor, torch.Tensor]:
    """ Per-head math W_q and W_k, each (heads, D, k). """
    return layout_of(attn).read_qk()


@torch.no_grad()
def write_qk_(attn: nn.Module, wq: torch.Tensor, wk: torch.Tensor) -> None:
    """ Write per-head math W_q, W_k (heads, D, k). """
    layout = layout_of(attn)
    expected = (layout.heads, layout.dim_in, layout.qk_dim)
    if wq.shape != expected or wk.shape != expected:
        raise ValueError(f'expected W_q and W_k of shape {expected}, got {tuple(wq.shape)}, {tuple(wk.shape)}')
    layout.write_qk_(wq, wk)


def read_vproj(attn: nn.Module) -> Tuple[torch.Tensor, torch.Tensor]:
    """ Math W_v (D, h d_v) and W_proj (h d_v, D_out): the value path computes x W_v W_proj (with attention in
    between). """
    return layout_of(attn).read_vproj()


@torch.no_grad()
def write_vproj_(attn: nn.Module, wv: torch.Tensor, wproj: torch.Tensor) -> None:
    layout_of(attn).write_vproj_(wv, wproj)


@torch.no_grad()
def zero_attention_bias_(attn: nn.Module, qk: bool = True, vproj: bool = True) -> None:
    """ Zero the biases of the parts an init wrote, so the written products are the whole linear map. """
    layout_of(attn).zero_bias_(qk=qk, vproj=vproj)


def written_tensors(attn: nn.Module) -> List[torch.Tensor]:
    """ Every tensor of `attn` an init may write: the projections' weights, biases and norms, the split biases and
    the position table. """
    return layout_of(attn).tensors()
