""" What an init does to the attention of models with a relative position bias (Swin's windows, BEiT's and the
relative-position ViTs' whole grid) and to Mixer's token mixing, read from the model itself.

Swin: the attention probabilities timm's window attention computes in the model's real forward pass (relative
position bias and shifted-window mask included), per block and head, averaged over images and windows. Without
images the probe is a batch of zero images: every token is then the same, so the maps show what position alone
(the bias tables) does. Mixer: each block's token mixing linearized at zero input, the (tokens, tokens) Jacobian of
its token MLP; for an impulse init it is the shift itself.
"""
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import nn

from ..inits.heads import model_layouts
from ..inits.impulse import impulse_target
from ..inits.model_maps import captured_maps
from ..inits.mixer import token_mixing_blocks
from ..inits.swin import window_attentions
from ..utils.figures import new_figure, save_figure

__all__ = ['swin_window_maps', 'mixer_mixing_maps', 'layer_maps', 'family_summary', 'plot_family_layer']


@torch.no_grad()
def swin_window_maps(model: nn.Module, images: torch.Tensor) -> List[Tuple[torch.Tensor, Optional[torch.Tensor]]]:
    """ Per window attention, in forward order: (probabilities (B, windows, heads, N, N), shift mask (windows, N, N)
    or None). timm's fused kernel never materializes the probabilities, so the unfused path (the same attention) is
    switched on for the pass and its softmax is hooked. """
    attns = window_attentions(model)
    captured, handles, fused = [], [], [a.fused_attn for a in attns]
    for attn in attns:
        attn.fused_attn = False
        handles.append(attn.softmax.register_forward_hook(lambda module, args, output: captured.append(output)))
    was_training = model.training
    try:
        model.eval()(images)
    finally:
        model.train(was_training)
        for attn, was_fused, handle in zip(attns, fused, handles):
            attn.fused_attn = was_fused
            handle.remove()
    blocks = [b for stage in model.layers for b in stage.blocks]
    return [(p.view(len(images), -1, *p.shape[1:]), b.attn_mask) for p, b in zip(captured, blocks)]


@torch.no_grad()
def mixer_mixing_maps(model: nn.Module) -> List[torch.Tensor]:
    """ Per Mixer block, its token mixing's Jacobian at zero input: (N, N), row i = how output token i takes each
    input token. """
    maps = []
    for block in token_mixing_blocks(model):
        n = block.mlp_tokens.fc1.in_features
        with torch.enable_grad():
            zero = torch.zeros(n, device=block.mlp_tokens.fc1.weight.device)
            maps.append(torch.autograd.functional.jacobian(block.mlp_tokens, zero).cpu())
    return maps


def _zero_images(model: nn.Module) -> torch.Tensor:
    stem = getattr(model, 'patch_embed', None) or model.stem
    return torch.zeros(1, stem.proj.in_channels, *stem.img_size).to(next(model.parameters()))


def layer_maps(model: nn.Module, images: Optional[torch.Tensor] = None) -> List[Tuple[torch.Tensor, Tuple[int, int]]]:
    """ Per layer: (maps (heads, N, N) averaged over images and windows, the grid they live on). Mixer has one map
    per block (`heads` = 1) on the patch grid; Swin's are per head on the window. """
    if token_mixing_blocks(model):
        grid = tuple(model.stem.grid_size)
        return [(m.unsqueeze(0), grid) for m in mixer_mixing_maps(model)]
    probe = _zero_images(model) if images is None else images
    if window_attentions(model):
        return [(p.mean((0, 1)).cpu(), tuple(a.window_size))
                for (p, _), a in zip(swin_window_maps(model, probe), window_attentions(model))]
    # a relative position bias over the whole grid (BEiT, relpos ViTs): the patch block of each attention's maps
    layouts = model_layouts(model)
    out = []
    for layout, maps in zip(layouts, captured_maps(model, [a.module for a in layouts], probe)):
        p = layout.position.prefix
        out.append((maps[0].float().mean(0)[:, p:, p:].cpu(), tuple(layout.position.grid)))
    return out


def _target_mass(maps: torch.Tensor, grid: Tuple[int, int], offset: List[int]) -> float:
    """ Mean share of |map| on the offset's key, over queries whose key is inside the grid. """
    target = impulse_target(grid, tuple(offset), 'zero')
    rows = torch.nonzero(target >= 0).flatten()
    share = maps.abs() / maps.abs().sum(-1, keepdim=True).clamp_min(1e-12)
    return share[rows, target[rows]].mean().item()


def family_summary(model: nn.Module, images: Optional[torch.Tensor] = None) -> List[Dict[str, Any]]:
    """ One row per layer and head: its offset and the mass on it (for an impulse record), else the mass on the
    map's diagonal (a head that attends to itself). """
    offsets = (getattr(model, 'struct_init_record', None) or {}).get('offsets')
    rows = []
    for layer, (maps, grid) in enumerate(layer_maps(model, images)):
        for head in range(maps.shape[0]):
            offset = offsets[layer][head] if offsets else [0, 0]
            rows.append({'layer': layer, 'head': head, 'offset': tuple(offset),
                         'mass': _target_mass(maps[head], grid, offset)})
    return rows


def plot_family_layer(model: nn.Module, layer: int, out: Path, images: Optional[torch.Tensor] = None,
                      title: str = '') -> Path:
    """ One layer: per head, the whole map and the centre query's row as a grid (the filter view). Written to a
    temporary file, then renamed. """
    maps, grid = layer_maps(model, images)[layer]
    centre = (grid[0] // 2) * grid[1] + grid[1] // 2
    fig = new_figure(figsize=(5.2, 2.6 * maps.shape[0]))
    axes = fig.subplots(maps.shape[0], 2, squeeze=False)
    for head, head_maps in enumerate(maps):
        for col, (panel, name) in enumerate([(head_maps, 'map'), (head_maps[centre].view(*grid), 'centre query')]):
            axes[head, col].imshow(panel.numpy(), cmap='viridis')
            axes[head, col].set_xticks([]), axes[head, col].set_yticks([])
            axes[head, col].set_title(name if head == 0 else '', fontsize=9)
        axes[head, 0].set_ylabel(f'head {head}', fontsize=9)
    fig.suptitle(title or f'layer {layer}', fontsize=10)
    return save_figure(fig, out, dpi=90)
