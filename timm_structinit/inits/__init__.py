""" Structured attention inits: the registry and `apply_init`, the one entry point every model uses.

Layout: `heads` reads and writes per-head W_q, W_k, W_v, W_proj in timm's fused qkv; `mimetic` and `impulse`
are the inits (pure functions over those weights plus one dataclass of hyperparameters each); `impulse_solvers`
solves impulse Q/K; `threads` keeps the math independent of the thread count.

An init is a name, a frozen dataclass of hyperparameters (each field's metadata gives its valid range or choices),
and a function `apply(model, attns, cfg, generator) -> record` that writes weights in place. Presets are the same
function with other defaults (`impulse2025` is `impulse` with the 2025 paper's settings). Hyperparameters are checked
before any weight is touched, and every error names the bad value and what would be valid.

Other model families (`model_family`): an init may have a version for timm's Swin Transformer (`swin`: the impulse
in the relative position bias, mimetic per stage) and MLP-Mixer (`mixer`: the impulse as a token shift), each with
its own hyperparameter dataclass, so `apply_init(model, name)` takes the version the model needs.
"""
import dataclasses
import math
import numbers
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from timm.utils import unwrap_model
from torch import nn

from .canonical import FACTOR_RULE
from .fit import attention_kind, check_attention_kinds, inner_norm, refuse_derived_weights, refuse_shared_weights
from .heads import find_attention, written_tensors
from .impulse import IMPULSE2025, ImpulseCfg, check_impulse_model, impulse_init_
from .mimetic import MimeticCfg, check_mimetic_model, mimetic_init_
from .mixer import MixerImpulseCfg, mixer_impulse_init_, token_mixing_blocks
from .swin import SwinImpulseCfg, swin_impulse_init_, swin_mimetic_init_, window_attentions
from .threads import on_one_thread
from ..utils.seeds import check_seed
from ..utils.words import plural

__all__ = ['StructInit', 'FamilyInit', 'register_init', 'list_inits', 'get_init', 'make_init_cfg', 'apply_init',
           'apply_init_cfg', 'check_init_cfg', 'model_geometry', 'model_family', 'reset_parameters_', 'rest_init_of']

FAMILIES = {'vit': 'ViT-style', 'swin': 'Swin Transformer', 'mixer': 'MLP-Mixer'}


@dataclass(frozen=True)
class FamilyInit:
    """ An init's version for another model family: its hyperparameters and `apply(model, cfg, generator)`. """
    cfg_cls: type
    apply: Callable[[nn.Module, Any, torch.Generator], Dict[str, Any]]
    preset: Dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StructInit:
    name: str
    cfg_cls: type
    apply: Callable[[nn.Module, List[nn.Module], Any, torch.Generator], Dict[str, Any]]
    preset: Dict[str, Any] = field(default_factory=dict)
    description: str = ''
    # check_model(cfg, geometry) raises ValueError when the init cannot apply to a model of that shape;
    # geometry: grid_size (H, W), embed_dim, num_heads, num_prefix_tokens, has_pos_embed, rotary (None or the
    # rotary embedding's class name), attention (the attention modules' qualified class names, `fit.attention_kind`),
    # inner_norm (None, or the class of a norm between the heads' output and proj, `fit.inner_norm`)
    check_model: Optional[Callable[[Any, Dict[str, Any]], None]] = None
    families: Dict[str, FamilyInit] = field(default_factory=dict)  # 'swin', 'mixer'


_INITS: Dict[str, StructInit] = {}


def register_init(init: StructInit, replace: bool = False) -> StructInit:
    """ Make `init` available by its name to `apply_init`, `make_init_cfg` and every model's `struct_init`. A name
    already registered (a built-in such as 'mimetic' included) is refused unless `replace=True`, so that a plugin
    cannot change what a name means by accident. """
    if not isinstance(init, StructInit):
        raise TypeError(f'register_init takes a StructInit, got {type(init).__name__}')
    if not isinstance(init.name, str) or not init.name.isidentifier():
        raise ValueError(f'StructInit.name={init.name!r} must be an identifier such as "my_init"')
    if not (dataclasses.is_dataclass(init.cfg_cls) and isinstance(init.cfg_cls, type)) or not callable(init.apply):
        raise TypeError(f'StructInit {init.name!r} needs a dataclass cfg_cls and a callable apply')
    if not isinstance(replace, bool):
        raise TypeError(f'replace={replace!r} must be True or False')
    if init.name in _INITS and not replace and _INITS[init.name] != init:
        known = _INITS[init.name].description or 'registered before'
        raise ValueError(f'struct_init {init.name!r} is already registered ({known}); choose another name, or pass '
                         f'replace=True to replace it')
    _INITS[init.name] = init
    return init


