""" The parser of `timm-structinit`: one subcommand each for export, push, show, recipes, models and compare, each a
help line and the function declaring its options (`Subcommand`). timm_structinit.cli runs them. """
import argparse
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence

from . import compare_options
from .arg_types import seed
from .kwargs import ParseKwargs
from .parsing import OneDefaultHelpFormatter, OneLineArgumentParser
from .version import __version__

__all__ = ['PROG', 'Subcommand', 'SUBCOMMANDS', 'build_parser', 'parse', 'subparser']

PROG = 'timm-structinit'
DESCRIPTION = ('Structured attention inits for timm ViTs: export, share and inspect models; list the training recipes; '
               'compare the inits on your data.')


@dataclass(frozen=True)
class Subcommand:
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    # the options it does not know go to `args.train_options` (compare passes them to the training command)
    passes_options: bool = False


def _add_build_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """ The options that say which weights to build; shared by export, push and show, each in its own words. """
    parser.add_argument('--seed', type=seed, default=0,
                        help='seeds torch.manual_seed and struct_init_seed, so every weight is reproducible')
    parser.add_argument(
        '--model-kwargs', nargs='*', default={}, action=ParseKwargs, metavar='KEY=VALUE',
        help='model arguments, e.g. embed_dim=32 depth=2 "struct_init_kwargs={\'qk_noise\': 0.5}"')
    parser.add_argument(
        '--checkpoint', metavar='PATH',
        help=f'{verb} these trained weights (timm checkpoint, state dict or .safetensors) instead of the init')
    parser.add_argument('--use-ema', action='store_true', help=f"{verb} the checkpoint's EMA weights")


def _add_export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('model', metavar='MODEL', help='registered model name, e.g. vit_tiny_patch2_32_mimetic')
    _add_build_arguments(parser, 'export')
    parser.add_argument('out_dir', metavar='DIR', help='export folder (config.json, model.safetensors, README.md)')
    parser.add_argument(
        '--force', action='store_true',
        help='replace the content of a non-empty DIR (only once the new export is complete)')


def _add_push_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('model', metavar='MODEL', help='registered model name, e.g. vit_tiny_patch2_32_mimetic')
    _add_build_arguments(parser, 'upload')
    parser.add_argument('--repo-id', required=True, metavar='ORG/NAME', help='Hugging Face Hub model repo')
    parser.add_argument('--private', action='store_true', help='create the repo as private (if it does not exist)')
    parser.add_argument('--revision', metavar='BRANCH',
                        help='branch to commit to, created from main if missing (default: main)')
    parser.add_argument('--commit-message', metavar='TEXT', help='commit message')
    parser.add_argument('--dry-run', action='store_true', help='build and list the files; send nothing')


def _add_show_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        'model', metavar='MODEL',
        help="the model to look at: one of this package's (vit_tiny_patch2_32_mimetic), any timm model "
             "(deit_tiny_patch16_224, best with --init), or an export (local-dir:DIR, hf-hub:ORG/NAME)")
    _add_build_arguments(parser, 'show')
    parser.add_argument(
        '--init', metavar='NAME',
        help='apply this structured init to MODEL first (e.g. mimetic on deit_tiny_patch16_224)')
    parser.add_argument(
        '--init-kwargs', nargs='*', default={}, action=ParseKwargs, metavar='KEY=VALUE',
        help='hyperparameters of --init, e.g. kernel_size=5')
    parser.add_argument('--layer', type=int, default=0, help='layer drawn in the figure')
    parser.add_argument(
        '--images', metavar='DIR',
        help='image folder (ImageFolder layout or flat); attention is also averaged over its images')
    parser.add_argument('--num-images', type=int, default=64, help='images taken from --images')
    parser.add_argument('--out', metavar='FIG.png', help='figure path (default: MODEL_layerL.png)')


def _add_recipes_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('name', nargs='?', metavar='NAME', help='print this recipe (default: list them all)')
    parser.add_argument('--path', action='store_true', help="print the recipe's file path instead of its text")


def _add_models_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('filter', nargs='?', default='', metavar='FILTER',
                        help="list only names matching this pattern, with timm's wildcards (e.g. '*mimetic')")


# subcommand name -> Subcommand, in the order `--help` lists them
SUBCOMMANDS = {
    'export': Subcommand("write a model in timm's Hub layout to a local folder", _add_export_arguments),
    'push': Subcommand('export a model and upload it to the Hugging Face Hub (token: HF_TOKEN or `hf auth login`)',
                       _add_push_arguments),
    'show': Subcommand("print per-head attention statistics of an init and draw one layer's attention maps",
                       _add_show_arguments),
    'recipes': Subcommand('list the packaged training recipes with what each trains, or print one',
                          _add_recipes_arguments),
    'models': Subcommand("list this package's registered models (timm lists them among its own)",
                         _add_models_arguments),
    'compare': Subcommand(compare_options.HELP, compare_options.add_arguments, passes_options=True),
}


def build_parser(commands: Mapping[str, Subcommand] = SUBCOMMANDS) -> argparse.ArgumentParser:
    """ The parser of `commands` (each with `help`, `add_arguments`), `SUBCOMMANDS` by default. """
    parser = OneLineArgumentParser(prog=PROG, description=DESCRIPTION)
    parser.add_argument('--version', action='version', version=f'%(prog)s {__version__}')
    subparsers = parser.add_subparsers(dest='command', metavar='COMMAND', required=True)
    for name, command in commands.items():
        # no abbreviations: `--model` (the training command's option) would silently mean --model-kwargs here
        sub = subparsers.add_parser(name, help=command.help, description=command.help, allow_abbrev=False,
                                    formatter_class=OneDefaultHelpFormatter)
        command.add_arguments(sub)
    return parser


def subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """ The parser of subcommand `command` in `parser`. """
    return next(action.choices[command] for action in parser._actions
                if isinstance(action, argparse._SubParsersAction))


def parse(argv: Optional[Sequence[str]] = None,
          commands: Mapping[str, Subcommand] = SUBCOMMANDS) -> argparse.Namespace:
    """ The arguments of `argv` (default: sys.argv[1:]); `--help`, `--version` and a usage error exit here, the
    latter in one line said by the subcommand's own parser. A subcommand that passes options gets the ones it does
    not know in `args.train_options`. """
    parser = build_parser(commands)
    args, unknown = parser.parse_known_args(argv)
    if getattr(commands[args.command], 'passes_options', False):
        args.train_options = unknown
    elif unknown:
        subparser(parser, args.command).error(f'unrecognized arguments: {" ".join(unknown)}')
    return args

