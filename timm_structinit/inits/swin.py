""" Impulse init for Swin Transformer (timm `SwinTransformer`): each head of each window attention starts as a random
impulse filter inside its window, whatever the image.

Where the structure lives. A ViT's impulse is solved into Q/K on a pseudo input, the LayerNormed position table,
because position enters a ViT only through that table. Swin's tokens carry no absolute position (no table by
default), so a Q/K solve would have no position signal to work on. What Swin does carry is position relative to
the query: every head adds `relative_position_bias_table[offset(i, j)]` to the logit of query i and key j, for every
image. The impulse is written there: head h's entry at its offset is `b`, every other entry 0, and Q/K keep timm's
init (logits of order 1e-3 at step 0). Head h then puts e^b / (e^b + n - 1) of query i's attention on key
i + offset_h, the rest uniform, in a window of n tokens; b = log(m (n - 1) / (1 - m)) makes that share `target_mass`
= m. Offsets are drawn as for ViT (`distinct` within a block, repeating only when a block has more heads than the
window has offsets, as Swin's later stages do).

Borders and shifted windows. A query whose target lies outside its window (at the window's border), or in another
region of a shifted window (which timm masks with -100), has no key at its offset: its row is uniform over the keys
it can see. Where timm shrinks the window to a small feature map (the last stages of a small image), offsets come
from the largest odd filter the window's table can hold (2 w - 1 wide for a window of w).
"""
import math
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any, Dict, List

import torch
from torch import nn

from .impulse_targets import OFFSET_POLICIES, _odd_kernel, draw_offsets_cycled
from .mimetic import MimeticCfg, mimetic_init_, mimetic_vproj_init_

__all__ = ['SwinImpulseCfg', 'window_attentions', 'impulse_bias_table', 'swin_impulse_init_', 'swin_mimetic_init_']


@dataclass(frozen=True)
class SwinImpulseCfg:
    kernel_size: int = field(default=3, metadata={'check': _odd_kernel})
    offsets: str = field(default='distinct', metadata={'choices': OFFSET_POLICIES})
    # the attention share on the target in a full window at step 0 (Q/K at timm's init)
    target_mass: float = field(default=0.5, metadata={'range': (1e-6, 1 - 1e-6)})
    vproj: str = field(default='keep', metadata={'choices': ('keep', 'mimetic')})


def window_attentions(model: nn.Module) -> List[nn.Module]:
    """ The model's Swin window attention modules, in forward order. """
    from timm.models.swin_transformer import WindowAttention
    return [m for m in model.modules() if isinstance(m, WindowAttention)]


def impulse_bias_table(window_size, offsets, bias: float) -> torch.Tensor:
    """ ((2 Wh - 1) (2 Ww - 1), heads) relative position bias table: `bias` at each head's offset, 0 elsewhere.

    timm indexes the table by query position minus key position, so key = query + (dy, dx) is row
    (Wh - 1 - dy) (2 Ww - 1) + (Ww - 1 - dx).
    """
    win_h, win_w = window_size
    table = torch.zeros((2 * win_h - 1) * (2 * win_w - 1), len(offsets))
    for head, (dy, dx) in enumerate(offsets):
        table[(win_h - 1 - dy) * (2 * win_w - 1) + (win_w - 1 - dx), head] = bias
    return table


@torch.no_grad()
def swin_impulse_init_(model: nn.Module, cfg: SwinImpulseCfg, generator: torch.Generator) -> Dict[str, Any]:
    """ Write each window attention's impulse bias table (and, with vproj='mimetic', mimetic V/proj per stage). """
    attns = window_attentions(model)
    offsets, biases = [], []
    for attn in attns:
        win_h, win_w = attn.window_size
        kernel = min(cfg.kernel_size, 2 * min(win_h, win_w) - 1)  # the largest filter the table can hold
        area = win_h * win_w
        bias = math.log(cfg.target_mass * (area - 1) / (1 - cfg.target_mass)) if area > 1 else 0.0
        block_offsets = draw_offsets_cycled(attn.num_heads, kernel, cfg.offsets, generator)
        table = attn.relative_position_bias_table
        table.copy_(impulse_bias_table((win_h, win_w), block_offsets, bias).to(table.dtype))
        offsets.append([list(o) for o in block_offsets])
        biases.append(round(bias, 6))
    if cfg.vproj == 'mimetic':
        for stage in _stages(attns):
            mimetic_vproj_init_(stage, MimeticCfg(), generator)
    return {'family': 'swin', 'offsets': offsets, 'bias': biases,
            'window_size': [list(a.window_size) for a in attns]}


def _stages(attns: List[nn.Module]) -> List[List[nn.Module]]:
    """ Consecutive window attentions of one (width, heads): Swin's stages, each written in one batch. """
    return [list(group) for _, group in groupby(attns, key=lambda a: (a.qkv.in_features, a.num_heads))]


@torch.no_grad()
def swin_mimetic_init_(model: nn.Module, cfg: MimeticCfg, generator: torch.Generator) -> Dict[str, Any]:
    """ Mimetic Q/K and V/proj in every window attention, stage by stage (the relative position bias is kept). """
    records = [mimetic_init_(stage, cfg, generator) for stage in _stages(window_attentions(model))]
    return {'family': 'swin', 'stages': records}
