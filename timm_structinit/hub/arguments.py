""" The checks of export's and push's arguments, each before a model is built or a file written: the model name and
its arguments, the seed, the checkpoint, the Hub repo id and branch, and the export's target folder. Each failure is
an error naming the bad value and what would be valid. """
import difflib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Union

import huggingface_hub
import timm
from timm.models import is_model, model_entrypoint

from ..models import StructMlpMixer, StructSwinTransformer, StructVisionTransformer
from ..models.registry import check_model_args, is_package_model, valid_model_args
from ..utils.seeds import check_seed
from ..utils.write_failures import path_too_long
from .upload import _one_line

PathLike = Union[str, os.PathLike]


def _model_class(model_name: str) -> type:
    """ The class a package entrypoint builds (the one class its module defines for it). """
    classes = {cls.__module__: cls for cls in (StructVisionTransformer, StructSwinTransformer, StructMlpMixer)}
    return classes[model_entrypoint(model_name).__module__]


def _check_model_kwargs(model_name: str, model_kwargs: Any) -> Dict[str, Any]:
    if not isinstance(model_kwargs, (Mapping, type(None))) or not all(isinstance(k, str) for k in model_kwargs or {}):
        raise ValueError(f'model_kwargs must be a dict with string keys, got {model_kwargs!r}')
    kwargs = dict(model_kwargs or {})
    for key in kwargs.keys() & {'pretrained', 'pretrained_cfg', 'checkpoint_path', 'features_only'}:
        raise ValueError(f'model_kwargs may not set {key!r}: export builds the model itself (trained weights come '
                         f'from checkpoint= / --checkpoint) and writes the registered pretrained_cfg')
    if is_package_model(model_name):  # timm's own models check their arguments themselves
        valid = valid_model_args(_model_class(model_name))
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
    if isinstance(model_name, str) and model_name.startswith(('local-dir:', 'hf-hub:')):
        raise ValueError(f'{model_name} is an export already (timm loads it with timm.create_model({model_name!r}, '
                         f'pretrained=True)); export and push take a registered model name: to write its weights '
                         f'again, name the registered model with --checkpoint pointing at its model.safetensors; to '
                         f'upload the folder as it is, use huggingface_hub (HfApi().upload_folder)')
    if not isinstance(model_name, str) or not is_model(model_name) or any(c in model_name for c in ':/.'):
        ours = [m for m in timm.list_models() if is_package_model(m)]
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
    # the export is staged as a hidden sibling whose name is longer than the target's (`utils.atomic`)
    too_long = path_too_long(str(target.absolute().parent / f'.{target.name}.0000000-00000000.old' / 'config.json'))
    if too_long:
        raise ValueError(f'export target {str(target)[:120]}... cannot be made: {too_long}; choose a shorter path')
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
