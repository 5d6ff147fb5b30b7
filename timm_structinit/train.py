#!/usr/bin/env python3
""" timm-structinit-train: train timm image classifiers (and this package's structured-init ViTs) from the CLI.

Everything but the loop is a timm component: `timm.data` (datasets, transforms, loader, Mixup/CutMix),
`timm.optim.create_optimizer_v2`, `timm.scheduler.create_scheduler_v2`, `timm.loss`, `timm.utils` (ModelEmaV3,
CheckpointSaver, summary CSV, metrics, grad clipping, seeding, distributed setup). Arguments and YAML keys carry
the names of timm's upstream train.py, so a config written for one runs on the other:

    timm-structinit-train -c configs/digits.yaml
    timm-structinit-train --model vit_tiny_patch2_32_mimetic --data-dir ../shared/data/cifar10 --val-split test
    torchrun --nproc_per_node=2 -m timm_structinit.train -c configs/quick_cifar10.yaml

Differences from the upstream script that protect results: a missing split folder is an error (timm would read the
whole root and evaluate on training images), an existing output directory is refused unless `--resume` or
`--overwrite`, every epoch's shuffling and augmentation is seeded from (seed, epoch, rank) so a resumed run repeats
the uninterrupted one, and distributed validation counts each image exactly once.

`--timm-train-script PATH` hands all other arguments to timm's own train.py after registering this package's models.
"""
import argparse
import difflib
import logging
import math
import os
import re
import runpy
import sys
import time
from collections import OrderedDict
from contextlib import nullcontext
from datetime import datetime
from functools import partial
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn
import yaml

import timm
import timm_structinit  # noqa: F401  registers this package's models with timm
from timm.data import FastCollateMixup, Mixup, create_loader, resolve_data_config
from timm.loss import LabelSmoothingCrossEntropy, SoftTargetCrossEntropy
from timm.models import clean_state_dict, create_model, load_checkpoint, load_state_dict, resume_checkpoint
from timm.optim import create_optimizer_v2, list_optimizers, optimizer_kwargs
from timm.scheduler import create_scheduler_v2, scheduler_kwargs
from timm.utils import (
    AverageMeter, CheckpointSaver, ModelEmaV3, NativeScaler, accuracy, dispatch_clip_grad, init_distributed_device,
    load_checkpoint_metadata, random_seed, trim_summary, unwrap_model, update_summary,
)

from .cli import OneLineArgumentParser, error_line
from .data import (
    ClassBalancedSubset, DataError, ImageReadError, build_dataset, check_dataset_name, dataset_classes,
    dataset_targets,
)
from .hub import _kwargs_cli, state_dict_mismatch
from .mass_tracking import TargetMassTracker, mass_columns

__all__ = ['main', 'train', 'parse_args', 'check_args', 'build_parser', 'load_config', 'ConfigError',
           'train_one_epoch', 'validate', 'seed_epoch', 'plot_summary', 'run_timm_train_script']

PROG = 'timm-structinit-train'
_logger = logging.getLogger('train')

# torchvision datasets whose PIL images are single-channel
GRAYSCALE_TORCH_DATASETS = ('mnist', 'kmnist', 'fashion_mnist', 'qmnist')
SCHEDULERS = ('cosine', 'tanh', 'step', 'constant', 'multistep', 'plateau', 'poly', 'wsd', 'rsqrt', 'none')
# files this entry point writes into an output directory; --overwrite removes exactly these
_OUTPUT_FILES = ('summary.csv', 'summary.png', 'target_mass.csv', 'target_mass.png', 'args.yaml', 'last.pth.tar',
                 'model_best.pth.tar', 'tmp.pth.tar')
# run-specific keys left out of the args.yaml written next to the checkpoints, so it can be reused with -c
_NOT_SAVED = ('config', 'resume', 'experiment', 'overwrite', 'local_rank', 'timm_train_script')


class ConfigError(ValueError):
    """ An argument or config value is invalid; the message names it and what would be valid. """


class KwargsAction(argparse.Action):
    """ `--model-kwargs k=v ...`: values parsed as Python literals, merged over the config file's dict. """

    def __call__(self, parser, namespace, values, option_string=None):
        import ast
        merged = dict(getattr(namespace, self.dest, None) or {})
        for item in values:
            if '=' not in item:
                parser.error(f'{option_string} expects key=value pairs, got {item!r}')
            key, value = item.split('=', 1)
            try:
                merged[key] = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                merged[key] = value  # a bare word is a string, so shells need no extra quoting
        setattr(namespace, self.dest, merged)


