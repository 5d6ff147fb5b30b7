""" Build, export and push: timm's `save_for_hf` writes the folder, huggingface_hub's `HfApi` uploads it.

An export folder holds `config.json` (plain timm's architecture and model_args, pretrained_cfg with class names of
trained weights, and the plugin's own fields under `timm_structinit`), `model.safetensors` and `README.md`.
"""
import json
import logging
import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

import timm
import torch
from timm.models import get_model_args, is_model, save_for_hf
from torch import nn

from ..atomic import atomic_dir
from .card import model_card
from .checks import (PathLike, check_build_args, check_model_kwargs, check_push_args, check_repo_id, check_target,
                     is_package_model)
from .errors import HubError, explain_hub_error, one_line, refuse_token_in_files, resolve_token, transport_errors
from .plain_timm import CONFIG_KEY, plain_timm_config
from .provenance import (Provenance, data_config_from_training, dataset_facts, evaluation_facts, kwargs_from_training,
                         label_names_from_training, portable, portable_args, read_checkpoint, started_from,
                         state_dict_mismatch, to_plain)

_logger = logging.getLogger(__name__)

# what an export folder holds, in the order a dry run lists it
EXPORT_FILES = ('config.json', 'model.safetensors', 'README.md')


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


def _package_version() -> str:
    from .. import __version__
    return __version__


def build_model(model_name: str, seed: int = 0, model_kwargs: Optional[Mapping[str, Any]] = None,
                checkpoint: Optional[PathLike] = None, use_ema: bool = False) -> nn.Module:
    """ Build `model_name` as an export writes it: seeded init, or the weights of a trained checkpoint.

    Every weight is reproducible from `seed`: it seeds torch's global generator (timm's init of the non-attention
    weights) and, for this package's models, the structured init (`struct_init_seed`, unless model_kwargs set it).
    The global generator's state is restored afterwards. With `checkpoint`, the architecture arguments the training
    run recorded (its model_kwargs, num_classes, gp and input channels) are defaults under `model_kwargs`, and the
    weights are loaded strictly. The model's `struct_init_record` holds the init record.
    """
    return _build(model_name, seed, model_kwargs, checkpoint, use_ema, label_names=False)[0]


def _create(model_name: str, seed: int, kwargs: Dict[str, Any]) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            return timm.create_model(model_name, **kwargs)
        except TypeError as e:
            raise ValueError(f'cannot build {model_name} with model_kwargs {kwargs}: {one_line(e)}') from None


def _training(path: Path, meta: Mapping[str, Any], num_classes: Optional[int], prov: Provenance) -> None:
    """ Fill `prov` with what the training checkpoint at `path` tells about its weights (portable facts only);
    the class names of its training data too, unless `num_classes` is None. """
    args = meta.get('args')
    prov.training = {
        'checkpoint': path.name, 'weights': meta['weights'], 'epoch': meta.get('epoch'), 'metric': meta.get('metric'),
        'started_from': started_from(args), 'eval': evaluation_facts(meta), 'dataset': dataset_facts(args),
        'base_model': None, 'args': portable_args(args)}
    model = (args or {}).get('model')
    if (args or {}).get('pretrained') and isinstance(model, str) and model.startswith(('hf-hub:', 'hf_hub:')):
        prov.training['base_model'] = model.split(':', 1)[1].split('@')[0]
    prov.data_config = data_config_from_training(args)
    prov.label_names = label_names_from_training(args, num_classes) if num_classes is not None else None


