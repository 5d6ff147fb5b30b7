""" What a run reads before its work, read once and carried through it (`RunInputs`): the `--resume` checkpoint (its
content, tensors memory-mapped), the `--initial-checkpoint` weights, and the model built on the meta device on which
every check of names, shapes and parameter groups is made. `check_args` reads them as its last check; the resume
checks, the model's build and the restore take them from here, and nothing opens those files again. """
import argparse
import os
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from timm.models import clean_state_dict, load_state_dict
from timm.utils import load_checkpoint_metadata
from torch import nn

from ..errors import ConfigError
from ..hub.probe import check_weights_source
from ..models.registry import check_model_args
from ..utils.command_line import error_line
from ..utils.run_folder import resumable_checkpoint

__all__ = ['RunInputs', 'read_inputs', 'read_checkpoint', 'resume_path', 'resume_file', 'in_chans',
           'model_factory_kwargs', 'checkpoint_state_dict', 'ema_state_dict', 'saved_args']


@dataclass
class RunInputs:
    """ A run's inputs, each read once. `resume` is the --resume checkpoint's content (None without --resume),
    `resume_file` its real path; `initial` the --initial-checkpoint's content and `initial_weights` the weights
    taken from it (both None without one, or for JAX .npz weights, which only the model's own loader reads);
    `check_model` the model built on the meta device for the
    checks (None for a `local-dir:` or `hf-hub:` model, which is checked where its weights come from). """
    resume: Optional[Any] = None
    resume_file: Optional[str] = None
    initial: Optional[Any] = None
    initial_weights: Optional[Dict[str, Any]] = None
    check_model: Optional[nn.Module] = None


def chans_option(args: argparse.Namespace) -> Optional[int]:
    """ The input channels the user set by option (--input-size or --in-chans), else None. """
    return args.input_size[0] if args.input_size else args.in_chans


def in_chans(args: argparse.Namespace) -> int:
    """ Input channels of the model and the data: the option, else model_kwargs in_chans, else 3. """
    chans = chans_option(args)
    if chans is None and isinstance(args.model_kwargs, dict):
        chans = args.model_kwargs.get('in_chans')
    return 3 if chans is None else chans


def model_factory_kwargs(args: argparse.Namespace) -> Dict[str, Any]:
    """ The arguments `create_model` gets: the options that set model arguments, under model_kwargs. """
    options = dict(in_chans=in_chans(args), num_classes=args.num_classes, drop_rate=args.drop,
                   drop_path_rate=args.drop_path, drop_block_rate=args.drop_block, global_pool=args.gp)
    return {**{k: v for k, v in options.items() if v is not None}, **args.model_kwargs}


def resume_path(resume: str) -> str:
    """ The checkpoint `--resume` names: a file, or an output folder's checkpoint to resume from
    (`resumable_checkpoint`; its last.pth.tar when it holds none). """
    if not os.path.isdir(resume):
        return resume
    return resumable_checkpoint(resume) or os.path.join(resume, 'last.pth.tar')


def resume_file(resume: str) -> str:
    """ The checkpoint `--resume` names, by its real path (a link in the working folder is followed to its run). """
    return os.path.realpath(resume_path(resume))


def _reader_message(error: BaseException) -> str:
    """ A reader's own message on one line, with its type where the message alone would not say what failed. """
    line = error_line(error)[:300]
    return line if isinstance(error, (ValueError, TypeError)) else f'{type(error).__name__}: {line}'


def read_checkpoint(path: str, flag: str) -> Any:
    """ A checkpoint's content, tensors memory-mapped (cheap); an unreadable file is the flag's error. """
    try:
        return load_checkpoint_metadata(path)
    except Exception as e:  # truncated or foreign file: say so instead of a traceback
        raise ConfigError(f'{flag} {path!r} is not a readable checkpoint ({_reader_message(e)})') from None


