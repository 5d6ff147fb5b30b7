""" Build, export and push: timm's loaders read checkpoints, timm's `save_for_hf` writes the folder, huggingface_hub's
`HfApi` uploads it (`upload`). Every argument is checked (`arguments`) before a model is built or a file is written.
"""
import argparse
import json
import logging
import numbers
import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple, Union

import huggingface_hub
import safetensors
import timm
import torch
from timm.models import get_model_args, is_model, load_state_dict, save_for_hf
from timm.utils import load_checkpoint_metadata
from torch import nn

from ..errors import HubError
from ..inits import rest_init_of
from ..models.registry import is_package_model
from ..utils.atomic import atomic_dir, write_refused
from ..utils.checkpoints import state_dict_mismatch
from ..utils.write_failures import is_write_failure, write_failure_reason
from ..version import __version__
from .arguments import (
    _check_build_args, _check_flags, _check_model_kwargs, _check_out_dir, _check_push_args, _check_target)
from .card import model_card
from .plain_timm import CONFIG_KEY, plain_timm_config, registered_exports
from .probe import check_weights_source
from .upload import _one_line, _upload

_logger = logging.getLogger(__name__)

PathLike = Union[str, os.PathLike]
# what an export folder holds, in the order a dry run lists it
EXPORT_FILES = ('config.json', 'model.safetensors', 'README.md')
# the model names timm loads an export by
EXPORT_PREFIXES = ('local-dir:', 'hf-hub:')
# training arguments a card lists as the recipe: none names a local folder or holds a credential
_RECIPE_KEYS = (
    'train_split', 'val_split', 'train_subset', 'val_subset', 'model', 'model_kwargs', 'num_classes', 'img_size',
    'input_size', 'epochs', 'batch_size', 'opt', 'lr', 'weight_decay', 'momentum', 'layer_decay', 'sched',
    'warmup_epochs', 'warmup_lr', 'min_lr', 'clip_grad', 'smoothing', 'aa', 'reprob', 'mixup', 'cutmix', 'drop',
    'drop_path', 'model_ema', 'model_ema_decay', 'amp', 'seed')


# Hub dataset ids of the torchvision datasets a run can name
_HUB_DATASETS = {'torch/cifar10': 'uoft-cs/cifar10', 'torch/cifar100': 'uoft-cs/cifar100',
                 'torch/svhn': 'ufldl-stanford/svhn', 'svhn': 'ufldl-stanford/svhn', 'torch/food101': 'ethz/food101'}


@dataclass
class PushResult:
    """ What `push_model` sent (or, with dry_run, would send). """
    repo_id: str
    revision: Optional[str]
    commit_message: str
    private: bool
    files: List[Tuple[str, int]]  # (name, size in bytes), in EXPORT_FILES order
    dry_run: bool
    url: Optional[str] = None  # the commit's URL, when the Hub returned one


def _read_checkpoint(path: Path, use_ema: bool) -> Tuple[Dict[str, torch.Tensor], Dict[str, Any]]:
    """ The state dict (timm's `load_state_dict`) and the metadata (timm's `load_checkpoint_metadata`) of a timm
    training checkpoint, a dict with 'model' / 'model_ema', a plain state dict or a safetensors file. """
    safetensors_file = path.suffix == '.safetensors'
    try:
        ckpt = {} if safetensors_file else load_checkpoint_metadata(str(path))
        state_dict = load_state_dict(str(path), use_ema=use_ema)
    except Exception as e:  # truncated, or not a checkpoint at all
        how = 'as safetensors' if safetensors_file else 'with torch.load(weights_only=True)'
        raise ValueError(f'cannot read checkpoint {path} {how}: {_one_line(e)}') from None
    keys = [k for k in ('state_dict_ema', 'model_ema', 'state_dict', 'model') if isinstance(ckpt, dict)
            and isinstance(ckpt.get(k), dict) and (use_ema or 'ema' not in k)] or ['state dict']
    if use_ema and 'ema' not in keys[0]:  # timm's loader would fall back to the weights without EMA
        raise ValueError(f'use_ema=True (--use-ema), but checkpoint {path} has no EMA weights')
    meta = ckpt if keys[0] != 'state dict' else {}  # a plain state dict: its keys are weights, not metadata
    args = vars(meta['args']) if isinstance(meta.get('args'), argparse.Namespace) else meta.get('args')
    return state_dict, dict(weights=keys[0], arch=meta.get('arch'), epoch=meta.get('epoch'),
                            metric=meta.get('metric'), args=dict(args) if isinstance(args, Mapping) else {})


