""" timm's Swin Transformer (V1): its window attentions, the impulse in their relative position bias tables
(`position_bias`), and mimetic stage by stage.

Each window attention adds `relative_position_bias_table[offset(i, j)]` to the logit of query i and key j in every
window; the impulse of head h is written there (`position_bias.bias_impulse_init_`, which also covers BEiT's and the
relative-position ViTs' tables). timm indexes the table by query position minus key position, so key = query +
(dy, dx) is row (Wh - 1 - dy) (2 Ww - 1) + (Ww - 1 - dx) (`impulse_bias_table`; the init reads the row from the
model's own index).
"""
from typing import Any, Dict, List

import torch
from torch import nn

from .heads import layout_of
from .mimetic import MimeticCfg, mimetic_layouts_
from .position_bias import BiasImpulseCfg, _stages, bias_impulse_init_

__all__ = ['SwinImpulseCfg', 'window_attentions', 'impulse_bias_table', 'swin_impulse_init_', 'swin_mimetic_init_']

SwinImpulseCfg = BiasImpulseCfg  # the name the Swin version had first


def window_attentions(model: nn.Module) -> List[nn.Module]:
    """ The model's Swin window attention modules, in forward order. """
    from timm.models.swin_transformer import WindowAttention
    return [m for m in model.modules() if isinstance(m, WindowAttention)]


def impulse_bias_table(window_size, offsets, bias: float) -> torch.Tensor:
    """ ((2 Wh - 1) (2 Ww - 1), heads) relative position bias table: `bias` at each head's offset, 0 elsewhere. """
    win_h, win_w = window_size
    table = torch.zeros((2 * win_h - 1) * (2 * win_w - 1), len(offsets))
    for head, (dy, dx) in enumerate(offsets):
        table[(win_h - 1 - dy) * (2 * win_w - 1) + (win_w - 1 - dx), head] = bias
    return table


@torch.no_grad()
def swin_impulse_init_(model: nn.Module, cfg: BiasImpulseCfg, generator: torch.Generator) -> Dict[str, Any]:
    """ Write each window attention's impulse bias table (and, with vproj='mimetic', mimetic V/proj per stage). """
    layouts = [layout_of(a) for a in window_attentions(model)]
    return bias_impulse_init_(model, layouts, cfg, generator, family='swin')


@torch.no_grad()
def swin_mimetic_init_(model: nn.Module, cfg: MimeticCfg, generator: torch.Generator) -> Dict[str, Any]:
    """ Mimetic Q/K and V/proj in every window attention, stage by stage (the relative position bias is kept). """
    stages = _stages([layout_of(a) for a in window_attentions(model)])
    return {'family': 'swin', 'stages': [mimetic_layouts_(stage, cfg, generator) for stage in stages]}