def saved_args(meta: Any) -> Dict[str, Any]:
    """ The training arguments a timm checkpoint records ({} when it records none). """
    args = meta.get('args') if isinstance(meta, Mapping) else None
    if isinstance(args, argparse.Namespace):
        return vars(args)
    return dict(args) if isinstance(args, Mapping) else {}


def _read_initial(path: str) -> Tuple[Optional[Any], Optional[Dict[str, Any]]]:
    """ The content of --initial-checkpoint and its weights, as timm's `load_state_dict(use_ema=True)` chooses them
    (the EMA ones when it has them); (None, None) for JAX weights (.npz, .npy), which the model's own loader reads. """
    if path.lower().endswith(('.npz', '.npy')):
        return None, None
    try:
        if path.lower().endswith('.safetensors'):
            return None, load_state_dict(path)
        content = load_checkpoint_metadata(path)
    except Exception as e:  # truncated or foreign file
        raise ConfigError(f'--initial-checkpoint {path!r} is not a readable checkpoint '
                          f'({type(e).__name__}: {error_line(e)})') from None
    if not isinstance(content, Mapping):
        raise ConfigError(f'--initial-checkpoint {path!r} holds a {type(content).__name__}, not a state dict or a '
                          f'training checkpoint')
    return content, ema_state_dict(content)


def _check_model(args: argparse.Namespace, resume: Any) -> Optional[nn.Module]:
    """ The model this command builds, on the meta device, with the classes the resumed run had when the data has
    not said yet; its constructor's and its init's checks run there (ConfigError naming what is wrong). """
    kwargs = model_factory_kwargs(args)
    saved_classes = saved_args(resume).get('num_classes')
    if 'num_classes' not in kwargs and isinstance(saved_classes, int) and not isinstance(saved_classes, bool):
        kwargs['num_classes'] = saved_classes
    try:
        model = check_model_args(args.model, kwargs)
        check_weights_source(args.model, args.pretrained)
    except ValueError as e:
        raise ConfigError(f'--model {args.model} (--model-kwargs): {e}' if not str(e).startswith('--') else str(e)) \
            from None
    return model


def read_inputs(args: argparse.Namespace) -> RunInputs:
    """ Read what the run starts from, once: the --resume checkpoint (refused when it holds another model), the
    --initial-checkpoint weights, and the model on the meta device. """
    inputs = RunInputs()
    if args.resume:
        inputs.resume_file = resume_file(args.resume)
        inputs.resume = read_checkpoint(inputs.resume_file, '--resume')
        arch = inputs.resume.get('arch') if isinstance(inputs.resume, dict) else None
        if arch is not None and arch != args.model:
            raise ConfigError(f'--resume {args.resume!r} holds a {arch!r} checkpoint, but --model is '
                              f'{args.model!r}')
    if args.initial_checkpoint:
        inputs.initial, inputs.initial_weights = _read_initial(args.initial_checkpoint)
    inputs.check_model = _check_model(args, inputs.resume)
    return inputs


def checkpoint_state_dict(resume: str, meta: Any) -> Dict[str, Any]:
    """ The model weights of a --resume checkpoint's content, wrapper prefixes removed (as timm's resume does). """
    state_dict = meta.get('state_dict') if isinstance(meta, dict) else None
    state_dict = clean_state_dict(state_dict) if isinstance(state_dict, dict) else meta
    if not isinstance(state_dict, dict):
        raise ConfigError(f'--resume {resume!r} holds a {type(meta).__name__}, not a checkpoint')
    return state_dict


def ema_state_dict(meta: Mapping[str, Any]) -> Dict[str, Any]:
    """ The EMA weights of a checkpoint's content as timm's `load_state_dict(use_ema=True)` picks them (timm reads
    them from a path only): its `state_dict_ema`, else `model_ema`, else the model's own weights. """
    for key in ('state_dict_ema', 'model_ema'):
        if meta.get(key) is not None:
            return clean_state_dict(meta[key])
    key = 'state_dict' if 'state_dict' in meta else 'model' if 'model' in meta else None
    return clean_state_dict(meta[key] if key else dict(meta))