def build_parser() -> argparse.ArgumentParser:
    """ The argument parser; option names and defaults follow timm's upstream train.py. """
    parser = OneLineArgumentParser(
        prog=PROG, description='Train a timm image classifier (structured-init ViTs registered).',
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument('-c', '--config', default='', metavar='FILE.yaml',
                        help='YAML file whose keys (underscored option names) set the defaults; flags override it')
    parser.add_argument('--timm-train-script', default=None, metavar='PATH',
                        help="run timm's upstream train.py at PATH with all other arguments, models registered")

    group = parser.add_argument_group('Dataset')
    group.add_argument('--data-dir', default=None, metavar='DIR', help='path to the dataset (root dir)')
    group.add_argument('--dataset', '-d', default='', metavar='NAME',
                       help="'' for an ImageFolder dir, torch/cifar10, torch/cifar100, torch/svhn, sklearn/digits")
    group.add_argument('--train-split', default='train', help='training split (sub-folder for ImageFolder)')
    group.add_argument('--val-split', default='validation', help='evaluation split (sub-folder for ImageFolder)')
    group.add_argument('--dataset-download', action='store_true', help='download a torch/ dataset if missing')
    group.add_argument('--train-subset', type=int, default=None, metavar='N',
                       help='train on a deterministic class-balanced subset of N images')
    group.add_argument('--val-subset', type=int, default=None, metavar='N',
                       help='evaluate on a deterministic class-balanced subset of N images')
    group.add_argument('--subset-seed', type=int, default=0, help='seed choosing the subsets (kept apart from --seed)')

    group = parser.add_argument_group('Model')
    group.add_argument('--model', default='vit_tiny_patch2_32_mimetic', help='name of the model to train')
    group.add_argument('--pretrained', action='store_true', help='start from pretrained weights')
    group.add_argument('--initial-checkpoint', default='', metavar='PATH', help='load these weights before training')
    group.add_argument('--resume', default='', metavar='PATH',
                       help='continue from a checkpoint (file, or an output directory meaning its last.pth.tar)')
    group.add_argument('--no-resume-opt', action='store_true', help='do not restore the optimizer when resuming')
    group.add_argument('--num-classes', type=int, default=None, help='classes (default: from the dataset)')
    group.add_argument('--gp', default=None, help="global pool type ('token', 'avg', ...); default: the model's")
    group.add_argument('--img-size', type=int, default=None, help='input image size (data side)')
    group.add_argument('--in-chans', type=int, default=None, help='input channels')
    group.add_argument('--input-size', type=int, nargs=3, default=None, metavar=('C', 'H', 'W'),
                       help='input size (overrides --img-size and --in-chans)')
    group.add_argument('--crop-pct', type=float, default=None, help='evaluation center-crop fraction')
    group.add_argument('--mean', type=float, nargs='+', default=None, metavar='MEAN', help='pixel mean per channel')
    group.add_argument('--std', type=float, nargs='+', default=None, metavar='STD', help='pixel std per channel')
    group.add_argument('--interpolation', default='', help='resize interpolation (default: the model\'s)')
    group.add_argument('-b', '--batch-size', type=int, default=128, help='training batch size per process')
    group.add_argument('-vb', '--validation-batch-size', type=int, default=None,
                       help='evaluation batch size per process (default: --batch-size)')
    group.add_argument('--model-kwargs', nargs='*', default={}, action=KwargsAction, metavar='KEY=VALUE',
                       help='extra model arguments, e.g. embed_dim=128 depth=6')

    group = parser.add_argument_group('Device')
    group.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu', help='device')
    group.add_argument('--amp', action='store_true', help='automatic mixed precision')
    group.add_argument('--amp-dtype', default='float16', choices=('float16', 'bfloat16'), help='AMP dtype')
    group.add_argument('--dist-backend', default=None, help='process group backend (default: nccl on cuda, else gloo)')
    group.add_argument('--local-rank', '--local_rank', dest='local_rank', type=int, default=0,
                       help='set by older launchers; torchrun uses the LOCAL_RANK variable')

    group = parser.add_argument_group('Optimizer')
    group.add_argument('--opt', default='sgd', help='optimizer (timm.optim.list_optimizers())')
    group.add_argument('--opt-eps', type=float, default=None, help='optimizer epsilon')
    group.add_argument('--opt-betas', type=float, nargs='+', default=None, help='optimizer betas')
    group.add_argument('--momentum', type=float, default=0.9, help='optimizer momentum')
    group.add_argument('--weight-decay', type=float, default=2e-5, help='weight decay')
    group.add_argument('--clip-grad', type=float, default=None, help='gradient clipping threshold (off if unset)')
    group.add_argument('--clip-mode', default='norm', choices=('norm', 'value', 'agc'), help='gradient clipping mode')
    group.add_argument('--layer-decay', type=float, default=None, help='layer-wise learning rate decay')
    group.add_argument('--opt-kwargs', nargs='*', default={}, action=KwargsAction, metavar='KEY=VALUE',
                       help='extra optimizer arguments')

    group = parser.add_argument_group('Learning rate schedule')
    group.add_argument('--sched', default='cosine', help=f'scheduler, one of {", ".join(SCHEDULERS)}')
    group.add_argument('--sched-on-updates', action='store_true', help='step the schedule per update, not per epoch')
    group.add_argument('--lr', type=float, default=None, help='learning rate (default: lr_base scaled by batch)')
    group.add_argument('--lr-base', type=float, default=0.1, help='learning rate at batch --lr-base-size')
    group.add_argument('--lr-base-size', type=int, default=256, help='batch size of --lr-base')
    group.add_argument('--lr-base-scale', default='', choices=('', 'linear', 'sqrt'),
                       help="batch scaling of --lr-base ('' = sqrt for ada*/lamb optimizers, else linear)")
    group.add_argument('--lr-noise', type=float, nargs='+', default=None, help='learning rate noise on/off epochs')
    group.add_argument('--lr-noise-pct', type=float, default=0.67, help='learning rate noise limit')
    group.add_argument('--lr-noise-std', type=float, default=1.0, help='learning rate noise std')
    group.add_argument('--lr-cycle-mul', type=float, default=1.0, help='cycle length multiplier')
    group.add_argument('--lr-cycle-decay', type=float, default=0.5, help='per-cycle learning rate decay')
    group.add_argument('--lr-cycle-limit', type=int, default=1, help='number of cycles')
    group.add_argument('--lr-k-decay', type=float, default=1.0, help='k-decay of cosine / poly schedules')
    group.add_argument('--warmup-lr', type=float, default=1e-5, help='warm-up start learning rate')
    group.add_argument('--min-lr', type=float, default=0.0, help='learning rate floor')
    group.add_argument('--epochs', type=int, default=300, help='epochs to train')
    group.add_argument('--decay-milestones', type=int, nargs='+', default=[90, 180, 270], help='multistep milestones')
    group.add_argument('--decay-epochs', type=float, default=90, help='epochs between decays (step)')
    group.add_argument('--warmup-epochs', type=int, default=5, help='warm-up epochs')
    group.add_argument('--warmup-prefix', action='store_true', help='warm-up comes before, not inside, the schedule')
    group.add_argument('--cooldown-epochs', type=int, default=0, help='epochs at min_lr after the schedule')
    group.add_argument('--patience-epochs', type=int, default=10, help='plateau patience')
    group.add_argument('--decay-rate', '--dr', type=float, default=0.1, help='decay rate')

    group = parser.add_argument_group('Augmentation and regularization')
    group.add_argument('--no-aug', action='store_true', help='no training augmentation')
    group.add_argument('--train-crop-mode', default=None, help="training crop mode ('rrc', 'rkrc', 'rkrr')")
    group.add_argument('--scale', type=float, nargs='+', default=[0.08, 1.0], metavar='PCT',
                       help='random-resized-crop area range')
    group.add_argument('--ratio', type=float, nargs='+', default=[3. / 4., 4. / 3.], metavar='RATIO',
                       help='random-resized-crop aspect range')
    group.add_argument('--hflip', type=float, default=0.5, help='horizontal flip probability')
    group.add_argument('--vflip', type=float, default=0.0, help='vertical flip probability')
    group.add_argument('--color-jitter', type=float, default=0.4, help='color jitter factor (unused with --aa)')
    group.add_argument('--aa', default=None, help="auto-augment policy, e.g. 'rand-m9-mstd0.5-inc1'")
    group.add_argument('--reprob', type=float, default=0.0, help='random erasing probability (Cutout)')
    group.add_argument('--remode', default='pixel', choices=('const', 'rand', 'pixel'), help='random erasing fill')
    group.add_argument('--recount', type=int, default=1, help='random erasing count')
    group.add_argument('--resplit', action='store_true', help='no random erasing on the first augmentation split')
    group.add_argument('--mixup', type=float, default=0.0, help='mixup alpha (on if > 0)')
    group.add_argument('--cutmix', type=float, default=0.0, help='cutmix alpha (on if > 0)')
    group.add_argument('--cutmix-minmax', type=float, nargs='+', default=None, help='cutmix min/max area ratio')
    group.add_argument('--mixup-prob', type=float, default=1.0, help='probability of mixup or cutmix per batch')
    group.add_argument('--mixup-switch-prob', type=float, default=0.5, help='probability of cutmix over mixup')
    group.add_argument('--mixup-mode', default='batch', choices=('batch', 'pair', 'elem'), help='mixup mode')
    group.add_argument('--mixup-off-epoch', type=int, default=0, help='turn mixup off from this epoch (0: never)')
    group.add_argument('--smoothing', type=float, default=0.1, help='label smoothing')
    group.add_argument('--train-interpolation', default='random', help='training interpolation')
    group.add_argument('--drop', type=float, default=0.0, help='dropout rate')
    group.add_argument('--drop-path', type=float, default=None, help='drop path (stochastic depth) rate')
    group.add_argument('--drop-block', type=float, default=None, help='drop block rate (CNNs)')

    group = parser.add_argument_group('Model exponential moving average')
    group.add_argument('--model-ema', action='store_true', help='keep and evaluate an EMA of the weights')
    group.add_argument('--model-ema-force-cpu', action='store_true', help='keep the EMA on CPU (not evaluated)')
    group.add_argument('--model-ema-decay', type=float, default=0.9998, help='EMA decay')
    group.add_argument('--model-ema-warmup', action='store_true', help='warm the EMA decay up')

    group = parser.add_argument_group('Miscellaneous')
    group.add_argument('--seed', type=int, default=42, help='random seed')
    group.add_argument('--log-interval', type=int, default=50, help='batches between log lines')
    group.add_argument('--checkpoint-hist', type=int, default=10, help='numbered checkpoints to keep')
    group.add_argument('-j', '--workers', type=int, default=4, help='data loading processes per training process')
    group.add_argument('--pin-mem', action='store_true', help='pin loader memory (faster GPU transfer)')
    group.add_argument('--no-prefetcher', action='store_true', help="do not use timm's batch prefetcher")
    group.add_argument('--output', default='', metavar='DIR', help='output root (default: ./output/train)')
    group.add_argument('--experiment', default='', help='output sub-folder (default: date-time-model)')
    group.add_argument('--overwrite', action='store_true',
                       help='reuse an existing output folder, deleting the files a previous run wrote there')
    group.add_argument('--eval-metric', default='top1', choices=('top1', 'top5', 'loss'),
                       help='metric ranking checkpoints')
    group.add_argument('--plot', action='store_true', help='draw loss and accuracy curves to summary.png')
    return parser


def _action_index(parser: argparse.ArgumentParser) -> Dict[str, argparse.Action]:
    # options that only make sense on the command line are not config keys
    cli_only = ('help', 'config', 'timm_train_script', argparse.SUPPRESS)
    return {a.dest: a for a in parser._actions if a.dest not in cli_only}


def _coerce(action: argparse.Action, key: str, value: Any, where: str) -> Any:
    """ Check and convert one YAML value to what the command-line option would produce. """
    def bad(expected: str) -> ConfigError:
        return ConfigError(f'{where}: {key}={value!r} is not valid; expected {expected}')

    def scalar(v: Any) -> Any:
        kind = action.type
        if kind is float:
            if isinstance(v, bool) or not isinstance(v, (int, float, str)):
                raise bad('a number')
            try:
                return float(v)  # also YAML 1.1 strings such as 3e-3
            except ValueError:
                raise bad('a number') from None
        if kind is int:
            if isinstance(v, bool) or not (isinstance(v, int) or (isinstance(v, float) and v.is_integer())):
                raise bad('an integer')
            return int(v)
        if isinstance(v, (dict, list)):
            raise bad('a single value')
        return v if isinstance(v, str) else str(v)

    if value is None:
        return None
    if isinstance(action, KwargsAction):
        if not isinstance(value, dict):
            raise bad('a mapping of keyword arguments')
        return dict(value)
    if action.nargs == 0:  # store_true flags
        if not isinstance(value, bool):
            raise bad('true or false')
        return value
    if action.nargs in ('+', '*') or isinstance(action.nargs, int):
        if not isinstance(value, (list, tuple)):
            raise bad('a list')
        if isinstance(action.nargs, int) and len(value) != action.nargs:
            raise bad(f'a list of {action.nargs} values')
        value = [scalar(v) for v in value]
    else:
        value = scalar(value)
    if action.choices is not None and value not in action.choices:
        raise bad(f'one of {list(action.choices)}')
    return value


def load_config(path: str, parser: argparse.ArgumentParser) -> Dict[str, Any]:
    """ Read a YAML config into parser defaults; an unknown key is an error naming it and the closest valid key. """
    if not os.path.isfile(path):
        raise ConfigError(f'--config {path!r}: no such file')
    try:
        with open(path, 'rb') as f:
            text = f.read().decode('utf-8-sig')
    except UnicodeDecodeError as e:
        raise ConfigError(f'--config {path!r} is not UTF-8 text (byte {e.object[e.start]:#04x} at offset '
                          f'{e.start}); save it as UTF-8') from None
    except OSError as e:
        raise ConfigError(f'--config {path!r} cannot be read: {e.strerror or e}') from None
    try:
        cfg = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, 'problem_mark', None)
        where = f' at line {mark.line + 1}, column {mark.column + 1}' if mark is not None else ''
        raise ConfigError(f'--config {path!r} is not valid YAML: {getattr(e, "problem", None) or error_line(e)}'
                          f'{where}') from None
    cfg = cfg or {}
    if not isinstance(cfg, dict):
        raise ConfigError(f'--config {path!r} must be a mapping of option names to values')
    actions = _action_index(parser)
    out = {}
    for key, value in cfg.items():
        if key not in actions:
            key_str = str(key)
            close = difflib.get_close_matches(key_str.replace('-', '_'), list(actions), n=1, cutoff=0.6)
            hint = f"; did you mean '{close[0]}'?" if close else ''
            raise ConfigError(
                f"unknown key '{key_str}' in {path}{hint} (keys are the option names with underscores, "
                f"see {PROG} --help)")
        out[key] = _coerce(actions[key], key, value, path)
    return out


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """ Parse the command line; `-c FILE.yaml` sets defaults, other flags override them. Does not validate. """
    argv = list(sys.argv[1:] if argv is None else argv)
    config_parser = OneLineArgumentParser(prog=PROG, add_help=False)
    config_parser.add_argument('-c', '--config', default='')
    known, _ = config_parser.parse_known_args(argv)
    parser = build_parser()
    if known.config:
        parser.set_defaults(**load_config(known.config, parser))
    return parser.parse_args(argv)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


