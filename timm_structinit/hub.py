""" Export and push initialized or trained models in timm's Hugging Face Hub layout, with a model card.

An export is a folder timm can load back:

* `config.json`: architecture, num_classes, num_features, model_args and pretrained_cfg, written by timm's own
  `save_for_hf`, plus a `timm_structinit` entry (package version, seed, init record, training summary),
* `model.safetensors`: the state dict, including the frozen sin-cos `pos_embed` of models that have one,
* `README.md`: a model card with the init method and every hyperparameter, the seed, the solver and its final
  objective for impulse inits, the training recipe for trained weights, citations, and the lines that load it.

After `import timm_structinit` (timm has no plugin discovery, so the import registers the architecture),
`timm.create_model('local-dir:DIR', pretrained=True)` or `timm.create_model('hf-hub:ORG/NAME', pretrained=True)`
rebuilds the model and loads bit-identical weights. model_args hold the registered architecture's overrides
(including `struct_init_seed`), so without `pretrained=True` timm builds the same architecture and redraws the same
structured attention init; every other weight then comes from torch's global generator, as for any timm model.

Uploads use huggingface_hub with the token it finds itself (`HF_TOKEN` or `hf auth login`); the token is never
printed or written. The folder is the same one `export_model` writes, so a dry run shows exactly what would be sent.
"""
import argparse
import dataclasses
import difflib
import glob
import importlib
import inspect
import json
import logging
import math
import numbers
import os
import pathlib
import re
import secrets
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import timm
import torch
from timm.models import clean_state_dict, is_model, model_entrypoint, save_for_hf, split_model_name_tag
from torch import nn

__all__ = [
    'HubError', 'PushResult', 'build_model', 'export_model', 'push_model', 'list_export_files', 'EXPORT_FILES',
    'state_dict_mismatch',
]

_logger = logging.getLogger(__name__)

PathLike = Union[str, os.PathLike]

_EXAMPLE_MODEL = 'vit_tiny_patch2_32_mimetic'

# what an export folder holds, in the order a dry run lists it
EXPORT_FILES = ('config.json', 'model.safetensors', 'README.md')

# keyword arguments that export sets itself or that would not build a plain classifier
_RESERVED_KWARGS = {
    'pretrained': 'export builds the model and writes its weights; load them with pretrained=True instead',
    'pretrained_cfg': 'export writes the registered pretrained_cfg',
    'pretrained_cfg_overlay': 'export writes the registered pretrained_cfg',
    'checkpoint_path': 'use checkpoint= (--checkpoint) for trained weights',
    'features_only': 'a feature extractor has no timm Hub layout; export the classifier',
    'cache_dir': 'not an architecture argument',
}
# argparse.Namespace keys of a training run that may hold credentials: never written to a card or config
_SECRET_ARG_WORDS = ('token', 'secret', 'password', 'passwd', 'api_key', 'apikey', 'credential')

_PAPERS = {
    'arXiv:2305.09828': (
        'Trockman & Kolter, "Mimetic Initialization of Self-Attention Layers", ICML 2023',
        '@inproceedings{trockman2023mimetic,\n'
        '  title={Mimetic Initialization of Self-Attention Layers},\n'
        '  author={Trockman, Asher and Kolter, J. Zico},\n'
        '  booktitle={International Conference on Machine Learning (ICML)},\n'
        '  year={2023},\n'
        '  eprint={2305.09828},\n'
        '  archivePrefix={arXiv}\n'
        '}'),
    'arXiv:2404.01139': (
        'Zheng, Li, Saratchandran & Lucey, "Structured Initialization for Attention in Vision Transformers", 2024',
        '@article{zheng2024structured,\n'
        '  title={Structured Initialization for Attention in Vision Transformers},\n'
        '  author={Zheng, Jianqiao and Li, Xueqian and Saratchandran, Hemanth and Lucey, Simon},\n'
        '  journal={arXiv preprint arXiv:2404.01139},\n'
        '  year={2024}\n'
        '}'),
    'arXiv:2505.19985': (
        'Zheng, Li, Saratchandran & Lucey, "Structured Initialization for Vision Transformers", 2025',
        '@article{zheng2025structured,\n'
        '  title={Structured Initialization for Vision Transformers},\n'
        '  author={Zheng, Jianqiao and Li, Xueqian and Saratchandran, Hemanth and Lucey, Simon},\n'
        '  journal={arXiv preprint arXiv:2505.19985},\n'
        '  year={2025}\n'
        '}'),
}
_METHOD_PAPERS = {
    'mimetic': ('arXiv:2305.09828',),
    'impulse': ('arXiv:2404.01139', 'arXiv:2505.19985'),
}

# the training arguments a card lists first, when the checkpoint has them; all others follow in a details block
_RECIPE_KEYS = (
    'dataset', 'train_split', 'val_split', 'train_subset', 'model', 'model_kwargs', 'num_classes', 'img_size',
    'input_size', 'epochs', 'batch_size', 'opt', 'lr', 'weight_decay', 'momentum', 'layer_decay', 'sched',
    'warmup_epochs', 'warmup_lr', 'min_lr', 'clip_grad', 'smoothing', 'aa', 'reprob', 'mixup', 'cutmix', 'drop',
    'drop_path', 'model_ema', 'model_ema_decay', 'amp', 'seed',
)


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


@dataclass
class _Provenance:
    """ How the weights of an export came to be; rendered into the model card and config.json. """
    model_name: str
    seed: int
    model_kwargs: Dict[str, Any]
    init_record: Optional[Dict[str, Any]] = None
    init_seed_known: bool = True
    training: Optional[Dict[str, Any]] = None  # checkpoint file name, epoch, weights key, metric, args
    data_config: Optional[Dict[str, Any]] = None  # the training run's preprocessing, for save_for_hf


