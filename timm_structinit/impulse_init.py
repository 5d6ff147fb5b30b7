""" Impulse (structured) attention init: wiring targets, pseudo input and solvers into a model's attention.

Two published versions, one configuration (`ImpulseCfg`), presets in the registry:

* `impulse` (2024, arXiv 2404.01139, the defaults): pseudo input LayerNorm(sin-cos table of the model's grid), the
  capped least-squares problem of `impulse_solvers`, solved by the `fast` solver (or the reference `adam`),
  per layer with per-layer offsets (`share_layers=True` for the authors' one-solve-for-all-layers default);
  V/proj keep timm's init. Offsets are `distinct` within a layer by default (the authors' code draws with
  replacement: `offsets='random'`).
* `impulse2025` (arXiv 2505.19985): the `svd` closed form, `fixed` 3x3 order, pseudo input LayerNorm of the model's
  own position embedding times 18 (the model keeps the x18 embedding, as in the authors' code), mimetic V/proj
  (a2 = b2 = 0.4), every layer solved with fresh noise.

Class and register tokens: the targets cover the patch tokens only. The solve sees the patch grid, and the prefix
tokens' rows and columns of the map are whatever the solved Q, K give them; with average pooling (the impulse
models) there are none.
"""
from dataclasses import dataclass, field
from typing import Any, Dict, List

import torch
import torch.nn.functional as F
from torch import nn

from .attention import write_qk_, zero_attention_bias_
from .impulse import BORDERS, OFFSET_POLICIES, _odd_kernel, draw_offsets, impulse_target
from .impulse_solvers import SOLVERS
from .mimetic import MimeticCfg, mimetic_vproj_init_
from .pos_embed import pseudo_input, set_pos_embed_scale_

__all__ = ['ImpulseCfg', 'impulse_init_', 'impulse_pseudo_input', 'check_impulse_model']

_POSITIVE = {'range': (1e-12, float('inf'))}
PSEUDO_INPUTS = ('sincos', 'pos_embed')


@dataclass(frozen=True)
class ImpulseCfg:
    kernel_size: int = field(default=3, metadata={'check': _odd_kernel})
    offsets: str = field(default='distinct', metadata={'choices': OFFSET_POLICIES})
    border: str = field(default='zero', metadata={'choices': BORDERS})
    share_layers: bool = False  # one set of offsets and one solve for every layer (the authors' 2024 default)
    solver: str = field(default='fast', metadata={'choices': tuple(SOLVERS)})
    # fast solver
    fast_iters: int = field(default=200, metadata={'range': (1, 10 ** 6)})
    fast_lr_scale: float = field(default=3.0, metadata=_POSITIVE)  # Adam step = fast_lr_scale / embed_dim
    reuse_solutions: bool = True
    # adam (2024 reference) solver
    adam_iters: int = field(default=10000, metadata={'range': (1, 10 ** 7)})
    adam_lr: float = field(default=1e-4, metadata=_POSITIVE)
    norm_every: int = field(default=100, metadata={'range': (1, 10 ** 7)})
    # svd (2025) solver
    target_scale: float = field(default=1000.0, metadata=_POSITIVE)
    noise_std: float = field(default=0.6, metadata={'range': (0.0, float('inf'))})
    noise_scale: float = field(default=3.0, metadata={'range': (0.0, float('inf'))})
    factor_norm: float = field(default=7.0, metadata=_POSITIVE)
    svd_rtol: float = field(default=0.1, metadata={'range': (0.0, 1.0)})  # spectrum cut of the pseudo input
    # pseudo input: 'sincos' (LayerNorm of the grid's sin-cos table) or 'pos_embed' (LayerNorm of the model's own
    # patch position embedding after scaling it by pos_embed_scale, which the model keeps)
    pseudo_input: str = field(default='sincos', metadata={'choices': PSEUDO_INPUTS})
    pos_embed_scale: float = field(default=1.0, metadata=_POSITIVE)
    vproj: str = field(default='keep', metadata={'choices': ('keep', 'mimetic')})

    def solver_options(self) -> Dict[str, Any]:
        if self.solver == 'fast':
            return dict(iters=self.fast_iters, lr_scale=self.fast_lr_scale, reuse_solutions=self.reuse_solutions)
        if self.solver == 'adam':
            return dict(iters=self.adam_iters, lr=self.adam_lr, norm_every=self.norm_every)
        return dict(
            target_scale=self.target_scale, noise_std=self.noise_std, noise_scale=self.noise_scale,
            factor_norm=self.factor_norm, rtol=self.svd_rtol)


IMPULSE2025 = dict(
    kernel_size=3, offsets='fixed', solver='svd', pseudo_input='pos_embed', pos_embed_scale=18.0, vproj='mimetic')