# the sections timm's auto-augment parsers read (timm/data/auto_augment.py), with the type of their value; timm
# silently ignores a section without a digit, so a typo would go unnoticed
_AA_SECTIONS = {
    'rand': dict(m=int, n=int, p=float, mstd=float, mmax=int, inc=int),
    'augmix': dict(m=int, w=int, d=int, a=float, b=int, mstd=float),
    'auto': dict(mstd=float),
}
_AA_POLICIES = ('original', 'originalr', 'v0', 'v0r', '3a')  # the 'auto' policies
_AA_RAND_TRANSFORMS = ('weights', '3aw', '3a')  # rand-...-t<name>


def _check_aa(policy: str) -> None:
    """ Check an auto-augment policy string against timm's grammar, section by section. """
    name, *sections = policy.split('-')
    kind = name if name in ('rand', 'augmix') else 'auto'
    keys = _AA_SECTIONS[kind]
    grammar = ', '.join(f'{k}<{t.__name__}>' for k, t in keys.items())
    if kind == 'rand':
        grammar += f', t<{"|".join(_AA_RAND_TRANSFORMS)}>'
    examples = "e.g. 'rand-m9-mstd0.5-inc1', 'augmix-m5-w4-d2', 'original-mstd0.5'"
    _check(kind != 'auto' or name in _AA_POLICIES,
           f"--aa {policy!r}: unknown policy {name!r}; valid: rand-..., augmix-..., {', '.join(_AA_POLICIES)} "
           f"({examples})")
    for section in sections:
        if kind == 'rand' and section.startswith('t'):
            ok = section[1:] in _AA_RAND_TRANSFORMS
        else:
            key, value = re.fullmatch(r'(\D*)(.*)', section).groups()
            number = r'\d+' if keys.get(key) is int else r'\d+(\.\d*)?'
            ok = key in keys and re.fullmatch(number, value) is not None
        _check(ok, f"--aa {policy!r}: section {section!r} is not valid; {name!r} takes {grammar} ({examples})")


def _chans_option(args: argparse.Namespace) -> Optional[int]:
    """ The input channels the user set by option (--input-size or --in-chans), else None. """
    return args.input_size[0] if args.input_size else args.in_chans


def _in_chans(args: argparse.Namespace) -> int:
    """ Input channels of the model and the data: the option, else model_kwargs in_chans, else 3. """
    chans = _chans_option(args)
    if chans is None and isinstance(args.model_kwargs, dict):
        chans = args.model_kwargs.get('in_chans')
    return 3 if chans is None else chans


# model arguments that have an option of their own: (option, model argument)
_MODEL_ARG_OPTIONS = (('--in-chans/--input-size', 'in_chans'), ('--num-classes', 'num_classes'),
                      ('--drop-path', 'drop_path_rate'), ('--drop-block', 'drop_block_rate'), ('--gp', 'global_pool'))


