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

On timm's own ViTs (`impulse_inputs`): a learned table under the 2024 solve starts at the sin-cos table the solve
assumes (written into its patch rows); the capped solves also see the prefix tokens (class, register) as keys with no
target; the record's hit rates and masses are measured in the model's own forward pass on position alone, and an init
whose first attention does not hold there is undone (`impulse_holds`).
"""
import copy
import itertools
from dataclasses import dataclass, field
from typing import Any, Dict, List, Tuple

import torch
from torch import nn

from ..layers.pos_embed import set_pos_embed_scale_
from .heads import layout_of
from .impulse_budget import (  # noqa: F401  the solve's cost and budget, importable from the init too
    SOLVE_MEMORY_BUDGET, SOLVE_WORK_BUDGET, check_solve_budget, impulse_solve_cost)
from .impulse_holds import MEASURED_ON, check_holds, measured_hits
from .impulse_inputs import (  # noqa: F401  the pseudo input, importable from the init too
    _token_table, content_dims, layer_normed, learned_table, pseudo_input, write_sincos_table_)
from .impulse_solvers import SOLVERS, WARM_START
from .impulse_targets import (  # noqa: F401  the offsets and targets, importable from the init too
    BORDERS, OFFSET_POLICIES, _odd_kernel, draw_offsets, draw_offsets_cycled, fixed_order, impulse_target,
    window_offsets)
from .layouts import AttentionLayout
from .mimetic import MimeticCfg, mimetic_vproj_init_

__all__ = [
    'window_offsets', 'fixed_order', 'draw_offsets', 'draw_offsets_cycled', 'impulse_target', 'pseudo_input',
    'ImpulseCfg', 'impulse_init_', 'impulse_pseudo_input', 'check_impulse_model', 'impulse_solve_cost',
    'OFFSET_POLICIES', 'BORDERS', 'IMPULSE2025', 'SOLVE_MEMORY_BUDGET', 'SOLVE_WORK_BUDGET',
]


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


def _no_position_table(geometry: Dict[str, Any], mimetic: str) -> str:
    """ The refusal of a model without model.pos_embed: what position signal it has instead. """
    model = geometry.get('model', 'this model')
    position, tables = geometry.get('position_terms'), geometry.get('pos_tables')
    if position:
        what = f"{model}'s only position signal is {position}"
    elif tables:
        what = (f"{model}'s position tables ({', '.join(tables[:3])}) are not one table of a ViT's patch grid at "
                f"model.pos_embed, and it has no relative position bias table")
    else:
        what = f'{model} has neither: no model.pos_embed and no relative position bias table'
    return ("impulse init needs a position signal it can write each head's offset with: an absolute position table "
            "(model.pos_embed) to solve Q/K on, or a relative position bias table indexed by signed offsets; "
            f"{what}; valid: {mimetic}, or a model with either")


def check_impulse_model(cfg: ImpulseCfg, geometry: Dict[str, Any]) -> None:
    """ ValueError, before any work, when the init cannot apply to a model of this geometry (`model_geometry`). The
    Q/K solve writes, per head, softmax(s x W_q W_k^T x^T) over the tokens of one patch grid carrying an absolute
    position table: each way a model departs from that is named, with what the model computes instead. """
    model = geometry.get('model', 'this model')
    mimetic = "struct_init 'mimetic' fits it"
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
        raise ValueError(_no_position_table(geometry, mimetic))
    shapes = geometry.get('shapes') or []
    if len(shapes) > 1:
        raise ValueError(f"impulse init solves Q/K on one patch grid of one width (a ViT's), but {model}'s "
                         f"attention has (width, heads) {shapes}, stage by stage on pooled grids; {mimetic}")
    if geometry.get('partial'):
        name, words = geometry['partial']
        raise ValueError(f"impulse init solves each head's map over the whole patch grid, but {model}'s attention "
                         f"{name} does not attend over it ({words}); {mimetic}")
    grid = geometry['grid_size']
    if grid is None:
        raise ValueError(f'impulse init solves Q/K over the patch grid of a ViT (model.patch_embed.grid_size); '
                         f'{model} has none; {mimetic}')
    if geometry.get('qk_normalized'):
        raise ValueError(f"impulse init writes the logits q k^T, but {model} normalizes them first "
                         f"({geometry['qk_normalized']}), which does not keep the solved maps; build it with "
                         f"qk_norm=False, or {mimetic}")
    if cfg.kernel_size > min(grid):
        raise ValueError(
            f'kernel_size={cfg.kernel_size} is larger than the patch grid {tuple(grid)}; '
            f'valid: odd sizes <= {min(grid)}')
    heads = geometry['num_heads']
    if cfg.offsets == 'distinct' and heads > cfg.kernel_size ** 2:
        raise ValueError(
            f"offsets='distinct' needs num_heads <= kernel_size**2, got num_heads={heads} with "
            f"kernel_size={cfg.kernel_size}; use offsets='random' or 'fixed', or a larger kernel_size")
    if cfg.pseudo_input == 'sincos' and geometry['embed_dim'] % 4:
        raise ValueError(
            f"pseudo_input='sincos' needs embed_dim divisible by 4, got {geometry['embed_dim']}")
    content = geometry.get('content_dims')  # an upper bound from the sizes: exact only where it reaches the width
    if cfg.content == 'orthogonal' and content is not None and content >= geometry['embed_dim']:
        content = geometry['content_rank']()
    if cfg.content == 'orthogonal' and content is not None and content >= geometry['embed_dim']:
        raise ValueError(
            f"content='orthogonal' leaves nothing to solve on: the patch embedding's weights, its bias and the "
            f"all-ones direction span {content} of the {geometry['embed_dim']} directions a token has (each patch "
            f"has {geometry.get('patch_values')} values), so no position direction is free of content; valid: "
            f"content='ignore', or a width above the patch's values + 2")
    check_solve_budget(cfg, geometry)


def impulse_pseudo_input(model: nn.Module, embed_dim: int, cfg: Any = None, prefix: bool = False) -> torch.Tensor:
    """ (N, D) pseudo input an impulse init solves on (its first layer's, with `layer_inputs='propagated'`):
    LayerNorm (no affine) of the position table of `cfg` (an `ImpulseCfg` or its dict; None: the 2024 default),
    with the content directions projected out first when `cfg.content == 'orthogonal'`. With `prefix`, the rows of
    the prefix tokens the solve also sees come first ((P + N, D)). """
    if cfg is None or isinstance(cfg, dict):
        names = ImpulseCfg.__dataclass_fields__
        cfg = ImpulseCfg(**{k: v for k, v in (cfg or {}).items() if k in names})
    return layer_normed(model, embed_dim, cfg, prefix)


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
           generator: torch.Generator, prefix: int = 0):
    options = cfg.solver_options()
    if prefix and cfg.solver == 'fast':  # the row space of the grid's rows, the prefix rows' own directions beside
        options['prefix'] = prefix
    wq, wk, info = SOLVERS[cfg.solver](x, targets, head_dim, heads, generator, **options)
    if cfg.content == 'orthogonal':
        wq, wk = _row_space_only(x, wq, wk)
    return wq, wk, info


def _with_prefix(targets: torch.Tensor, prefix: int) -> torch.Tensor:
    """ Targets over the P + N tokens the solve sees: prefix queries have none, patch keys move by P. """
    if not prefix:
        return targets
    shifted = torch.where(targets >= 0, targets + prefix, targets)
    return torch.cat([torch.full((*targets.shape[:-1], prefix), -1, dtype=targets.dtype), shifted], -1)


def _propagated_solve(model: nn.Module, layouts: List[AttentionLayout], x: torch.Tensor, targets: torch.Tensor,
                      cfg: ImpulseCfg, generator: torch.Generator):
    """ Solve and write one layer at a time, each on the tokens the blocks before it produce from the position
    table, so a layer's targets are solved on the input it will see at step 0. """
    blocks = list(getattr(model, 'blocks', []))
    if [getattr(b, 'attn', None) for b in blocks] != [a.module for a in layouts] or \
            not all(hasattr(b, 'norm1') for b in blocks):
        raise ValueError("layer_inputs='propagated' needs timm ViT blocks (model.blocks[i].norm1 and .attn); "
                         "use layer_inputs='same' for this model")
    heads, head_dim = layouts[0].heads, layouts[0].qk_dim
    stream, prefix = _token_table(model, x.shape[-1], cfg)
    stream = stream.float()
    if cfg.pseudo_input == 'sincos':
        stream[prefix:] = stream[prefix:] * cfg.pos_embed_scale  # the residual stream carries the table at its scale
    stream, parts = stream.unsqueeze(0), []
    for i, (block, layout, layer_targets) in enumerate(zip(blocks, layouts, targets.split(heads))):
        layer_x = x if i == 0 else _on_cpu(block.norm1)(stream)[0].float()
        wq, wk, info = _solve(layer_x, layer_targets, head_dim, heads, cfg, generator, prefix)
        layout.write_qk_(wq, wk)
        layout.zero_bias_(qk=True, vproj=False)
        parts.append(info)
        was_training = block.training
        block.eval()  # no dropout or drop-path in the carried tokens
        stream = _on_cpu(block)(stream.to(layout.q.linear.weight.dtype)).float()
        block.train(was_training)
    return {k: torch.cat([p[k] for p in parts]) for k in ('objective', 'hit_rate', 'target_mass')}


def _hint(cfg: ImpulseCfg) -> str:
    """ What to try when the init does not hold. """
    if cfg.content == 'orthogonal':
        return "content='ignore'"
    if cfg.pseudo_input == 'pos_embed':
        return "a larger pos_embed_scale (impulse2025 uses 18)"
    return "struct_init 'impulse2025' (its closed form writes sharper maps)"


@torch.no_grad()
def impulse_init_(model: nn.Module, layouts: List[AttentionLayout], cfg: ImpulseCfg, generator: torch.Generator):
    """ Write impulse Q/K (and, if cfg.vproj == 'mimetic', V/proj) into every attention, then measure the maps in the
    model's own forward pass on position alone (`MEASURED_ON`): the record's hit rates and masses are those, and an
    init whose first attention does not hold there (`HOLDS_AT`) raises, so that the model is restored. """
    layouts = [layout_of(a) for a in layouts]
    dim, heads = layouts[0].dim_in, layouts[0].heads
    head_dim = layouts[0].qk_dim
    grid = tuple(model.patch_embed.grid_size)
    table_rule = 'the model\'s own table'
    if cfg.pos_embed_scale != getattr(model, 'pos_embed_scale', 1.0):
        set_pos_embed_scale_(model, cfg.pos_embed_scale)  # the model keeps the scaled table (the 2025 authors' code)
    if cfg.pseudo_input == 'sincos' and learned_table(model):
        write_sincos_table_(model, cfg.pos_embed_scale)
        table_rule = 'the sin-cos table the solve assumes, written into the model\'s learned table'

    x = impulse_pseudo_input(model, dim, cfg, prefix=True)
    prefix = x.shape[0] - grid[0] * grid[1]
    solved_layers = 1 if cfg.share_layers else len(layouts)
    offsets = [draw_offsets(heads, cfg.kernel_size, cfg.offsets, generator) for _ in range(solved_layers)]
    targets = _with_prefix(torch.stack([impulse_target(grid, o, cfg.border) for layer in offsets for o in layer]),
                           prefix)
    if cfg.layer_inputs == 'propagated':
        if cfg.vproj == 'mimetic':  # the carried tokens must pass through the V/proj the model starts with
            mimetic_vproj_init_(layouts, MimeticCfg(), generator)
        info = _propagated_solve(model, layouts, x, targets, cfg, generator)
    else:
        wq, wk, info = _solve(x, targets, head_dim, heads, cfg, generator, prefix)
        wq, wk = wq.view(solved_layers, heads, dim, head_dim), wk.view(solved_layers, heads, dim, head_dim)
        for i, layout in enumerate(layouts):
            layout.write_qk_(wq[0 if cfg.share_layers else i], wk[0 if cfg.share_layers else i])
            layout.zero_bias_(qk=True, vproj=False)
        if cfg.vproj == 'mimetic':
            mimetic_vproj_init_(layouts, MimeticCfg(), generator)

    def per_layer(values: torch.Tensor) -> List[List[float]]:
        rows = values.view(solved_layers, heads).tolist()
        return [rows[0 if cfg.share_layers else i] for i in range(len(layouts))]
    layer_offsets = [[list(o) for o in offsets[0 if cfg.share_layers else i]] for i in range(len(layouts))]
    measured = measured_hits(model, layouts, layer_offsets, grid, cfg.border)
    check_holds(model, measured, prefix + grid[0] * grid[1], _hint(cfg))
    return {
        'solver': cfg.solver,
        'offsets': layer_offsets,
        'objective': per_layer(info['objective']),
        **measured,
        'measured_on': MEASURED_ON,
        'solve': {'hit_rate': per_layer(info['hit_rate']), 'target_mass': per_layer(info['target_mass']),
                  'input': f'the pseudo input the solve used (LayerNorm of {cfg.pseudo_input} table'
                           f'{", with the prefix tokens" if prefix else ""})'},
        'objective_mean': float(info['objective'].mean()),
        'grid_size': list(grid),
        'position_table': table_rule,
    }