# ---------------------------------------------------------------------------------------------------------------
# input checks: all run before a model is built or a file is written


def _package_models() -> List[str]:
    return [m for m in timm.list_models() if _is_package_model(m)]


def _is_package_model(model_name: str) -> bool:
    return model_entrypoint(model_name).__module__.startswith(__name__.split('.')[0] + '.')


def _check_model_name(model_name: Any) -> str:
    if not isinstance(model_name, str) or not model_name:
        raise ValueError(f'model name must be a non-empty string, got {model_name!r}')
    if ':' in model_name or '/' in model_name:
        raise ValueError(
            f'model {model_name!r} looks like a Hub repo or a path; export and push take a registered model name '
            f'such as {_EXAMPLE_MODEL!r}')
    if split_model_name_tag(model_name)[1]:
        raise ValueError(
            f'model {model_name!r} has a pretrained tag; export builds an architecture, name it without the tag '
            f'({split_model_name_tag(model_name)[0]!r})')
    if not is_model(model_name):
        pool = _package_models()
        close = difflib.get_close_matches(model_name, pool, n=5, cutoff=0.5)
        close += [m for m in difflib.get_close_matches(model_name, timm.list_models(), n=5, cutoff=0.6)
                  if m not in close]
        hint = f'close names: {", ".join(close[:5])}' if close else f'models of this package: {", ".join(pool)}'
        raise ValueError(f'unknown model {model_name!r}; {hint}')
    return model_name


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed < 2 ** 63:
        raise ValueError(f'seed={seed!r} must be an integer in [0, 2**63)')
    return int(seed)


def _valid_model_kwargs(model_name: str) -> Optional[List[str]]:
    """ Keyword arguments a package model accepts; None for other timm models (their class checks them). """
    if not _is_package_model(model_name):
        return None
    from .vision_transformer import StructVisionTransformer
    names = set()
    for cls in StructVisionTransformer.__mro__:
        init = cls.__dict__.get('__init__')
        if init is None or cls is nn.Module or cls is object:
            continue
        for p in inspect.signature(init).parameters.values():
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != 'self':
                names.add(p.name)
    return sorted(names | {'out_indices'})


