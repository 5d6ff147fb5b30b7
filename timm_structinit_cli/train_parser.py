""" The parser of `timm-structinit-train`: timm train.py's option names and defaults, in groups as timm's are, and the
checks a command line gets before anything is imported (an option of timm's train.py that this command lacks, a
second `-c`). timm_structinit.train.config reads `-c` (a recipe or a YAML file) under the flags and runs the rest. """
import argparse
from typing import Optional, Sequence

from .arg_types import STOP_SIGNALS, stop_signal_argument
from .kwargs import ParseKwargs
from .parsing import OneDefaultHelpFormatter, OneLineArgumentParser
from .version import __version__
from .workers import DEFAULT_WORKERS, workers_help

__all__ = ['PROG', 'SCHEDULERS', 'TIMM_TRAIN_ONLY', 'timm_only_error', 'command_line_problem', 'config_paths',
           'build_parser']

PROG = 'timm-structinit-train'
SCHEDULERS = ('cosine', 'tanh', 'step', 'constant', 'multistep', 'plateau', 'poly', 'wsd', 'rsqrt', 'none')
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


def config_paths(argv: Sequence[str]) -> list:
    """ The values of every `-c` / `--config` in `argv`, in order. """
    config_parser = OneLineArgumentParser(prog=PROG, add_help=False)
    config_parser.add_argument('-c', '--config', action='append', default=[])
    return config_parser.parse_known_args(list(argv))[0].config


def command_line_problem(argv: Sequence[str]) -> Optional[str]:
    """ What is wrong with `argv` that argparse would not say, or say wrongly (None when nothing): an option of
    timm's train.py this command lacks (argparse would call it unknown), a second `-c` (argparse would keep the last
    silently). """
    for token in argv:
        option = token.split('=', 1)[0]
        if option in TIMM_TRAIN_ONLY:
            return timm_only_error(option)
    paths = config_paths(argv)
    if len(paths) > 1:
        return (f'-c/--config is given {len(paths)} times ({", ".join(map(repr, paths))}); give one config, and set '
                f'what differs with flags after it')
    return None


def build_parser() -> argparse.ArgumentParser:
    """ The argument parser; option names and defaults follow timm's upstream train.py. """
    parser = OneLineArgumentParser(
        prog=PROG, description='Train a timm image classifier (structured-init ViTs registered).',
        formatter_class=OneDefaultHelpFormatter)
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
                       help="torch/cifar10, torch/cifar100, torch/svhn, ... (a name it does not know is refused, "
                            "listing those it does), sklearn/digits, or '' for an image folder under --data-dir "
                            "(default: '', the image folder)")
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
    # no default here: asking torch whether CUDA is there would import it; the training command resolves it after
    # parsing
    group.add_argument('--device', help='device (default: cuda where torch sees one, else cpu)')
    group.add_argument('--threads', type=int, metavar='N',
                       help='torch threads on the CPU (default: OMP_NUM_THREADS where set, else the count, of the '
                            'usable cores halved down to one, that a probe of the model\'s training step finds '
                            'fastest here before the first epoch)')
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
    group.add_argument('--stop-signals', nargs='*', type=stop_signal_argument, default=list(STOP_SIGNALS),
                       metavar='SIGNAL',
                       help='signals that stop the run as Ctrl-C does, keeping the last finished epoch and printing '
                            'how to resume (SLURM: --signal=USR1@120); none: only Ctrl-C')
    group.add_argument('-j', '--workers', type=int, default=DEFAULT_WORKERS, help=workers_help())
    group.add_argument('--pin-mem', action='store_true',
                       help='pin loader memory (faster GPU transfer; ignored without an accelerator)')
    group.add_argument('--no-prefetcher', action='store_true', help="do not use timm's batch prefetcher")
    group.add_argument('--loader', default='timm', choices=('timm', 'device'),
                       help="timm: timm's loader, images read and augmented in worker processes; device: the "
                            "images decoded once into memory on the training device and augmented there, each "
                            "with its own random parameters (images of one size, a quarter of the device's free "
                            "memory at most)")
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

