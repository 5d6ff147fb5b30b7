""" Impulse init in a relative position bias table: each head starts as a random impulse filter, whatever the image.

Where the structure lives. A ViT's impulse is solved into Q/K on a pseudo input, the LayerNormed position table,
because position enters a ViT only through that table. Models with a relative position bias (Swin V1's windows,
BEiT's and the relative-position ViTs' whole grid) carry position relative to the query instead: every head adds
`table[entry(i, j)]` to the logit of query i and key j, for every image. The impulse is written there: head h's
entry at its offset is `b`, every other entry 0, and Q/K keep timm's init (logits of order 1e-3 at step 0). Head h
then puts e^b / (e^b + n - 1) of query i's attention on key i + offset_h, the rest uniform, over n keys; b =
log(m (n - 1) / (1 - m)) makes that share `target_mass` = m. Offsets are drawn as for ViT (`distinct` within an
attention, repeating only when it has more heads than the window has offsets, as Swin's later stages do).

Which entry an offset takes is read from the model's own index (`PositionBias.index`: the entry of each query-key
pair), not restated: an offset is writable when all its pairs share one entry that no other pair uses. A table
indexed by |dy|, |dx| (LeViT's, TinyViT's, EfficientFormer's attention biases) gives an offset's entry to its mirror
images too, so no impulse can be written there (`signed`).

Borders and shifted windows. A query whose target lies outside its window (at the window's border), or in another
region of a shifted window (which timm masks with -100), has no key at its offset: its row is uniform over the keys
it can see. Where timm shrinks the window to a small feature map (the last stages of a small image), offsets come
from the largest odd filter the window's table can hold (2 w - 1 wide for a window of w). A table shared by every
attention (BEiT's `use_shared_rel_pos_bias`) takes one set of offsets for all of them.
"""
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import nn

from .impulse_holds import MEASURED_ON, check_holds, measured_bias_hits
from .impulse_targets import OFFSET_POLICIES, _odd_kernel, draw_offsets_cycled
from .layouts import AttentionLayout, PositionBias
from .mimetic import MimeticCfg, mimetic_vproj_init_

__all__ = ['BiasImpulseCfg', 'offset_entries', 'signed', 'write_impulse_', 'bias_impulse_init_']


@dataclass(frozen=True)
class BiasImpulseCfg:
    kernel_size: int = field(default=3, metadata={'check': _odd_kernel})
    offsets: str = field(default='distinct', metadata={'choices': OFFSET_POLICIES})
    # the attention share on the target in a full window at step 0 (Q/K at timm's init)
    target_mass: float = field(default=0.5, metadata={'range': (1e-6, 1 - 1e-6)})
    vproj: str = field(default='keep', metadata={'choices': ('keep', 'mimetic')})


def _grid_pairs(position: PositionBias) -> Tuple[torch.Tensor, torch.Tensor]:
    """ For every query-key pair of the grid's tokens: its offset (key - query) as dy * (2 W - 1) + dx codes, and its
    entry of the table. """
    height, width = position.grid
    tokens = torch.arange(height * width)
    rows, cols = tokens // width, tokens % width
    dy = rows[None, :] - rows[:, None]
    dx = cols[None, :] - cols[:, None]
    codes = (dy + height - 1) * (2 * width - 1) + (dx + width - 1)
    p = position.prefix
    entries = position.index_cpu()[p:, p:]
    return codes.flatten(), entries.flatten()


def offset_entries(position: PositionBias) -> Dict[Tuple[int, int], Optional[int]]:
    """ Per offset (dy, dx) within the grid: the table entry every pair at that offset takes, or None when its pairs
    take several entries or share theirs with another offset (or with a prefix token's pairs). """
    height, width = position.grid
    if position.index_cpu() is None:  # a model built on the meta device whose index cannot be computed here
        return {}
    codes, entries = _grid_pairs(position)
    pairs = torch.unique(torch.stack([codes, entries]), dim=1)
    by_code: Dict[int, set] = {}
    by_entry: Dict[int, set] = {}
    for code, entry in pairs.T.tolist():
        by_code.setdefault(code, set()).add(entry)
        by_entry.setdefault(entry, set()).add(code)
    p = position.prefix
    if p:
        index = position.index_cpu()
        for entry in torch.cat([index[:p].flatten(), index[p:, :p].flatten()]).tolist():
            by_entry.setdefault(entry, set()).add(-1)
    out = {}
    for code, found in by_code.items():
        dy, dx = code // (2 * width - 1) - (height - 1), code % (2 * width - 1) - (width - 1)
        entry = next(iter(found)) if len(found) == 1 else None
        out[(dy, dx)] = entry if entry is not None and by_entry[entry] == {code} else None
    return out


def signed(position: Optional[PositionBias]) -> bool:
    """ The table gives each offset its own entry (an impulse can be written there), checked on the four nearest
    offsets that fit the grid. """
    if position is None:
        return False
    entries = offset_entries(position)
    near = [o for o in ((0, 1), (1, 0), (0, -1), (-1, 0)) if o in entries]
    return bool(near) and all(entries[o] is not None for o in near)


@torch.no_grad()
def write_impulse_(position: PositionBias, offsets: List[Tuple[int, int]], bias: float) -> None:
    """ Head h's column of the table: `bias` at the entry of offsets[h], 0 everywhere else. """
    entries = offset_entries(position)
    for head, offset in enumerate(offsets):
        column = position.column(head)
        column.zero_()
        column[entries[tuple(offset)]] = bias


def _kernel_for(position: PositionBias, kernel_size: int) -> int:
    """ The largest odd filter up to `kernel_size` whose offsets the table holds (2 w - 1 wide for a window of w). """
    return min(kernel_size, 2 * min(position.grid) - 1)


def _stages(layouts: List[AttentionLayout]) -> List[List[AttentionLayout]]:
    from itertools import groupby
    return [list(group) for _, group in groupby(layouts, key=lambda a: a.shape())]


@torch.no_grad()
def bias_impulse_init_(model: nn.Module, layouts: List[AttentionLayout], cfg: BiasImpulseCfg,
                       generator: torch.Generator, family: str = 'relpos') -> Dict[str, Any]:
    """ Write each attention's impulse into its relative position bias table (one set of offsets per table: a shared
    table once for all), then mimetic V/proj stage by stage with vproj='mimetic'; measure the maps in the model's own
    forward pass on position alone, and raise (the model is then restored) when the first attention does not hold. """
    offsets, biases, written = [], [], {}
    for layout in layouts:
        position = layout.position
        key = id(position.table)
        if key not in written:
            area = position.grid[0] * position.grid[1]
            keys = area + position.prefix
            bias = math.log(cfg.target_mass * (keys - 1) / (1 - cfg.target_mass)) if keys > 1 else 0.0
            drawn = draw_offsets_cycled(layout.heads, _kernel_for(position, cfg.kernel_size), cfg.offsets, generator)
            write_impulse_(position, drawn, bias)
            written[key] = ([list(o) for o in drawn], round(bias, 6))
        offsets.append(written[key][0])
        biases.append(written[key][1])
    if cfg.vproj == 'mimetic':
        for stage in _stages(layouts):
            mimetic_vproj_init_(stage, MimeticCfg(), generator)
    measured = measured_bias_hits(model, layouts, offsets)
    check_holds(model, measured, 0, 'a larger target_mass')
    return {'family': family, 'offsets': offsets, 'bias': biases,
            'window_size': [list(a.position.grid) for a in layouts], **measured, 'measured_on': MEASURED_ON}