def check_args(args: argparse.Namespace, check_model: bool = True) -> None:
    """ Validate every value before any work is done; errors name the value and what is valid. """
    if check_model and ':' not in args.model and not timm.is_model(args.model):
        close = difflib.get_close_matches(args.model, timm.list_models(), n=3)
        raise ConfigError(
            f'--model {args.model!r} is not a registered model'
            + (f'; did you mean {", ".join(close)}?' if close else '; see timm.list_models()'))
    for action in build_parser()._actions:  # inf and nan pass every range check below
        value = getattr(args, action.dest, None) if action.type is float else None
        bad = [v for v in (value if isinstance(value, (list, tuple)) else [value])
               if v is not None and not math.isfinite(v)]
        _check(not bad, f'{max(action.option_strings, key=len)} {value} must be a finite number')
    _check(isinstance(args.model_kwargs, dict), f'model_kwargs {args.model_kwargs!r} must be a mapping')
    in_chans = _in_chans(args)
    _check(isinstance(in_chans, int) and not isinstance(in_chans, bool) and in_chans >= 1,
           f'model_kwargs in_chans={in_chans!r} must be a positive integer')
    option_values = dict(in_chans=_chans_option(args), num_classes=args.num_classes, drop_path_rate=args.drop_path,
                         drop_block_rate=args.drop_block, global_pool=args.gp)
    for flag, key in _MODEL_ARG_OPTIONS:
        # only a value the user set can contradict model_kwargs, not an option's default
        value = option_values[key]
        _check(value is None or key not in args.model_kwargs or args.model_kwargs[key] == value,
               f'model_kwargs {key}={args.model_kwargs.get(key)!r} contradicts {flag} {value}; set it in one place')
    try:
        kind = check_dataset_name(args.dataset)
    except DataError as e:
        raise ConfigError(str(e)) from None
    _check(kind == 'digits' or bool(args.data_dir),
           f'--dataset {args.dataset!r} needs --data-dir (e.g. --data-dir ../shared/data/cifar10 for the '
           f'ImageFolder copy of CIFAR-10)')
    if kind == 'torch' and args.dataset.split('/')[-1].lower() in GRAYSCALE_TORCH_DATASETS:
        _check(in_chans == 1, f'--dataset {args.dataset!r} has 1-channel images but the model would take '
                              f'{in_chans}; pass --in-chans 1')
    positive_ints = ('epochs', 'batch_size', 'log_interval', 'checkpoint_hist', 'lr_base_size', 'recount')
    for name in positive_ints:
        _check(getattr(args, name) >= 1, f'--{name.replace("_", "-")} {getattr(args, name)} must be >= 1')
    for name in ('validation_batch_size', 'train_subset', 'val_subset', 'num_classes', 'img_size', 'in_chans'):
        value = getattr(args, name)
        _check(value is None or value >= 1, f'--{name.replace("_", "-")} {value} must be >= 1')
    for name in ('workers', 'warmup_epochs', 'cooldown_epochs', 'mixup_off_epoch', 'seed', 'subset_seed'):
        _check(getattr(args, name) >= 0, f'--{name.replace("_", "-")} {getattr(args, name)} must be >= 0')
    for name in ('weight_decay', 'mixup', 'cutmix', 'drop', 'warmup_lr', 'min_lr', 'momentum'):
        _check(getattr(args, name) >= 0, f'--{name.replace("_", "-")} {getattr(args, name)} must be >= 0')
    for name in ('hflip', 'vflip', 'reprob', 'mixup_prob', 'mixup_switch_prob'):
        value = getattr(args, name)
        _check(0 <= value <= 1, f'--{name.replace("_", "-")} {value} must be in [0, 1]')
    _check(0 <= args.smoothing < 1, f'--smoothing {args.smoothing} must be in [0, 1)')
    _check(args.drop_path is None or 0 <= args.drop_path < 1, f'--drop-path {args.drop_path} must be in [0, 1)')
    _check(args.lr is None or args.lr > 0, f'--lr {args.lr} must be > 0')
    _check(args.clip_grad is None or args.clip_grad > 0, f'--clip-grad {args.clip_grad} must be > 0 (or unset)')
    _check(0 < args.model_ema_decay < 1, f'--model-ema-decay {args.model_ema_decay} must be in (0, 1)')
    _check(len(args.scale) == 2 and 0 < args.scale[0] <= args.scale[1] <= 1,
           f'--scale {args.scale} must be two numbers 0 < lo <= hi <= 1')
    _check(len(args.ratio) == 2 and 0 < args.ratio[0] <= args.ratio[1],
           f'--ratio {args.ratio} must be two numbers 0 < lo <= hi')
    _check(args.input_size is None or all(v >= 1 for v in args.input_size),
           f'--input-size {args.input_size} must be three positive integers C H W')
    for name in ('mean', 'std'):
        value = getattr(args, name)
        _check(value is None or len(value) in (1, in_chans) or len(set(value)) == 1,
               f'--{name} {value} must have 1 value or one per input channel ({in_chans})')
    _check(args.std is None or all(v > 0 for v in args.std), f'--std {args.std} must be positive')
    _check(args.sched in SCHEDULERS, f'--sched {args.sched!r} is not valid; choose one of {", ".join(SCHEDULERS)}')
    optimizers = list_optimizers()
    opt_name = args.opt.lower().split('_')[-1]
    _check(opt_name in optimizers, f'--opt {args.opt!r} is not a timm optimizer; valid: {", ".join(optimizers)}')
    _check(args.opt_betas is None or len(args.opt_betas) in (2, 3), f'--opt-betas {args.opt_betas} needs 2 values')
    _check(args.cutmix_minmax is None or len(args.cutmix_minmax) == 2,
           f'--cutmix-minmax {args.cutmix_minmax} needs 2 values')
    mixup_active = args.mixup > 0 or args.cutmix > 0 or args.cutmix_minmax is not None
    _check(not mixup_active or args.batch_size % 2 == 0,
           f'--batch-size {args.batch_size} must be even with mixup/cutmix, which pairs images within a batch')
    if args.aa:
        _check_aa(args.aa)
        from timm.data import create_transform
        try:  # timm parses the policy string lazily; build it once here to fail before any work
            create_transform(32, is_training=True, auto_augment=args.aa)
        except (AssertionError, ValueError, KeyError, IndexError) as e:
            raise ConfigError(
                f"--aa {args.aa!r} is not a valid auto-augment policy ({e or type(e).__name__}); examples: "
                f"'rand-m9-mstd0.5-inc1', 'augmix-m5-w4-d2', 'original', 'v0'") from None
    if args.resume:
        path = _resume_path(args.resume)
        _check(not os.path.isdir(args.resume) or os.path.isfile(path),
               f'--resume {args.resume!r}: nothing to resume, {os.path.abspath(args.resume)} holds no last.pth.tar '
               f'(no epoch of that run finished); start it again without --resume (with --overwrite to reuse '
               f'that folder)')
        _check(os.path.isfile(path), f'--resume {args.resume!r}: no checkpoint at {os.path.abspath(path)}')
    if args.initial_checkpoint:
        _check(os.path.isfile(args.initial_checkpoint),
               f'--initial-checkpoint {args.initial_checkpoint!r}: no such file')
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise ConfigError("--plot needs matplotlib: pip install 'timm-structinit[plots]'") from None


def _resume_path(resume: str) -> str:
    return os.path.join(resume, 'last.pth.tar') if os.path.isdir(resume) else resume


def seed_epoch(seed: int, epoch: int, rank: int = 0) -> None:
    """ Seed python, numpy and torch from (seed, epoch, rank) at the start of every epoch.

    The loader's shuffling, its workers' augmentation seeds, mixup, random erasing and dropout then depend on the
    epoch alone, not on how many epochs ran in this process, so a resumed run repeats the uninterrupted one.
    """
    epoch_seed = int(np.random.SeedSequence([seed, epoch, rank]).generate_state(1)[0])
    random_seed(epoch_seed, 0)


def _mean_lr(optimizer: torch.optim.Optimizer) -> float:
    lrs = [group['lr'] for group in optimizer.param_groups]
    return sum(lrs) / len(lrs)


def _all_reduce_sum(values: List[float], device: torch.device, distributed: bool) -> List[float]:
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    if distributed:
        torch.distributed.all_reduce(tensor)
    return tensor.tolist()


def _progress(total: int, desc: str, enabled: bool):
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, disable=not enabled, leave=False, dynamic_ncols=True, file=sys.stdout)