def _check_model_kwargs(model_name: str, model_kwargs: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    if model_kwargs is None:
        return {}
    if not isinstance(model_kwargs, Mapping) or not all(isinstance(k, str) for k in model_kwargs):
        raise ValueError(f'model_kwargs must be a dict with string keys, got {model_kwargs!r}')
    kwargs = dict(model_kwargs)
    for key in kwargs:
        if key in _RESERVED_KWARGS:
            raise ValueError(f'model_kwargs may not set {key!r}: {_RESERVED_KWARGS[key]}')
    valid = _valid_model_kwargs(model_name)
    if valid is not None:
        unknown = sorted(set(kwargs) - set(valid))
        if unknown:
            close = {k: difflib.get_close_matches(k, valid, n=3) for k in unknown}
            hints = '; '.join(f'{k!r}: did you mean {", ".join(v)}?' for k, v in close.items() if v)
            raise ValueError(
                f'unknown model_kwargs {unknown} for {model_name}' + (f' ({hints})' if hints else '')
                + f'; valid: {", ".join(valid)}')
    for key, value in kwargs.items():
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            raise ValueError(
                f'model_kwargs[{key!r}]={value!r} cannot be written to config.json; use numbers, strings, '
                f'booleans, None, lists or dicts of those') from None
    return kwargs


def _check_build_args(
        model_name: Any,
        seed: Any,
        model_kwargs: Any,
        checkpoint: Optional[PathLike],
        use_ema: Any,
) -> None:
    _check_model_name(model_name)
    _check_seed(seed)
    _check_model_kwargs(model_name, model_kwargs)
    if not isinstance(use_ema, bool):
        raise ValueError(f'use_ema={use_ema!r} must be True or False')
    if use_ema and checkpoint is None:
        raise ValueError('use_ema=True (--use-ema) needs a checkpoint (--checkpoint) with EMA weights')
    if checkpoint is not None and not Path(checkpoint).expanduser().is_file():
        raise FileNotFoundError(f'checkpoint {os.fspath(checkpoint)} does not exist or is not a file')


def _check_repo_id(repo_id: Any) -> str:
    from huggingface_hub.utils import validate_repo_id
    if not isinstance(repo_id, str) or repo_id.count('/') != 1:
        raise ValueError(f'repo id {repo_id!r} must have the form ORG/NAME (a user or organization, then a name)')
    try:
        validate_repo_id(repo_id)
    except ValueError as e:  # HFValidationError
        raise ValueError(f'repo id {repo_id!r} is not valid: {_one_line(e)}') from None
    return repo_id


def _check_target(target: Path, force: bool) -> None:
    if target.exists() and not target.is_dir():
        raise NotADirectoryError(f'export target {target} exists and is not a directory')
    # the export is staged next to the target: its nearest existing parent must be a writable folder
    parent = next(p for p in target.absolute().parents if p.exists())
    if not parent.is_dir():
        raise NotADirectoryError(f'export target {target}: {parent} is a file, not a directory')
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PermissionError(f'export target {target}: no permission to write in {parent}')
    if target.is_dir() and any(target.iterdir()):
        if not force:
            raise FileExistsError(
                f'export target {target} is not empty; choose a new directory or pass force=True (--force) to '
                f'replace it')
        # replacing means deleting: never the folder a user works in (a mistyped `.`), its parents or home
        resolved = target.resolve()
        protected = {Path.home().resolve(), Path(resolved.anchor)}
        if resolved in protected or resolved == Path.cwd().resolve() or resolved in Path.cwd().resolve().parents:
            raise ValueError(
                f'refusing to replace {target}: it is the current directory, one of its parents or the home '
                f'directory; export to a dedicated folder')


# ---------------------------------------------------------------------------------------------------------------
# checkpoints


def _safe_torch_load(path: Path) -> Any:
    """ torch.load without running arbitrary pickled code; timm training checkpoints also pickle their args. """
    allowed = [argparse.Namespace, pathlib.PosixPath, pathlib.WindowsPath, pathlib.PurePosixPath,
               pathlib.PureWindowsPath]
    try:
        with torch.serialization.safe_globals(allowed):
            return torch.load(path, map_location='cpu', weights_only=True)
    except Exception as e:
        raise ValueError(
            f'cannot read checkpoint {path} with torch.load(weights_only=True): {_one_line(e)}') from None


def _read_checkpoint(path: Path, use_ema: bool) -> Tuple[Dict[str, torch.Tensor], Dict[str, Any]]:
    """ The state dict and metadata (arch, args, epoch, metric, weights key) of a checkpoint file.

    Accepts a timm training checkpoint (a dict with 'state_dict', maybe 'state_dict_ema', 'args', 'epoch'), a dict
    with 'model' / 'model_ema', a plain state dict, or a safetensors file.
    """
    if path.suffix == '.safetensors':
        import safetensors.torch
        if use_ema:
            raise ValueError(f'use_ema=True, but {path} is a plain safetensors state dict with no EMA weights')
        try:
            state_dict = safetensors.torch.load_file(str(path), device='cpu')
        except (safetensors.SafetensorError, OSError) as e:  # truncated, or not a safetensors file at all
            raise ValueError(f'cannot read checkpoint {path} as safetensors: {_one_line(e)}') from None
        return clean_state_dict(state_dict), {'weights': 'state dict'}
    ckpt = _safe_torch_load(path)
    if not isinstance(ckpt, dict):
        raise ValueError(f'checkpoint {path} holds a {type(ckpt).__name__}, not a state dict or a checkpoint dict')
    keys = [k for k in ('state_dict', 'model') if isinstance(ckpt.get(k), dict)]
    ema_keys = [k for k in ('state_dict_ema', 'model_ema') if isinstance(ckpt.get(k), dict)]
    if use_ema:
        if not ema_keys:
            raise ValueError(
                f'use_ema=True (--use-ema), but checkpoint {path} has no EMA weights; '
                f'it has {sorted(k for k in ckpt if isinstance(k, str))[:12]}')
        key = ema_keys[0]
    elif keys:
        key = keys[0]
    elif ckpt and all(isinstance(v, torch.Tensor) for v in ckpt.values()):
        key = None
    else:
        raise ValueError(
            f'checkpoint {path} has no state dict: expected a timm checkpoint dict with "state_dict" (or '
            f'"state_dict_ema" with --use-ema) or a plain state dict; it has keys {sorted(map(str, ckpt))[:12]}')
    state_dict = ckpt if key is None else ckpt[key]
    args = ckpt.get('args') if key is not None else None
    if isinstance(args, argparse.Namespace):
        args = vars(args)
    meta = {
        'weights': key or 'state dict',
        'arch': ckpt.get('arch') if key is not None else None,
        'epoch': ckpt.get('epoch') if key is not None else None,
        'metric': ckpt.get('metric') if key is not None else None,
        'args': dict(args) if isinstance(args, Mapping) else None,
    }
    return clean_state_dict(state_dict), meta


def _kwargs_from_training(args: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
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


def _started_from(args: Optional[Mapping[str, Any]]) -> Optional[str]:
    """ The weights a training run loaded before its first step (Markdown), if it did not start from its init. """
    if not args:
        return None
    model = args.get('model')
    if args.get('initial_checkpoint'):  # timm loads it after the pretrained weights, so it wins
        return f'initial checkpoint `{os.path.basename(str(args["initial_checkpoint"]))}`'
    if args.get('pretrained') and isinstance(model, str):
        return f'`{model}` with pretrained=True'
    return None


def _data_config_from_training(args: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    """ The preprocessing a training run asked for, so config.json describes the data the weights have seen. """
    if not args:
        return None
    keys = ('input_size', 'img_size', 'in_chans', 'mean', 'std', 'crop_pct', 'crop_mode', 'interpolation')
    config = {k: args[k] for k in keys if args.get(k) not in (None, '')}
    return config or None


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


def _load_weights(model: nn.Module, state_dict: Dict[str, torch.Tensor], path: Path, model_name: str) -> None:
    mismatch = state_dict_mismatch(model.state_dict(), state_dict)
    if mismatch:
        raise ValueError(
            f'checkpoint {path} does not fit {model_name} with these model_kwargs (weights: {mismatch}); '
            f'pass the model_kwargs (--model-kwargs) the run was trained with')
    model.load_state_dict(state_dict, strict=True)


# ---------------------------------------------------------------------------------------------------------------
# building


def build_model(
        model_name: str,
        seed: int = 0,
        model_kwargs: Optional[Mapping[str, Any]] = None,
        checkpoint: Optional[PathLike] = None,
        use_ema: bool = False,
) -> nn.Module:
    """ Build `model_name` as an export writes it: seeded init, or the weights of a trained checkpoint.

    Every weight is reproducible from `seed`: it seeds torch's global generator (timm's init of the non-attention
    weights) and, for this package's models, the structured init (`struct_init_seed`, unless model_kwargs set it).
    The global generator's state is restored afterwards. With `checkpoint`, the architecture arguments the training
    run recorded (its model_kwargs, num_classes, gp and input channels) are defaults under `model_kwargs`, and the
    weights are loaded strictly. The model's `struct_init_record` holds the init record.
    """
    model, _ = _build(model_name, seed, model_kwargs, checkpoint, use_ema)
    return model


def _build(
        model_name: str,
        seed: int,
        model_kwargs: Optional[Mapping[str, Any]],
        checkpoint: Optional[PathLike],
        use_ema: bool,
) -> Tuple[nn.Module, _Provenance]:
    _check_build_args(model_name, seed, model_kwargs, checkpoint, use_ema)
    seed = int(seed)
    user_kwargs = _check_model_kwargs(model_name, model_kwargs)
    state_dict, meta = None, None
    kwargs = dict(user_kwargs)
    if checkpoint is not None:
        path = Path(checkpoint).expanduser()
        state_dict, meta = _read_checkpoint(path, use_ema)
        arch = meta.get('arch')
        if isinstance(arch, str) and is_model(arch) and arch != model_name:
            raise ValueError(f'checkpoint {path} was trained as {arch!r}, not {model_name!r}; export it as {arch}')
        kwargs = _check_model_kwargs(model_name, {**_kwargs_from_training(meta.get('args')), **user_kwargs})
    package_model = _is_package_model(model_name)
    if package_model and checkpoint is None:
        # the init's own generator gets the seed too, so the attention weights do not depend on timm's draws
        kwargs.setdefault('struct_init_seed', seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            model = timm.create_model(model_name, **kwargs)
        except TypeError as e:
            raise ValueError(f'cannot build {model_name} with model_kwargs {kwargs}: {_one_line(e)}') from None
    record = getattr(model, 'struct_init_record', None)
    prov = _Provenance(model_name=model_name, seed=seed, model_kwargs=user_kwargs, init_record=_plain(record))
    if checkpoint is not None:
        _load_weights(model, state_dict, path, model_name)
        started_from = _started_from(meta.get('args'))
        # the init that started training is known only if the run fixed struct_init_seed and loaded nothing over it
        prov.init_seed_known = 'struct_init_seed' in kwargs and started_from is None
        prov.training = {
            'checkpoint': path.name,
            'weights': meta['weights'],
            'epoch': meta.get('epoch'),
            'metric': meta.get('metric'),
            'started_from': started_from,
            'args': _public_args(meta.get('args')),
        }
        prov.model_kwargs = kwargs
        prov.data_config = _data_config_from_training(meta.get('args'))
    return model, prov


# ---------------------------------------------------------------------------------------------------------------
# writing


def _plain(value: Any) -> Any:
    """ A JSON-safe copy: tensors and tuples become lists, non-finite floats strings, other objects their repr. """
    if isinstance(value, torch.Tensor):
        return _plain(value.detach().cpu().tolist())
    if isinstance(value, argparse.Namespace):
        value = vars(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        value = float(value)
        return value if math.isfinite(value) else str(value)
    if hasattr(value, 'tolist'):  # numpy arrays and scalars
        return _plain(value.tolist())
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return repr(value)


def _public_args(args: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    if args is None:
        return None
    return {k: v for k, v in _plain(args).items() if not any(w in k.lower() for w in _SECRET_ARG_WORDS)}


# staging folders of an export next to its target: `.<target>.<pid>-<hex>.tmp` (the new export while it is written)
# and `.<target>.<pid>-<hex>.old` (the replaced one until it is deleted); the pid is left out by older versions
_STAGING_RE = r'\.{name}\.(?:(?P<pid>\d+)-)?[0-9a-f]{{8}}\.(?:tmp|old)'


def _remove_stale_staging(target: Path) -> None:
    """ Delete the staging folders a killed export left next to `target`; those of a running export stay. """
    pattern = re.compile(_STAGING_RE.format(name=re.escape(target.name)))
    for path in target.parent.glob(f'.{glob.escape(target.name)}.*'):
        match = pattern.fullmatch(path.name)
        if match and path.is_dir() and not _process_alive(match.group('pid')):
            _logger.info(f'Removing {path}, left by an interrupted export')
            shutil.rmtree(path, ignore_errors=True)


def _process_alive(pid: Optional[str]) -> bool:
    if pid is None or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # someone else's process (or a pid this system cannot hold): leave its folder alone
    return True


@contextmanager
def _staging_dir(target: Path, force: bool) -> Iterator[Path]:
    """ Yield a fresh folder next to `target`; on success it replaces `target` by renames, on failure it goes.

    A reader never sees a half-written export, and with force the old content is removed only after the new one
    is complete and in place. Staging folders of an export that was killed are removed first.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_staging(target)

    def sibling(kind: str) -> Path:
        # a sibling, so the final rename stays on one file system
        return target.with_name(f'.{target.name}.{os.getpid()}-{secrets.token_hex(4)}.{kind}')

    staging = sibling('tmp')
    staging.mkdir()  # mkdir (not mkdtemp) keeps the usual permissions
    try:
        yield staging
        _check_target(target, force)  # again: the folder may have been filled while the export ran
        backup = None
        if target.exists():
            backup = sibling('old')
            os.rename(target, backup)
        try:
            os.rename(staging, target)
        except BaseException:
            if backup is not None:
                os.rename(backup, target)
            raise
        if backup is not None:
            shutil.rmtree(backup)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _write_export(model: nn.Module, folder: Path, prov: _Provenance, load_id: str) -> None:
    extra = {
        'version': _package_version(),
        'seed': prov.seed,
        'struct_init': prov.init_record if prov.init_seed_known else _without_solution(prov.init_record),
        'trained': None if prov.training is None else {k: v for k, v in prov.training.items() if k != 'args'},
    }
    # model_config entries other than timm's own keys land at the top level of config.json, where loaders ignore them
    save_for_hf(
        model, str(folder), model_config={'timm_structinit': extra}, safe_serialization=True,
        data_config=prov.data_config)
    # safetensors creates its file owner-only; give it the mode config.json got from the umask, so whoever can
    # read the export can load it
    os.chmod(folder / 'model.safetensors', (folder / 'config.json').stat().st_mode & 0o777)
    config = json.loads((folder / 'config.json').read_text(encoding='utf-8'))
    (folder / 'README.md').write_text(_model_card(model, config, prov, load_id), encoding='utf-8')


def _write_export_or_fail(model: nn.Module, folder: Path, prov: _Provenance, load_id: str, target: Path) -> None:
    """ `_write_export`, with a write failure (a full disk, say) as one OSError line naming the target. """
    import safetensors
    try:
        _write_export(model, folder, prov, load_id)
    except (OSError, safetensors.SafetensorError) as e:
        error = OSError(f'cannot write the export to {target}: {getattr(e, "strerror", None) or _one_line(e)}; '
                        f'nothing was written')
        error.errno = getattr(e, 'errno', None)
        raise error from None


def _without_solution(record: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """ Of a rebuilt init whose seed differs from the training run's, only method and hyperparameters hold. """
    if record is None:
        return None
    return {'method': record.get('method'), 'cfg': record.get('cfg')}


def export_model(
        model_name: str,
        out_dir: PathLike,
        seed: int = 0,
        model_kwargs: Optional[Mapping[str, Any]] = None,
        checkpoint: Optional[PathLike] = None,
        use_ema: bool = False,
        force: bool = False,
        repo_id: Optional[str] = None,
) -> Path:
    """ Write `model_name` in timm's Hub layout (config.json, model.safetensors, README.md) to `out_dir`.

    Args:
        model_name: a registered model, e.g. 'vit_tiny_patch2_32_mimetic'.
        out_dir: the export folder; a non-empty one is refused unless `force`.
        seed: seeds torch's global generator and `struct_init_seed`, so every weight is reproducible.
        model_kwargs: architecture / init overrides passed to `timm.create_model`, written to config.json.
        checkpoint: a trained checkpoint (timm checkpoint dict, plain state dict or safetensors) to export instead
            of the fresh init; its training recipe goes into the model card.
        use_ema: export the checkpoint's EMA weights.
        force: replace the content of a non-empty `out_dir`, once the new export is complete.
        repo_id: the Hub repo the export is meant for; the model card's load lines then use `hf-hub:repo_id`.

    Returns:
        the export folder.

    The export is written to a sibling temporary folder and renamed into place, so `out_dir` never holds a partial
    export. Invalid arguments raise ValueError (FileExistsError for a non-empty target) before anything is built.
    """
    target = Path(out_dir).expanduser()
    _check_build_args(model_name, seed, model_kwargs, checkpoint, use_ema)
    if repo_id is not None:
        _check_repo_id(repo_id)
    if not isinstance(force, bool):
        raise ValueError(f'force={force!r} must be True or False')
    _check_target(target, force)
    load_id = f'hf-hub:{repo_id}' if repo_id else f'local-dir:{os.fspath(target)}'
    model, prov = _build(model_name, seed, model_kwargs, checkpoint, use_ema)
    with _staging_dir(target.resolve(), force) as staging:
        _write_export_or_fail(model, staging, prov, load_id, target)
    _logger.info(f'Exported {model_name} to {target}')
    return target


def list_export_files(folder: PathLike) -> List[Tuple[str, int]]:
    """ (name, size in bytes) of the export files in `folder`, in EXPORT_FILES order. """
    folder = Path(folder)
    return [(name, (folder / name).stat().st_size) for name in EXPORT_FILES if (folder / name).is_file()]


# ---------------------------------------------------------------------------------------------------------------
# pushing


def push_model(
        model_name: str,
        repo_id: str,
        seed: int = 0,
        model_kwargs: Optional[Mapping[str, Any]] = None,
        checkpoint: Optional[PathLike] = None,
        use_ema: bool = False,
        private: bool = False,
        revision: Optional[str] = None,
        commit_message: Optional[str] = None,
        dry_run: bool = False,
        token: Optional[str] = None,
) -> PushResult:
    """ Export `model_name` (see `export_model`) to a temporary folder and upload it to the Hub repo `repo_id`.

    The repo is created if missing (`private` applies only then), a missing `revision` branch is created from
    main, and the folder is uploaded as one commit with `commit_message`. The token comes from `token`, else from
    huggingface_hub (`HF_TOKEN`, or the one `hf auth login` saved); it is never printed or written. With
    `dry_run`, the export is built and listed and nothing is sent (no token needed).

    Network, authentication and permission failures raise HubError with a one-line message.
    """
    _check_build_args(model_name, seed, model_kwargs, checkpoint, use_ema)
    repo_id = _check_repo_id(repo_id)
    if revision is not None and (not isinstance(revision, str) or not revision.strip()):
        raise ValueError(f'revision={revision!r} must be a non-empty branch name or None (main)')
    if commit_message is not None and (not isinstance(commit_message, str) or not commit_message.strip()):
        raise ValueError(f'commit_message={commit_message!r} must be a non-empty string')
    if not dry_run:
        token = _resolve_token(token)  # before the export, so a missing login costs nothing
    load_id = f'hf-hub:{repo_id}' + (f'@{revision}' if revision else '')
    model, prov = _build(model_name, seed, model_kwargs, checkpoint, use_ema)
    commit_message = commit_message or _default_commit_message(prov)
    with tempfile.TemporaryDirectory(prefix='timm_structinit_push_') as tmp:
        folder = Path(tmp) / 'export'
        folder.mkdir()
        _write_export(model, folder, prov, load_id)
        files = list_export_files(folder)
        result = PushResult(
            repo_id=repo_id, revision=revision, commit_message=commit_message, private=bool(private),
            files=files, dry_run=bool(dry_run))
        if dry_run:
            return result
        _refuse_token_in_files(folder, token)
        result.url = _upload(folder, repo_id, token, private, revision, commit_message)
    return result


def _default_commit_message(prov: _Provenance) -> str:
    method = (prov.init_record or {}).get('method')
    init = f'{method} init' if method else 'timm init'
    if prov.training is not None:
        return f'Add {prov.model_name} trained from {init}'
    return f'Add {prov.model_name} ({init}, seed {prov.seed})'


def _resolve_token(token: Optional[str]) -> str:
    if token is not None:
        if not isinstance(token, str) or not token:
            raise ValueError('token must be a non-empty string or None (then HF_TOKEN or the saved login is used)')
        return token
    import huggingface_hub
    try:
        found = huggingface_hub.get_token()
    except Exception as e:  # e.g. a failed OIDC exchange
        raise HubError(f'could not read the Hugging Face token: {_one_line(e)}') from None
    if not found:
        raise HubError('no Hugging Face token found: set HF_TOKEN or run `hf auth login`, then push again')
    return found


def _refuse_token_in_files(folder: Path, token: str) -> None:
    # the text files are built from model and checkpoint metadata: make sure none carried the token along
    for name in ('config.json', 'README.md'):
        if token in (folder / name).read_text(encoding='utf-8'):
            raise HubError(f'refusing to upload: {name} contains the Hugging Face token (check the checkpoint args)')


def _upload(folder: Path, repo_id: str, token: str, private: bool, revision: Optional[str], message: str) -> str:
    from huggingface_hub import HfApi
    api = HfApi(token=token, library_name='timm_structinit', library_version=_package_version())
    try:
        api.create_repo(repo_id, repo_type='model', private=bool(private), exist_ok=True)
        if revision is not None and revision != 'main' and not revision.startswith('refs/'):
            api.create_branch(repo_id, branch=revision, repo_type='model', exist_ok=True)
        info = api.upload_folder(
            repo_id=repo_id, folder_path=str(folder), repo_type='model', revision=revision,
            commit_message=message)
    except _transport_errors() as e:
        raise HubError(_explain_hub_error(e, repo_id, revision, token)) from None
    return getattr(info, 'commit_url', None) or f'https://huggingface.co/{repo_id}'


def _transport_errors() -> Tuple[type, ...]:
    """ Exceptions a Hub request raises: the HTTP library's base error (httpx2 / httpx) and OSError (requests). """
    errors = [OSError]  # HfHubHTTPError and requests' errors are OSErrors
    for module in ('httpx2', 'httpx'):
        try:
            errors.append(importlib.import_module(module).HTTPError)
        except (ImportError, AttributeError):
            pass
    return tuple(errors)


def _explain_hub_error(error: BaseException, repo_id: str, revision: Optional[str], token: str) -> str:
    from huggingface_hub import errors as hf_errors
    status = getattr(getattr(error, 'response', None), 'status_code', None)
    server_message = getattr(error, 'server_message', None)
    detail = _one_line(server_message) if server_message else _one_line(error)
    if isinstance(error, hf_errors.RevisionNotFoundError):
        msg = f'revision {revision!r} of {repo_id} not found: {detail}'
    elif isinstance(error, hf_errors.RepositoryNotFoundError):
        msg = f'repository {repo_id} not found or not accessible with this token: {detail}'
    elif status in (401, 403):
        msg = (f'not authorized to push to {repo_id} (HTTP {status}): check that the token (HF_TOKEN or '
               f'`hf auth login`) is valid and has write access to {repo_id.split("/")[0]}')
    elif isinstance(error, hf_errors.OfflineModeIsEnabled):
        msg = 'the Hugging Face Hub is unreachable in offline mode (HF_HUB_OFFLINE is set)'
    elif isinstance(error, hf_errors.HfHubHTTPError):
        msg = f'the Hub refused the upload to {repo_id} (HTTP {status}): {detail}'
    elif _is_connection_error(error):
        msg = f'cannot reach the Hugging Face Hub ({type(error).__name__}: {detail})'
    else:  # e.g. a local file that could not be read while uploading
        msg = f'upload to {repo_id} failed ({type(error).__name__}: {detail})'
    return _scrub(msg, token)


def _is_connection_error(error: BaseException) -> bool:
    # httpx / httpx2 transport errors and requests' ConnectionError / Timeout are not builtin ConnectionErrors
    module = type(error).__module__.split('.')[0]
    return isinstance(error, (ConnectionError, TimeoutError)) or module in ('httpx2', 'httpx', 'requests', 'urllib3')


def _scrub(text: str, token: Optional[str]) -> str:
    return text.replace(token, '***') if token else text


def _one_line(error: Union[BaseException, str]) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def _package_version() -> str:
    from . import __version__
    return __version__


# ---------------------------------------------------------------------------------------------------------------
# model card


def _round(value: Any) -> Any:
    """ Floats at 6 significant digits, inside containers too, so long records stay readable. """
    if isinstance(value, float):
        return float(f'{value:.6g}')
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_round(v) for v in value]
    return value


def _fmt(value: Any) -> str:
    """ A compact inline rendering: JSON in code spans for strings and containers, plain numbers. """
    value = _round(_plain(value))
    if isinstance(value, float):
        return f'{value:.6g}'
    if isinstance(value, (dict, list)):
        return f'`{json.dumps(value, separators=(", ", ": "))}`'
    return f'`{value}`' if isinstance(value, str) else str(value)


def _table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    lines = ['| ' + ' | '.join(header) + ' |', '|' + ' --- |' * len(header)]
    # a '|' inside a cell would end it
    return '\n'.join(lines + ['| ' + ' | '.join(str(c).replace('|', '\\|') for c in row) + ' |' for row in rows])


def _paper_ids(method: Optional[str], pretrained_cfg: Mapping[str, Any]) -> List[str]:
    ids: List[str] = []
    if method:
        base = next((m for m in _METHOD_PAPERS if method.startswith(m)), None)
        ids += list(_METHOD_PAPERS.get(base, ()))
    ids += [p for p in pretrained_cfg.get('paper_ids') or () if p not in ids]
    return ids


def _py_literal(value: Any) -> str:
    """ A Python literal for `value` that uses double quotes, so the shell command can wrap it in single ones. """
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        items = ', '.join(_py_literal(v) for v in value)
        return f'({items},)' if isinstance(value, tuple) and len(value) == 1 else (
            f'({items})' if isinstance(value, tuple) else f'[{items}]')
    if isinstance(value, Mapping):
        return '{' + ', '.join(f'{_py_literal(k)}: {_py_literal(v)}' for k, v in value.items()) + '}'
    return repr(value)


def _kwargs_cli(kwargs: Mapping[str, Any]) -> str:
    """ `--model-kwargs` items that parse back to `kwargs`; plain words stay unquoted, as the parser allows. """
    import ast
    import shlex
    items = []
    for key, value in kwargs.items():
        text = _py_literal(value)
        if isinstance(value, str):
            try:
                ast.literal_eval(value)
            except (ValueError, SyntaxError):
                text = value  # not a literal, so the parser keeps it as the string it is
        items.append(shlex.quote(f'{key}={text}'))
    return ' '.join(items)


def _flat_numbers(value: Any) -> List[float]:
    if isinstance(value, list):
        return [x for v in value for x in _flat_numbers(v)]
    return [float(value)] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


def _summarize_objective(objective: Any, per_layer: bool) -> str:
    """ One cell for the solver's final objective: the value, or mean and worst over heads when it is per head. """
    values = _flat_numbers(objective)
    if not isinstance(objective, list) or not values:
        return _fmt(objective)
    mean = sum(values) / len(values)
    where = 'per layer below' if per_layer else f'all: {_fmt(objective)}'
    return f'mean {mean:.6g}, worst {max(values):.6g} over {len(values)} heads ({where})'


def _per_layer_entries(record: Mapping[str, Any], num_layers: int) -> Dict[str, List[Any]]:
    """ Record entries holding one list per layer (offsets, objective per head, ...): shown as a table by layer. """
    return {k: v for k, v in record.items()
            if k not in ('method', 'seed', 'cfg') and isinstance(v, list) and num_layers > 0
            and len(v) == num_layers and all(isinstance(x, list) for x in v)}


def _init_blocks(record: Mapping[str, Any], prov: _Provenance, num_layers: int) -> List[str]:
    method = record.get('method')
    trained = prov.training is not None
    rows: List[Tuple[str, Any]] = [('method', f'`{method}`' if method else "none (timm's default init)")]
    if not trained:
        seeds = f'{prov.seed} (`torch.manual_seed`)'
        if method:
            seeds += f', struct_init_seed {record.get("seed", prov.seed)}'
        rows.append(('seed', seeds))
    elif (prov.training or {}).get('started_from'):
        rows.append(('initial weights', f'loaded from {prov.training["started_from"]}, whose own record tells '
                                        f'its init and seed'))
    elif method and prov.init_seed_known:
        rows.append(('init seed', f"struct_init_seed {record.get('seed')} (from the training run's model_kwargs)"))
    elif method:
        args = (prov.training or {}).get('args') or {}
        note = f'; the run seeded torch with {args["seed"]}' if args.get('seed') is not None else ''
        rows.append(('init seed', f'not recorded in the checkpoint (struct_init_seed was not fixed{note})'))
    # a rebuilt init is the training run's own only if its seed is known
    solution = bool(method) and (not trained or prov.init_seed_known)
    per_layer = _per_layer_entries(record, num_layers) if solution else {}
    if solution and 'solver' in record:
        rows.append(('solver', _fmt(record['solver'])))
    if solution and 'objective' in record:
        rows.append(('final objective', _summarize_objective(record['objective'], 'objective' in per_layer)))
    blocks = ['## Initialization', _table(rows, ('field', 'value'))]
    if method:
        cfg = record.get('cfg') or {}
        blocks += ['Hyperparameters (every field of the init config):',
                   _table([(f'`{k}`', _fmt(v)) for k, v in cfg.items()], ('name', 'value'))]
        shown = {'method', 'seed', 'cfg', 'solver', 'objective', *per_layer}
        extra = {k: v for k, v in record.items() if k not in shown}
        if solution and extra:
            blocks += ['Init record:', _table([(f'`{k}`', _fmt(v)) for k, v in extra.items()], ('entry', 'value'))]
        if per_layer:
            what = 'offsets (dy, dx) and ' if 'offsets' in per_layer else ''
            blocks.append(f'Per layer, one value per head ({what}the solver\'s results):')
            header = ('layer', *per_layer)
            body = [(str(i), *(_fmt(v[i]) for v in per_layer.values())) for i in range(num_layers)]
            blocks.append(_table(body, header))
    if not trained:
        cmd = f'timm-structinit export {prov.model_name} DIR --seed {prov.seed}'
        if prov.model_kwargs:
            cmd += f' --model-kwargs {_kwargs_cli(prov.model_kwargs)}'
        blocks += ['To write these weights again:', f'```bash\n{cmd}\n```']
    return blocks


def _architecture_blocks(model: nn.Module, config: Mapping[str, Any]) -> List[str]:
    pcfg = config.get('pretrained_cfg', {})
    rows = [('architecture', f'`{config.get("architecture")}`'),
            ('model_args', _fmt(config.get('model_args', {}))),
            ('num_classes', config.get('num_classes')),
            ('num_features', config.get('num_features')),
            ('parameters', f'{sum(p.numel() for p in model.parameters()):,}')]
    if pcfg.get('input_size'):
        rows.append(('input size', 'x'.join(str(s) for s in pcfg['input_size'])))
    if pcfg.get('mean') and pcfg.get('std'):
        rows.append(('normalization', f'mean {_fmt(pcfg["mean"])}, std {_fmt(pcfg["std"])}'))
    if getattr(model, 'sincos_pos_embed', False):
        rows.append(('position embedding', 'fixed 2D sin-cos (frozen, stored with the weights)'))
    return ['## Architecture', _table(rows, ('field', 'value'))]


def _training_blocks(training: Mapping[str, Any]) -> List[str]:
    weights = f'`{training["weights"]}`' + (' (EMA)' if 'ema' in training['weights'] else '')
    rows = [('checkpoint', f'`{training["checkpoint"]}`'), ('weights', weights)]
    args = training.get('args') or {}
    if training.get('epoch') is not None:
        rows.append(('epoch (timm counts from 0)', _fmt(training['epoch'])))
    if training.get('metric') is not None:
        label = f'eval {args["eval_metric"]}' if args.get('eval_metric') else 'eval metric'
        rows.append((label, _fmt(training['metric'])))
    # an EMA decay is part of the recipe only when the run kept an EMA
    skip = set() if args.get('model_ema') else {'model_ema_decay'}
    rows += [(f'`{k}`', _fmt(args[k])) for k in _RECIPE_KEYS if args.get(k) not in (None, '') and k not in skip]
    blocks = ['## Training', _table(rows, ('field', 'value'))]
    if args:
        blocks.append('<details><summary>All training arguments</summary>\n\n```json\n'
                      + json.dumps(args, indent=2, sort_keys=True) + '\n```\n\n</details>')
    else:
        blocks.append('The checkpoint holds no training arguments, so the recipe is not known.')
    return blocks


def _citation_blocks(paper_ids: Sequence[str]) -> List[str]:
    if not paper_ids:
        return []
    links = [f'- {_PAPERS.get(pid, (pid, None))[0]}: https://arxiv.org/abs/{pid.split(":", 1)[-1]}'
             for pid in paper_ids]
    bibs = [f'```bibtex\n{_PAPERS[pid][1]}\n```' for pid in paper_ids if pid in _PAPERS]
    return ['## Citation', '\n'.join(links)] + bibs


def _model_card(model: nn.Module, config: Mapping[str, Any], prov: _Provenance, load_id: str) -> str:
    """ The README.md of an export: what the weights are, how they were made, how to load and cite them. """
    record = prov.init_record or {}
    method = record.get('method')
    if load_id.startswith('hf-hub:'):
        title = load_id.split(':', 1)[1].split('@')[0].split('/')[-1]
    else:
        title = prov.model_name
    tags = ['image-classification', 'timm', 'timm-structinit', 'vision-transformer']
    tags += [f'{method}-init'] if method else []
    license_ = config.get('pretrained_cfg', {}).get('license', 'apache-2.0')
    front = '\n'.join(['---', 'library_name: timm', f'license: {license_}', 'pipeline_tag: image-classification',
                       'tags:'] + [f'- {t}' for t in tags] + ['---'])
    init_text = f'{method} initialization' if method else "timm's default initialization (no structured init)"
    if prov.training is not None:
        state = 'trained weights'
    else:
        state = 'initial weights, before any training: a run that loads them starts from exactly this point'
    blocks = [
        front,
        f'# {title}',
        f'A timm Vision Transformer (`{prov.model_name}`) with {init_text}. These are the {state}.',
        '## How to load',
        f'timm knows `{prov.model_name}` only after `timm_structinit` is imported (timm has no plugin discovery), '
        'so import it before creating the model:',
        '```python\nimport timm\nimport timm_structinit  # registers the architecture with timm\n\n'
        f'model = timm.create_model("{load_id}", pretrained=True)\n```',
        '`pretrained=True` loads these weights bit for bit; without it timm builds the same architecture with a '
        f'fresh init. Needs `timm-structinit` (this export: version {_package_version()}) and timm >= 1.0.16 '
        f'(written with timm {timm.__version__}).',
    ]
    blocks += _init_blocks(record, prov, len(getattr(model, 'blocks', ())))
    blocks += _architecture_blocks(model, config)
    if prov.training is not None:
        blocks += _training_blocks(prov.training)
    blocks += _citation_blocks(_paper_ids(method, config.get('pretrained_cfg', {})))
    return '\n\n'.join(blocks) + '\n'
