""" A config.json that plain timm loads, and the hook that lets the plugin rebuild its own registered model.

A package model's state dict (the fixed sin-cos table included, as `pos_embed`) loads strictly into timm's own
`VisionTransformer` (`SwinTransformer`) of the same geometry. An export therefore names a timm architecture with the
`model_args` of that geometry, and keeps the registered name and its model_args under the top-level `timm_structinit`
key, which timm ignores and the hook reads. timm has no public hook for this: the hook wraps a private function of
timm's, only inside `registered_exports()` or, on request, for the whole process (`install_config_hook()`); importing
the package leaves timm's function as it is.
"""
import inspect
import logging
import re
from contextlib import contextmanager
from typing import Any, Dict, Iterator, Optional, Tuple

import timm
import torch
from timm.models import VisionTransformer, get_model_args, is_model
from timm.models.swin_transformer import SwinTransformer
from torch import nn

_logger = logging.getLogger(__name__)

# the key of config.json that holds the plugin's own fields
CONFIG_KEY = 'timm_structinit'
# arguments timm's VisionTransformer does not take from an export: the plugin's own, and init-only switches
_NOT_PLAIN = {'struct_init', 'struct_init_kwargs', 'struct_init_seed', 'out_indices', 'weight_init', 'fix_init'}


def _side(size: Tuple[int, int]) -> Any:
    return size[0] if size[0] == size[1] else list(size)


def _timm_args(model: nn.Module, timm_class: type) -> Dict[str, Any]:
    """ The arguments `model` was created with that `timm_class` takes (the plugin's own left out). """
    timm_params = inspect.signature(timm_class.__init__).parameters
    return {k: v for k, v in get_model_args(model).items() if k in timm_params and k not in _NOT_PLAIN}


def plain_model_args(model: nn.Module) -> Dict[str, Any]:
    """ timm `VisionTransformer` arguments for `model`'s geometry: the arguments it was created with that timm's
    class takes, and every size read from the model itself (a registered variant sets them in its entrypoint). """
    args = _timm_args(model, VisionTransformer)
    if args.get('pos_embed') == 'sincos':
        del args['pos_embed']  # timm's learned table has the same shape; the export stores the fixed values
    args.update(
        img_size=_side(model.patch_embed.img_size), patch_size=_side(model.patch_embed.patch_size),
        in_chans=model.patch_embed.proj.in_channels, num_classes=model.num_classes,
        global_pool=model.global_pool, embed_dim=model.embed_dim, depth=len(model.blocks),
        num_heads=model.blocks[0].attn.num_heads, class_token=model.cls_token is not None)
    return args