def _portable(value: Any) -> Any:
    """ `value` with an absolute path (also after 'local-dir:') cut to its last component. """
    prefix = 'local-dir:' if isinstance(value, str) and value.startswith('local-dir:') else ''
    if isinstance(value, str) and os.path.isabs(value[len(prefix):]):
        return prefix + os.path.basename(os.path.normpath(value[len(prefix):]))
    return value


def _training_facts(path: Path, meta: Mapping[str, Any], kwargs: Mapping[str, Any]) -> Dict[str, Any]:
    """ What config.json and the card tell of a training checkpoint: names and recipe values, never local paths. """
    args, metric, dataset = meta['args'], meta['metric'], meta['args'].get('dataset')
    model, pretrained = args.get('model'), bool(args.get('pretrained')) and isinstance(args.get('model'), str)
    started_from = (f'initial checkpoint `{os.path.basename(str(args["initial_checkpoint"]))}`'
                    if args.get('initial_checkpoint')  # timm loads it after the pretrained weights, so it wins
                    else f'`{_portable(model)}` with pretrained=True' if pretrained else None)
    evaluation = None
    if args and isinstance(metric, numbers.Real) and not isinstance(metric, bool):
        # a run with an EMA ranks (and records) its checkpoints by the EMA's metric
        of_ema = bool(args.get('model_ema')) and not args.get('model_ema_force_cpu')
        evaluation = dict(metric=str(args.get('eval_metric') or 'top1'), value=float(metric),
                          split=str(args.get('val_split') or 'validation'), subset=args.get('val_subset') or None,
                          of_these_weights=of_ema == ('ema' in meta['weights']))
    if dataset == '':  # an ImageFolder directory: its folder name only
        dataset = {'name': f'image folder {os.path.basename(os.path.normpath(str(args.get("data_dir") or "-")))}',
                   'type': 'imagefolder', 'hub_id': None}
    elif dataset is not None:
        hub_id = dataset.split('/', 1)[1] if dataset.startswith('hfds/') else _HUB_DATASETS.get(dataset.lower())
        dataset = {'name': dataset, 'type': hub_id or dataset, 'hub_id': hub_id}
    recipe = {k: _portable(args[k]) for k in _RECIPE_KEYS if args.get(k) not in (None, '')
              and (k != 'model_ema_decay' or args.get('model_ema'))}  # a decay is part of the recipe with an EMA
    return json.loads(json.dumps(dict(
        checkpoint=path.name, weights=meta['weights'], epoch=meta['epoch'], eval=evaluation, dataset=dataset,
        started_from=started_from, init_seed_known='struct_init_seed' in kwargs and started_from is None,
        **({'init_seed_drawn': True} if _drawn_init_seed(args) is not None else {}),
        base_model=model.split(':', 1)[1].split('@')[0] if pretrained and model.startswith('hf-hub:') else None,
        recipe_file=os.path.basename(str(args['config'])) if args.get('config') else None, recipe=recipe), default=str))


def _drawn_init_seed(args: Mapping[str, Any]) -> Optional[int]:
    """ The seed a run's structured init drew from torch's generator (its model_kwargs fixed none), as the training
    command records it with the run's arguments; None where it did not (a fixed seed, or an older run). """
    seed = args.get('struct_init_seed')
    fixed = 'struct_init_seed' in (args.get('model_kwargs') or {})
    return int(seed) if isinstance(seed, numbers.Integral) and not isinstance(seed, bool) and not fixed else None