def list_inits() -> List[str]:
    return sorted(_INITS)


def get_init(name: str) -> StructInit:
    if not isinstance(name, str) or name not in _INITS:
        raise ValueError(f'unknown struct_init {name!r}; valid: {", ".join(list_inits())}')
    return _INITS[name]


def _check_value(cls_name: str, f: dataclasses.Field, value: Any) -> Any:
    meta = f.metadata
    where = f'{cls_name}.{f.name}'
    if 'choices' in meta:
        if value not in meta['choices'] or isinstance(value, bool) != isinstance(meta['choices'][0], bool):
            raise ValueError(f'{where}={value!r} is not valid; choose one of {list(meta["choices"])}')
        return value
    if f.type in (bool, 'bool'):
        if not isinstance(value, bool):
            raise ValueError(f'{where}={value!r} must be True or False')
        return value
    if f.type in (int, 'int'):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ValueError(f'{where}={value!r} must be an integer')
        value = int(value)
    elif f.type in (float, 'float'):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise ValueError(f'{where}={value!r} must be a finite number')
        value = float(value)
    if 'range' in meta:
        low, high = meta['range']
        if not low <= value <= high:
            raise ValueError(f'{where}={value!r} is out of range; valid: {low} <= {f.name} <= {high}')
    if 'check' in meta:
        meta['check'](where, value)
    return value


def model_family(model: nn.Module) -> str:
    """ 'swin' (timm SwinTransformer window attention), 'mixer' (timm MlpMixer blocks) or 'vit' (everything else,
    which the ViT path checks). """
    if window_attentions(model):
        return 'swin'
    if token_mixing_blocks(model):
        return 'mixer'
    return 'vit'


def _family_version(name: str, family: str) -> Any:
    """ (cfg class, preset) of init `name` for a model family; ValueError naming the inits that have one. """
    init = get_init(name)
    if not isinstance(family, str) or family not in FAMILIES:
        raise ValueError(f'family={family!r} is not valid; valid: {", ".join(FAMILIES)}')
    if family == 'vit':
        return init.cfg_cls, init.preset
    if family not in init.families:
        having = [n for n in list_inits() if family in _INITS[n].families]
        raise ValueError(f'struct_init {name!r} has no version for {FAMILIES[family]} models; valid there: '
                         f'{", ".join(having)}')
    return init.families[family].cfg_cls, init.families[family].preset


def make_init_cfg(name: str, family: str = 'vit', **kwargs) -> Any:
    """ The validated hyperparameter dataclass of init `name` (for a model of `family`, see `model_family`): its
    preset, overridden by kwargs. """
    cfg_cls, preset = _family_version(name, family)
    fields = {f.name: f for f in dataclasses.fields(cfg_cls)}
    unknown = sorted(set(kwargs) - set(fields))
    if unknown:
        where = '' if family == 'vit' else f' on {FAMILIES[family]} models'
        raise ValueError(f'unknown {plural(len(unknown), "hyperparameter")} {unknown} for struct_init {name!r}{where}; valid: '
                         f'{sorted(fields)}')
    values = {**preset, **kwargs}
    checked = {k: _check_value(cfg_cls.__name__, fields[k], v) for k, v in values.items()}
    cfg = cfg_cls(**checked)
    post = getattr(cfg, 'validate', None)
    if post is not None:
        post()
    return cfg


def reset_parameters_(model: nn.Module) -> None:
    """ PyTorch's default init for every layer of `model`: each module's own `reset_parameters` (Linear and Conv:
    Kaiming-uniform, weights and biases within +-1/sqrt(fan_in); norms: ones and zeros). This is timm's
    `weight_init='reset'`, and what the structured-init authors' `weight_init=skip` leaves every layer with. """
    for module in model.modules():
        if module is not model and callable(getattr(module, 'reset_parameters', None)):
            module.reset_parameters()


def rest_init_of(model: nn.Module) -> str:
    """ How the weights an init does not write were initialized: the model's timm `weight_init` mode ('' for timm's
    own init, 'reset' for PyTorch's defaults; timm's 'skip' leaves the layers at PyTorch's defaults too). """
    return str(getattr(model, 'weight_init_mode', '') or '')