def _build(model_name: str, seed: int, model_kwargs: Optional[Mapping[str, Any]], checkpoint: Optional[PathLike],
           use_ema: bool, label_names: bool = True) -> Tuple[nn.Module, Provenance]:
    check_build_args(model_name, seed, model_kwargs, checkpoint, use_ema)
    seed = int(seed)
    kwargs = user_kwargs = check_model_kwargs(model_name, model_kwargs)
    if checkpoint is not None:
        path = Path(checkpoint).expanduser()
        state_dict, meta = read_checkpoint(path, use_ema)
        arch = meta.get('arch')
        if isinstance(arch, str) and is_model(arch) and arch != model_name:
            raise ValueError(f'checkpoint {path} was trained as {arch!r}, not {model_name!r}; export it as {arch}')
        kwargs = check_model_kwargs(model_name, {**kwargs_from_training(meta.get('args')), **user_kwargs})
    elif is_package_model(model_name):
        # the init's own generator gets the seed too, so the attention weights do not depend on timm's draws
        kwargs = {'struct_init_seed': seed, **kwargs}
    model = _create(model_name, seed, kwargs)
    prov = Provenance(model_name=model_name, seed=seed, model_kwargs=user_kwargs,
                      init_record=to_plain(getattr(model, 'struct_init_record', None)))
    if checkpoint is not None:
        mismatch = state_dict_mismatch(model.state_dict(), state_dict)
        if mismatch:
            raise ValueError(
                f'checkpoint {path} does not fit {model_name} with these model_kwargs (weights: {mismatch}); '
                f'pass the model_kwargs (--model-kwargs) the run was trained with')
        model.load_state_dict(state_dict, strict=True)
        _training(path, meta, model.num_classes if label_names else None, prov)
        # the init that started training is known only if the run fixed struct_init_seed and loaded nothing over it
        prov.init_seed_known = 'struct_init_seed' in kwargs and prov.training['started_from'] is None
        prov.model_kwargs = kwargs
    return model, prov


# ---------------------------------------------------------------------------------------------------------------
# writing


