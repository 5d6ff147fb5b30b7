""" Build, export and push: timm's loaders read checkpoints, timm's `save_for_hf` writes the folder, huggingface_hub's
`HfApi` uploads it. Every argument is checked before a model is built or a file is written.
"""
import argparse
import difflib
import inspect
import json
import logging
import numbers
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import huggingface_hub
import safetensors
import timm
import torch
from timm.models import get_model_args, is_model, load_state_dict, model_entrypoint, save_for_hf
from timm.utils import load_checkpoint_metadata
from torch import nn

from .. import __version__
from ..atomic import atomic_dir, write_refused
from ..checkpoints import state_dict_mismatch
from ..inits import rest_init_of
from ..model_build import check_model_args
from ..seeds import check_seed
from .card import model_card
from .plain_timm import CONFIG_KEY, plain_timm_config

_logger = logging.getLogger(__name__)

PathLike = Union[str, os.PathLike]
# what an export folder holds, in the order a dry run lists it
EXPORT_FILES = ('config.json', 'model.safetensors', 'README.md')
# training arguments a card lists as the recipe: none names a local folder or holds a credential
_RECIPE_KEYS = (
    'train_split', 'val_split', 'train_subset', 'val_subset', 'model', 'model_kwargs', 'num_classes', 'img_size',
    'input_size', 'epochs', 'batch_size', 'opt', 'lr', 'weight_decay', 'momentum', 'layer_decay', 'sched',
    'warmup_epochs', 'warmup_lr', 'min_lr', 'clip_grad', 'smoothing', 'aa', 'reprob', 'mixup', 'cutmix', 'drop',
    'drop_path', 'model_ema', 'model_ema_decay', 'amp', 'seed')
# Hub dataset ids of the torchvision datasets a run can name
_HUB_DATASETS = {'torch/cifar10': 'uoft-cs/cifar10', 'torch/cifar100': 'uoft-cs/cifar100',
                 'torch/svhn': 'ufldl-stanford/svhn', 'svhn': 'ufldl-stanford/svhn', 'torch/food101': 'ethz/food101'}


class HubError(RuntimeError):
    """ A Hub request failed (network, authentication, permissions): the message is one line and holds no token. """


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


def _one_line(error: Any) -> str:
    return next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)


def _is_package_model(model_name: str) -> bool:
    return model_entrypoint(model_name).__module__.startswith('timm_structinit.')


def _model_class(model_name: str) -> type:
    """ The class a package entrypoint builds (the one class its module defines for it). """
    from ..mlp_mixer import StructMlpMixer
    from ..swin_transformer import StructSwinTransformer
    from ..vision_transformer import StructVisionTransformer
    classes = {cls.__module__: cls for cls in (StructVisionTransformer, StructSwinTransformer, StructMlpMixer)}
    return classes[model_entrypoint(model_name).__module__]


def _check_model_kwargs(model_name: str, model_kwargs: Any) -> Dict[str, Any]:
    if not isinstance(model_kwargs, (Mapping, type(None))) or not all(isinstance(k, str) for k in model_kwargs or {}):
        raise ValueError(f'model_kwargs must be a dict with string keys, got {model_kwargs!r}')
    kwargs = dict(model_kwargs or {})
    for key in kwargs.keys() & {'pretrained', 'pretrained_cfg', 'checkpoint_path', 'features_only'}:
        raise ValueError(f'model_kwargs may not set {key!r}: export builds the model itself (trained weights come '
                         f'from checkpoint= / --checkpoint) and writes the registered pretrained_cfg')
    if _is_package_model(model_name):  # timm's own models check their arguments themselves
        model_cls = _model_class(model_name)
        valid = sorted({p for cls in model_cls.__mro__ if '__init__' in vars(cls) and cls is not nn.Module
                        for p in inspect.signature(cls.__init__).parameters} - {'self', 'args', 'kwargs'}
                       | {'out_indices'})
        unknown = sorted(set(kwargs) - set(valid))
        if unknown:
            close = sorted({m for k in unknown for m in difflib.get_close_matches(k, valid, n=3)})
            raise ValueError(f'unknown model_kwargs {unknown} for {model_name}' + (
                f' (did you mean {", ".join(close)}?)' if close else '') + f'; valid: {", ".join(valid)}')
    try:
        json.dumps(kwargs)
    except (TypeError, ValueError):
        raise ValueError(f'model_kwargs {kwargs} cannot be written to config.json; use numbers, strings, booleans, '
                         f'None, lists or dicts of those') from None
    return kwargs