def train_one_epoch(
        epoch: int,
        model: nn.Module,
        loader,
        optimizer: torch.optim.Optimizer,
        loss_fn: Callable,
        args: argparse.Namespace,
        device: torch.device,
        lr_scheduler=None,
        amp_autocast: Callable = nullcontext,
        loss_scaler: Optional[NativeScaler] = None,
        model_ema: Optional[ModelEmaV3] = None,
        mixup_fn: Optional[Mixup] = None,
        num_updates: int = 0,
        show_progress: bool = False,
        log: bool = True,
) -> Tuple[OrderedDict, int]:
    """ One pass over the training loader; returns ({'loss', 'img_per_sec'}, updated num_updates). """
    model.train()
    parameters = [p for p in model.parameters() if p.requires_grad]
    prefetcher = not args.no_prefetcher
    world_size = getattr(args, 'world_size', 1)
    distributed = getattr(args, 'distributed', False)
    num_batches = len(loader)
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    samples = 0
    batch_time = AverageMeter()
    recent_loss = AverageMeter()
    bar = _progress(num_batches, f'epoch {epoch + 1}', show_progress)
    start = end = time.perf_counter()
    for batch_idx, (inputs, target) in enumerate(loader):
        if not prefetcher:
            inputs, target = inputs.to(device), target.to(device)
            if mixup_fn is not None:
                inputs, target = mixup_fn(inputs, target)
        with amp_autocast():
            output = model(inputs)
            loss = loss_fn(output, target)
        optimizer.zero_grad(set_to_none=True)
        if loss_scaler is not None:
            loss_scaler(loss, optimizer, clip_grad=args.clip_grad, clip_mode=args.clip_mode, parameters=parameters)
        else:
            loss.backward()
            if args.clip_grad is not None:
                dispatch_clip_grad(parameters, args.clip_grad, mode=args.clip_mode)
            optimizer.step()
        num_updates += 1
        if model_ema is not None:
            model_ema.update(unwrap_model(model), step=num_updates)
        batch_size = inputs.size(0)
        samples += batch_size
        loss_sum += loss.detach().double() * batch_size
        batch_time.update(time.perf_counter() - end)
        end = time.perf_counter()
        last = batch_idx == num_batches - 1
        if last or (batch_idx + 1) % args.log_interval == 0:
            # syncing only here keeps GPUs busy between log points
            loss_now = loss.item()
            if not math.isfinite(loss_now):
                raise FloatingPointError(
                    f'training loss is {loss_now} in epoch {epoch + 1}, batch {batch_idx + 1}; lower --lr '
                    f'(now {_mean_lr(optimizer):.3g}) or set --clip-grad')
            recent_loss.update(loss_now, batch_size)
            rate = batch_size * world_size / max(batch_time.avg, 1e-9)
            if show_progress:
                bar.set_postfix(loss=f'{loss_now:.4f}', lr=f'{_mean_lr(optimizer):.2e}', img_s=f'{rate:.0f}')
            elif log:
                done = batch_idx + 1
                _logger.info(
                    f'Train: epoch {epoch + 1} [{done:>4d}/{num_batches} ({100. * done / num_batches:>3.0f}%)]'
                    f'  loss {loss_now:.4f} ({recent_loss.avg:.4f})  lr {_mean_lr(optimizer):.3e}  {rate:.1f} img/s')
        bar.update(1)
        if lr_scheduler is not None:
            lr_scheduler.step_update(num_updates=num_updates, metric=recent_loss.avg)
    bar.close()
    elapsed = time.perf_counter() - start
    total_loss, total_samples = _all_reduce_sum([loss_sum.item(), float(samples)], device, distributed)
    if total_samples == 0:
        raise DataError('the training loader produced no batch: the training set is smaller than --batch-size '
                        '(per process, the last incomplete batch is dropped); lower --batch-size')
    metrics = OrderedDict(loss=total_loss / total_samples, img_per_sec=total_samples / max(elapsed, 1e-9))
    return metrics, num_updates


@torch.no_grad()
def validate(
        model: nn.Module,
        loader,
        args: argparse.Namespace,
        device: torch.device,
        amp_autocast: Callable = nullcontext,
        num_classes: int = 1000,
) -> OrderedDict:
    """ Loss, top-1 and top-5 (in %) over the evaluation loader, each image counted once across processes. """
    model.eval()
    prefetcher = not args.no_prefetcher
    distributed = getattr(args, 'distributed', False)
    topk = (1, min(5, num_classes))
    sampler = getattr(getattr(loader, 'loader', loader), 'sampler', None)
    # the distributed eval sampler pads ranks to equal length with repeats at the end; count only real samples
    remaining = getattr(sampler, 'num_valid_samples', None)
    loss_fn = nn.CrossEntropyLoss(reduction='sum')
    loss_sum = correct1 = correct5 = count = 0.
    for inputs, target in loader:
        if not prefetcher:
            inputs, target = inputs.to(device), target.to(device)
        with amp_autocast():
            output = model(inputs)
        if remaining is not None:
            keep = min(int(remaining), output.size(0))
            remaining -= keep
            output, target = output[:keep], target[:keep]
            if keep == 0:
                continue
        n = output.size(0)
        loss_sum += loss_fn(output.float(), target).item()
        acc1, acc5 = accuracy(output, target, topk=topk)
        correct1 += acc1.item() * n / 100.
        correct5 += acc5.item() * n / 100.
        count += n
    loss_sum, correct1, correct5, count = _all_reduce_sum([loss_sum, correct1, correct5, count], device, distributed)
    count = max(count, 1.)
    return OrderedDict(loss=loss_sum / count, top1=100. * correct1 / count, top5=100. * correct5 / count,
                       count=int(round(count)))


def plot_summary(summary_csv: str, png_path: str) -> str:
    """ Draw training/eval loss and eval accuracy per epoch from a summary CSV into a PNG; returns the PNG path. """
    import csv
    try:
        from matplotlib.figure import Figure  # no pyplot: no GUI backend, no global state
    except ImportError:
        raise ConfigError("plotting needs matplotlib: pip install 'timm-structinit[plots]'") from None
    with open(summary_csv, newline='') as f:
        rows = [r for r in csv.DictReader(f) if r.get('epoch') not in (None, '', 'epoch')]
    if not rows:
        raise ValueError(f'{summary_csv} has no epochs to plot')

    def column(name: str) -> Optional[List[float]]:
        return [float(r[name]) for r in rows] if name in rows[0] else None

    epochs = [e + 1 for e in column('epoch')]  # counted from 1, as the log prints them
    fig = Figure(figsize=(10, 4), dpi=100)
    ax_loss, ax_acc = fig.subplots(1, 2)
    for name, label in (('train_loss', 'train'), ('eval_loss', 'eval'), ('eval_ema_loss', 'eval (EMA)')):
        values = column(name)
        if values is not None:
            ax_loss.plot(epochs, values, marker='.', label=label)
    for name, label in (('eval_top1', 'top-1'), ('eval_top5', 'top-5'), ('eval_ema_top1', 'top-1 (EMA)')):
        values = column(name)
        if values is not None:
            ax_acc.plot(epochs, values, marker='.', label=label)
    ax_loss.set(xlabel='epoch', ylabel='loss', title='loss')
    ax_acc.set(xlabel='epoch', ylabel='accuracy (%)', title='eval accuracy')
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(os.path.basename(os.path.dirname(os.path.abspath(summary_csv))), fontsize=9)
    fig.tight_layout()
    tmp = png_path + '.tmp.png'
    fig.savefig(tmp)
    os.replace(tmp, png_path)
    return png_path


def _output_dir(args: argparse.Namespace) -> Tuple[str, bool]:
    """ Decide the output folder; returns (path, continuing) and refuses to write into a used folder. """
    root = args.output or './output/train'
    resume_dir = os.path.dirname(os.path.abspath(_resume_path(args.resume))) if args.resume else None
    if args.experiment:
        path = os.path.join(root, args.experiment)
    elif resume_dir is not None:
        path = resume_dir  # continue in the folder of the checkpoint
    else:
        path = os.path.join(root, '-'.join([datetime.now().strftime('%Y%m%d-%H%M%S'), args.model.replace('/', '_')]))
    continuing = resume_dir is not None and os.path.abspath(path) == resume_dir
    _check_writable_folder(path, args.output)
    used = os.path.isdir(path) and any(os.scandir(path))
    if used and not continuing and not args.overwrite:
        last = os.path.join(path, 'last.pth.tar')
        resume = f'pass --resume {last} to continue that run, ' if os.path.isfile(last) else (
            'it holds no checkpoint, so there is nothing to resume; ')
        raise ConfigError(f'output folder {os.path.abspath(path)} already exists and is not empty; {resume}pass '
                          f'--overwrite to replace its files, or another --experiment')
    return path, continuing


def _check_writable_folder(path: str, output: str) -> None:
    """ Refuse an output folder that is a file, or lies in a folder this process cannot write. """
    flag = f'--output {output!r}' if output else f'output folder {path}'
    missing = _first_missing(path)
    existing = os.path.dirname(missing) if missing else os.path.abspath(path)
    if not os.path.isdir(existing):
        raise ConfigError(f'{flag}: {existing} is a file, not a folder')
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f'{flag}: no permission to write in {existing}')


def _run_files(path: str) -> List[str]:
    """ The files of `path` this entry point writes. """
    return [os.path.join(path, name) for name in os.listdir(path)
            if name in _OUTPUT_FILES or (name.startswith('checkpoint-') and name.endswith('.pth.tar'))]


def _prepare_output_dir(path: str, continuing: bool, overwrite: bool) -> None:
    os.makedirs(path, exist_ok=True)
    if overwrite and not continuing:
        for file in _run_files(path):
            os.remove(file)


def _first_missing(path: str) -> Optional[str]:
    """ The outermost folder of `path` that does not exist yet (None if `path` exists). """
    missing, path = None, os.path.abspath(path)
    while not os.path.exists(path):
        missing, path = path, os.path.dirname(path)
    return missing