def _without_solution(record: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """ Of a rebuilt init whose seed differs from the training run's, only method and hyperparameters hold. """
    return None if record is None else {'method': record.get('method'), 'cfg': record.get('cfg')}


@contextmanager
def _model_args_for_export(model: nn.Module, model_args: Optional[Dict[str, Any]]) -> Iterator[None]:
    """ Let timm's `save_for_hf` write `model_args` instead of the arguments the model was created with. """
    if model_args is None:
        yield
        return
    created_with = model.__dict__.get('_model_args', {})
    model._model_args = {}
    try:
        yield
    finally:
        model._model_args = created_with


def _config_fields(model: nn.Module, prov: Provenance) -> Tuple[Dict[str, Any], Optional[Dict[str, Any]]]:
    """ save_for_hf's model_config (plain timm's architecture, class names, plugin fields) and model_args. """
    own = {
        'version': _package_version(),
        'seed': prov.seed,
        'struct_init': prov.init_record if prov.init_seed_known else _without_solution(prov.init_record),
        'trained': None if prov.training is None else portable(to_plain(
            {k: v for k, v in prov.training.items() if k not in ('args', 'dataset', 'base_model')})),
    }
    pretrained_cfg: Dict[str, Any] = {}
    if prov.label_names:
        pretrained_cfg.update(label_names=list(prov.label_names), num_classes=model.num_classes)
    plain = plain_timm_config(model, prov.model_name, getattr(model, '_model_args', {}))
    if plain is None:
        return {CONFIG_KEY: own, 'pretrained_cfg': pretrained_cfg}, None
    own.update(architecture=prov.model_name, model_args=to_plain(get_model_args(model)))
    return {CONFIG_KEY: own, 'pretrained_cfg': dict(pretrained_cfg, architecture=plain[0])}, plain[1]


def _write_export(model: nn.Module, folder: Path, prov: Provenance, load_id: str) -> None:
    model_config, model_args = _config_fields(model, prov)
    # model_config entries other than timm's own keys land at the top level of config.json, where loaders ignore them
    with _model_args_for_export(model, model_args):
        save_for_hf(model, str(folder), model_config=model_config, model_args=model_args, safe_serialization=True,
                    data_config=prov.data_config)
    # safetensors creates its file owner-only; give it the mode config.json got from the umask, so whoever can
    # read the export can load it
    os.chmod(folder / 'model.safetensors', (folder / 'config.json').stat().st_mode & 0o777)
    config = json.loads((folder / 'config.json').read_text(encoding='utf-8'))
    (folder / 'README.md').write_text(str(model_card(model, config, prov, load_id)), encoding='utf-8')


def _write_export_or_fail(model: nn.Module, folder: Path, prov: Provenance, load_id: str, target: Path) -> None:
    """ `_write_export`, with a write failure (a full disk, say) as one OSError line naming the target. """
    import safetensors
    try:
        _write_export(model, folder, prov, load_id)
    except (OSError, safetensors.SafetensorError) as e:
        error = OSError(f'cannot write the export to {target}: {getattr(e, "strerror", None) or one_line(e)}; '
                        f'nothing was written')
        error.errno = getattr(e, 'errno', None)
        raise error from None


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
    check_build_args(model_name, seed, model_kwargs, checkpoint, use_ema)
    if repo_id is not None:
        check_repo_id(repo_id)
    if not isinstance(force, bool):
        raise ValueError(f'force={force!r} must be True or False')
    check_target(target, force)
    load_id = f'hf-hub:{repo_id}' if repo_id else f'local-dir:{os.fspath(target)}'
    model, prov = _build(model_name, seed, model_kwargs, checkpoint, use_ema)
    # checked again before the swap: the folder may have been filled while the export ran
    with atomic_dir(target.resolve(), before_replace=lambda _: check_target(target, force)) as staging:
        _write_export_or_fail(model, staging, prov, load_id, target)
    _logger.info(f'Exported {model_name} to {target}')
    return target


def list_export_files(folder: PathLike) -> List[Tuple[str, int]]:
    """ (name, size in bytes) of the export files in `folder`, in EXPORT_FILES order. """
    folder = Path(folder)
    return [(name, (folder / name).stat().st_size) for name in EXPORT_FILES if (folder / name).is_file()]


def load_lines(folder: PathLike) -> List[str]:
    """ How to load the export in `folder`, one line per way: plain timm first when it can. """
    config = json.loads((Path(folder) / 'config.json').read_text(encoding='utf-8'))
    create = f'timm.create_model("local-dir:{os.fspath(folder)}", pretrained=True)'
    registered = (config.get(CONFIG_KEY) or {}).get('architecture')
    plugin = f'import timm, timm_structinit; {create}'
    if registered is None:
        return [f'load it with: {plugin}']
    return [f'load it in plain timm: import timm; {create}', f'or as the registered {registered}: {plugin}']


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
    check_build_args(model_name, seed, model_kwargs, checkpoint, use_ema)
    repo_id = check_repo_id(repo_id)
    check_push_args(revision, commit_message)
    if not dry_run:
        token = resolve_token(token)  # before the export, so a missing login costs nothing
    load_id = f'hf-hub:{repo_id}' + (f'@{revision}' if revision else '')
    model, prov = _build(model_name, seed, model_kwargs, checkpoint, use_ema)
    commit_message = commit_message or _default_commit_message(prov)
    with tempfile.TemporaryDirectory(prefix='timm_structinit_push_') as tmp:
        folder = Path(tmp) / 'export'
        folder.mkdir()
        _write_export(model, folder, prov, load_id)
        result = PushResult(repo_id=repo_id, revision=revision, commit_message=commit_message, private=bool(private),
                            files=list_export_files(folder), dry_run=bool(dry_run))
        if not dry_run:
            refuse_token_in_files(folder, token)
            result.url = _upload(folder, repo_id, token, private, revision, commit_message)
    return result


def _default_commit_message(prov: Provenance) -> str:
    method = (prov.init_record or {}).get('method')
    init = f'{method} init' if method else 'timm init'
    if prov.training is not None:
        return f'Add {prov.model_name} trained from {init}'
    return f'Add {prov.model_name} ({init}, seed {prov.seed})'


def _upload(folder: Path, repo_id: str, token: str, private: bool, revision: Optional[str], message: str) -> str:
    from huggingface_hub import HfApi
    api = HfApi(token=token, library_name='timm_structinit', library_version=_package_version())
    try:
        api.create_repo(repo_id, repo_type='model', private=bool(private), exist_ok=True)
        if revision is not None and revision != 'main' and not revision.startswith('refs/'):
            api.create_branch(repo_id, branch=revision, repo_type='model', exist_ok=True)
        info = api.upload_folder(
            repo_id=repo_id, folder_path=str(folder), repo_type='model', revision=revision, commit_message=message)
    except transport_errors() as e:
        raise HubError(explain_hub_error(e, repo_id, revision, token)) from None
    return getattr(info, 'commit_url', None) or f'https://huggingface.co/{repo_id}'
