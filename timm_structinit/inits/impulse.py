""" Impulse (structured) attention init: each head starts as a random impulse convolution filter.

Zheng, Li, Saratchandran & Lucey, "Structured Initialization for Attention in Vision Transformers" (2024,
https://arxiv.org/abs/2404.01139) and "Structured Initialization for Vision Transformers" (NeurIPS 2025,
https://arxiv.org/abs/2505.19985). Head i gets an offset (dy, dx) in an f x f window and its target map sends
query patch (r, c) to key patch (r + dy, c + dx): a random impulse convolution filter, written as attention.

The init.
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
import copy
import itertools
from dataclasses import dataclass, field
from typing import Any, Dict, List, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from ..layers.pos_embed import set_pos_embed_scale_, sincos_pos_embed
from .heads import write_qk_, zero_attention_bias_
from .impulse_budget import (  # noqa: F401  the solve's cost and budget, importable from the init too
    SOLVE_MEMORY_BUDGET, SOLVE_WORK_BUDGET, check_solve_budget, impulse_solve_cost)
from .impulse_solvers import SOLVERS, WARM_START
from .impulse_targets import (  # noqa: F401  the offsets and targets, importable from the init too
    BORDERS, OFFSET_POLICIES, _odd_kernel, draw_offsets, draw_offsets_cycled, fixed_order, impulse_target,
    window_offsets)
from .mimetic import MimeticCfg, mimetic_vproj_init_

__all__ = [
    'window_offsets', 'fixed_order', 'draw_offsets', 'draw_offsets_cycled', 'impulse_target', 'pseudo_input',
    'ImpulseCfg', 'impulse_init_', 'impulse_pseudo_input', 'check_impulse_model', 'impulse_solve_cost',
    'OFFSET_POLICIES', 'BORDERS', 'IMPULSE2025', 'SOLVE_MEMORY_BUDGET', 'SOLVE_WORK_BUDGET',
]


def pseudo_input(grid_size: Tuple[int, int], embed_dim: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """ LayerNorm (no affine, eps 1e-5) of the grid's sin-cos table: (H * W, D), the 2024 impulse pseudo input.

    This is what a block's pre-attention LayerNorm sees at step 0 for a blank image whose patch embedding is
    zero, so an attention map solved on it is the map the model starts from on the position signal alone.
    """
    table = sincos_pos_embed(grid_size, embed_dim, dtype=torch.float64)[0]
    return F.layer_norm(table, (embed_dim,), eps=1e-5).to(dtype)


_POSITIVE = {'range': (1e-12, float('inf'))}
PSEUDO_INPUTS = ('sincos', 'pos_embed')
CONTENT_MODES = ('ignore', 'orthogonal')
LAYER_INPUTS = ('same', 'propagated')


@dataclass(frozen=True)
class ImpulseCfg:
    kernel_size: int = field(default=3, metadata={'check': _odd_kernel})
    offsets: str = field(default='distinct', metadata={'choices': OFFSET_POLICIES})
    border: str = field(default='zero', metadata={'choices': BORDERS})
    share_layers: bool = False  # one set of offsets and one solve for every layer (the authors' 2024 default)
    solver: str = field(default='fast', metadata={'choices': tuple(SOLVERS)})
    # fast solver
    # L-BFGS evaluations of the objective; 0: as many as the width and the grid need (`fast_evaluations`: 12 for
    # ViT-T on a 16 x 16 grid, more for wider models, whose capped logits can grow larger, and for smaller grids)
    fast_iters: int = field(default=0, metadata={'range': (0, 10 ** 6)})
    reuse_solutions: bool = True
    # the closed-form start's norm against the random start's (`_closed_form_start`); 0: the random start alone
    warm_start: float = field(default=WARM_START, metadata={'range': (0.0, float('inf'))})
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
    # content: 'ignore' (the papers) or 'orthogonal': the pseudo input loses its part in the directions patch content
    # can take (the patch embedding's range and bias, and the all-ones direction LayerNorm removes), and Q/K are
    # kept to the pseudo input's row space, so at step 0 a real token's logits see its position alone
    content: str = field(default='ignore', metadata={'choices': CONTENT_MODES})
    # layer_inputs: 'same' (every layer solved on the pseudo input) or 'propagated': layer l is solved on the pseudo
    # tokens carried through the blocks before it as initialized (the 2025 paper's Table 6: deeper layers see what
    # the residual stream carries there, which mimetic V/proj mixes)
    layer_inputs: str = field(default='same', metadata={'choices': LAYER_INPUTS})

    def validate(self) -> None:
        if self.layer_inputs == 'propagated' and self.share_layers:
            raise ValueError("layer_inputs='propagated' solves every layer on its own input; it cannot go with "
                             "share_layers=True (use layer_inputs='same')")

    def solver_options(self) -> Dict[str, Any]:
        if self.solver == 'fast':
            return dict(iters=self.fast_iters, reuse_solutions=self.reuse_solutions, warm_start=self.warm_start)
        if self.solver == 'adam':
            return dict(iters=self.adam_iters, lr=self.adam_lr, norm_every=self.norm_every)
        return dict(
            target_scale=self.target_scale, noise_std=self.noise_std, noise_scale=self.noise_scale,
            factor_norm=self.factor_norm, rtol=self.svd_rtol)


IMPULSE2025 = dict(
    kernel_size=3, offsets='fixed', solver='svd', pseudo_input='pos_embed', pos_embed_scale=18.0, vproj='mimetic')


# attention classes that attend within windows of the patch grid, which the whole-grid targets do not fit
_WINDOWED = {'timm.models.vision_transformer_sam.Attention': 'SAM ViT: 14 x 14 windows in most blocks'}


def check_impulse_model(cfg: ImpulseCfg, geometry: Dict[str, Any]) -> None:
    """ ValueError, before any work, when the init cannot apply to a model of this geometry. """
    grid = geometry['grid_size']
    if grid is None:
        raise ValueError('impulse init needs a patch grid (model.patch_embed.grid_size); this model has none')
    if cfg.kernel_size > min(grid):
        raise ValueError(
            f'kernel_size={cfg.kernel_size} is larger than the patch grid {tuple(grid)}; '
            f'valid: odd sizes <= {min(grid)}')
    if geometry.get('rotary'):
        # the solve sets the logits x W_q W_k^T x^T; a rotary embedding turns q and k by position before the product,
        # and on eva02_tiny_patch14_224 the maps on the solve's own input keep their argmax on target for 14-46% of
        # the queries instead of 92-100%
        raise ValueError(
            f"impulse init writes Q/K for attention logits q k^T, but this model turns q and k by position with a "
            f"rotary embedding ({geometry['rotary']}) in its forward pass, which does not keep the solved maps; "
            f"valid: models without rotary embedding (timm VisionTransformer: vit_*, deit_*), or struct_init "
            f"'mimetic'")
    if not geometry.get('has_pos_embed', True):
        # the solve writes Q/K for a position signal the tokens must carry: without an absolute table (a relative
        # position bias alone, BEiT's default and vit_relpos_*'s, or pos_embed='none') they carry none at step 0
        raise ValueError(
            "impulse init solves Q/K on the position table the tokens carry, but this model has no absolute position "
            "embedding (model.pos_embed; a relative position bias alone gives the tokens none); valid: models with "
            "one (timm VisionTransformer: vit_*, deit_*; BEiT with use_abs_pos_emb=True), or struct_init 'mimetic'")
    if cfg.vproj == 'mimetic' and geometry.get('inner_norm'):
        raise ValueError(f"vproj='mimetic' writes the product W_v W_proj, but this model's attention normalizes the "
                         f"heads' output ({geometry['inner_norm']}) between them; use vproj='keep', or build it "
                         f"without that norm (scale_attn_norm=False)")
    windowed = sorted(set(geometry.get('attention', ())) & set(_WINDOWED))
    if windowed:
        raise ValueError(f"impulse init writes maps over the whole patch grid, but {windowed[0]} attends within "
                         f"windows of it ({_WINDOWED[windowed[0]]}); valid: struct_init 'mimetic' on this model")
    heads = geometry['num_heads']
    if cfg.offsets == 'distinct' and heads > cfg.kernel_size ** 2:
        raise ValueError(
            f"offsets='distinct' needs num_heads <= kernel_size**2, got num_heads={heads} with "
            f"kernel_size={cfg.kernel_size}; use offsets='random' or 'fixed', or a larger kernel_size")
    if cfg.pseudo_input == 'sincos' and geometry['embed_dim'] % 4:
        raise ValueError(
            f"pseudo_input='sincos' needs embed_dim divisible by 4, got {geometry['embed_dim']}")
    check_solve_budget(cfg, geometry)


def _position_table(model: nn.Module, embed_dim: int, cfg: ImpulseCfg) -> torch.Tensor:
    """ (N, D) position signal of the patch tokens before LayerNorm: the grid's sin-cos table in float64, unscaled
    (`pseudo_input='sincos'`; LayerNorm removes the scale), or the model's own patch position embedding as it is
    now (`'pos_embed'`, float32). """
    if cfg.pseudo_input == 'sincos':
        return sincos_pos_embed(tuple(model.patch_embed.grid_size), embed_dim, dtype=torch.float64)[0]
    table = model.pos_embed.detach().cpu().float()[0]  # the init computes on the CPU wherever the model lives
    if not getattr(model, 'no_embed_class', False):
        table = table[getattr(model, 'num_prefix_tokens', 0):]  # drop class / register rows
    return table


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


def impulse_pseudo_input(model: nn.Module, embed_dim: int, cfg: Any = None) -> torch.Tensor:
    """ (N, D) pseudo input an impulse init solves on (its first layer's, with `layer_inputs='propagated'`):
    LayerNorm (no affine) of the position table of `cfg` (an `ImpulseCfg` or its dict; None: the 2024 default),
    with the content directions projected out first when `cfg.content == 'orthogonal'`. """
    if cfg is None or isinstance(cfg, dict):
        names = ImpulseCfg.__dataclass_fields__
        cfg = ImpulseCfg(**{k: v for k, v in (cfg or {}).items() if k in names})
    table = _position_table(model, embed_dim, cfg)
    if cfg.content == 'orthogonal':
        basis = _content_basis(model)
        table = (table - (table.double() @ basis) @ basis.T).to(table.dtype)
    # in float64: the float32 result is then the same bits whatever kernels (vector widths) computed the statistics
    return F.layer_norm(table.double(), (embed_dim,), eps=1e-5).float()


def _on_cpu(module: nn.Module) -> nn.Module:
    """ `module` itself when its weights are on the CPU, else a CPU copy of it: the init computes on the CPU wherever
    the model lives (its generator is a CPU one), so a model on a GPU gets the weights it would get on the CPU. """
    if all(t.device.type == 'cpu' for t in itertools.chain(module.parameters(), module.buffers())):
        return module
    return copy.deepcopy(module).cpu()


def _row_space_only(x: torch.Tensor, *weights: torch.Tensor) -> Tuple[torch.Tensor, ...]:
    """ Each (..., D, k) weight without the part x never reaches (x's logits are unchanged). """
    _, s, vh = torch.linalg.svd(x.double(), full_matrices=False)
    v = vh[s > 1e-5 * s[0]].T
    return tuple((v @ (v.T @ w.double())).to(w.dtype) for w in weights)


def _solve(x: torch.Tensor, targets: torch.Tensor, head_dim: int, heads: int, cfg: ImpulseCfg,
           generator: torch.Generator):
    wq, wk, info = SOLVERS[cfg.solver](x, targets, head_dim, heads, generator, **cfg.solver_options())
    if cfg.content == 'orthogonal':
        wq, wk = _row_space_only(x, wq, wk)
    return wq, wk, info


def _propagated_solve(model: nn.Module, attns: List[nn.Module], x: torch.Tensor, targets: torch.Tensor,
                      cfg: ImpulseCfg, generator: torch.Generator):
    """ Solve and write one layer at a time, each on the patch tokens the blocks before it produce from the
    position table (prefix tokens left out), so a layer's targets are solved on the input it will see at step 0. """
    blocks = list(getattr(model, 'blocks', []))
    if [getattr(b, 'attn', None) for b in blocks] != list(attns) or not all(hasattr(b, 'norm1') for b in blocks):
        raise ValueError("layer_inputs='propagated' needs timm ViT blocks (model.blocks[i].norm1 and .attn); "
                         "use layer_inputs='same' for this model")
    heads, head_dim = attns[0].num_heads, attns[0].qkv.in_features // attns[0].num_heads
    stream = _position_table(model, x.shape[-1], cfg).float()
    if cfg.pseudo_input == 'sincos':
        stream = stream * cfg.pos_embed_scale  # the residual stream carries the table at the model's scale
    if cfg.content == 'orthogonal':
        basis = _content_basis(model).float()
        stream = stream - (stream @ basis) @ basis.T
    stream, parts = stream.unsqueeze(0), []
    for i, (block, layer_targets) in enumerate(zip(blocks, targets.split(heads))):
        layer_x = x if i == 0 else _on_cpu(block.norm1)(stream)[0].float()
        wq, wk, info = _solve(layer_x, layer_targets, head_dim, heads, cfg, generator)
        write_qk_(block.attn, wq.to(block.attn.qkv.weight.dtype), wk.to(block.attn.qkv.weight.dtype))
        zero_attention_bias_(block.attn, qk=True, vproj=False)
        parts.append(info)
        was_training = block.training
        block.eval()  # no dropout or drop-path in the carried tokens
        stream = _on_cpu(block)(stream.to(block.attn.qkv.weight.dtype)).float()
        block.train(was_training)
    return {k: torch.cat([p[k] for p in parts]) for k in ('objective', 'hit_rate', 'target_mass')}


@torch.no_grad()
def impulse_init_(model: nn.Module, attns: List[nn.Module], cfg: ImpulseCfg, generator: torch.Generator):
    """ Write impulse Q/K (and, if cfg.vproj == 'mimetic', V/proj) into every attention module. """
    dim, heads = attns[0].qkv.in_features, attns[0].num_heads
    head_dim = dim // heads
    grid = tuple(model.patch_embed.grid_size)
    if cfg.pos_embed_scale != getattr(model, 'pos_embed_scale', 1.0):
        set_pos_embed_scale_(model, cfg.pos_embed_scale)  # the model keeps the scaled table (the 2025 authors' code)
    x = impulse_pseudo_input(model, dim, cfg)
    solved_layers = 1 if cfg.share_layers else len(attns)
    offsets = [draw_offsets(heads, cfg.kernel_size, cfg.offsets, generator) for _ in range(solved_layers)]
    targets = torch.stack([impulse_target(grid, o, cfg.border) for layer in offsets for o in layer])
    if cfg.layer_inputs == 'propagated':
        if cfg.vproj == 'mimetic':  # the carried tokens must pass through the V/proj the model starts with
            mimetic_vproj_init_(attns, MimeticCfg(), generator)
        info = _propagated_solve(model, attns, x, targets, cfg, generator)
    else:
        wq, wk, info = _solve(x, targets, head_dim, heads, cfg, generator)
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
