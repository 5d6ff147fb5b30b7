""" The attention maps a model computes in its own forward pass, captured where it computes them.

timm's attention runs fused kernels (`F.scaled_dot_product_attention`) that never materialize the maps, or computes
`softmax` itself; either way the call happens inside the attention module's forward. `captured_maps` runs the model
under a `TorchFunctionMode` that, while one of the watched modules is running, sees every such call: it records the
output of a softmax over the last dimension, and for a fused call computes softmax(q k^T * scale + mask) from the
very tensors the kernel receives (the kernel itself still runs, so the forward pass is the model's). Whatever the
layout, the maps are those of the model's code, not a restatement of it. What an impulse init records (its hit
rates and target masses) is measured on these.
"""
from typing import Dict, List, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

__all__ = ['captured_maps', 'impulse_hits', 'blank_image']

_SOFTMAXES = {torch.softmax, torch.Tensor.softmax, F.softmax}


def _sdpa_maps(q, k, v=None, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    logits = (q.float() @ k.float().transpose(-1, -2)) * scale
    if is_causal:
        logits = logits.masked_fill(torch.ones_like(logits, dtype=torch.bool).triu(1), float('-inf'))
    if attn_mask is not None:
        logits = logits.masked_fill(~attn_mask, float('-inf')) if attn_mask.dtype == torch.bool else \
            logits + attn_mask.float()
    return logits.softmax(-1)


class _Capture(TorchFunctionMode):
    def __init__(self, count: int):
        super().__init__()
        self.active: List[int] = []
        self.maps: Dict[int, List[torch.Tensor]] = {i: [] for i in range(count)}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.active:
            if func is F.scaled_dot_product_attention:
                with torch.no_grad():
                    self.maps[self.active[-1]].append(_sdpa_maps(*args, **kwargs).detach())
            elif func in _SOFTMAXES:
                dim = kwargs.get('dim', args[1] if len(args) > 1 else None)
                if dim is not None and dim in (-1, out.dim() - 1):
                    self.maps[self.active[-1]].append(out.detach().float())
        return out


def _no_content(module: nn.Module, args, output):
    """ A forward hook that replaces a patch embedding's output by zeros: the tokens carry position alone. """
    return torch.zeros_like(output)


@torch.no_grad()
def captured_maps(model: nn.Module, modules: Sequence[nn.Module], images: torch.Tensor,
                  position_only: bool = False) -> List[List[torch.Tensor]]:
    """ Per module of `modules`, the attention maps (..., queries, keys) it computed in one eval-mode forward pass of
    `model` on `images`, in call order (a module called for several windows or twice gives several). With
    `position_only`, the patch embedding's output is zero (no content, no bias): the tokens carry their position
    table and the prefix tokens their own values, what an impulse solve is about. """
    capture = _Capture(len(modules))
    handles = []
    if position_only:
        handles.append(model.patch_embed.register_forward_hook(_no_content))

    def leave(module, args, output):  # returns None: the module's output stays its own
        capture.active.pop()
    for i, module in enumerate(modules):
        handles.append(module.register_forward_pre_hook(lambda m, a, i=i: capture.active.append(i)))
        handles.append(module.register_forward_hook(leave))
    was_training = model.training
    try:
        model.eval()
        with capture:
            model(images)
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    return [capture.maps[i] for i in range(len(modules))]


def blank_image(model: nn.Module, batch: int = 1) -> torch.Tensor:
    """ An all-zero input at the model's own input size (the dataset mean after normalization): what the model
    sees of position alone, the patch embedding giving each token its bias. """
    patch_embed = getattr(model, 'patch_embed', None)
    size = getattr(patch_embed, 'img_size', None) or model.pretrained_cfg.get('input_size', (3, 224, 224))[1:]
    first_conv = next((m for m in model.modules() if isinstance(m, nn.Conv2d)), None)  # the stem or patch embedding
    chans = getattr(first_conv, 'in_channels', None) or model.pretrained_cfg.get('input_size', (3,))[0]
    param = next(model.parameters())
    return torch.zeros(batch, chans, *tuple(size)[-2:], dtype=param.dtype, device=param.device)


def impulse_hits(maps: torch.Tensor, targets: torch.Tensor, prefix: int = 0) -> Dict[str, torch.Tensor]:
    """ Per head of maps (..., heads, P + N, P + N) (P prefix tokens first), over the patch queries whose target
    key `targets` (heads, N) is on the grid: the share whose largest entry is the target key (every key counted,
    prefix ones too) and the mean attention on the target. """
    maps = maps.float().reshape(-1, *maps.shape[-3:])  # (B, heads, tokens, tokens)
    rows = maps[:, :, prefix:]                          # patch queries
    valid = targets >= 0                                # (heads, N)
    index = (targets.clamp_min(0) + prefix).to(maps.device)
    hit = (rows.argmax(-1) == index) & valid
    mass = rows.gather(-1, index[None, :, :, None].expand(rows.shape[0], -1, -1, 1))[..., 0] * valid
    count = valid.sum(-1).clamp_min(1) * rows.shape[0]
    return {'hit_rate': hit.sum((0, 2)).float() / count, 'target_mass': mass.sum((0, 2)) / count}