def _check_build_args(model_name: Any, seed: Any, model_kwargs: Any, checkpoint: Any, use_ema: Any) -> Dict[str, Any]:
    """ The checked model_kwargs; ValueError (FileNotFoundError for a missing checkpoint) naming the bad value. """
    if not isinstance(model_name, str) or not is_model(model_name) or any(c in model_name for c in ':/.'):
        ours = [m for m in timm.list_models() if _is_package_model(m)]
        close = list(dict.fromkeys(difflib.get_close_matches(str(model_name), ours + timm.list_models(), cutoff=0.6)))
        raise ValueError(f'unknown model {model_name!r}; ' + (f'close names: {", ".join(close)}' if close else
                         f'models of this package: {", ".join(ours)}') + ' (a registered name, without a Hub prefix '
                         'or a pretrained tag)')
    check_seed(seed)
    if use_ema not in (True, False) or (use_ema and checkpoint is None):
        raise ValueError(f'use_ema={use_ema!r} must be True (with a checkpoint holding EMA weights) or False')
    if checkpoint is not None and not Path(checkpoint).expanduser().is_file():
        raise FileNotFoundError(f'checkpoint {os.fspath(checkpoint)} does not exist or is not a file')
    kwargs = _check_model_kwargs(model_name, model_kwargs)
    if checkpoint is None:  # a checkpoint's run supplies more arguments: checked once they are read
        check_model_args(model_name, kwargs)
    return kwargs


def _check_push_args(repo_id: Any, revision: Any = None, commit_message: Any = None) -> None:
    if not isinstance(repo_id, str) or repo_id.count('/') != 1:
        raise ValueError(f'repo id {repo_id!r} must have the form ORG/NAME (a user or organization, then a name)')
    try:
        huggingface_hub.utils.validate_repo_id(repo_id)
    except ValueError as e:  # HFValidationError
        raise ValueError(f'repo id {repo_id!r} is not valid: {_one_line(e)}') from None
    for name, value in (('revision', revision), ('commit_message', commit_message)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ValueError(f'{name}={value!r} must be a non-empty string or None')
    if revision is not None and not _is_branch_name(revision):
        raise ValueError(f'revision={revision!r} is not a valid branch name (git check-ref-format: no spaces, "..", '
                         f'"@{{", ~^:?*[\\, no leading "-" or "/", no trailing "/", "." or ".lock")')


def _check_flags(**flags: Any) -> None:
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise ValueError(f'{name}={value!r} must be True or False')


def _is_branch_name(name: str) -> bool:
    """ git's rules for a ref name (check-ref-format), which the Hub applies to a revision it creates. """
    bad = re.search(r'[\s~^:?*\[\\\x00-\x1f\x7f]|\.\.|@\{|//|/\.|^\.', name)
    return not (bad or name.startswith(('-', '/')) or name.endswith(('/', '.', '.lock')) or name == '@')


def _check_out_dir(out_dir: Any) -> Path:
    if not isinstance(out_dir, (str, os.PathLike)) or not os.fspath(out_dir):
        raise ValueError(f'out_dir={out_dir!r} must be the path of a folder to write the export to')
    return Path(out_dir).expanduser()


def _check_target(target: Path, force: Any, checkpoint: Optional[PathLike] = None) -> None:
    _check_flags(force=force)
    if checkpoint is not None and target.exists():
        # replacing the target would delete the weights being exported (a run folder exported into itself)
        source, folder = Path(checkpoint).resolve(), target.resolve()
        if source == folder or folder in source.parents:
            raise ValueError(f'export target {target} holds the checkpoint it exports ({checkpoint}); replacing it '
                             f'would delete it: export to another folder')
    if target.exists() and not target.is_dir():
        raise NotADirectoryError(f'export target {target} exists and is not a directory')
    # the export is staged next to the target: its nearest existing parent must be a writable folder
    parent = next(p for p in target.absolute().parents if p.exists())
    if not parent.is_dir():
        raise NotADirectoryError(f'export target {target}: {parent} is a file, not a directory')
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PermissionError(f'export target {target}: no permission to write in {parent}')
    try:  # the staging folder goes there: create one now rather than fail after the build
        os.rmdir(tempfile.mkdtemp(prefix=f'.{target.name}.', suffix='.probe', dir=parent))
    except OSError as e:
        raise PermissionError(f'export target {target}: cannot create a folder in {parent} '
                              f'({e.strerror or _one_line(e)})') from None
    if target.is_dir() and any(target.iterdir()):
        if not force:
            raise FileExistsError(f'export target {target} is not empty; choose a new directory or pass force=True '
                                  f'(--force) to replace it')
        # replacing means deleting: never the folder a user works in (a mistyped `.`), its parents or home
        resolved, cwd = target.resolve(), Path.cwd().resolve()
        if resolved in (Path.home().resolve(), Path(resolved.anchor), cwd, *cwd.parents):
            raise ValueError(f'refusing to replace {target}: it is the current directory, one of its parents or the '
                             f'home directory; export to a dedicated folder')


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
        base_model=model.split(':', 1)[1].split('@')[0] if pretrained and model.startswith('hf-hub:') else None,
        recipe_file=os.path.basename(str(args['config'])) if args.get('config') else None, recipe=recipe), default=str))


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
                             f'export it as {meta["arch"]}')
        args = info['args'] = meta['args']
        # the architecture arguments the run passed to create_model are defaults under the caller's
        input_size = args.get('input_size') or [args.get('in_chans')]
        trained = dict(num_classes=args.get('num_classes'), global_pool=args.get('gp') or None, in_chans=input_size[0])
        trained = {**{k: v for k, v in trained.items() if v is not None}, **(args.get('model_kwargs') or {})}
        kwargs = _check_model_kwargs(model_name, {**trained, **kwargs})
    elif _is_package_model(model_name):
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
    of a trained checkpoint, with the arguments its training run recorded as defaults under `model_kwargs`. """
    kwargs = _check_build_args(model_name, seed, model_kwargs, checkpoint, use_ema)
    return _build(model_name, seed, kwargs, checkpoint, use_ema)[0]


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
    with atomic_dir(target.resolve(), before_replace=lambda _: _check_target(target, force, checkpoint)) as staging:
        try:
            _write_export(model, staging, model_name, info, load_id)
        except (OSError, safetensors.SafetensorError) as e:
            reason = getattr(e, 'strerror', None) or _one_line(e)
            raise write_refused(f'cannot write the export to {target}: {reason}; nothing was written', e) from None
    return target


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
    with tempfile.TemporaryDirectory(prefix='timm_structinit_push_') as folder:
        _write_export(model, Path(folder), model_name, info, f'hf-hub:{repo_id}' + (f'@{revision}' if revision else ''))
        result = PushResult(repo_id, revision, commit_message, bool(private), list_export_files(folder), bool(dry_run))
        if not dry_run:
            result.url = _upload(Path(folder), repo_id, token, bool(private), revision, commit_message)
    return result


def _upload(folder: Path, repo_id: str, token: str, private: bool, revision: Optional[str], message: str) -> str:
    """ The export folder as one commit, with huggingface_hub's `create_repo`, `create_branch` and `upload_folder`
    (timm's `push_to_hf_hub` makes these calls too, but writes timm's generic card where the repo has none, and
    creates no branch); the commit's URL. """
    api = huggingface_hub.HfApi(token=token, library_name='timm_structinit', library_version=__version__)
    try:
        repo_url = api.create_repo(repo_id, repo_type='model', private=private, exist_ok=True)
        repo_id = getattr(repo_url, 'repo_id', None) or repo_id  # as the Hub spells it
        if revision not in (None, 'main') and not revision.startswith('refs/'):
            api.create_branch(repo_id, branch=revision, repo_type='model', exist_ok=True)
        info = api.upload_folder(
            repo_id=repo_id, folder_path=str(folder), repo_type='model', revision=revision, commit_message=message)
    except Exception as e:  # network, authentication, permissions, a file that could not be read: one line
        raise HubError(_explain_hub_error(e, repo_id, revision).replace(token, '***')) from None
    return getattr(info, 'commit_url', None) or str(repo_url)