def _label_names(args: Mapping[str, Any], num_classes: int) -> Optional[List[str]]:
    """ Class names of the training data in label order: recorded by the run, else read from its training split when
    that data is on this machine; None when unknown or when they do not match the classifier. """
    names = args.get('class_names') or args.get('label_names')
    if not names and args.get('dataset') is not None:
        from ..data import build_dataset, dataset_classes
        try:
            names = dataset_classes(build_dataset(
                args['dataset'], args.get('data_dir') and str(args['data_dir']), args.get('train_split') or 'train',
                '--train-split'))
        except Exception as e:  # the data is elsewhere, or gone: the export goes on without class names
            _logger.info(f'No class names for the export: {_one_line(e)}')
    names = [str(n) for n in names] if isinstance(names, (list, tuple)) else []
    return names if len(names) == num_classes else None


def _build(model_name: str, seed: int, kwargs: Dict[str, Any], checkpoint: Optional[PathLike],
           use_ema: bool) -> Tuple[nn.Module, Dict[str, Any]]:
    """ The model, the plugin fields of its config.json (`own`), its training run's arguments, the caller's kwargs. """
    info = {'args': {}, 'model_kwargs': kwargs}
    if checkpoint is not None:
        path = Path(checkpoint).expanduser()
        state_dict, meta = _read_checkpoint(path, use_ema)
        if isinstance(meta['arch'], str) and is_model(meta['arch']) and meta['arch'] != model_name:
            raise ValueError(f'checkpoint {path} was trained as {meta["arch"]!r}, not {model_name!r}; '
                             f'name {meta["arch"]} as the MODEL')
        args = info['args'] = meta['args']
        # the architecture arguments the run passed to create_model are defaults under the caller's
        input_size = args.get('input_size') or [args.get('in_chans')]
        trained = dict(num_classes=args.get('num_classes'), global_pool=args.get('gp') or None, in_chans=input_size[0])
        trained = {**{k: v for k, v in trained.items() if v is not None}, **(args.get('model_kwargs') or {})}
        if _drawn_init_seed(args) is not None:  # the init training started from, built again
            trained['struct_init_seed'] = _drawn_init_seed(args)
        kwargs = _check_model_kwargs(model_name, {**trained, **kwargs})
    elif is_package_model(model_name):
        # the init's own generator gets the seed too, so the attention weights do not depend on timm's draws
        kwargs = {'struct_init_seed': int(seed), **kwargs}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        try:
            model = timm.create_model(model_name, **kwargs)
        except TypeError as e:
            raise ValueError(f'cannot build {model_name} with model_kwargs {kwargs}: {_one_line(e)}') from None
    own = info['own'] = dict(version=__version__, seed=int(seed), trained=None,
                             struct_init=getattr(model, 'struct_init_record', None), weight_init=rest_init_of(model))
    if checkpoint is not None:
        mismatch = state_dict_mismatch(model.state_dict(), state_dict)
        if mismatch:
            raise ValueError(f'checkpoint {path} does not fit {model_name} with these model_kwargs (weights: '
                             f'{mismatch}); pass the model_kwargs (--model-kwargs) the run was trained with')
        model.load_state_dict(state_dict, strict=True)
        own['trained'] = _training_facts(path, meta, kwargs)
        if own['struct_init'] and not own['trained']['init_seed_known']:
            # the rebuilt init is not the one training started from: only its method and hyperparameters hold
            own['struct_init'] = {k: own['struct_init'].get(k) for k in ('method', 'cfg')}
    return model, info


def build_model(model_name: str, seed: int = 0, model_kwargs: Optional[Mapping[str, Any]] = None,
                checkpoint: Optional[PathLike] = None, use_ema: bool = False) -> nn.Module:
    """ Build `model_name` as an export writes it: seeded init (see `export_model`), or the strictly loaded weights
    of a trained checkpoint, with the arguments its training run recorded as defaults under `model_kwargs`. A
    `local-dir:` or `hf-hub:` name is an export itself: loaded with its weights (`load_export`). """
    if isinstance(model_name, str) and model_name.startswith(EXPORT_PREFIXES):
        if checkpoint is not None or use_ema:
            raise ValueError(f'{model_name} brings its own weights: leave out checkpoint (--checkpoint) and use_ema '
                             f'(--use-ema), or name the registered model the checkpoint was trained as')
        return load_export(model_name, model_kwargs)
    kwargs = _check_build_args(model_name, seed, model_kwargs, checkpoint, use_ema)
    return _build(model_name, seed, kwargs, checkpoint, use_ema)[0]


