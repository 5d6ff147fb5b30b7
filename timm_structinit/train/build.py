""" What a run is made of, from checked arguments: datasets, model (with the weights it starts from), data config and
optimizer, each from timm's factories; the loaders and the loss are `loaders`'. """
import argparse
import logging
import math
import os
from contextlib import nullcontext
from functools import partial
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from timm.data import resolve_data_config
from timm.models import create_model, load_checkpoint
from timm.optim import create_optimizer_v2, optimizer_kwargs
from timm.utils import NativeScaler, unwrap_model

from ..data import ClassBalancedSubset, build_dataset, dataset_classes, dataset_targets
from ..errors import ConfigError, DataError
from ..utils.checkpoints import state_dict_mismatch
from ..utils.command_line import error_line, warn
from ..utils.kwargs import format_kwargs
from ..utils.words import counted
from .config import PROG
from .inputs import RunInputs, checkpoint_state_dict, in_chans, model_factory_kwargs

_logger = logging.getLogger('train')


def build_datasets(args: argparse.Namespace):
    """ The training and evaluation datasets, refusing splits that overlap or disagree on the classes. """
    def build(split: str, flag: str):
        return build_dataset(args.dataset, args.data_dir, split, flag, download=args.dataset_download)

    dataset_train = build(args.train_split, '--train-split')
    dataset_eval = build(args.val_split, '--val-split')
    train_root = getattr(getattr(dataset_train, 'reader', None), 'root', None)
    eval_root = getattr(getattr(dataset_eval, 'reader', None), 'root', None)
    if train_root is not None and eval_root is not None and os.path.realpath(train_root) == os.path.realpath(eval_root):
        raise ConfigError(f'--train-split {args.train_split!r} and --val-split {args.val_split!r} are the same '
                          f'folder ({os.path.realpath(train_root)}); evaluating on training images is refused')
    # the same file reached by other paths (a linked class folder, a hard link): compared by identity, not by name
    shared = getattr(dataset_train, 'file_ids', set()) & getattr(dataset_eval, 'file_ids', set())
    if shared:
        example = next(p for p, _ in dataset_eval.reader.samples if _file_id(p) in shared)
        raise ConfigError(f'--train-split {args.train_split!r} and --val-split {args.val_split!r} share '
                          f'{counted(len(shared), "image file")}, e.g. {os.path.abspath(example)} (a link between the splits?); '
                          f'evaluating on training images is refused')
    train_classes, eval_classes = dataset_classes(dataset_train), dataset_classes(dataset_eval)
    if train_classes is not None and eval_classes is not None and train_classes != eval_classes:
        missing = sorted(set(train_classes) ^ set(eval_classes))
        raise DataError(f'training and evaluation splits have different classes (differing: {missing[:10]}); '
                        f'labels would not line up')
    if args.train_subset:
        dataset_train = ClassBalancedSubset(dataset_train, args.train_subset, args.subset_seed, '--train-subset')
    if args.val_subset:
        dataset_eval = ClassBalancedSubset(dataset_eval, args.val_subset, args.subset_seed, '--val-subset')
    classes = dataset_classes(dataset_train)
    num_classes = len(classes) if classes else int(max(dataset_targets(dataset_train), default=-1)) + 1
    if num_classes < 2:  # one class trains to a trivial 100% on any data
        where = f' ({train_root})' if train_root else ''
        raise DataError(f'--train-split {args.train_split!r}{where} holds one class'
                        + (f' ({classes[0]!r})' if classes else '') + '; a classifier needs at least two')
    if args.num_classes is None:
        args.num_classes = args.model_kwargs.get('num_classes', num_classes)
    if args.num_classes < num_classes:
        raise ConfigError(f'num_classes {args.num_classes} (--num-classes or model_kwargs) is too small: the '
                          f'training labels go up to {num_classes - 1}')
    if args.num_classes > num_classes and getattr(args, 'rank', 0) == 0:
        # what was asked is done (a head sized for later classes is a choice), and said: those units see no label
        warn(f'num_classes {args.num_classes} (--num-classes or model_kwargs) is more than the {num_classes} classes '
             f'of the training data: {counted(args.num_classes - num_classes, "output unit")} never see a label', PROG)
    return dataset_train, dataset_eval


