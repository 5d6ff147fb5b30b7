""" The training arguments: timm train.py's option names, and a YAML file (`-c`) of the same keys under the flags.
`checks.check_args` then validates the result once. """
import argparse
import difflib
import os
import sys
from typing import Any, Dict, Optional, Sequence

import torch
import yaml

from ..errors import ConfigError
from ..recipes import resolve_config, unknown_config
from ..utils.atomic import atomic_file
from ..utils.command_line import OneLineArgumentParser, error_line
from ..utils.kwargs import ParseKwargs
from ..version import __version__

PROG = 'timm-structinit-train'
SCHEDULERS = ('cosine', 'tanh', 'step', 'constant', 'multistep', 'plateau', 'poly', 'wsd', 'rsqrt', 'none')
GRAYSCALE_TORCH_DATASETS = ('mnist', 'kmnist', 'fashion_mnist', 'qmnist')  # single-channel PIL images
# options that only make sense on the command line are not config keys
_CLI_ONLY = ('help', 'version', 'config')
# run-specific keys left out of the args.yaml written next to the checkpoints, so it can be reused with -c
_NOT_SAVED = ('resume', 'experiment', 'overwrite', 'local_rank')
# options of timm's train.py (timm 1.0.31) that this entry point does not have: each is refused with a pointer to
# running timm's own script with this package's models (`python -m timm_structinit.run path/to/train.py`)
TIMM_TRAIN_ONLY = (
    '--aug-splits', '--bce-loss', '--bce-pos-weight', '--bce-sum', '--bce-target-thresh', '--bn-eps', '--bn-momentum',
    '--channels-last', '--class-map', '--color-jitter-prob', '--dataset-trust-remote-code', '--device-modules',
    '--dist-bn', '--distill-loss-weight', '--drop-connect', '--epoch-repeats', '--fast-norm', '--fuser',
    '--gaussian-blur-prob', '--grad-checkpointing', '--grayscale-prob', '--head-init-bias', '--head-init-scale',
    '--input-img-mode', '--input-key', '--jsd-loss', '--kd-distill-type', '--kd-loss-type', '--kd-model-name',
    '--kd-student-feature-dim', '--kd-teacher-feature-dim', '--kd-temperature', '--kd-token-distill-type',
    '--layer-decay-min-scale', '--layer-decay-no-opt-scale', '--model-dtype', '--naflex-loader', '--naflex-loss-scale',
    '--naflex-max-seq-len', '--naflex-patch-size-probs', '--naflex-patch-sizes', '--naflex-patchify-channels-first',
    '--naflex-train-seq-lens', '--no-ddp-bb', '--pretrained-path', '--recovery-interval', '--save-images',
    '--split-bn', '--start-epoch', '--sync-bn', '--synchronize-step', '--target-key', '--task-loss-weight',
    '--torchscript', '--train-batch-sizes', '--train-batches-per-epoch', '--train-img-sizes', '--train-num-samples',
    '--train-size-probs', '--train-size-random-mix', '--train-size-schedule', '--train-size-schedule-spread',
    '--train-steps-per-epoch', '--tta', '--use-multi-epochs-loader', '--val-num-samples',
    '--variable-batch-loss-scale', '--wandb-resume-id', '--worker-seeding')
# this entry point's own options for some of them
_OWN_FOR = {'--train-num-samples': '--train-subset', '--val-num-samples': '--val-subset'}


def timm_only_error(option: str) -> str:
    """ The error for an option of timm's train.py that this entry point does not have. """
    own = f' (this entry point has {_OWN_FOR[option]})' if option in _OWN_FOR else ''
    return (f"{option} is an option of timm's train.py that {PROG} does not support{own}; run timm's own script with "
            f"this package's models: python -m timm_structinit.run path/to/train.py ... {option} ...")


def _refuse_timm_only(argv: Sequence[str]) -> None:
    for token in argv:
        option = token.split('=', 1)[0]
        if option in TIMM_TRAIN_ONLY:
            raise ConfigError(timm_only_error(option))