def check_impulse_model(cfg: ImpulseCfg, geometry: Dict[str, Any]) -> None:
    """ ValueError, before any work, when the init cannot apply to a model of this geometry. """
    grid = geometry['grid_size']
    if grid is None:
        raise ValueError('impulse init needs a patch grid (model.patch_embed.grid_size); this model has none')
    if cfg.kernel_size > min(grid):
        raise ValueError(
            f'kernel_size={cfg.kernel_size} is larger than the patch grid {tuple(grid)}; '
            f'valid: odd sizes <= {min(grid)}')
    heads = geometry['num_heads']
    if cfg.offsets == 'distinct' and heads > cfg.kernel_size ** 2:
        raise ValueError(
            f"offsets='distinct' needs num_heads <= kernel_size**2, got num_heads={heads} with "
            f"kernel_size={cfg.kernel_size}; use offsets='random' or 'fixed', or a larger kernel_size")
    if (cfg.pseudo_input == 'pos_embed' or cfg.pos_embed_scale != 1.0) and not geometry.get('has_pos_embed', True):
        raise ValueError(
            f"pseudo_input={cfg.pseudo_input!r} with pos_embed_scale={cfg.pos_embed_scale} needs a model with a "
            f"position embedding; this one has none (valid here: pseudo_input='sincos', pos_embed_scale=1)")
    if cfg.pseudo_input == 'sincos' and geometry['embed_dim'] % 4:
        raise ValueError(
            f"pseudo_input='sincos' needs embed_dim divisible by 4, got {geometry['embed_dim']}")


def impulse_pseudo_input(model: nn.Module, embed_dim: int, kind: str = 'sincos') -> torch.Tensor:
    """ (N, D) pseudo input an impulse init solves on: LayerNorm (no affine) of the model grid's sin-cos table
    (`kind='sincos'`) or of the model's own patch position embedding as it is now (`kind='pos_embed'`). """
    if kind not in PSEUDO_INPUTS:
        raise ValueError(f'pseudo input kind={kind!r} is unknown; valid: {", ".join(PSEUDO_INPUTS)}')
    if kind == 'sincos':
        return pseudo_input(tuple(model.patch_embed.grid_size), embed_dim)
    pos_embed = getattr(model, 'pos_embed', None)
    if pos_embed is None:
        raise ValueError("pseudo_input='pos_embed' needs a model with a position embedding")
    table = pos_embed.detach().float()[0]
    if not getattr(model, 'no_embed_class', False):
        table = table[getattr(model, 'num_prefix_tokens', 0):]  # drop class / register rows
    return F.layer_norm(table, (table.shape[-1],), eps=1e-5)


@torch.no_grad()
def impulse_init_(model: nn.Module, attns: List[nn.Module], cfg: ImpulseCfg, generator: torch.Generator):
    """ Write impulse Q/K (and, if cfg.vproj == 'mimetic', V/proj) into every attention module. """
    dim, heads = attns[0].qkv.in_features, attns[0].num_heads
    head_dim = dim // heads
    grid = tuple(model.patch_embed.grid_size)
    if cfg.pos_embed_scale != getattr(model, 'pos_embed_scale', 1.0):
        set_pos_embed_scale_(model, cfg.pos_embed_scale)  # the model keeps the scaled table (the 2025 authors' code)
    x = impulse_pseudo_input(model, dim, cfg.pseudo_input)
    solved_layers = 1 if cfg.share_layers else len(attns)
    offsets = [draw_offsets(heads, cfg.kernel_size, cfg.offsets, generator) for _ in range(solved_layers)]
    targets = torch.stack([impulse_target(grid, o, cfg.border) for layer in offsets for o in layer])
    wq, wk, info = SOLVERS[cfg.solver](x, targets, head_dim, heads, generator, **cfg.solver_options())
    wq, wk = wq.view(solved_layers, heads, dim, head_dim), wk.view(solved_layers, heads, dim, head_dim)
    for i, attn in enumerate(attns):
        src = 0 if cfg.share_layers else i
        dtype = attn.qkv.weight.dtype
        write_qk_(attn, wq[src].to(dtype), wk[src].to(dtype))
        zero_attention_bias_(attn, qk=True, vproj=False)
    if cfg.vproj == 'mimetic':
        mimetic_vproj_init_(attns, MimeticCfg(), generator)

    def per_layer(values: torch.Tensor) -> List[List[float]]:
        rows = values.view(solved_layers, heads).tolist()
        return [rows[0 if cfg.share_layers else i] for i in range(len(attns))]
    return {
        'solver': cfg.solver,
        'offsets': [[list(o) for o in offsets[0 if cfg.share_layers else i]] for i in range(len(attns))],
        'objective': per_layer(info['objective']),
        'hit_rate': per_layer(info['hit_rate']),
        'target_mass': per_layer(info['target_mass']),
        'objective_mean': float(info['objective'].mean()),
        'grid_size': list(grid),
    }