def apply_init(model: nn.Module, name: str, seed: Optional[int] = None, weight_init: Optional[str] = None,
               **kwargs) -> Dict[str, Any]:
    """ Apply structured init `name` to a timm ViT-style model in place and return its init record.

    Works on any model with timm's fused-qkv attention of one width, e.g.
    `apply_init(timm.create_model('deit_small_patch16_224'), 'mimetic')`, and on timm's Swin Transformer and
    MLP-Mixer with the init's version for them (`model_family`). Only attention weights (and, for
    inits that say so, the position table) change. Everything is checked before any weight is written, and if the
    init fails anyway the model is left as it was. `seed` makes the result reproducible bit for bit on one
    machine, whatever the number of torch threads (the init's math runs on one thread); without it, a seed is drawn
    from torch's global generator (so `torch.manual_seed` governs it) and recorded. The record is also stored as
    `model.struct_init_record`.

    `weight_init='reset'` first puts every other layer at PyTorch's default init (`reset_parameters_`, the setting
    of the structured-init authors' runs, default arm included); None leaves them as the model has them. Either
    way the record's `weight_init` says which it is.
    """
    if weight_init not in (None, 'reset'):
        raise ValueError(f"weight_init={weight_init!r} is not valid; choose None (keep the other weights as they "
                         f"are) or 'reset' (PyTorch's default init for every layer the init does not write)")
    if not isinstance(model, nn.Module):
        raise TypeError(f'model must be a torch.nn.Module, got {type(model).__name__}')
    # DataParallel / DistributedDataParallel (.module) and torch.compile (._orig_mod) wrap the model they train
    model = unwrap_model(model)
    if any(p.is_meta for p in model.parameters()):  # writing into them is a silent no-op
        raise ValueError(f'{type(model).__name__} has its weights on the meta device (no values to write); '
                         f"materialize it first (model.to_empty(device='cpu')), then apply_init")
    return apply_init_cfg(model, name, make_init_cfg(name, model_family(model), **kwargs), seed=seed,
                          reset_rest=weight_init == 'reset')


def check_init_cfg(model: nn.Module, name: str, cfg: Any) -> Tuple[StructInit, str, List[nn.Module]]:
    """ The checks `apply_init_cfg` makes before it writes anything (the cfg's type, the model's family, attention
    and geometry), alone: a model built on the meta device checks its arguments this way, before any work. Returns
    (init, family, the ViT attention modules or []). """
    init, family = get_init(name), model_family(model)
    cfg_cls = _family_version(name, family)[0]
    if not isinstance(cfg, cfg_cls):
        raise TypeError(f'cfg of struct_init {name!r} must be a {cfg_cls.__name__} from make_init_cfg, '
                        f'got {type(cfg).__name__}')
    attns = []
    if family == 'vit':
        attns = find_attention(model)
        check_attention_kinds(model, attns, name)
        if init.check_model is not None:
            init.check_model(cfg, model_geometry(model, attns))
    refuse_derived_weights(model, attns if family == 'vit' else [model])
    refuse_shared_weights(model, _written(model, family, attns))
    return init, family, attns


def _written(model: nn.Module, family: str, attns: List[nn.Module]) -> Dict[str, List[torch.Tensor]]:
    """ The tensors an init of `family` writes, by the name of the module that holds them. """
    names = {id(m): n for n, m in model.named_modules()}
    if family == 'swin':
        return {names.get(id(a), ''): [*written_tensors(a), a.relative_position_bias_table]
                for a in window_attentions(model)}
    if family == 'mixer':
        return {names.get(id(b.mlp_tokens), ''): list(b.mlp_tokens.parameters()) for b in token_mixing_blocks(model)}
    return {names.get(id(a), ''): written_tensors(a) for a in attns}


def apply_init_cfg(model: nn.Module, name: str, cfg: Any, seed: Optional[int] = None,
                   reset_rest: bool = False, restore_on_failure: bool = True) -> Dict[str, Any]:
    """ `apply_init` with hyperparameters already validated by `make_init_cfg` (a model checks them once, when it
    is built, and applies them at every `init_weights`). The model's shape is checked here, read by
    `model_geometry`. `reset_rest` puts every layer at PyTorch's default init before the init writes its own.
    `restore_on_failure=False` keeps no copy of what the init writes, for a model under construction, which is
    never returned if its init fails (the copy costs up to a tenth of building a ViT-S). """
    if seed is not None:
        check_seed(seed)
    init, family, attns = check_init_cfg(model, name, cfg)
    if family == 'vit':
        backup = _writable_state(model, attns, everything=reset_rest) if restore_on_failure else None
        apply = partial(init.apply, model, attns)
    else:  # the family's own function checks the model before it writes anything
        backup = _writable_state(model, [], everything=True) if restore_on_failure else None
        apply = partial(init.families[family].apply, model)
    if seed is None:
        seed = int(torch.randint(0, 2 ** 62, (1,)).item())
    generator = torch.Generator().manual_seed(int(seed))
    try:
        if reset_rest:
            with torch.no_grad():
                reset_parameters_(model)
            if hasattr(model, 'weight_init_mode'):  # so that model.init_weights() resets them again
                model.weight_init_mode = 'reset'
        record = {'method': name, 'seed': int(seed), 'weight_init': 'reset' if reset_rest else rest_init_of(model),
                  'cfg': dataclasses.asdict(cfg), 'factor_rule': FACTOR_RULE}
        record.update(on_one_thread(apply, cfg, generator))
    except BaseException:
        if backup is not None:
            _restore(model, backup)
        raise
    model.struct_init_record = record
    return record


