""" A model's name and arguments, checked before any work: the arguments its class takes (unknown ones named, with close
matches), a dry build on the meta device that runs every constructor check and the init's own (nothing allocated,
nothing computed), and where pretrained weights would come from.

The training entry point and `export` / `push` / `show` call `check_model_args` first, so that a mistyped argument,
an impossible geometry or an unreachable Hub ends in one line before data is read or weights are computed.
"""
import difflib
import inspect
import os
import warnings
from typing import Any, Dict, List, Mapping, Optional, Union
from urllib.parse import urlparse

import timm
import torch
from timm.models import is_model, model_entrypoint
from torch import nn

from .command_line import error_line
from .pos_embed import check_sincos_dim

__all__ = ['is_package_model', 'list_models', 'model_class', 'valid_model_args', 'check_model_args',
           'check_weights_source', 'hub_offline', 'hub_unreachable', 'check_sizes', 'check_patch_fits', 'check_vit_args']


def _as_sizes(value: Any) -> List[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def check_sizes(model: str, minimum: int = 1, **sizes: Any) -> None:
    """ Each of `sizes` (a name and an int, or a tuple of ints) is an integer >= `minimum`; ValueError naming it. """
    for name, value in sizes.items():
        for v in _as_sizes(value):
            if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
                raise ValueError(f'{name}={value!r} is not valid for {model}; valid: integers >= {minimum}')


def check_patch_fits(model: str, img_size: Any, patch_size: Any, padded: Optional[bool] = None) -> None:
    """ The patch size divides the image size (timm would silently drop the border pixels otherwise); `padded` is
    the model's dynamic_img_pad (None: the model has no such option). """
    sides, patches = _as_sizes(img_size), _as_sizes(patch_size)
    sides, patches = sides * (2 // len(sides)), patches * (2 // len(patches))
    if padded or all(s % p == 0 for s, p in zip(sides, patches)):
        return
    fits = [p for p in range(1, min(sides) + 1) if all(s % p == 0 for s in sides)]
    pad = ' (or dynamic_img_pad=True to pad the image)' if padded is not None else ''
    raise ValueError(f'patch_size={patch_size!r} does not divide img_size={img_size!r} for {model}: the pixels past '
                     f'the last whole patch would be dropped; valid patch sizes here: {fits}{pad}')


def check_vit_args(pos_embed: str, struct_init: Optional[str], kwargs: Mapping[str, Any]) -> None:
    """ The arguments of a `StructVisionTransformer` (its own, and timm's `VisionTransformer` ones in `kwargs`) can
    build a model: ValueError naming the first that cannot, before timm builds anything. """
    embed_dim, num_heads = kwargs.get('embed_dim', 768), kwargs.get('num_heads', 12)
    name = 'StructVisionTransformer'
    check_sizes(name, embed_dim=embed_dim, num_heads=num_heads, in_chans=kwargs.get('in_chans', 3),
                img_size=kwargs.get('img_size', 224), patch_size=kwargs.get('patch_size', 16))
    check_sizes(name, 0, depth=kwargs.get('depth', 12), num_classes=kwargs.get('num_classes', 1000))
    if struct_init is not None and kwargs.get('depth', 12) == 0:
        raise ValueError(f'depth=0 leaves no attention block for struct_init={struct_init!r} to write; valid: '
                         f'depth >= 1')
    check_patch_fits(name, kwargs.get('img_size', 224), kwargs.get('patch_size', 16),
                     padded=kwargs.get('dynamic_img_pad', False))
    if embed_dim % num_heads:
        raise ValueError(
            f'embed_dim={embed_dim} is not divisible by num_heads={num_heads}; '
            f'valid num_heads divide embed_dim (e.g. {[h for h in (1, 2, 3, 4, 6, 8, 12, 16) if embed_dim % h == 0]})')
    if pos_embed not in ('learn', 'none', '', 'sincos'):
        raise ValueError(f"pos_embed={pos_embed!r} is not valid; choose 'learn', 'sincos' or 'none'")
    if kwargs.get('global_pool', 'token') == 'token' and not kwargs.get('class_token', True):
        raise ValueError("global_pool='token' needs a class token; use global_pool='avg' with class_token=False")
    if pos_embed == 'sincos':
        check_sincos_dim(embed_dim)


def is_package_model(model_name: str) -> bool:
    return model_entrypoint(model_name).__module__.startswith('timm_structinit.')


def list_models(filter: Union[str, List[str]] = '', **kwargs: Any) -> List[str]:
    """ The registered models of this package, in timm's order: `timm.list_models(filter, **kwargs)` (timm's wildcards and
    options) without timm's own. timm lists them under its module names, so that
    `timm.list_models(module='vision_transformer')` holds both. """
    return [name for name in timm.list_models(filter, **kwargs) if is_package_model(name.split('.')[0])]


def model_class(model_name: str) -> type:
    """ The class a registered name builds, read from a default instance built on the meta device. """
    with torch.device('meta'), warnings.catch_warnings():
        warnings.simplefilter('ignore')
        return type(timm.create_model(model_name))


def valid_model_args(cls: type) -> List[str]:
    """ The keyword arguments the classes of `cls`'s MRO take (timm's entrypoints pass them through). """
    names = {p for c in cls.__mro__ if '__init__' in vars(c) and c is not nn.Module
             for p in inspect.signature(c.__init__).parameters}
    return sorted(names - {'self', 'args', 'kwargs'} | {'out_indices'})


def _unknown_args(model_name: str, kwargs: Mapping[str, Any]) -> Optional[str]:
    try:
        cls = model_class(model_name)
    except Exception:  # the defaults themselves do not build (not ours to report here)
        return None
    parameters = inspect.signature(cls.__init__).parameters.values()
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    if takes_any and not is_package_model(model_name):
        return None  # a timm class that passes any name on: its layers say what they do not take
    valid = valid_model_args(cls)
    unknown = sorted(set(kwargs) - set(valid))
    if not unknown:
        return None
    close = sorted({m for k in unknown for m in difflib.get_close_matches(k, valid, n=3)})
    return (f'unknown model argument(s) {unknown} for {model_name}' + (
        f' (did you mean {", ".join(close)}?)' if close else '') + f'; valid: {", ".join(valid)}')


def _not_booleans(model_name: str, kwargs: Mapping[str, Any]) -> Optional[str]:
    """ The arguments whose default in the model's classes is True or False but whose value is not a bool: a
    string such as 'no' or 'False' would be taken as true. """
    try:
        cls = model_class(model_name)
    except Exception:
        return None
    flags = {name for c in cls.__mro__ if '__init__' in vars(c) and c is not nn.Module
             for name, p in inspect.signature(c.__init__).parameters.items() if isinstance(p.default, bool)}
    bad = [f'{k}={kwargs[k]!r}' for k in sorted(flags & set(kwargs)) if not isinstance(kwargs[k], bool)]
    return (f'{", ".join(bad)} for {model_name}: must be True or False (a string is taken as true, "no" included)'
            if bad else None)


def check_model_args(model_name: str, kwargs: Mapping[str, Any]) -> None:
    """ Build `model_name` with `kwargs` on the meta device: the constructor's checks and the structured init's
    (which writes nothing there) run, nothing is allocated. ValueError with one line naming what is wrong. """
    if not is_model(model_name):
        return  # hub and local-dir models: `check_weights_source`
    unknown = _unknown_args(model_name, kwargs) or _not_booleans(model_name, kwargs)
    if unknown:
        raise ValueError(unknown)
    try:
        with torch.device('meta'), warnings.catch_warnings():
            warnings.simplefilter('ignore')
            timm.create_model(model_name, pretrained=False, **kwargs)
    except Exception as e:  # any constructor's complaint (ZeroDivisionError, AssertionError, ...), as one line
        detail = ' '.join(str(e).split()) or type(e).__name__
        kind = '' if isinstance(e, ValueError) else f'{type(e).__name__}: '
        raise ValueError(f'cannot build {model_name} with {dict(kwargs)}: {kind}{detail}') from None


def hub_offline() -> bool:
    """ huggingface_hub's offline mode: its `HF_HUB_OFFLINE` as read when it was imported, or as set since.
    (`constants.HF_HUB_OFFLINE` is what its `is_offline_mode()`, new in 1.x, returns; 0.25 has the constant alone.) """
    from huggingface_hub import constants
    return constants.HF_HUB_OFFLINE or os.environ.get('HF_HUB_OFFLINE', '').upper() in constants.ENV_VARS_TRUE_VALUES


def hub_unreachable(timeout: float = 3.0) -> Optional[str]:
    """ Why the Hugging Face Hub cannot be reached from here, or None: one HEAD request to its endpoint (`HF_ENDPOINT`,
    a mirror included) through huggingface_hub's own HTTP session, so through the proxies it honours, and without its
    retries. Any HTTP answer, an error status included, means reachable: what the Hub then says is the download's. """
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session
    if hub_offline():
        return 'huggingface_hub is in offline mode (HF_HUB_OFFLINE is set)'
    host = urlparse(constants.ENDPOINT).hostname or constants.ENDPOINT
    try:
        get_session().head(constants.ENDPOINT, timeout=timeout)
    except Exception as e:  # the session's transport errors: DNS, refused, timeout, proxy
        return f'{host} is unreachable ({error_line(e)})'
    return None


def _pretrained_hub_id(model_name: str) -> Optional[str]:
    """ The Hub repo of the model's pretrained weights; None when they come from a file or URL; ValueError when
    the model has none (timm would warn and go on with its random init). """
    from timm.models import get_pretrained_cfg
    cfg = get_pretrained_cfg(model_name, allow_unregistered=True)
    if cfg is None or not (cfg.file or cfg.url or cfg.hf_hub_id or cfg.state_dict):
        raise ValueError(f'--pretrained {model_name}: this model has no pretrained weights (its pretrained_cfg names '
                         f'no file, URL or Hub repo); leave out --pretrained, or start from --initial-checkpoint')
    return None if cfg.file or (cfg.url and not cfg.hf_hub_id) else cfg.hf_hub_id


def _cached(repo_id: str, filenames: List[str]) -> bool:
    from huggingface_hub import try_to_load_from_cache
    return any(isinstance(try_to_load_from_cache(repo_id, f), str) for f in filenames)


def _check_local_files(folder: str, what: str) -> None:
    """ A local-dir: folder's config.json is a JSON object and its weights file, if any, is readable by its reader
    (safetensors' header, or torch.load's zip index): a truncated or foreign file is one line naming it, before any
    work, whatever the reader raises. """
    import json
    path = os.path.join(folder, 'config.json')
    try:
        with open(path, encoding='utf-8') as f:
            config = json.load(f)
        if not isinstance(config, dict):
            raise ValueError(f'a JSON {type(config).__name__}, not an object')
    except Exception as e:
        raise ValueError(f'{what}: {os.path.abspath(path)} is not a readable config ({type(e).__name__}: '
                         f'{error_line(e)[:200]})') from None
    weights = next((os.path.join(folder, n) for n in ('model.safetensors', 'pytorch_model.bin')
                    if os.path.exists(os.path.join(folder, n))), None)
    if weights is None:
        return
    try:
        if weights.endswith('.safetensors'):
            from safetensors import safe_open
            with safe_open(weights, framework='pt') as f:
                f.keys()
        else:
            torch.load(weights, map_location='meta', weights_only=True, mmap=True)
    except Exception as e:
        raise ValueError(f'{what}: {os.path.abspath(weights)} is not readable weights ({type(e).__name__}: '
                         f'{error_line(e)[:200]})') from None


def check_weights_source(model: str, pretrained: bool, flag: str = '--model') -> None:
    """ Where the model (a `local-dir:` / `hf-hub:` name) or its pretrained weights come from must be there: a local
    folder with config.json, or a Hub repo in the local cache or on a reachable Hub (huggingface_hub would otherwise
    retry for a minute before failing). ValueError naming the flag and the fix. """
    offline = hub_offline()
    if model.startswith('local-dir:'):
        folder = model.split(':', 1)[1]
        if not os.path.isfile(os.path.join(folder, 'config.json')):
            raise ValueError(f'{flag} {model!r}: no config.json in {os.path.abspath(folder)} (a local-dir: model is a '
                             f'folder written by `timm-structinit export` or timm\'s save_for_hf)')
        _check_local_files(folder, f'{flag} {model!r}')
        return
    if model.startswith('hf-hub:'):
        repo_id = model.split(':', 1)[1].split('@')[0]
        files, what = ['config.json'], f'{flag} {model!r}'
    elif pretrained and is_model(model.split('.')[0]):
        repo_id = _pretrained_hub_id(model)
        files, what = ['model.safetensors', 'pytorch_model.bin', 'open_clip_pytorch_model.bin'], \
            f'--pretrained {model}'
        if repo_id is None:
            return  # a file or URL timm downloads itself
    else:
        return
    if _cached(repo_id, files):
        return
    if offline:
        raise ValueError(f'{what}: Hub repo {repo_id} is not in the local cache and HF_HUB_OFFLINE is set; fetch it '
                         f'once with internet, or unset HF_HUB_OFFLINE')
    why = hub_unreachable()
    if why:
        raise ValueError(f'{what} needs the Hugging Face Hub (repo {repo_id}), and {why}; with a cached copy set '
                         f'HF_HUB_OFFLINE=1, or choose a model that needs no download')