def _remove_unfinished_run(path: str, created: Optional[str]) -> None:
    """ A new run that stopped before its first checkpoint: remove the files it wrote, and the folders it made. """
    for file in _run_files(path):
        os.remove(file)
    path = os.path.abspath(path)
    while created is not None and path.startswith(created) and not os.listdir(path):
        os.rmdir(path)
        path = os.path.dirname(path)


def _save_args(args: argparse.Namespace, path: str) -> None:
    parser_keys = set(_action_index(build_parser()))
    cfg = {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(args).items()
           if k in parser_keys and k not in _NOT_SAVED}
    tmp = path + '.tmp'
    with open(tmp, 'w') as f:
        yaml.safe_dump(cfg, f, default_flow_style=False, sort_keys=True)
    os.replace(tmp, path)


def _build_datasets(args: argparse.Namespace):
    def build(split: str, flag: str):
        return build_dataset(args.dataset, args.data_dir, split, flag, download=args.dataset_download)

    dataset_train = build(args.train_split, '--train-split')
    dataset_eval = build(args.val_split, '--val-split')
    train_root = getattr(getattr(dataset_train, 'reader', None), 'root', None)
    if train_root is not None and train_root == getattr(getattr(dataset_eval, 'reader', None), 'root', None):
        raise ConfigError(f'--train-split {args.train_split!r} and --val-split {args.val_split!r} are the same '
                          f'folder ({train_root}); evaluating on training images is refused')
    train_classes, eval_classes = dataset_classes(dataset_train), dataset_classes(dataset_eval)
    if train_classes is not None and eval_classes is not None and train_classes != eval_classes:
        missing = sorted(set(train_classes) ^ set(eval_classes))
        raise DataError(f'training and evaluation splits have different classes (differing: {missing[:10]}); '
                        f'labels would not line up')
    if args.train_subset:
        dataset_train = ClassBalancedSubset(dataset_train, args.train_subset, args.subset_seed, '--train-subset')
    if args.val_subset:
        dataset_eval = ClassBalancedSubset(dataset_eval, args.val_subset, args.subset_seed, '--val-subset')
    return dataset_train, dataset_eval


def _set_input_size(dataset, input_size: Sequence[int]) -> None:
    """ Let a dataset produce images of the model's size and channels (gray 'L' images for 1 channel). """
    base = dataset.dataset if isinstance(dataset, ClassBalancedSubset) else dataset
    if hasattr(base, 'set_img_size'):
        base.set_img_size(input_size[-1])
    if getattr(base, 'input_img_mode', None) in ('RGB', 'L'):
        base.input_img_mode = 'L' if input_size[0] == 1 else 'RGB'


def _check_checkpoint_fits(model: nn.Module, state_dict: Dict[str, Any], flag: str, path: str,
                           args: argparse.Namespace) -> None:
    """ Refuse a checkpoint whose weights do not fit `model`, saying which model it is for and which keys differ. """
    mismatch = state_dict_mismatch(model.state_dict(), state_dict)
    if not mismatch:
        return
    try:  # a timm training checkpoint records the model and its arguments
        meta = load_checkpoint_metadata(_resume_path(path))
    except Exception:
        meta = None
    arch = meta.get('arch') if isinstance(meta, dict) else None
    saved = meta.get('args') if isinstance(meta, dict) else None
    saved_kwargs = getattr(saved, 'model_kwargs', None) if saved is not None else None
    ours = f'--model {args.model}' + (f' with model_kwargs {args.model_kwargs}' if args.model_kwargs else '')
    theirs = f'{arch} weights' if arch else 'weights of another model'
    fix = [f'--model {arch}'] if arch and arch != args.model else []
    if isinstance(saved_kwargs, dict):
        theirs += f' trained with model_kwargs {saved_kwargs}'
        if saved_kwargs != args.model_kwargs:
            fix.append(f'--model-kwargs {_kwargs_cli(saved_kwargs)}' if saved_kwargs else 'no --model-kwargs')
    hint = f'pass {" ".join(fix)}' if fix else 'build the model it was saved from'
    raise ConfigError(f'{flag} {path!r} does not fit {ours}: it holds {theirs} (keys: {mismatch}); {hint}')


def _fixed_img_size(model: nn.Module) -> Optional[Tuple[int, int]]:
    """ The (H, W) a patch-embedding model requires, or None when it takes any size. """
    patch_embed = getattr(unwrap_model(model), 'patch_embed', None)
    size = getattr(patch_embed, 'img_size', None)
    if size is None or getattr(patch_embed, 'dynamic_img_size', False) \
            or not getattr(patch_embed, 'strict_img_size', True):
        return None
    return tuple(size)


def _check_input_size(model: nn.Module, input_size: Sequence[int]) -> None:
    model_size = _fixed_img_size(model)
    if model_size is not None and model_size != tuple(input_size[1:]):
        raise ConfigError(
            f'the data input size {input_size[1]}x{input_size[2]} (from --img-size/--input-size or the model\'s '
            f'pretrained config) does not match the model\'s img_size {model_size[0]}x{model_size[1]}; pass '
            f'--img-size {model_size[0]}, or set model_kwargs img_size={input_size[1]}')


def _setup_logging(primary: bool) -> None:
    if not logging.root.handlers:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter('%(message)s'))
        logging.root.addHandler(handler)
    logging.root.setLevel(logging.INFO if primary else logging.WARNING)
    # timm's own per-checkpoint and data-config messages would drown the per-epoch lines
    logging.getLogger('timm').setLevel(logging.WARNING)


def train(args: argparse.Namespace) -> Dict[str, Any]:
    """ Train as `args` says (already checked by `check_args`); returns the outcome and the output folder. """
    device = init_distributed_device(args)
    primary = args.rank == 0
    _setup_logging(primary)
    try:
        return _train(args, device, primary)
    finally:
        if args.distributed and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def _broadcast_error(error: Optional[str], args: argparse.Namespace) -> None:
    """ Raise on every process when the primary found a problem, so no process waits on the others forever. """
    if args.distributed:
        box = [error]
        torch.distributed.broadcast_object_list(box, src=0)
        error = box[0]
    if error:
        raise ConfigError(error)