def _file_id(path: str) -> Tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _reader_message(error: BaseException) -> str:
    """ A reader's own message on one line, with its type where the message alone would not say what failed. """
    line = error_line(error)[:300]
    return line if isinstance(error, (ValueError, TypeError)) else f'{type(error).__name__}: {line}'


def check_checkpoint_fits(model: nn.Module, state_dict: Mapping[str, Any], flag: str, path: str,
                          args: argparse.Namespace, meta: Any = None) -> None:
    """ Refuse a checkpoint whose weights do not fit `model`, saying which model it is for and which keys differ;
    `meta` is the checkpoint's content when it is a training checkpoint (its model and arguments name the fix). """
    mismatch = state_dict_mismatch(model.state_dict(), state_dict)
    if not mismatch:
        return
    arch = meta.get('arch') if isinstance(meta, dict) else None
    saved_kwargs = getattr(meta.get('args'), 'model_kwargs', None) if isinstance(meta, dict) else None
    ours = f'--model {args.model}' + (f' with model_kwargs {args.model_kwargs}' if args.model_kwargs else '')
    theirs = f'{arch} weights' if arch else 'weights of another model'
    fix = [f'--model {arch}'] if arch and arch != args.model else []
    if isinstance(saved_kwargs, dict):
        theirs += f' trained with model_kwargs {saved_kwargs}'
        if saved_kwargs != args.model_kwargs:
            items = format_kwargs(saved_kwargs)
            fix.append(f'--model-kwargs {items}' if items else 'no --model-kwargs')
    hint = f'pass {" ".join(fix)}' if fix else 'build the model it was saved from'
    raise ConfigError(f'{flag} {path!r} does not fit {ours}: it holds {theirs} (keys: {mismatch}); {hint}')


def build_model(args: argparse.Namespace, inputs: RunInputs) -> nn.Module:
    """ The model as the options and model_kwargs say (`model_factory_kwargs`, what the checks built on the meta
    device), with the weights of --initial-checkpoint; a --resume checkpoint that would not fit it (the data may
    have given it another number of classes) is refused here, before any data is loaded into it. """
    try:
        model = create_model(args.model, pretrained=args.pretrained, **model_factory_kwargs(args))
    except OSError as e:  # pretrained weights or a Hub config that could not be fetched
        raise ConfigError(f'--model {args.model!r}{" --pretrained" if args.pretrained else ""}: cannot load its '
                          f'weights or config ({type(e).__name__}: {error_line(e)})') from None
    except Exception as e:  # any constructor's or weight reader's complaint (a truncated local-dir: safetensors)
        raise ConfigError(f'cannot build --model {args.model!r} with model_kwargs {args.model_kwargs}: '
                          f'{_reader_message(e)}') from None
    path = args.initial_checkpoint
    if path and inputs.initial_weights is None:
        try:
            load_checkpoint(model, path)  # JAX weights: the model's own loader, as timm does
        except Exception as e:  # numpy's reader, or the model's own loader on arrays it does not expect
            raise ConfigError(f'--initial-checkpoint {path!r} cannot be loaded into --model {args.model} '
                              f'({_reader_message(e)})') from None
    elif path:
        check_checkpoint_fits(model, inputs.initial_weights, '--initial-checkpoint', path, args, inputs.initial)
        model.load_state_dict(inputs.initial_weights)
    if args.resume:
        check_checkpoint_fits(model, checkpoint_state_dict(args.resume, inputs.resume), '--resume', args.resume,
                              args, inputs.resume)
    return model


def _fixed_img_size(model: nn.Module) -> Optional[Tuple[int, int]]:
    """ The (H, W) a patch-embedding model requires, or None when it takes any size. """
    patch_embed = getattr(unwrap_model(model), 'patch_embed', None)
    size = getattr(patch_embed, 'img_size', None)
    if size is None or getattr(patch_embed, 'dynamic_img_size', False) \
            or not getattr(patch_embed, 'strict_img_size', True):
        return None
    return tuple(size)