def build_parser() -> argparse.ArgumentParser:
    """ The argument parser; option names and defaults follow timm's upstream train.py. """
    parser = OneLineArgumentParser(
        prog=PROG, description='Train a timm image classifier (structured-init ViTs registered).',
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument('-c', '--config', default='', metavar='RECIPE',
                        help='a packaged recipe name (timm-structinit recipes) or a YAML file whose keys (underscored '
                             'option names) set the defaults; flags override it')
    parser.add_argument('--version', action='version', version=f'%(prog)s {__version__}')
    for add_group in (_add_data_group, _add_model_group, _add_optimizer_groups, _add_schedule_group,
                      _add_augment_group, _add_run_groups):
        add_group(parser)
    return parser


def _add_data_group(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group('Dataset')
    group.add_argument('--data-dir', metavar='DIR', help='path to the dataset (root dir)')
    group.add_argument('--dataset', '-d', default='', metavar='NAME',
                       help="'' for an ImageFolder dir, torch/cifar10, torch/cifar100, torch/svhn, sklearn/digits")
    group.add_argument('--train-split', default='train', help='training split (sub-folder for ImageFolder)')
    group.add_argument('--val-split', default='validation', help='evaluation split (sub-folder for ImageFolder)')
    group.add_argument('--dataset-download', action='store_true', help='download a torch/ dataset if missing')
    group.add_argument('--train-subset', type=int, metavar='N',
                       help='train on a deterministic class-balanced subset of N images')
    group.add_argument('--val-subset', type=int, metavar='N',
                       help='evaluate on a deterministic class-balanced subset of N images')
    group.add_argument('--subset-seed', type=int, default=0, help='seed choosing the subsets (kept apart from --seed)')


def _add_model_group(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group('Model')
    group.add_argument('--model', default='vit_tiny_patch2_32_mimetic', help='name of the model to train')
    group.add_argument('--pretrained', action='store_true', help='start from pretrained weights')
    group.add_argument('--initial-checkpoint', default='', metavar='PATH', help='load these weights before training')
    group.add_argument('--resume', default='', metavar='PATH',
                       help='continue from a checkpoint (file, or an output directory meaning its last.pth.tar)')
    group.add_argument('--no-resume-opt', action='store_true', help='do not restore the optimizer when resuming')
    group.add_argument('--num-classes', type=int, help='classes (default: from the dataset)')
    group.add_argument('--gp', help="global pool type ('token', 'avg', ...); default: the model's")
    group.add_argument('--img-size', type=int, help='input image size (data side)')
    group.add_argument('--in-chans', type=int, help='input channels')
    group.add_argument('--input-size', type=int, nargs=3, metavar=('C', 'H', 'W'),
                       help='input size (overrides --img-size and --in-chans)')
    group.add_argument('--crop-pct', type=float, help='evaluation center-crop fraction')
    group.add_argument('--mean', type=float, nargs='+', metavar='MEAN', help='pixel mean per channel')
    group.add_argument('--std', type=float, nargs='+', metavar='STD', help='pixel std per channel')
    group.add_argument('--interpolation', default='', help='resize interpolation (default: the model\'s)')
    group.add_argument('-b', '--batch-size', type=int, default=128, help='training batch size per process')
    group.add_argument('-vb', '--validation-batch-size', type=int,
                       help='evaluation batch size per process (default: --batch-size)')
    group.add_argument('--grad-accum-steps', type=int, default=1, metavar='N',
                       help='batches whose gradients are summed into one optimizer update (global batch = '
                            'batch size x processes x N)')
    group.add_argument('--model-kwargs', nargs='*', default={}, action=ParseKwargs, metavar='KEY=VALUE',
                       help='extra model arguments, e.g. embed_dim=128 depth=6')


def _add_optimizer_groups(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group('Device')
    group.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu', help='device')
    group.add_argument('--amp', action='store_true', help='automatic mixed precision')
    group.add_argument('--amp-dtype', choices=('float16', 'bfloat16'),
                       help='AMP dtype; unset: bfloat16 on CPU (float16 autocast is slow there), float16 elsewhere')
    group.add_argument('--torchcompile', nargs='?', const='inductor', metavar='BACKEND',
                       help='compile the model with torch.compile (backend default: inductor)')
    group.add_argument('--torchcompile-mode', help="torch.compile mode (e.g. 'reduce-overhead', 'max-autotune')")
    group.add_argument('--dist-backend', help='process group backend (default: nccl on cuda, else gloo)')
    group.add_argument('--local-rank', '--local_rank', dest='local_rank', type=int, default=0,
                       help='set by older launchers; torchrun uses the LOCAL_RANK variable')
    group = parser.add_argument_group('Optimizer')
    group.add_argument('--opt', default='sgd', help='optimizer (timm.optim.list_optimizers())')
    group.add_argument('--opt-eps', type=float, help='optimizer epsilon')
    group.add_argument('--opt-betas', type=float, nargs='+', help='optimizer betas')
    group.add_argument('--momentum', type=float, default=0.9, help='optimizer momentum')
    group.add_argument('--weight-decay', type=float, default=2e-5, help='weight decay')
    group.add_argument('--clip-grad', type=float, help='gradient clipping threshold (off if unset)')
    group.add_argument('--clip-mode', default='norm', choices=('norm', 'value', 'agc'), help='gradient clipping mode')
    group.add_argument('--layer-decay', type=float, help='layer-wise learning rate decay')
    group.add_argument('--opt-kwargs', nargs='*', default={}, action=ParseKwargs, metavar='KEY=VALUE',
                       help='extra optimizer arguments')


def _add_schedule_group(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group('Learning rate schedule')
    group.add_argument('--sched', default='cosine', help=f'scheduler, one of {", ".join(SCHEDULERS)}')
    group.add_argument('--sched-on-updates', action='store_true', help='step the schedule per update, not per epoch')
    group.add_argument('--lr', type=float, help='learning rate (default: lr_base scaled by batch)')
    group.add_argument('--lr-base', type=float, default=0.1, help='learning rate at batch --lr-base-size')
    group.add_argument('--lr-base-size', type=int, default=256, help='batch size of --lr-base')
    group.add_argument('--lr-base-scale', default='', choices=('', 'linear', 'sqrt'),
                       help="batch scaling of --lr-base ('' = sqrt for ada*/lamb optimizers, else linear)")
    group.add_argument('--lr-noise', type=float, nargs='+', help='learning rate noise on/off epochs')
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


def _add_augment_group(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group('Augmentation and regularization')
    group.add_argument('--no-aug', action='store_true', help='no training augmentation')
    group.add_argument('--train-crop-mode', help="training crop mode ('rrc', 'rkrc', 'rkrr')")
    group.add_argument('--scale', type=float, nargs='+', default=[0.08, 1.0], metavar='PCT',
                       help='random-resized-crop area range')
    group.add_argument('--ratio', type=float, nargs='+', default=[3. / 4., 4. / 3.], metavar='RATIO',
                       help='random-resized-crop aspect range')
    group.add_argument('--hflip', type=float, default=0.5, help='horizontal flip probability')
    group.add_argument('--vflip', type=float, default=0.0, help='vertical flip probability')
    group.add_argument('--color-jitter', type=float, default=0.4, help='color jitter factor (unused with --aa)')
    group.add_argument('--aa', help="auto-augment policy, e.g. 'rand-m9-mstd0.5-inc1'")
    group.add_argument('--aug-repeats', type=float, default=0, metavar='N',
                       help="repeated augmentation: each image N times per epoch, spread over the processes "
                            "(timm's RepeatAugSampler; distributed runs only)")
    group.add_argument('--reprob', type=float, default=0.0, help='random erasing probability (Cutout)')
    group.add_argument('--remode', default='pixel', choices=('const', 'rand', 'pixel'), help='random erasing fill')
    group.add_argument('--recount', type=int, default=1, help='random erasing count')
    group.add_argument('--resplit', action='store_true', help='no random erasing on the first augmentation split')
    group.add_argument('--mixup', type=float, default=0.0, help='mixup alpha (on if > 0)')
    group.add_argument('--cutmix', type=float, default=0.0, help='cutmix alpha (on if > 0)')
    group.add_argument('--cutmix-minmax', type=float, nargs='+', help='cutmix min/max area ratio')
    group.add_argument('--mixup-prob', type=float, default=1.0, help='probability of mixup or cutmix per batch')
    group.add_argument('--mixup-switch-prob', type=float, default=0.5, help='probability of cutmix over mixup')
    group.add_argument('--mixup-mode', default='batch', choices=('batch', 'pair', 'elem'), help='mixup mode')
    group.add_argument('--mixup-off-epoch', type=int, default=0, help='turn mixup off from this epoch (0: never)')
    group.add_argument('--smoothing', type=float, default=0.1, help='label smoothing')
    group.add_argument('--train-interpolation', default='random', help='training interpolation')
    group.add_argument('--drop', type=float, default=0.0, help='dropout rate')
    group.add_argument('--drop-path', type=float, help='drop path (stochastic depth) rate')
    group.add_argument('--drop-block', type=float, help='drop block rate (CNNs)')


def _add_run_groups(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group('Model exponential moving average')
    group.add_argument('--model-ema', action='store_true', help='keep and evaluate an EMA of the weights')
    group.add_argument('--model-ema-force-cpu', action='store_true', help='keep the EMA on CPU (not evaluated)')
    group.add_argument('--model-ema-decay', type=float, default=0.9998, help='EMA decay')
    group.add_argument('--model-ema-warmup', action='store_true', help='warm the EMA decay up')
    group = parser.add_argument_group('Miscellaneous')
    group.add_argument('--seed', type=int, default=42, help='random seed')
    group.add_argument('--log-interval', type=int, default=50, help='batches between log lines')
    group.add_argument('--val-interval', type=int, default=1, metavar='N',
                       help='epochs between evaluation and checkpointing (the last epoch is always evaluated)')
    group.add_argument('--checkpoint-hist', type=int, default=10, help='numbered checkpoints to keep')
    group.add_argument('-j', '--workers', type=int, default=4,
                       help='data loading processes per training process (at most one per core available)')
    group.add_argument('--pin-mem', action='store_true',
                       help='pin loader memory (faster GPU transfer; ignored without an accelerator)')
    group.add_argument('--no-prefetcher', action='store_true', help="do not use timm's batch prefetcher")
    group.add_argument('--output', default='', metavar='DIR', help='output root (default: ./output/train)')
    group.add_argument('--experiment', default='', help='output sub-folder (default: date-time-model)')
    group.add_argument('--overwrite', action='store_true',
                       help='reuse an existing output folder, deleting the files a previous run wrote there')
    group.add_argument('--eval-metric', default='top1', choices=('top1', 'top5', 'loss'),
                       help='metric ranking checkpoints')
    group.add_argument('--plot', action='store_true', help='draw loss and accuracy curves to summary.png')
    group.add_argument('--log-wandb', action='store_true',
                       help='log every epoch to Weights & Biases (WANDB_MODE=offline keeps it on disk)')
    group.add_argument('--wandb-project', help='wandb project name')
    group.add_argument('--wandb-tags', nargs='+', default=[], metavar='TAG', help='wandb tags')


def _config_actions(parser: argparse.ArgumentParser) -> Dict[str, argparse.Action]:
    return {a.dest: a for a in parser._actions if a.dest not in _CLI_ONLY}


class _UniqueKeyLoader(yaml.SafeLoader):
    """ yaml's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last one silently). """


def _unique_key_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> Dict[Any, Any]:
    lines: Dict[Any, int] = {}
    # a merge key (`<<: *defaults`) brings keys its own mapping may override; only the mapping's own keys count
    own = [(k, v) for k, v in node.value if k.tag != 'tag:yaml.org,2002:merge']
    for key_node, _ in own:
        key = loader.construct_object(key_node, deep=True)
        try:
            first = lines.setdefault(key, key_node.start_mark.line + 1)
        except TypeError:  # an unhashable key: construct_mapping names it
            break
        if first != key_node.start_mark.line + 1:
            raise yaml.constructor.ConstructorError(
                None, None, f'key {key!r} is given twice (lines {first} and {key_node.start_mark.line + 1})',
                key_node.start_mark)
    return loader.construct_mapping(node, deep=True)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_key_mapping)


def _read_yaml(path: str) -> Dict[Any, Any]:
    if not os.path.isfile(path):
        raise ConfigError(f'--config {path!r}: {unknown_config(path)}')
    try:
        with open(path, 'rb') as f:
            cfg = yaml.load(f.read().decode('utf-8-sig'), Loader=_UniqueKeyLoader)
    except UnicodeDecodeError as e:
        raise ConfigError(f'--config {path!r} is not UTF-8 text (byte {e.object[e.start]:#04x} at offset '
                          f'{e.start}); save it as UTF-8') from None
    except OSError as e:
        raise ConfigError(f'--config {path!r} cannot be read: {e.strerror or e}') from None
    except yaml.YAMLError as e:
        mark = getattr(e, 'problem_mark', None)
        where = f' at line {mark.line + 1}, column {mark.column + 1}' if mark is not None else ''
        raise ConfigError(f'--config {path!r} is not valid YAML: {getattr(e, "problem", None) or error_line(e)}'
                          f'{where}') from None
    except Exception as e:  # whatever else PyYAML meets (a RecursionError for nesting too deep)
        raise ConfigError(f'--config {path!r} cannot be read as YAML ({type(e).__name__}: {error_line(e)[:200]})') \
            from None
    if not isinstance(cfg or {}, dict):
        raise ConfigError(f'--config {path!r} must be a mapping of option names to values')
    return cfg or {}


def _config_value(parser: argparse.ArgumentParser, action: argparse.Action, key: str, value: Any, path: str) -> Any:
    """ A YAML value as its flag would store it: numbers, strings and lists go through the flag's own action. """
    def bad(reason: str) -> ConfigError:
        return ConfigError(f'{path}: {key}={value!r} is not valid; {reason}')

    def text(v: Any) -> str:  # 2.0 for an integer option, as YAML writers put it
        return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)

    if value is None:
        if action.default is not None:
            raise bad(f'leave the key out for the default {action.default!r}')
    elif isinstance(action, ParseKwargs):
        if not isinstance(value, dict):
            raise bad('expected a mapping of keyword arguments')
        value = dict(value)
    elif action.nargs == 0:  # store_true flags
        if not isinstance(value, bool):
            raise bad('expected true or false')
    else:
        many = action.nargs is not None
        if isinstance(value, dict) or many != isinstance(value, (list, tuple)):
            raise bad('expected a list' if many else 'expected a single value')
        option = max(action.option_strings, key=len)
        tokens = [option, *map(text, value)] if many else [f'{option}={text(value)}']
        try:
            value = getattr(parser.parse_args(tokens, argparse.Namespace()), action.dest)
        except argparse.ArgumentError:  # the wrong count, a choice not offered or a value of another type
            if isinstance(action.nargs, int) and len(value) != action.nargs:
                raise bad(f'expected a list of {action.nargs} values') from None
            raise bad(f'expected one of {list(action.choices)}' if action.choices
                      else f'expected {"an integer" if action.type is int else "a number"}') from None
    return value


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """ Parse the command line over the values of its `-c FILE.yaml`, each value through its flag's argparse action
    (type, choices, count); `check_args` then checks the result. """
    argv = list(sys.argv[1:] if argv is None else argv)
    _refuse_timm_only(argv)
    config_parser = OneLineArgumentParser(prog=PROG, add_help=False)
    config_parser.add_argument('-c', '--config', action='append', default=[])
    paths = config_parser.parse_known_args(argv)[0].config
    if len(paths) > 1:  # argparse would keep the last silently
        raise ConfigError(f'-c/--config is given {len(paths)} times ({", ".join(map(repr, paths))}); give one '
                          f'config, and set what differs with flags after it')
    path = paths[0] if paths else ''
    parser = build_parser()
    namespace = argparse.Namespace()
    if path:
        path = resolve_config(path) or path  # a file, else a packaged recipe of that name
        actions = _config_actions(parser)
        parser.exit_on_error = False  # a bad YAML value raises, to be reported as the config's error
        for key, value in _read_yaml(path).items():
            if key not in actions and f'--{str(key).replace("_", "-")}' in TIMM_TRAIN_ONLY:
                raise ConfigError(f'{path}: key {key!r}: ' + timm_only_error(f'--{str(key).replace("_", "-")}'))
            if key not in actions:
                close = difflib.get_close_matches(str(key).replace('-', '_'), list(actions), n=1, cutoff=0.6)
                hint = f"; did you mean '{close[0]}'?" if close else ''
                raise ConfigError(f"unknown key '{key}' in {path}{hint} (keys are the option names with "
                                  f"underscores, see {PROG} --help)")
            setattr(namespace, key, _config_value(parser, actions[key], key, value, path))
        parser.exit_on_error = True
    return parser.parse_args(argv, namespace)


def save_args(args: argparse.Namespace, path: str) -> None:
    """ Write the run's arguments as a YAML config that `-c` reads back. """
    keys = set(_config_actions(build_parser())) - set(_NOT_SAVED)
    cfg = {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(args).items() if k in keys}
    with atomic_file(path) as tmp, open(tmp, 'w') as f:
        yaml.safe_dump(cfg, f, default_flow_style=False, sort_keys=True)
