""" Where the weights of an export come from: a seeded init, or a training checkpoint read with timm's loaders.

Everything kept from a training run is portable: file names instead of paths, no data or output folders, no
credentials, so a model card or config.json can be shared as it is.
"""
import argparse
import dataclasses
import logging
import math
import numbers
import os
import pathlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

import torch
from timm.models import load_state_dict
from timm.utils import load_checkpoint_metadata

from .errors import one_line

_logger = logging.getLogger(__name__)

# training arguments that may hold credentials: never written to a card or config
_SECRET_ARG_WORDS = ('token', 'secret', 'password', 'passwd', 'api_key', 'apikey', 'credential')
# training arguments naming local folders or files that say nothing about the weights: left out of exports
_LOCAL_ARGS = ('data_dir', 'data', 'output', 'resume', 'timm_train_script')
# what a timm training checkpoint may pickle besides tensors and builtins
_SAFE_GLOBALS = [argparse.Namespace, pathlib.PosixPath, pathlib.WindowsPath, pathlib.PurePosixPath,
                 pathlib.PureWindowsPath]


@dataclass
class Provenance:
    """ How the weights of an export came to be; rendered into the model card and config.json. """
    model_name: str
    seed: int
    model_kwargs: Dict[str, Any]
    init_record: Optional[Dict[str, Any]] = None
    init_seed_known: bool = True
    training: Optional[Dict[str, Any]] = None  # checkpoint file name, epoch, weights key, metric, portable args
    data_config: Optional[Dict[str, Any]] = None  # the training run's preprocessing, for save_for_hf
    label_names: Optional[List[str]] = None  # class names of the training data, in label order


