""" What a position-aware init needs to know of a model, read once before any work (`model_geometry`): its patch
grid, widths and heads, prefix tokens, position signals (an absolute table, a rotary embedding, the relative position
terms its attention adds, other tables), which attention does not attend over the whole grid and why, normalized q
and k, and how many directions patch content can take. """
import re
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import nn

from .heads import layout_of
from .impulse_inputs import content_dims
from .layouts import AttentionLayout
from .position_bias import signed

__all__ = ['model_geometry']


def model_geometry(model: nn.Module, attns: List[AttentionLayout]) -> Dict[str, Any]:
    """ What a position-aware init needs to know of a model: patch grid, widths and heads, prefix tokens, position
    signals (an absolute table; a rotary embedding, which turns q and k by position in the forward pass; the
    position terms its attention adds), which attention does not attend over the whole grid and why, normalized
    q and k, and the image and patch sizes that set the grid. """
    attns = [a if isinstance(a, AttentionLayout) else layout_of(a) for a in attns]  # modules are read too
    patch_embed = getattr(model, 'patch_embed', None)
    grid = tuple(patch_embed.grid_size) if getattr(patch_embed, 'grid_size', None) is not None else None
    first = attns[0]
    normalized = next((a for a in attns if a.qk_normalized), None)
    return dict(
        model=type(model).__name__, grid_size=grid, embed_dim=first.dim_in, num_heads=first.heads,
        num_layers=len(attns), shapes=sorted({(a.dim_in, a.heads) for a in attns}),
        img_size=_size_of(patch_embed, 'img_size'), patch_size=_size_of(patch_embed, 'patch_size'),
        num_prefix_tokens=int(getattr(model, 'num_prefix_tokens', 0)),
        has_pos_embed=isinstance(getattr(model, 'pos_embed', None), torch.Tensor),
        position_terms=_position_terms(attns), partial=_partial(model, attns), pos_tables=_pos_tables(model),
        qk_normalized=normalized.between[0] if normalized is not None and normalized.between else None,
        attention=sorted({a.kind for a in attns}), **_content(model),
        rotary=next((type(m).__name__ for m in model.modules() if 'rotary' in type(m).__name__.lower()), None))


def _position_terms(attns: List[AttentionLayout]) -> Optional[str]:
    """ In words, the relative position terms the attention adds (None without any). """
    for a in attns:
        if a.position is not None and not signed(a.position):
            return ('attention biases indexed by |dy|, |dx| (an offset shares its bias with its mirror images, so a '
                    'bias written at one offset would be at its mirror images too)')
    for a in attns:
        words = [w for w in a.between if 'position' in w]
        if words:
            return words[0]
    return None


def _pos_tables(model: nn.Module) -> List[str]:
    """ Names of the model's absolute position tables other than model.pos_embed (per stage, branch or level). """
    pattern = re.compile(r'pos_?emb|(^|_)pos$')
    names = [n for n, _ in [*model.named_parameters(), *model.named_buffers()] if pattern.search(n.split('.')[-1])]
    return [n for n in names if n != 'pos_embed']


def _partial(model: nn.Module, attns: List[AttentionLayout]) -> Optional[Tuple[str, str]]:
    """ (name, what it does instead, in words) of the first attention that does not attend over the whole grid. """
    windows = {id(m.attn): m.window_size for m in model.modules()
               if isinstance(getattr(m, 'window_size', None), int) and isinstance(getattr(m, 'attn', None), nn.Module)}
    for a in attns:
        if a.whole_grid:
            continue
        window = windows.get(id(a.module))
        if window:  # SAM's blocks cut the grid into windows of their own size
            return a.name, f'windows of {window} x {window} tokens (window_size={window})'
        return a.name, ', '.join(a.between) or 'a part of the tokens'
    return None


def _content(model: nn.Module) -> Dict[str, Any]:
    """ The patch's values (C p p) and how many directions its content can give a token: an upper bound from the
    sizes (C p p, the bias, the all-ones direction), and a function giving the exact count (an SVD of the patch
    embedding, up to a second on ViT-B: only a check that needs it calls it). """
    proj = getattr(getattr(model, 'patch_embed', None), 'proj', None)
    weight = getattr(proj, 'weight', None)
    if not isinstance(weight, torch.Tensor) or weight.dim() < 2:
        return {}
    values = int(weight[0].numel())
    bound = min(weight.shape[0], values + 1 + int(getattr(proj, 'bias', None) is not None))
    return {'patch_values': values, 'content_dims': bound,
            'content_rank': (lambda: content_dims(model)) if not weight.is_meta else (lambda: bound)}


def _size_of(patch_embed: Optional[nn.Module], name: str) -> Optional[tuple]:
    value = getattr(patch_embed, name, None)
    return tuple(value) if isinstance(value, (tuple, list)) else None
