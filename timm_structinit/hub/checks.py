""" Input checks of export and push: all run before a model is built or a file is written. """
import difflib
import inspect
import json
import numbers
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Union

import timm
from timm.models import is_model, model_entrypoint, split_model_name_tag
from torch import nn

from .errors import one_line

PathLike = Union[str, os.PathLike]

_EXAMPLE_MODEL = 'vit_tiny_patch2_32_mimetic'

# keyword arguments that export sets itself or that would not build a plain classifier
_RESERVED_KWARGS = {
    'pretrained': 'export builds the model and writes its weights; load them with pretrained=True instead',
    'pretrained_cfg': 'export writes the registered pretrained_cfg',
    'pretrained_cfg_overlay': 'export writes the registered pretrained_cfg',
    'checkpoint_path': 'use checkpoint= (--checkpoint) for trained weights',
    'features_only': 'a feature extractor has no timm Hub layout; export the classifier',
    'cache_dir': 'not an architecture argument',
}


def is_package_model(model_name: str) -> bool:
    return model_entrypoint(model_name).__module__.startswith(__name__.split('.')[0] + '.')


def _package_models() -> List[str]:
    return [m for m in timm.list_models() if is_package_model(m)]


def check_model_name(model_name: Any) -> str:
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


def check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed < 2 ** 63:
        raise ValueError(f'seed={seed!r} must be an integer in [0, 2**63)')
    return int(seed)


def init_params(cls: type) -> List[str]:
    """ The keyword arguments `cls.__init__` and the __init__ of its bases accept. """
    names = set()
    for base in cls.__mro__:
        init = base.__dict__.get('__init__')
        if init is None or base in (nn.Module, object):
            continue
        names.update(p.name for p in inspect.signature(init).parameters.values()
                     if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != 'self')
    return sorted(names)


def _valid_model_kwargs(model_name: str) -> Optional[List[str]]:
    """ Keyword arguments a package model accepts; None for other timm models (their class checks them). """
    if not is_package_model(model_name):
        return None
    from .. import StructVisionTransformer
    return sorted(set(init_params(StructVisionTransformer)) | {'out_indices'})


def check_model_kwargs(model_name: str, model_kwargs: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    if model_kwargs is None:
        return {}
    if not isinstance(model_kwargs, Mapping) or not all(isinstance(k, str) for k in model_kwargs):
        raise ValueError(f'model_kwargs must be a dict with string keys, got {model_kwargs!r}')
    kwargs = dict(model_kwargs)
    for key in kwargs:
        if key in _RESERVED_KWARGS:
            raise ValueError(f'model_kwargs may not set {key!r}: {_RESERVED_KWARGS[key]}')
    valid = _valid_model_kwargs(model_name)
    unknown = sorted(set(kwargs) - set(valid)) if valid is not None else []
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


def check_build_args(model_name: Any, seed: Any, model_kwargs: Any, checkpoint: Optional[PathLike],
                     use_ema: Any) -> None:
    check_model_name(model_name)
    check_seed(seed)
    check_model_kwargs(model_name, model_kwargs)
    if not isinstance(use_ema, bool):
        raise ValueError(f'use_ema={use_ema!r} must be True or False')
    if use_ema and checkpoint is None:
        raise ValueError('use_ema=True (--use-ema) needs a checkpoint (--checkpoint) with EMA weights')
    if checkpoint is not None and not Path(checkpoint).expanduser().is_file():
        raise FileNotFoundError(f'checkpoint {os.fspath(checkpoint)} does not exist or is not a file')


def check_repo_id(repo_id: Any) -> str:
    from huggingface_hub.utils import validate_repo_id
    if not isinstance(repo_id, str) or repo_id.count('/') != 1:
        raise ValueError(f'repo id {repo_id!r} must have the form ORG/NAME (a user or organization, then a name)')
    try:
        validate_repo_id(repo_id)
    except ValueError as e:  # HFValidationError
        raise ValueError(f'repo id {repo_id!r} is not valid: {one_line(e)}') from None
    return repo_id


def check_push_args(revision: Any, commit_message: Any) -> None:
    if revision is not None and (not isinstance(revision, str) or not revision.strip()):
        raise ValueError(f'revision={revision!r} must be a non-empty branch name or None (main)')
    if commit_message is not None and (not isinstance(commit_message, str) or not commit_message.strip()):
        raise ValueError(f'commit_message={commit_message!r} must be a non-empty string')


def check_target(target: Path, force: bool) -> None:
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