def data_config(args: argparse.Namespace, model: nn.Module, datasets: Sequence) -> Dict[str, Any]:
    """ timm's data config for `model` under the options; the datasets are told the input size it takes. """
    chans = in_chans(args)
    data_args = dict(vars(args), in_chans=chans)
    for name in ('mean', 'std'):  # equal values stand for any number of channels
        if data_args[name] is not None and len(set(data_args[name])) == 1:
            data_args[name] = data_args[name][:1]
    model_size = _fixed_img_size(model)
    if args.img_size is None and args.input_size is None and model_size is not None:
        # a model built with model_kwargs img_size=... keeps its registered pretrained_cfg size; follow the model
        data_args['input_size'] = (chans, *model_size)
    config = resolve_data_config(data_args, model=model)
    input_size = config['input_size']
    if model_size is not None and model_size != tuple(input_size[1:]):
        raise ConfigError(
            f'the data input size {input_size[1]}x{input_size[2]} (from --img-size/--input-size or the model\'s '
            f'pretrained config) does not match the model\'s img_size {model_size[0]}x{model_size[1]}; pass '
            f'--img-size {model_size[0]}, or set model_kwargs img_size={input_size[1]}')
    for dataset in datasets:  # images of the model's size and channels (gray 'L' images for 1 channel)
        base = dataset.dataset if isinstance(dataset, ClassBalancedSubset) else dataset
        if hasattr(base, 'set_img_size'):
            base.set_img_size(input_size[-1])
        if getattr(base, 'input_img_mode', None) in ('RGB', 'L'):
            base.input_img_mode = 'L' if input_size[0] == 1 else 'RGB'
    _check_data_channels(args, datasets[0], input_size[0])
    return config


def autocast_dtype(amp_dtype: Optional[str], device: torch.device) -> torch.dtype:
    """ The AMP dtype: `amp_dtype` when named, else what the device autocasts well: bfloat16 on CPU (float16
    autocast there ran 4-12x slower than float32, bfloat16 faster), float16 on accelerators (timm's default). """
    if amp_dtype:
        return getattr(torch, amp_dtype)
    return torch.bfloat16 if device.type == 'cpu' else torch.float16


def _check_data_channels(args: argparse.Namespace, dataset, chans: int) -> None:
    """ The images have the channels the model takes (--in-chans, --input-size or model_kwargs in_chans: one
    setting however it is spelled), read off the first image; a mismatch would fail in the first step. """
    base = dataset.dataset if isinstance(dataset, ClassBalancedSubset) else dataset
    if len(dataset) == 0 or getattr(base, 'transform', None) is not None:
        return
    item = dataset[0]
    image = item[0] if isinstance(item, (tuple, list)) and item else None
    bands = len(image.getbands()) if hasattr(image, 'getbands') else None
    if bands is not None and bands != chans:
        convertible = getattr(base, 'input_img_mode', None) in ('RGB', 'L')
        valid = '1 (read as gray) or 3 (RGB)' if convertible else f'{bands}'
        raise ConfigError(f'the model takes {counted(chans, "input channel")} (--in-chans, --input-size or model_kwargs '
                          f'in_chans), but the images of --dataset {args.dataset!r} have {bands} ({image.mode}); '
                          f'valid here: {valid}')


def build_optimizer(args: argparse.Namespace, model: nn.Module, device: torch.device):
    """ (optimizer, autocast context, loss scaler or None); --lr unset is lr_base scaled by the global batch. """
    if args.lr is None:
        global_batch = args.batch_size * args.world_size * args.grad_accum_steps
        ratio = global_batch / args.lr_base_size
        scale = args.lr_base_scale or ('sqrt' if any(o in args.opt.lower() for o in ('ada', 'lamb')) else 'linear')
        args.lr = args.lr_base * (math.sqrt(ratio) if scale == 'sqrt' else ratio)
        _logger.info(f'Learning rate {args.lr:.3g} from lr_base {args.lr_base} and global batch {global_batch}')
    optimizer = create_optimizer_v2(model, **optimizer_kwargs(cfg=args), **args.opt_kwargs)
    amp_autocast, loss_scaler = nullcontext, None
    if args.amp:
        amp_dtype = autocast_dtype(args.amp_dtype, device)
        if not args.amp_dtype:
            _logger.info(f'AMP: {amp_dtype} autocast on {device.type} (--amp-dtype chooses)')
        amp_autocast = partial(torch.autocast, device_type=device.type, dtype=amp_dtype)
        if device.type == 'cuda' and amp_dtype == torch.float16:
            loss_scaler = NativeScaler(device=device.type)
    return optimizer, amp_autocast, loss_scaler