def load_export(name: str, model_kwargs: Optional[Mapping[str, Any]] = None) -> nn.Module:
    """ The model of an export (`local-dir:DIR` or `hf-hub:ORG/NAME`) with its weights, built as the registered model
    its config names (`registered_exports`), or as the timm model of a plain config; its source is checked first. """
    if not isinstance(model_kwargs, (Mapping, type(None))) or not all(isinstance(k, str) for k in model_kwargs or {}):
        raise ValueError(f'model_kwargs must be a dict with string keys, got {model_kwargs!r}')
    check_weights_source(name, True, 'MODEL')
    try:
        with registered_exports():
            return timm.create_model(name, pretrained=True, **dict(model_kwargs or {}))
    except (TypeError, RuntimeError, ValueError) as e:  # arguments the model does not take; weights that do not fit
        raise ValueError(f'cannot load {name} with model_kwargs {dict(model_kwargs or {})}: {_one_line(e)}') \
            from None


def _write_export(model: nn.Module, folder: Path, model_name: str, info: Dict[str, Any], load_id: str) -> None:
    args, own = info['args'], dict(info['own'])
    model_config = {CONFIG_KEY: own, 'label_names': _label_names(args, model.num_classes) if args else None}
    plain = plain_timm_config(model, model_name)
    if plain is not None:
        own.update(architecture=model_name, model_args=get_model_args(model))
        model_config['pretrained_cfg'] = {'architecture': plain[0]}
        model._model_args = {}  # so that save_for_hf writes plain timm's model_args alone
    data_keys = ('input_size', 'img_size', 'in_chans', 'mean', 'std', 'crop_pct', 'crop_mode', 'interpolation')
    save_for_hf(model, str(folder), model_config=model_config, model_args=plain[1] if plain else None,
                safe_serialization=True, data_config={k: args[k] for k in data_keys if args.get(k) not in (None, '')})
    # safetensors writes its file owner-only: give it config.json's mode, so whoever reads the export can load it
    os.chmod(folder / 'model.safetensors', (folder / 'config.json').stat().st_mode & 0o777)
    config = json.loads((folder / 'config.json').read_text(encoding='utf-8'))
    card = model_card(model, config, model_name, info['model_kwargs'], load_id)
    (folder / 'README.md').write_text(str(card), encoding='utf-8')


def export_model(model_name: str, out_dir: PathLike, seed: int = 0, model_kwargs: Optional[Mapping[str, Any]] = None,
                 checkpoint: Optional[PathLike] = None, use_ema: bool = False, force: bool = False,
                 repo_id: Optional[str] = None) -> Path:
    """ Write `model_name` in timm's Hub layout (config.json, model.safetensors, README.md) to `out_dir`.

    Args:
        model_name: a registered model, e.g. 'vit_tiny_patch2_32_mimetic'.
        out_dir: the export folder; a non-empty one is replaced only with `force`, once the new export is complete.
        seed: seeds torch's global generator and `struct_init_seed`, so every weight is reproducible.
        model_kwargs: arguments passed to `timm.create_model`.
        checkpoint: trained weights (timm checkpoint, state dict or safetensors) to export instead of the init.
        use_ema: export the checkpoint's EMA weights.
        repo_id: the Hub repo the export is meant for; the model card then loads it from `hf-hub:repo_id`.

    Bad arguments raise ValueError (FileExistsError for a non-empty target) before anything is built.
    """
    target = _check_out_dir(out_dir)
    kwargs = _check_build_args(model_name, seed, model_kwargs, checkpoint, use_ema)
    if repo_id is not None:
        _check_push_args(repo_id)
    _check_target(target, force, checkpoint)
    model, info = _build(model_name, seed, kwargs, checkpoint, use_ema)
    load_id = f'hf-hub:{repo_id}' if repo_id else f'local-dir:{os.fspath(target)}'
    if info['own']['trained']:  # the card of trained weights is written to be shared: no absolute local path
        load_id = _portable(load_id)
    # checked again before the swap: the folder may have been filled while the export ran
    what = f'the export to {target}'
    with _refused_writes(what, target):  # the staging folder's own failures, and those of the swap
        with atomic_dir(target.resolve(), before_replace=lambda _: _check_target(target, force, checkpoint)) as staging:
            with _refused_writes(what, staging):  # said before the staging folder goes, as the write met it
                _write_export(model, staging, model_name, info, load_id)
    return target


