""" Impulse init for MLP-Mixer (timm `MlpMixer`): each block's token mixing starts as a random shift of the patch grid,
the impulse filter of the papers' ConvMixer argument (Zheng et al. 2024, arXiv 2404.01139, section 3).

One filter per block, not per channel group. Token mixing computes y = W2 act(W1 u + b1) + b2 on each channel's
column u (the N token values of one channel), with the same W1, W2 for every channel. A block's token mixing is
therefore one spatial operator for all channels: the per-channel filters of ConvMixer's depthwise convolution, or
a ViT's per-head filters, cannot be expressed by a vanilla Mixer block. Each block gets one offset (`distinct`
across blocks until the window's offsets are used up), and depth composes them.

The nonlinearity. The shift S, (S u)_i = u_(i + offset) (0 where i + offset leaves the grid), passes GELU exactly:
GELU(a) - GELU(-a) = a Phi(a) + a Phi(-a) = a (also for SiLU and ReLU). With W1 = [S; -S], b1 = 0,
W2 = gain [I, -I], b2 = 0 the block computes gain S u for every input. That takes 2N hidden units (tokens_dim >=
2 x tokens). With N <= tokens_dim < 2N (timm's mixer_s16_224: 196 tokens, 256 hidden units), W1 = S, b1 = c,
W2 = gain I, b2 = -gain c with c = 3 keeps GELU in its nearly linear range: GELU(z) - z = -z Phi(-z), -0.004 at
z = 3, so on LayerNormed inputs (about N(0, 1)) the block computes gain S u up to a mean relative error of about
3% (`exact: False` in the record). Hidden units beyond those keep timm's W1 rows and get zero W2 columns: nothing at
step 0, free to learn.
"""
from dataclasses import dataclass, field
from typing import Any, Dict, List, Sequence, Tuple

import torch
from torch import nn

from .impulse_targets import OFFSET_POLICIES, _odd_kernel, draw_offsets_cycled, impulse_target

__all__ = ['MixerImpulseCfg', 'token_mixing_blocks', 'shift_matrix', 'shift_token_mlp_', 'mixer_impulse_init_']

_LINEAR_RANGE = 3.0  # the hidden bias that keeps act(z) ~ z when 2N hidden units are not available
_ODD_ACTIVATIONS = (nn.GELU, nn.SiLU, nn.ReLU)  # act(a) - act(-a) = a


@dataclass(frozen=True)
class MixerImpulseCfg:
    kernel_size: int = field(default=3, metadata={'check': _odd_kernel})
    offsets: str = field(default='distinct', metadata={'choices': OFFSET_POLICIES})  # one offset per block
    gain: float = field(default=1.0, metadata={'range': (1e-12, float('inf'))})  # token mixing = gain * shift


def token_mixing_blocks(model: nn.Module) -> List[nn.Module]:
    """ The model's Mixer blocks, in forward order. """
    from timm.models.mlp_mixer import MixerBlock
    return [m for m in model.modules() if isinstance(m, MixerBlock)]


def shift_matrix(grid_size: Sequence[int], offset: Tuple[int, int]) -> torch.Tensor:
    """ (N, N) S with (S u)_i = u_(i + offset) on the grid, rows whose key leaves the grid zero. """
    target = impulse_target(grid_size, offset, 'zero')
    rows = torch.nonzero(target >= 0).flatten()
    shift = torch.zeros(len(target), len(target))
    shift[rows, target[rows]] = 1.0
    return shift


def _check_token_mlp(mlp: nn.Module, num_tokens: int, where: str) -> None:
    fc1, fc2, act = getattr(mlp, 'fc1', None), getattr(mlp, 'fc2', None), getattr(mlp, 'act', None)
    if not (isinstance(fc1, nn.Linear) and isinstance(fc2, nn.Linear) and fc1.bias is not None
            and fc2.bias is not None and isinstance(act, _ODD_ACTIVATIONS)):
        raise ValueError(f'{where}: token mixing must be timm Mlp(fc1, act, fc2) with biases and act one of '
                         f'{[a.__name__ for a in _ODD_ACTIVATIONS]}, got {type(mlp).__name__} with act {act}')
    norm = getattr(mlp, 'norm', None)
    if fc2.in_features != fc1.out_features or (isinstance(norm, nn.Module) and not isinstance(norm, nn.Identity)):
        # a gated MLP (timm's GluMlp: gmixer_*) multiplies half of fc1's output by the other half, and a norm
        # between fc1 and fc2 rescales it: neither computes the shift written into fc1 and fc2
        raise ValueError(f'{where}: token mixing {type(mlp).__name__} is not a plain fc1-act-fc2 MLP (fc1 gives '
                         f'{fc1.out_features} hidden units, fc2 takes {fc2.in_features}; norm '
                         f'{type(norm).__name__ if norm is not None else None}), so it cannot compute a shift; valid: '
                         f'timm MlpMixer with its plain Mlp (mixer_*)')
    if fc1.in_features != num_tokens or fc1.out_features < num_tokens:
        raise ValueError(f'{where}: token mixing of {fc1.in_features} tokens with {fc1.out_features} hidden units '
                         f'on a grid of {num_tokens} tokens; a shift needs at least as many hidden units as tokens '
                         f'(2x for an exact one): raise mlp_ratio[0]')


@torch.no_grad()
def shift_token_mlp_(mlp: nn.Module, shift: torch.Tensor, gain: float = 1.0) -> bool:
    """ Make token-mixing MLP `mlp` compute gain * shift @ u; returns whether it does so exactly (2N hidden). """
    n, hidden = shift.shape[0], mlp.fc1.out_features
    exact = hidden >= 2 * n
    fc1, fc2 = mlp.fc1, mlp.fc2
    shift = shift.to(fc1.weight)  # built on the CPU; the model may live on a GPU
    eye = gain * torch.eye(n, dtype=fc2.weight.dtype, device=fc2.weight.device)
    fc1.weight[:n] = shift
    fc2.weight.zero_()
    fc2.weight[:, :n] = eye
    if exact:
        fc1.weight[n:2 * n] = -shift
        fc1.bias[:2 * n] = 0.0
        fc2.weight[:, n:2 * n] = -eye
        fc2.bias.zero_()
    else:
        fc1.bias[:n] = _LINEAR_RANGE
        fc2.bias.fill_(-gain * _LINEAR_RANGE)
    return exact


def mixer_impulse_init_(model: nn.Module, cfg: MixerImpulseCfg, generator: torch.Generator) -> Dict[str, Any]:
    """ Write a random shift into every block's token mixing; everything is checked before anything is written. """
    blocks = token_mixing_blocks(model)
    grid = tuple(model.stem.grid_size)
    if cfg.kernel_size > min(grid):
        raise ValueError(f'kernel_size={cfg.kernel_size} is larger than the patch grid {grid}; valid: odd sizes '
                         f'<= {min(grid)}')
    for i, block in enumerate(blocks):
        _check_token_mlp(block.mlp_tokens, grid[0] * grid[1], f'block {i}')
    offsets = draw_offsets_cycled(len(blocks), cfg.kernel_size, cfg.offsets, generator)
    exact = [shift_token_mlp_(b.mlp_tokens, shift_matrix(grid, o), cfg.gain) for b, o in zip(blocks, offsets)]
    return {'family': 'mixer', 'offsets': [[list(o)] for o in offsets], 'exact': exact}
