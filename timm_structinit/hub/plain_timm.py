""" config.json that plain timm can build, and the hook that lets the plugin rebuild its own registered model.

A package model is a timm `VisionTransformer` subclass whose state dict (the sin-cos table included, stored as
`pos_embed`) loads strictly into timm's own `VisionTransformer` of the same geometry. An export therefore names a
timm architecture (`vit_tiny_patch16_224`, ...) and the `model_args` that reproduce the geometry, and keeps what the
plugin needs (the registered name and its own model_args) under the top-level `timm_structinit` key, which timm
ignores. After `import timm_structinit`, `install_config_hook` makes timm's `local-dir:` / `hf-hub:` loader read that
key, so the same `create_model` line gives the registered `StructVisionTransformer` (fixed sin-cos table, init record).
"""
import logging
import re
from typing import Any, Dict, Mapping, Optional, Tuple

import timm
import torch
from timm.models import VisionTransformer, is_model
from torch import nn

from .checks import init_params, is_package_model

_logger = logging.getLogger(__name__)

# the key of config.json that holds the plugin's own fields
CONFIG_KEY = 'timm_structinit'
# arguments the plugin adds to timm's VisionTransformer, and those that change training but not the weights' use
_PLUGIN_ONLY = {'struct_init', 'struct_init_kwargs', 'struct_init_seed', 'out_indices'}
_NOT_ARCHITECTURE = {'weight_init', 'fix_init'}


def _side(size: Tuple[int, int]) -> Any:
    return size[0] if size[0] == size[1] else list(size)


def timm_architecture(model_name: str) -> str:
    """ The timm ViT entrypoint an export of `model_name` names; model_args set every size it differs in. """
    match = re.match(r'vit_(tiny|small|base|large)_', model_name)
    return f'vit_{match.group(1) if match else "tiny"}_patch16_224'


def plain_model_args(model: nn.Module, kwargs: Mapping[str, Any]) -> Dict[str, Any]:
    """ timm `VisionTransformer` arguments that rebuild `model`'s geometry: read from the model, plus the
    architecture arguments of `kwargs` (the caller's model_kwargs) that timm's class takes. """
    timm_params = set(init_params(VisionTransformer)) - _PLUGIN_ONLY - _NOT_ARCHITECTURE
    args = {k: v for k, v in kwargs.items() if k in timm_params and not k.endswith('drop_rate')}
    if args.get('pos_embed') == 'sincos':
        del args['pos_embed']  # timm's learned table has the same shape; the export stores the fixed values
    args.update(
        img_size=_side(model.patch_embed.img_size), patch_size=_side(model.patch_embed.patch_size),
        in_chans=model.patch_embed.proj.in_channels, num_classes=model.num_classes,
        global_pool=model.global_pool, embed_dim=model.embed_dim, depth=len(model.blocks),
        num_heads=model.blocks[0].attn.num_heads, class_token=model.cls_token is not None)
    return args


def loads_in_plain_timm(model: nn.Module, architecture: str, model_args: Mapping[str, Any]) -> bool:
    """ Whether timm's own `architecture` built with `model_args` loads `model`'s state dict strictly and computes
    the same outputs (to 1e-6) on a random batch. """
    was_training = model.training
    try:
        with torch.random.fork_rng(devices=[]):
            plain = timm.create_model(architecture, weight_init='skip', **model_args)
        plain.load_state_dict(model.state_dict(), strict=True)
        size = (model.patch_embed.proj.in_channels, *model.patch_embed.img_size)
        x = torch.randn(2, *size, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            same = torch.allclose(plain.eval()(x), model.eval()(x), rtol=0, atol=1e-6)
    except (TypeError, ValueError, RuntimeError, AssertionError) as e:
        _logger.info(f'timm {architecture} cannot take these weights: {e}')
        same = False
    finally:
        model.train(was_training)
    return same


def plain_timm_config(model: nn.Module, model_name: str, kwargs: Mapping[str, Any]
                      ) -> Optional[Tuple[str, Dict[str, Any]]]:
    """ (timm architecture, model_args) under which plain timm loads `model` with identical outputs, or None. """
    if not is_package_model(model_name) or not isinstance(model, VisionTransformer):
        return None  # timm's own models are written as they are
    architecture, args = timm_architecture(model_name), plain_model_args(model, kwargs)
    if loads_in_plain_timm(model, architecture, args):
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


def install_config_hook() -> None:
    """ Let timm's `local-dir:` and `hf-hub:` loads build the registered model an export names in its plugin fields.

    Both loaders parse config.json with `timm.models._hub._parse_model_cfg`; it is wrapped once. Exports without
    plugin fields, and every other model, are parsed exactly as before.
    """
    from timm.models import _hub
    parse = getattr(_hub, '_parse_model_cfg', None)
    if parse is None or getattr(parse, '_timm_structinit', False):
        return

    def parse_model_cfg(cfg, *args, **kwargs):
        return parse(_plugin_config(cfg), *args, **kwargs)

    parse_model_cfg._timm_structinit = True
    parse_model_cfg.__wrapped__ = parse
    _hub._parse_model_cfg = parse_model_cfg