def to_plain(value: Any) -> Any:
    """ A JSON-safe copy: tensors and tuples become lists, non-finite floats strings, other objects their repr. """
    if isinstance(value, torch.Tensor):
        return to_plain(value.detach().cpu().tolist())
    if isinstance(value, argparse.Namespace):
        value = vars(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, Mapping):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_plain(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        value = float(value)
        return value if math.isfinite(value) else str(value)
    if hasattr(value, 'tolist'):  # numpy arrays and scalars
        return to_plain(value.tolist())
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return repr(value)


def portable(value: Any) -> Any:
    """ `value` with every absolute path (also after 'local-dir:') cut to its last component. """
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [portable(v) for v in value]
    if isinstance(value, str):
        prefix, path = ('local-dir:', value[10:]) if value.startswith('local-dir:') else ('', value)
        if os.path.isabs(path) or (len(path) > 2 and path[1] == ':' and path[2] in '\\/'):
            return prefix + pathlib.PurePath(path.replace('\\', '/')).name
    return value


def portable_args(args: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    """ A training run's arguments as a card may show them: no credentials, no local folders, file names only. """
    if args is None:
        return None
    return {k: portable(v) for k, v in to_plain(args).items()
            if k not in _LOCAL_ARGS and not any(w in k.lower() for w in _SECRET_ARG_WORDS)}


def _checkpoint_meta(path: Path, use_ema: bool) -> Dict[str, Any]:
    """ The weights key and the metadata (arch, args, epoch, metric) of a torch checkpoint, tensors unread. """
    try:
        with torch.serialization.safe_globals(_SAFE_GLOBALS):
            ckpt = load_checkpoint_metadata(str(path))
    except Exception as e:
        raise ValueError(f'cannot read checkpoint {path} with torch.load(weights_only=True): {one_line(e)}') from None
    if not isinstance(ckpt, dict):
        raise ValueError(f'checkpoint {path} holds a {type(ckpt).__name__}, not a state dict or a checkpoint dict')
    keys = [k for k in ('state_dict', 'model') if isinstance(ckpt.get(k), dict)]
    ema_keys = [k for k in ('state_dict_ema', 'model_ema') if isinstance(ckpt.get(k), dict)]
    if use_ema and not ema_keys:
        raise ValueError(f'use_ema=True (--use-ema), but checkpoint {path} has no EMA weights; '
                         f'it has {sorted(k for k in ckpt if isinstance(k, str))[:12]}')
    if not keys and not ema_keys and not (ckpt and all(isinstance(v, torch.Tensor) for v in ckpt.values())):
        raise ValueError(
            f'checkpoint {path} has no state dict: expected a timm checkpoint dict with "state_dict" (or '
            f'"state_dict_ema" with --use-ema) or a plain state dict; it has keys {sorted(map(str, ckpt))[:12]}')
    key = ema_keys[0] if use_ema else (keys[0] if keys else None)
    if key is None:
        return {'weights': 'state dict'}
    args = ckpt.get('args')
    args = vars(args) if isinstance(args, argparse.Namespace) else args
    return {'weights': key, 'arch': ckpt.get('arch'), 'epoch': ckpt.get('epoch'), 'metric': ckpt.get('metric'),
            'args': dict(args) if isinstance(args, Mapping) else None}


def read_checkpoint(path: Path, use_ema: bool) -> Tuple[Dict[str, torch.Tensor], Dict[str, Any]]:
    """ The state dict (timm's `load_state_dict`) and metadata of a checkpoint file.

    Accepts a timm training checkpoint (a dict with 'state_dict', maybe 'state_dict_ema', 'args', 'epoch'), a dict
    with 'model' / 'model_ema', a plain state dict, or a safetensors file.
    """
    safetensors_file = path.suffix == '.safetensors'
    if safetensors_file and use_ema:
        raise ValueError(f'use_ema=True, but {path} is a plain safetensors state dict with no EMA weights')
    meta = {'weights': 'state dict'} if safetensors_file else _checkpoint_meta(path, use_ema)
    how = 'as safetensors' if safetensors_file else 'with torch.load(weights_only=True)'
    try:
        with torch.serialization.safe_globals(_SAFE_GLOBALS):
            state_dict = load_state_dict(str(path), use_ema=use_ema)
    except Exception as e:  # truncated, or not a checkpoint at all
        raise ValueError(f'cannot read checkpoint {path} {how}: {one_line(e)}') from None
    return state_dict, meta


def kwargs_from_training(args: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """ The architecture arguments a timm-style training run passed to create_model.

    Its model_kwargs, plus num_classes, global pool (`gp`) and input channels (`input_size[0]` or `in_chans`)
    when the run set them.
    """
    if not args:
        return {}
    model_kwargs = args.get('model_kwargs') or {}
    kwargs = dict(model_kwargs) if isinstance(model_kwargs, Mapping) else {}
    if args.get('num_classes') is not None:
        kwargs.setdefault('num_classes', args['num_classes'])
    if args.get('gp'):
        kwargs.setdefault('global_pool', args['gp'])
    input_size = args.get('input_size')
    in_chans = input_size[0] if isinstance(input_size, (list, tuple)) and input_size else args.get('in_chans')
    if in_chans is not None:
        kwargs.setdefault('in_chans', in_chans)
    return kwargs


def started_from(args: Optional[Mapping[str, Any]]) -> Optional[str]:
    """ The weights a training run loaded before its first step (Markdown), if it did not start from its init. """
    if not args:
        return None
    model = args.get('model')
    if args.get('initial_checkpoint'):  # timm loads it after the pretrained weights, so it wins
        return f'initial checkpoint `{os.path.basename(str(args["initial_checkpoint"]))}`'
    if args.get('pretrained') and isinstance(model, str):
        return f'`{portable(model)}` with pretrained=True'
    return None


def data_config_from_training(args: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    """ The preprocessing a training run asked for, so config.json describes the data the weights have seen. """
    if not args:
        return None
    keys = ('input_size', 'img_size', 'in_chans', 'mean', 'std', 'crop_pct', 'crop_mode', 'interpolation')
    config = {k: args[k] for k in keys if args.get(k) not in (None, '')}
    return config or None


def label_names_from_training(args: Optional[Mapping[str, Any]], num_classes: int) -> Optional[List[str]]:
    """ Class names of the training data in label order: recorded by the run, else read from its training split
    when that data is on this machine; None when unknown or when they do not match the classifier. """
    if not args:
        return None
    names = args.get('class_names') or args.get('label_names')
    if not names and args.get('dataset') is not None:
        from ..data import build_dataset, dataset_classes
        try:
            split = args.get('train_split') or 'train'
            names = dataset_classes(build_dataset(args['dataset'], args.get('data_dir'), split, '--train-split'))
        except Exception as e:  # the data is elsewhere, or gone: the export goes on without class names
            _logger.info(f'No class names for the export: {one_line(e)}')
            return None
    names = [str(n) for n in names] if isinstance(names, (list, tuple)) else None
    return names if names and len(names) == num_classes else None


def state_dict_mismatch(own: Mapping[str, torch.Tensor], loaded: Mapping[str, torch.Tensor]) -> str:
    """ '' when `loaded` fits a model whose state dict is `own`, else one line naming the keys that differ. """
    missing = sorted(set(own) - set(loaded))
    unexpected = sorted(set(loaded) - set(own))
    mismatched = sorted(k for k in set(own) & set(loaded)
                        if tuple(own[k].shape) != tuple(getattr(loaded[k], 'shape', ())))
    parts = []
    if missing:
        parts.append(f'{len(missing)} missing, e.g. {", ".join(missing[:3])}')
    if unexpected:
        parts.append(f'{len(unexpected)} unexpected, e.g. {", ".join(unexpected[:3])}')
    if mismatched:
        k = mismatched[0]
        parts.append(f'{len(mismatched)} of another shape, e.g. {k}: checkpoint '
                     f'{tuple(getattr(loaded[k], "shape", ()))} vs model {tuple(own[k].shape)}')
    return '; '.join(parts)


# Hub dataset ids of the torchvision datasets a run can name as torch/NAME
_HUB_DATASETS = {'cifar10': 'uoft-cs/cifar10', 'cifar100': 'uoft-cs/cifar100', 'mnist': 'ylecun/mnist',
                 'fashion_mnist': 'zalando-datasets/fashion_mnist', 'svhn': 'ufldl-stanford/svhn'}


def dataset_facts(args: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Optional[str]]]:
    """ The training data as a card names it: a display name, the kind for model-index, a Hub id if it has one. """
    if not args or args.get('dataset') is None:
        return None
    name = str(args['dataset'])
    prefix, _, rest = name.partition('/')
    if not name:  # an ImageFolder directory: its folder name only
        folder = os.path.basename(os.path.normpath(str(args.get('data_dir') or ''))) or 'unnamed'
        return {'name': f'image folder {folder}', 'type': 'imagefolder', 'hub_id': None}
    hub_id = rest if prefix.lower() == 'hfds' else _HUB_DATASETS.get((rest or prefix).lower())
    if prefix.lower() not in ('torch', 'hfds', 'svhn'):
        hub_id = None
    return {'name': name, 'type': hub_id or name, 'hub_id': hub_id}


def evaluation_facts(meta: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    """ The eval metric a checkpoint recorded, the split it was measured on, and whether it belongs to the exported
    weights (a run that evaluates an EMA ranks its checkpoints by the EMA's metric). """
    args, metric = meta.get('args') or {}, meta.get('metric')
    if not args or isinstance(metric, bool) or not isinstance(metric, numbers.Real):
        return None
    metric_of_ema = bool(args.get('model_ema')) and not args.get('model_ema_force_cpu')
    return {'metric': str(args.get('eval_metric') or 'top1'), 'value': float(metric),
            'split': str(args.get('val_split') or 'validation'), 'subset': args.get('val_subset') or None,
            'measured_on': 'the EMA weights' if metric_of_ema else 'the weights without EMA',
            'of_these_weights': metric_of_ema == ('ema' in str(meta.get('weights')))}
