""" The options of `timm-structinit compare` (timm_structinit.compare.command runs it). The options it does not
declare are the training command's, left for every training run (`passes_options`). """
import argparse

from . import slurm_options
from .kwargs import ParseKwargs

__all__ = ['HELP', 'DEFAULT_ARMS', 'add_arguments']

HELP = ('train every init on your data, several seeds each, and say which helps and whether the difference is real '
        '(other options go to every training run)')
# the arms compared when --inits is not given; timm_structinit.compare.plan.DEFAULT_ARMS is the same tuple (a test
# holds them equal): written here too, as the plan's module imports the package
DEFAULT_ARMS = ('plain', 'mimetic', 'impulse3')


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--out', required=True, metavar='DIR', help='folder of the runs and the answer')
    parser.add_argument('--data-dir', metavar='DIR', help="the data, as the training command's --data-dir")
    parser.add_argument('--model', help='base model every arm builds; one with an init of its own is refused '
                                        '(default: a ViT-Tiny the images suit, average pooling, sin-cos table)')
    parser.add_argument('--model-kwargs', nargs='*', default={}, action=ParseKwargs, metavar='KEY=VALUE',
                        help="the base model's arguments, e.g. embed_dim=128 depth=6 num_heads=4 patch_size=4")
    parser.add_argument('--inits', nargs='+', default=list(DEFAULT_ARMS), metavar='INIT',
                        help='the arms: plain (the model\'s own init), mimetic, impulse3, impulse5, or any init '
                             'name, each optionally NAME:key=value,... (default: plain mimetic impulse3)')
    # three: the fewest whose interval can decide a gain two or three times the seeds' spread (docs/which_init.md)
    parser.add_argument('--seeds', type=int, default=3, metavar='N', help='seeds per arm, 0..N-1 (default: 3)')
    parser.add_argument('--device', help='training device (default: cuda where there is one, else cpu)')
    parser.add_argument('--concurrent', type=int, default=1, metavar='N',
                        help='runs at a time, each its own process on the device with its share of the cores '
                             '(torch threads and loader processes) (default: 1)')
    parser.add_argument('--time-limit', type=float, metavar='SECONDS',
                        help='start no run that cannot end within this many seconds from now; stop the runs '
                             'under way then (their checkpoints resume them; exit status 3 when runs are left)')
    parser.add_argument('--report', action='store_true', help='write the answer from the runs in --out; train nothing')
    slurm_options.add_arguments(parser)