@contextmanager
def _refused_writes(what: str, where: PathLike) -> Iterator[None]:
    """ A write the file system refuses (OSError, safetensors' SafetensorError, torch's RuntimeError) as one OSError
    naming `what` and the operating system's reason; the writes inside stage their files, so nothing is left. """
    try:
        yield
    except (OSError, RuntimeError, safetensors.SafetensorError) as e:
        if getattr(e, 'said', False) or not is_write_failure(e) or isinstance(e, (FileExistsError, NotADirectoryError)):
            raise  # said already; or a target filled or replaced meanwhile, refused by its own check
        reason = write_failure_reason(e, getattr(e, 'filename', None) or os.fspath(where))
        refused = write_refused(f'cannot write {what}: {reason}; nothing was written', e)
        refused.said = True
        raise refused from None


def list_export_files(folder: PathLike) -> List[Tuple[str, int]]:
    """ (name, size in bytes) of the export files in `folder`, in EXPORT_FILES order. """
    if not isinstance(folder, (str, os.PathLike)) or not Path(folder).is_dir():
        raise NotADirectoryError(f'folder={folder!r} is not a folder')
    return [(name, (Path(folder) / name).stat().st_size) for name in EXPORT_FILES if (Path(folder) / name).is_file()]


def push_model(model_name: str, repo_id: str, seed: int = 0, model_kwargs: Optional[Mapping[str, Any]] = None,
               checkpoint: Optional[PathLike] = None, use_ema: bool = False, private: bool = False,
               revision: Optional[str] = None, commit_message: Optional[str] = None, dry_run: bool = False,
               token: Optional[str] = None) -> PushResult:
    """ Export `model_name` (see `export_model`) to a temporary folder and upload it to the Hub repo `repo_id`.

    The repo is created if missing (`private` applies only then), a missing `revision` branch is created from
    main, and the folder is uploaded as one commit. The token comes from `token`, else from huggingface_hub
    (`HF_TOKEN`, or the one `hf auth login` saved); it is never printed or written. With `dry_run`, the export is
    built and listed and nothing is sent (no token needed). Hub failures raise HubError with a one-line message.
    """
    kwargs = _check_build_args(model_name, seed, model_kwargs, checkpoint, use_ema)
    _check_push_args(repo_id, revision, commit_message)
    _check_flags(private=private, dry_run=dry_run)
    if token is not None and (not isinstance(token, str) or not token.strip()):
        raise ValueError('token must be a non-empty string or None (then HF_TOKEN or the saved login is used)')
    token = token or (None if dry_run else huggingface_hub.get_token())
    if not dry_run and not token:  # before the export, so a missing login costs nothing
        raise HubError('no Hugging Face token found: set HF_TOKEN or run `hf auth login`, then push again')
    model, info = _build(model_name, seed, kwargs, checkpoint, use_ema)
    init = f'{(info["own"]["struct_init"] or {}).get("method") or "timm"} init'
    commit_message = commit_message or f'Add {model_name} ' + (
        f'trained from {init}' if info['own']['trained'] else f'({init}, seed {seed})')
    what = f"push's staging folder in {tempfile.gettempdir()} (set TMPDIR to stage elsewhere)"
    with _refused_writes(what, tempfile.gettempdir()):
        staged = tempfile.TemporaryDirectory(prefix='timm_structinit_push_')
    try:
        with _refused_writes(what, staged.name):
            _write_export(model, Path(staged.name), model_name, info,
                          f'hf-hub:{repo_id}' + (f'@{revision}' if revision else ''))
    except BaseException:
        staged.cleanup()
        raise
    with staged as folder:
        result = PushResult(repo_id, revision, commit_message, bool(private), list_export_files(folder), bool(dry_run))
        if not dry_run:
            result.url = _upload(Path(folder), repo_id, token, bool(private), revision, commit_message)
    return result