def loads_in_plain_timm(model: nn.Module, architecture: str, model_args: Dict[str, Any]) -> bool:
    """ Whether timm's `architecture` built with `model_args` loads `model`'s state dict strictly and computes the
    same outputs (to 1e-6) on a random batch. """
    was_training = model.training
    try:
        with torch.random.fork_rng(devices=[]):
            plain = timm.create_model(architecture, weight_init='skip', **model_args)
        plain.load_state_dict(model.state_dict(), strict=True)
        stem = getattr(model, 'patch_embed', None) or model.stem
        x = torch.randn(2, stem.proj.in_channels, *stem.img_size, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            return torch.allclose(plain.eval()(x), model.eval()(x), rtol=0, atol=1e-6)
    except (TypeError, ValueError, RuntimeError, AssertionError) as e:
        _logger.info(f'timm {architecture} cannot take these weights: {e}')
        return False
    finally:
        model.train(was_training)


def _swin_args(model: SwinTransformer) -> Dict[str, Any]:
    """ timm `SwinTransformer` arguments for `model`'s geometry, read from the model as for ViT. """
    stages = list(model.layers)
    first = stages[0].blocks[0]
    return dict(
        _timm_args(model, SwinTransformer), img_size=_side(model.patch_embed.img_size),
        patch_size=_side(model.patch_embed.patch_size), in_chans=model.in_chans, num_classes=model.num_classes,
        global_pool=model.global_pool, embed_dim=model.embed_dim, window_size=_side(first.window_size),
        depths=[len(stage.blocks) for stage in stages], num_heads=[stage.blocks[0].attn.num_heads for stage in stages],
        mlp_ratio=first.mlp_ratio)


# timm classes the package subclasses: the timm architecture whose entrypoint takes any of their geometries, and
# the geometry's arguments. (timm's Mixer entrypoints fix patch_size, num_blocks and embed_dim, so no timm name
# builds another Mixer geometry: Mixer exports need the plugin.)
_PLAIN = ((SwinTransformer, 'swin_tiny_patch4_window7_224', _swin_args),)


def plain_timm_config(model: nn.Module, model_name: str) -> Optional[Tuple[str, Dict[str, Any]]]:
    """ (timm architecture, model_args) under which plain timm loads `model` with the same outputs, or None. """
    plain = [(arch, read) for cls, arch, read in _PLAIN if isinstance(model, cls) and type(model) is not cls]
    if plain:
        (architecture, read), = plain
        args = read(model)
    elif isinstance(model, VisionTransformer) and type(model) is not VisionTransformer:
        # the size in the name is cosmetic: model_args set every size the weights have
        match = re.match(r'vit_(tiny|small|base|large)_', model_name)
        architecture, args = f'vit_{match.group(1) if match else "base"}_patch16_224', plain_model_args(model)
    elif type(model).__module__.startswith('timm.'):
        return None  # timm's own models are written as they are
    else:
        architecture = None
    if architecture is not None and loads_in_plain_timm(model, architecture, args):
        return architecture, args
    _logger.warning(f'{model_name} with these model_kwargs has no plain timm equivalent; the export needs '
                    f'`import timm_structinit` to load')
    return None


def _plugin_config(cfg: Dict[str, Any]) -> Dict[str, Any]:
    """ `cfg` (a parsed config.json) with the registered architecture and model_args of its plugin fields. """
    own = cfg.get(CONFIG_KEY)
    if isinstance(own, dict) and isinstance(own.get('architecture'), str) and is_model(own['architecture']):
        cfg = dict(cfg, architecture=own['architecture'], model_args=dict(own.get('model_args') or {}))
    return cfg


def _install() -> bool:
    """ Wrap timm's private `timm.models._hub._parse_model_cfg(cfg, extra_fields)`, once; whether the hook is in place.

    Both of timm's loaders (`local-dir:`, `hf-hub:`) parse config.json with it; configs without plugin fields parse as
    before. A timm without that function, or with other arguments, is left alone with a warning: exports then load as
    timm's own `VisionTransformer` (same weights and outputs).
    """
    from timm.models import _hub
    parse = getattr(_hub, '_parse_model_cfg', None)
    if getattr(parse, '_timm_structinit', False):
        return True
    try:
        params = list(inspect.signature(parse).parameters)
    except (TypeError, ValueError):  # missing, or not a plain function
        params = None
    if params != ['cfg', 'extra_fields']:
        _logger.warning(
            f'timm {timm.__version__} has no timm.models._hub._parse_model_cfg(cfg, extra_fields): exports load as '
            f"timm's VisionTransformer (same weights and outputs), not as the registered timm_structinit model")
        return False

    def parse_model_cfg(cfg, *args, **kwargs):
        return parse(_plugin_config(cfg), *args, **kwargs)

    parse_model_cfg._timm_structinit = True
    parse_model_cfg.__wrapped__ = parse
    _hub._parse_model_cfg = parse_model_cfg
    return True


_process_wide = False  # install_config_hook() was called: no block takes the hook out


@contextmanager
def registered_exports() -> Iterator[bool]:
    """ Within the block, timm's `local-dir:` / `hf-hub:` loads build the registered model an export names in its
    plugin fields (outside it, the timm model its config names); timm's parser is back on exit. Yields whether the
    hook is in place. The package's training command and `python -m timm_structinit.run` load models inside it. """
    from timm.models import _hub
    before = getattr(_hub, '_parse_model_cfg', None)
    hooked = _install()
    try:
        yield hooked
    finally:
        now = getattr(_hub, '_parse_model_cfg', None)
        if not _process_wide and now is not before and getattr(now, '__wrapped__', None) is before:
            _hub._parse_model_cfg = before


def install_config_hook() -> bool:
    """ `registered_exports()` for the rest of the process: `timm.create_model('local-dir:DIR')` (or 'hf-hub:...')
    builds the registered model of a package export from here on. Returns whether the hook is in place. """
    global _process_wide
    _process_wide = _install()
    return _process_wide