def _explain_hub_error(error: Exception, repo_id: str, revision: Optional[str]) -> str:
    """ What went wrong with a push to `repo_id`, and what to check. """
    from huggingface_hub import errors
    status = getattr(getattr(error, 'response', None), 'status_code', None)
    detail, kind = _one_line(getattr(error, 'server_message', None) or error), type(error).__name__
    if isinstance(error, errors.RevisionNotFoundError):
        return f'revision {revision!r} of {repo_id} not found: {detail}'
    if isinstance(error, errors.RepositoryNotFoundError):
        return f'repository {repo_id} not found or not accessible with this token: {detail}'
    if status in (401, 403):
        return (f'not authorized to push to {repo_id} (HTTP {status}): check that the token (HF_TOKEN or '
                f'`hf auth login`) is valid and has write access to {repo_id.split("/")[0]}')
    if isinstance(error, errors.OfflineModeIsEnabled):
        return 'the Hugging Face Hub is unreachable in offline mode (HF_HUB_OFFLINE is set)'
    if isinstance(error, errors.HfHubHTTPError):
        return f'the Hub refused the upload to {repo_id} (HTTP {status}): {detail}'
    # the HTTP clients' transport errors are not builtin ConnectionErrors
    if isinstance(error, (ConnectionError, TimeoutError)) or type(error).__module__.split('.')[0] in (
            'httpx2', 'httpx', 'requests', 'urllib3'):
        return f'cannot reach the Hugging Face Hub ({kind}: {detail})'
    return f'upload to {repo_id} failed ({kind}: {detail})'
