""" Where a model's weights come from, checked before any work: a `local-dir:` folder holds a readable config and
weights, and a Hub repo (an `hf-hub:` model, or the pretrained weights a timm model names) is in the local cache or on a
Hub that answers. huggingface_hub would otherwise retry for a minute before failing, after the data was read. """
import os
from typing import List, Optional
from urllib.parse import urlparse

import torch
from timm.models import is_model

from ..utils.command_line import error_line

__all__ = ['hub_offline', 'hub_unreachable', 'check_weights_source']


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