def _train(args: argparse.Namespace, device: torch.device, primary: bool) -> Dict[str, Any]:
    if args.distributed:
        _logger.info(f'Distributed training: {args.world_size} processes, backend '
                     f'{torch.distributed.get_backend()}, device {device}')
    # refuse a used output folder and a mismatched checkpoint before loading data or building anything
    error, output_dir, continuing = None, None, False
    if primary:
        try:
            output_dir, continuing = _output_dir(args)
            if args.resume:
                try:
                    meta = load_checkpoint_metadata(_resume_path(args.resume))
                except Exception as e:  # truncated or foreign file: say so instead of a traceback
                    raise ConfigError(f'--resume {args.resume!r} is not a readable checkpoint '
                                      f'({type(e).__name__}: {e})') from None
                arch = meta.get('arch') if isinstance(meta, dict) else None
                if arch is not None and arch != args.model:
                    raise ConfigError(f'--resume {args.resume!r} holds a {arch!r} checkpoint, but --model is '
                                      f'{args.model!r}')
        except ConfigError as e:
            error = str(e)
    _broadcast_error(error, args)

    # data first: a missing dataset fails in a second, before a model is built
    if args.distributed and args.dataset_download and not primary:
        torch.distributed.barrier()  # let the primary download alone
    dataset_train, dataset_eval = _build_datasets(args)
    if args.distributed and args.dataset_download and primary:
        torch.distributed.barrier()
    classes = dataset_classes(dataset_train)
    num_classes_data = len(classes) if classes else int(max(dataset_targets(dataset_train), default=-1)) + 1
    if args.num_classes is None:
        args.num_classes = args.model_kwargs.get('num_classes', num_classes_data)
    if args.num_classes < num_classes_data:
        raise ConfigError(f'num_classes {args.num_classes} (--num-classes or model_kwargs) is too small: the '
                          f'training labels go up to {num_classes_data - 1}')

    random_seed(args.seed, args.rank)
    in_chans = _in_chans(args)
    # check_args refused options that contradict model_kwargs; model_kwargs fill in the options left unset
    factory_kwargs = dict(
        in_chans=in_chans, num_classes=args.num_classes, drop_rate=args.drop, drop_path_rate=args.drop_path,
        drop_block_rate=args.drop_block, global_pool=args.gp)
    factory_kwargs.update(args.model_kwargs)
    try:
        model = create_model(args.model, pretrained=args.pretrained, **factory_kwargs)
    except (TypeError, ValueError, RuntimeError) as e:
        raise ConfigError(f'cannot build --model {args.model!r} with model_kwargs {args.model_kwargs}: '
                          f'{error_line(e)}') from None
    if args.initial_checkpoint and args.initial_checkpoint.lower().endswith(('.npz', '.npy')):
        load_checkpoint(model, args.initial_checkpoint)  # JAX weights: the model's own loader, as timm does
    elif args.initial_checkpoint:
        try:  # timm's choice of weights: the EMA ones when the checkpoint has them
            state_dict = load_state_dict(args.initial_checkpoint, use_ema=True)
        except Exception as e:  # truncated or foreign file
            raise ConfigError(f'--initial-checkpoint {args.initial_checkpoint!r} is not a readable checkpoint '
                              f'({type(e).__name__}: {error_line(e)})') from None
        _check_checkpoint_fits(model, state_dict, '--initial-checkpoint', args.initial_checkpoint, args)
        model.load_state_dict(state_dict)
    if args.resume:
        resume_state = load_checkpoint_metadata(_resume_path(args.resume))  # tensors memory-mapped: cheap
        if isinstance(resume_state, dict) and isinstance(resume_state.get('state_dict'), dict):
            resume_state = clean_state_dict(resume_state['state_dict'])
        if not isinstance(resume_state, dict):
            raise ConfigError(f'--resume {args.resume!r} holds a {type(resume_state).__name__}, not a checkpoint')
        _check_checkpoint_fits(model, resume_state, '--resume', args.resume, args)
    data_args = dict(vars(args), in_chans=in_chans)
    for name in ('mean', 'std'):  # equal values stand for any number of channels
        if data_args[name] is not None and len(set(data_args[name])) == 1:
            data_args[name] = data_args[name][:1]
    model_img_size = _fixed_img_size(model)
    if args.img_size is None and args.input_size is None and model_img_size is not None:
        # a model built with model_kwargs img_size=... keeps its registered pretrained_cfg size; follow the model
        data_args['input_size'] = (in_chans, *model_img_size)
    data_config = resolve_data_config(data_args, model=model)
    _check_input_size(model, data_config['input_size'])
    for dataset in (dataset_train, dataset_eval):
        _set_input_size(dataset, data_config['input_size'])
    num_params = sum(p.numel() for p in model.parameters())
    _logger.info(f'Model {args.model}: {num_params / 1e6:.3f}M parameters, {args.num_classes} classes, input '
                 f'{tuple(data_config["input_size"])}; {len(dataset_train)} training / {len(dataset_eval)} '
                 f'evaluation images')
    model.to(device)

    # lr from lr_base when --lr is unset, scaled by the global batch as in timm's train.py
    if args.lr is None:
        global_batch = args.batch_size * args.world_size
        ratio = global_batch / args.lr_base_size
        scale = args.lr_base_scale or ('sqrt' if any(o in args.opt.lower() for o in ('ada', 'lamb')) else 'linear')
        args.lr = args.lr_base * (math.sqrt(ratio) if scale == 'sqrt' else ratio)
        _logger.info(f'Learning rate {args.lr:.3g} from lr_base {args.lr_base} and global batch {global_batch}')
    optimizer = create_optimizer_v2(model, **optimizer_kwargs(cfg=args), **args.opt_kwargs)

    amp_autocast, loss_scaler = nullcontext, None
    if args.amp:
        amp_dtype = torch.bfloat16 if args.amp_dtype == 'bfloat16' else torch.float16
        amp_autocast = partial(torch.autocast, device_type=device.type, dtype=amp_dtype)
        if device.type == 'cuda' and amp_dtype == torch.float16:
            loss_scaler = NativeScaler(device=device.type)

    start_epoch = 0
    if args.resume:
        resume_file = _resume_path(args.resume)
        start_epoch = resume_checkpoint(
            model, resume_file, optimizer=None if args.no_resume_opt else optimizer, loss_scaler=loss_scaler,
            log_info=primary) or 0

    model_ema = None
    if args.model_ema:
        model_ema = ModelEmaV3(model, decay=args.model_ema_decay, use_warmup=args.model_ema_warmup,
                               device='cpu' if args.model_ema_force_cpu else None)
        if args.resume:
            load_checkpoint(model_ema.module, _resume_path(args.resume), use_ema=True)

    if args.distributed:
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == 'cuda' else None)

    # loaders: timm's transforms and loader; mixup in the collate when batches are prefetched
    prefetcher = not args.no_prefetcher
    collate_fn = mixup_fn = None
    mixup_active = args.mixup > 0 or args.cutmix > 0 or args.cutmix_minmax is not None
    if mixup_active:
        mixup_args = dict(
            mixup_alpha=args.mixup, cutmix_alpha=args.cutmix, cutmix_minmax=args.cutmix_minmax,
            prob=args.mixup_prob, switch_prob=args.mixup_switch_prob, mode=args.mixup_mode,
            label_smoothing=args.smoothing, num_classes=args.num_classes)
        if prefetcher:
            collate_fn = FastCollateMixup(**mixup_args)
        else:
            mixup_fn = Mixup(**mixup_args)
    train_interpolation = args.train_interpolation
    if args.no_aug or not train_interpolation:
        train_interpolation = data_config['interpolation']
    loader_common = dict(
        input_size=data_config['input_size'], mean=data_config['mean'], std=data_config['std'],
        num_workers=args.workers, distributed=args.distributed, pin_memory=args.pin_mem, device=device,
        use_prefetcher=prefetcher,
        # fresh workers every epoch, seeded from the per-epoch seed: worker RNG never carries across epochs
        persistent_workers=False)
    loader_train = create_loader(
        dataset_train, batch_size=args.batch_size, is_training=True, no_aug=args.no_aug, re_prob=args.reprob,
        re_mode=args.remode, re_count=args.recount, re_split=args.resplit, train_crop_mode=args.train_crop_mode,
        scale=args.scale, ratio=args.ratio, hflip=args.hflip, vflip=args.vflip, color_jitter=args.color_jitter,
        auto_augment=args.aa, interpolation=train_interpolation, collate_fn=collate_fn, **loader_common)
    loader_eval = create_loader(
        dataset_eval, batch_size=args.validation_batch_size or args.batch_size, is_training=False,
        interpolation=data_config['interpolation'], crop_pct=data_config['crop_pct'], **loader_common)
    train_sampler = getattr(getattr(loader_train, 'loader', loader_train), 'sampler', None)
    if hasattr(train_sampler, 'seed'):
        train_sampler.seed = args.seed  # timm builds the DistributedSampler with seed 0; follow --seed
    if len(loader_train) == 0:
        raise DataError(f'{len(dataset_train)} training images make no full batch of --batch-size '
                        f'{args.batch_size} per process; lower --batch-size')

    if mixup_active:
        train_loss_fn = SoftTargetCrossEntropy()  # smoothing is folded into the mixed targets
    elif args.smoothing:
        train_loss_fn = LabelSmoothingCrossEntropy(smoothing=args.smoothing)
    else:
        train_loss_fn = nn.CrossEntropyLoss()
    train_loss_fn = train_loss_fn.to(device)

    updates_per_epoch = len(loader_train)
    lr_scheduler, num_epochs = create_scheduler_v2(
        optimizer, **scheduler_kwargs(args, decreasing_metric=args.eval_metric == 'loss'),
        updates_per_epoch=updates_per_epoch)
    if lr_scheduler is not None and start_epoch > 0:
        if args.sched_on_updates:
            lr_scheduler.step_update(start_epoch * updates_per_epoch)
        else:
            lr_scheduler.step(start_epoch)

    saver = None
    summary_csv = None
    created = _first_missing(output_dir) if primary else None
    if primary:
        _prepare_output_dir(output_dir, continuing, args.overwrite)
        saver = CheckpointSaver(
            model=model, optimizer=optimizer, args=args, model_ema=model_ema, amp_scaler=loss_scaler,
            checkpoint_dir=output_dir, recovery_dir=output_dir, decreasing=args.eval_metric == 'loss',
            max_history=args.checkpoint_hist)
        if continuing:
            saver.load_state_dict_from_checkpoint(_resume_path(args.resume))
        summary_csv = os.path.join(output_dir, 'summary.csv')
        trim_summary(summary_csv, start_epoch)
        if not continuing or not os.path.exists(os.path.join(output_dir, 'args.yaml')):
            _save_args(args, os.path.join(output_dir, 'args.yaml'))
        todo = f'epochs {start_epoch + 1}..{num_epochs}' if start_epoch < num_epochs else 'no epoch left'
        _logger.info(f'Output: {os.path.abspath(output_dir)}; {todo} of {num_epochs}')

    tracker = None
    if primary and TargetMassTracker.applies_to(unwrap_model(model)):
        # an impulse model: follow the mass on its targets from the start (or the resumed epoch) on
        tracker = TargetMassTracker(
            dataset_eval, dict(loader_common, interpolation=data_config['interpolation'],
                               crop_pct=data_config['crop_pct']), output_dir, start_epoch)
        if not any(r['epoch'] == start_epoch for r in tracker.rows):
            first = tracker.measure(unwrap_model(model), start_epoch)
            print(f'target mass at epoch {start_epoch}: {first["mean"]:.3f} (layers '
                  f'{" ".join(f"{v:.2f}" for k, v in first.items() if k.startswith("layer"))})', flush=True)

    show_progress = primary and sys.stdout.isatty()
    history: List[Dict[str, Any]] = []
    eval_metrics: Dict[str, Any] = {}
    num_updates = start_epoch * updates_per_epoch
    epoch = start_epoch - 1
    try:
        for epoch in range(start_epoch, num_epochs):
            epoch_start = time.perf_counter()
            seed_epoch(args.seed, epoch, args.rank)
            if hasattr(train_sampler, 'set_epoch'):
                train_sampler.set_epoch(epoch)
            if mixup_active and args.mixup_off_epoch and epoch >= args.mixup_off_epoch:
                (collate_fn or mixup_fn).mixup_enabled = False
            train_metrics, num_updates = train_one_epoch(
                epoch, model, loader_train, optimizer, train_loss_fn, args, device, lr_scheduler=lr_scheduler,
                amp_autocast=amp_autocast, loss_scaler=loss_scaler, model_ema=model_ema, mixup_fn=mixup_fn,
                num_updates=num_updates, show_progress=show_progress)
            lr = _mean_lr(optimizer)
            eval_metrics = validate(model, loader_eval, args, device, amp_autocast, args.num_classes)
            latest_metric = eval_metrics[args.eval_metric]
            if model_ema is not None and not args.model_ema_force_cpu:
                ema_metrics = validate(model_ema, loader_eval, args, device, amp_autocast, args.num_classes)
                eval_metrics.update((f'ema_{k}', v) for k, v in ema_metrics.items() if k != 'count')
                latest_metric = ema_metrics[args.eval_metric]  # as timm: the EMA ranks checkpoints when evaluated
            if lr_scheduler is not None:
                lr_scheduler.step(epoch + 1, latest_metric)
            epoch_time = time.perf_counter() - epoch_start
            row = {'epoch': epoch, **{f'train_{k}': v for k, v in train_metrics.items()},
                   **{f'eval_{k}': v for k, v in eval_metrics.items()}, 'lr': lr}
            history.append(row)
            if primary:
                mass = tracker.measure(unwrap_model(model), epoch + 1) if tracker is not None else None
                update_summary(epoch, train_metrics, {**{k: v for k, v in eval_metrics.items() if k != 'count'},
                                                      **mass_columns(mass)}, summary_csv, lr=lr)
                saver.save_checkpoint(epoch, metric=latest_metric)
                ema_text = f'  ema top-1 {eval_metrics["ema_top1"]:.2f}%' if 'ema_top1' in eval_metrics else ''
                print(f'epoch {epoch + 1:>3d}/{num_epochs}  train loss {train_metrics["loss"]:.4f}  '
                      f'eval loss {eval_metrics["loss"]:.4f}  top-1 {eval_metrics["top1"]:.2f}%{ema_text}  '
                      f'lr {lr:.2e}  {train_metrics["img_per_sec"]:.0f} img/s  {epoch_time:.1f}s'
                      + (f'  target mass {mass["mean"]:.3f}' if mass is not None else ''), flush=True)
                if args.plot:
                    plot_summary(summary_csv, os.path.join(output_dir, 'summary.png'))
                    if tracker is not None:
                        tracker.plot(os.path.join(output_dir, 'target_mass.png'), args.model)
    except BaseException as e:
        last = os.path.join(output_dir, 'last.pth.tar') if primary else None
        if primary and not continuing and not os.path.exists(last):
            _remove_unfinished_run(output_dir, created)
        if primary and isinstance(e, KeyboardInterrupt):
            where = f'interrupted in epoch {epoch + 1}/{num_epochs}'
            if os.path.exists(last):
                print(f'{where}; the last finished epoch is in {last} (continue with --resume {last})',
                      file=sys.stderr)
            elif args.resume:
                print(f'{where}, before it finished: nothing was kept; continue again with --resume '
                      f'{args.resume}', file=sys.stderr)
            else:
                print(f'{where}, before any epoch finished: nothing to resume, and nothing was kept',
                      file=sys.stderr)
        raise

    if not history:  # the checkpoint had already reached the final epoch: report its accuracy
        eval_metrics = validate(model_ema if model_ema is not None else model, loader_eval, args, device,
                                amp_autocast, args.num_classes)
    result = dict(
        output_dir=output_dir, history=history, final=dict(eval_metrics), num_epochs=num_epochs,
        best_metric=saver.best_metric if saver is not None else None,
        best_epoch=saver.best_epoch if saver is not None else None)
    if primary:
        parts = []
        if saver is not None and saver.best_metric is not None:
            name = {'top1': 'top-1', 'top5': 'top-5', 'loss': 'loss'}[args.eval_metric]
            name += ' (EMA)' if model_ema is not None and not args.model_ema_force_cpu else ''
            unit = '' if args.eval_metric == 'loss' else '%'
            parts.append(f'best {name} {saver.best_metric:.2f}{unit} (epoch {saver.best_epoch + 1})')
        parts.append(f'final top-1 {eval_metrics["top1"]:.2f}% on {eval_metrics.get("count", 0)} '
                     f'{args.val_split} images')
        print(f'Done: {", ".join(parts)}; output in {os.path.abspath(output_dir)}', flush=True)
    return result