def _writable_state(model: nn.Module, attns: List[nn.Module], everything: bool = False) -> Dict[str, Any]:
    """ Copies of what an init may write (attention weights and biases, the position table and its scale; with
    `everything`, every parameter and buffer), so that a failed init leaves the model as it was. """
    if everything:
        tensors = [*model.parameters(), *model.buffers()]
    else:
        tensors = [t for attn in attns for t in written_tensors(attn)]
        pos_embed = getattr(model, 'pos_embed', None)
        if isinstance(pos_embed, torch.Tensor):
            tensors.append(pos_embed)
    return {
        'tensors': [(t, t.detach().clone()) for t in tensors],
        'pos_embed_scale': getattr(model, 'pos_embed_scale', None),
        'weight_init_mode': getattr(model, 'weight_init_mode', None),
    }


@torch.no_grad()
def _restore(model: nn.Module, backup: Dict[str, Any]) -> None:
    for tensor, saved in backup['tensors']:
        tensor.copy_(saved)
    if backup['pos_embed_scale'] is not None:
        model.pos_embed_scale = backup['pos_embed_scale']
    elif hasattr(model, 'pos_embed_scale'):
        del model.pos_embed_scale
    if backup['weight_init_mode'] is not None:
        model.weight_init_mode = backup['weight_init_mode']


def model_geometry(model: nn.Module, attns: List[nn.Module]) -> Dict[str, Any]:
    """ What a position-aware init needs to know of a model: patch grid, width, heads, prefix tokens, position
    embeddings (an absolute table; a rotary embedding, which turns q and k by position in the forward pass), and
    the image and patch sizes that set the grid. """
    patch_embed = getattr(model, 'patch_embed', None)
    grid = tuple(patch_embed.grid_size) if getattr(patch_embed, 'grid_size', None) is not None else None
    return dict(
        grid_size=grid, embed_dim=attns[0].qkv.in_features, num_heads=attns[0].num_heads, num_layers=len(attns),
        img_size=_size_of(patch_embed, 'img_size'), patch_size=_size_of(patch_embed, 'patch_size'),
        num_prefix_tokens=int(getattr(model, 'num_prefix_tokens', 0)),
        has_pos_embed=isinstance(getattr(model, 'pos_embed', None), torch.Tensor),
        attention=sorted({attention_kind(a) for a in attns}), inner_norm=inner_norm(attns),
        rotary=next((type(m).__name__ for m in model.modules() if 'rotary' in type(m).__name__.lower()), None))


def _size_of(patch_embed: Optional[nn.Module], name: str) -> Optional[tuple]:
    value = getattr(patch_embed, name, None)
    return tuple(value) if isinstance(value, (tuple, list)) else None


def _apply_mimetic(model: nn.Module, attns: List[nn.Module], cfg: MimeticCfg, generator: torch.Generator):
    return mimetic_init_(attns, cfg, generator)


register_init(StructInit(
    'mimetic', MimeticCfg, _apply_mimetic, check_model=check_mimetic_model,
    description='Trockman & Kolter 2023: W_q W_k^T ~ +I (rank-k per head), W_v W_proj ~ -I',
    families={'swin': FamilyInit(MimeticCfg, swin_mimetic_init_)},
))
_IMPULSE_FAMILIES = {'swin': FamilyInit(SwinImpulseCfg, swin_impulse_init_),
                     'mixer': FamilyInit(MixerImpulseCfg, mixer_impulse_init_)}
register_init(StructInit(
    'impulse', ImpulseCfg, impulse_init_, check_model=check_impulse_model,
    description='Zheng et al. 2024: each head starts as a random f x f impulse filter (capped solve, sin-cos input)',
    families=_IMPULSE_FAMILIES,
))
register_init(StructInit(
    'impulse2025', ImpulseCfg, impulse_init_, preset=IMPULSE2025, check_model=check_impulse_model,
    description='Zheng et al. 2025: closed-form impulse Q/K (SVD, factors at norm 7), mimetic V/proj, x18 PE',
    families={'swin': FamilyInit(SwinImpulseCfg, swin_impulse_init_, dict(offsets='fixed', vproj='mimetic')),
              'mixer': FamilyInit(MixerImpulseCfg, mixer_impulse_init_, dict(offsets='fixed'))},
))