def _split_timm_train_script(argv: List[str]) -> Tuple[Optional[str], List[str]]:
    for i, arg in enumerate(argv):
        if arg == '--timm-train-script':
            if i + 1 >= len(argv):
                raise ConfigError('--timm-train-script needs the path of timm\'s train.py')
            return argv[i + 1], argv[:i] + argv[i + 2:]
        if arg.startswith('--timm-train-script='):
            return arg.split('=', 1)[1], argv[:i] + argv[i + 1:]
    return None, argv


def run_timm_train_script(path: str, argv: Sequence[str]) -> int:
    """ Run timm's upstream train.py (not in timm's wheel) as `__main__` with `argv`, this package's models
    registered. Equivalent for current timm: `python train.py --device-modules timm_structinit ...`. """
    if not os.path.isfile(path):
        raise ConfigError(
            f"--timm-train-script {path!r}: no such file. timm's train.py ships in the timm source repository "
            f"(https://github.com/huggingface/pytorch-image-models), not in the installed package; download the "
            f"one matching timm {timm.__version__}")
    path = os.path.abspath(path)
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [path, *argv]
    sys.path.insert(0, os.path.dirname(path))  # as `python train.py` would, for its sibling imports
    try:
        runpy.run_path(path, run_name='__main__')
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """ Console entry point; returns the exit status (2 for invalid arguments or data, with a one-line error). """
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        script, rest = _split_timm_train_script(argv)
        if script is not None:
            return run_timm_train_script(script, rest)
        args = parse_args(argv)
        check_args(args)
        train(args)
    except (ConfigError, DataError) as e:
        print(f'{PROG}: error: {error_line(e)}', file=sys.stderr)
        return 2
    except (FloatingPointError, ImageReadError) as e:
        print(f'{PROG}: error: {error_line(e)}', file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == '__main__':
    sys.exit(main())
