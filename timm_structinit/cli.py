""" The `timm-structinit` command line: one argparse subcommand per task.

    timm-structinit export MODEL DIR [--seed N] [--model-kwargs k=v ...] [--checkpoint PATH [--use-ema]] [--force]
    timm-structinit push MODEL --repo-id ORG/NAME [same build options] [--private] [--revision BRANCH]
                         [--commit-message TEXT] [--dry-run]
    timm-structinit show MODEL [same build options] [--init NAME [--init-kwargs k=v ...]] [--layer L]
                         [--images DIR] [--num-images N] [--out FIG.png]
    timm-structinit recipes [NAME [--path]]
    timm-structinit models [FILTER]

A subcommand is a `Command`: a help line, a function adding its arguments to its parser and a function running it
(returning the exit code). `register_command` adds one; `main` builds the parser from the registry, so a new
subcommand needs no change here beyond its own two functions and one `register_command` call.

Every expected failure prints one line, `timm-structinit <command>: error: ...`, to stderr. The exit status is 2
when the input is wrong (a usage error, an invalid argument, an unreadable checkpoint or image folder, a target
that is not empty or not writable) and 1 when the work itself failed (a full disk, a Hub or network error).
"""
import argparse
import logging
import sys
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence

from .errors import HubError, RunStopped, exit_status
from .utils.command_line import OneLineArgumentParser, error_line, output_closed  # noqa: F401  part of this API
from .utils.kwargs import ParseKwargs, format_kwargs  # noqa: F401  part of this module's API
from .version import __version__

__all__ = ['Command', 'COMMANDS', 'register_command', 'build_parser', 'main', 'ParseKwargs', 'format_kwargs',
           'OneLineArgumentParser', 'error_line', 'exit_status', 'output_closed']

PROG = 'timm-structinit'


@dataclass(frozen=True)
class Command:
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# subcommand name -> Command, in the order `--help` lists them
COMMANDS: Dict[str, Command] = {}


def register_command(
        name: str,
        help: str,
        add_arguments: Callable[[argparse.ArgumentParser], None],
        run: Callable[[argparse.Namespace], int],
) -> Command:
    """ Add subcommand `name`: `add_arguments(parser)` declares its options, `run(args)` returns the exit code. """
    command = Command(help=help, add_arguments=add_arguments, run=run)
    COMMANDS[name] = command
    return command


def _seed(text: str) -> int:
    """ argparse type of --seed: `seeds.check_seed`'s range. """
    from .utils.seeds import check_seed
    try:
        return check_seed(int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f'{text!r} is not a valid seed; valid: an integer from 0 to 2**63 - 1') \
            from None


def _add_build_arguments(parser: argparse.ArgumentParser) -> None:
    """ The options that say which weights to build; shared by export and push. """
    parser.add_argument('model', metavar='MODEL', help='registered model name, e.g. vit_tiny_patch2_32_mimetic')
    parser.add_argument(
        '--seed', type=_seed, default=0,
        help='seeds torch.manual_seed and struct_init_seed, so every weight is reproducible (default: 0)')
    parser.add_argument(
        '--model-kwargs', nargs='*', default={}, action=ParseKwargs, metavar='KEY=VALUE',
        help='model arguments, e.g. embed_dim=32 depth=2 "struct_init_kwargs={\'qk_noise\': 0.5}"')
    parser.add_argument(
        '--checkpoint', metavar='PATH', default=None,
        help='export these trained weights (timm checkpoint, state dict or .safetensors) instead of the init')
    parser.add_argument('--use-ema', action='store_true', help="export the checkpoint's EMA weights")


def _add_export_arguments(parser: argparse.ArgumentParser) -> None:
    _add_build_arguments(parser)
    parser.add_argument('out_dir', metavar='DIR', help='export folder (config.json, model.safetensors, README.md)')
    parser.add_argument(
        '--force', action='store_true',
        help='replace the content of a non-empty DIR (only once the new export is complete)')


def _run_export(args: argparse.Namespace) -> int:
    import json
    from .hub import export_model, list_export_files
    folder = export_model(
        args.model, args.out_dir, seed=args.seed, model_kwargs=args.model_kwargs, checkpoint=args.checkpoint,
        use_ema=args.use_ema, force=args.force)
    print(f'exported {args.model} to {folder}')
    for name, size in list_export_files(folder):
        print(f'  {name}  {size:,} bytes')
    create = f'timm.create_model("local-dir:{folder}", pretrained=True)'
    if 'architecture' in json.loads((folder / 'config.json').read_text(encoding='utf-8'))['timm_structinit']:
        print(f'load it in plain timm: import timm; {create}')  # plugin fields beside plain timm's config
        print(f'load it as the registered {args.model}: import timm, timm_structinit, then '
              f'with timm_structinit.hub.registered_exports(): {create}')
    else:
        print(f'load it as the registered {args.model}: import timm, timm_structinit; {create}')
    return 0


def _add_push_arguments(parser: argparse.ArgumentParser) -> None:
    _add_build_arguments(parser)
    parser.add_argument('--repo-id', required=True, metavar='ORG/NAME', help='Hugging Face Hub model repo')
    parser.add_argument('--private', action='store_true', help='create the repo as private (if it does not exist)')
    parser.add_argument(
        '--revision', default=None, metavar='BRANCH', help='branch to commit to, created from main if missing '
                                                          '(default: main)')
    parser.add_argument('--commit-message', default=None, metavar='TEXT', help='commit message')
    parser.add_argument('--dry-run', action='store_true', help='build and list the files; send nothing')


def _run_push(args: argparse.Namespace) -> int:
    from .hub import push_model
    result = push_model(
        args.model, args.repo_id, seed=args.seed, model_kwargs=args.model_kwargs, checkpoint=args.checkpoint,
        use_ema=args.use_ema, private=args.private, revision=args.revision, commit_message=args.commit_message,
        dry_run=args.dry_run)
    where = f'{result.repo_id} (revision {result.revision or "main"}{", private" if result.private else ""})'
    print(f'{"dry run, would upload" if result.dry_run else "uploaded"} to {where}:')
    for name, size in result.files:
        print(f'  {name}  {size:,} bytes')
    print(f'commit message: {result.commit_message}')
    if result.dry_run:
        print('nothing was sent')
    else:
        print(f'done: {result.url}')
    return 0


register_command('export', 'write a model in timm\'s Hub layout to a local folder', _add_export_arguments, _run_export)
register_command(
    'push', 'export a model and upload it to the Hugging Face Hub (token: HF_TOKEN or `hf auth login`)',
    _add_push_arguments, _run_push)


def _add_show_arguments(parser: argparse.ArgumentParser) -> None:
    _add_build_arguments(parser)
    parser.add_argument(
        '--init', default=None, metavar='NAME',
        help='apply this structured init to MODEL first (e.g. mimetic on deit_tiny_patch16_224)')
    parser.add_argument(
        '--init-kwargs', nargs='*', default={}, action=ParseKwargs, metavar='KEY=VALUE',
        help='hyperparameters of --init, e.g. kernel_size=5')
    parser.add_argument('--layer', type=int, default=0, help='layer drawn in the figure (default: 0)')
    parser.add_argument(
        '--images', default=None, metavar='DIR',
        help='image folder (ImageFolder layout or flat); attention is also averaged over its images')
    parser.add_argument('--num-images', type=int, default=64, help='images taken from --images (default: 64)')
    parser.add_argument('--out', default=None, metavar='FIG.png', help='figure path (default: MODEL_layerL.png)')


def _check_figure_path(out: str) -> None:
    """ A figure can be written at `out`: an image format matplotlib writes, not a folder, in a writable folder. """
    import os
    formats = ('png', 'pdf', 'svg', 'jpg', 'jpeg', 'eps', 'ps', 'tif', 'tiff', 'webp')
    ext = os.path.splitext(out)[1].lower().lstrip('.')
    if ext not in formats:
        raise ValueError(f'--out {out!r} is not a figure file; valid endings: {", ".join("." + f for f in formats)}')
    if os.path.isdir(out):
        raise IsADirectoryError(f'--out {out!r} is a folder; give a file name such as {os.path.join(out, "map.png")}')
    folder = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f'--out {out!r}: cannot write in {folder} (missing, or no permission)')


def _run_show(args: argparse.Namespace) -> int:
    from .hub import build_model
    from .inits import apply_init, get_init, model_family
    from .diagnostics import load_images
    if args.init is not None:
        get_init(args.init)  # an unknown name fails before the model is built
    if args.num_images < 1:
        raise ValueError(f'--num-images={args.num_images} must be at least 1')
    if args.out is not None:
        _check_figure_path(args.out)
    model = build_model(args.model, seed=args.seed, model_kwargs=args.model_kwargs, checkpoint=args.checkpoint,
                        use_ema=args.use_ema)
    if args.init is not None:
        apply_init(model, args.init, seed=args.seed, **args.init_kwargs)
    vit = model_family(model) == 'vit'
    depth = _show_depth(model, vit)
    if not 0 <= args.layer < depth:
        raise ValueError(f'--layer={args.layer} is out of range; the model has layers 0..{depth - 1}')
    images = load_images(args.images, model, args.num_images) if args.images else None
    record = getattr(model, 'struct_init_record', None)
    if record:
        print(f"init: {record['method']} (seed {record['seed']}"
              + (f", solver {record['solver']}, objective {record['objective_mean']:.5f}" if 'solver' in record else '')
              + ')')
    else:
        print('init: timm default (no structured init)')
    out = args.out or f'{args.model.replace("/", "_").replace(":", "_")}_layer{args.layer}.png'
    title = f'{args.model}: layer {args.layer}'
    if vit:
        from .diagnostics import format_summary, plot_layer, summarize
        print(format_summary(summarize(model, images)))
        plot_layer(model, args.layer, out, images=images, title=title)
    else:
        from .diagnostics.family_maps import family_summary, plot_family_layer
        print(f'{"layer":>5} {"head":>4} {"offset":>8} {"mass":>6}')
        for r in family_summary(model, images):
            print(f'{r["layer"]:5d} {r["head"]:4d} {str(r["offset"]):>8} {r["mass"]:6.3f}')
        plot_family_layer(model, args.layer, out, images=images, title=title)
    print(f'figure: {out}')
    return 0


def _show_depth(model, vit: bool) -> int:
    if vit:
        from .inits.heads import find_attention
        return len(find_attention(model))
    from .inits.mixer import token_mixing_blocks
    from .inits.swin import window_attentions
    return len(window_attentions(model) or token_mixing_blocks(model))


register_command(
    'show', 'print per-head attention statistics of an init and draw one layer\'s attention maps',
    _add_show_arguments, _run_show)


def _add_recipes_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('name', nargs='?', metavar='NAME', help='print this recipe (default: list them all)')
    parser.add_argument('--path', action='store_true', help="print the recipe's file path instead of its text")


def _run_recipes(args: argparse.Namespace) -> int:
    from .recipes import list_recipes, recipe_path, recipe_source
    if args.name is None:
        if args.path:
            raise ValueError('--path needs a recipe NAME')
        names = list_recipes()
        width = max(map(len, names))
        for name in names:
            print(f'{name:{width}}  {recipe_source(name)}')
        print(f'\n{len(names)} recipes; train with one: timm-structinit-train -c NAME [flags overriding it]')
        return 0
    path = recipe_path(args.name)
    print(path if args.path else path.read_text(encoding='utf-8'), end='\n' if args.path else '')
    return 0


register_command(
    'recipes', 'list the packaged training recipes with their sources, or print one', _add_recipes_arguments,
    _run_recipes)


def _add_models_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('filter', nargs='?', default='', metavar='FILTER',
                        help="list only names matching this pattern, with timm's wildcards (e.g. '*mimetic')")


def _run_models(args: argparse.Namespace) -> int:
    import timm
    from .models import list_models
    names = list_models(args.filter)
    if not names:
        raise ValueError(f'no model of this package matches {args.filter!r}; the filter takes timm\'s wildcards '
                         f'(*, ?), e.g. \'*mimetic\' (list them all: {PROG} models)')
    width = max(map(len, names))
    for name in names:
        print(f'{name:{width}}  {timm.get_pretrained_cfg_value(name, "description") or ""}'.rstrip())
    print(f'\n{len(names)} models; build one after `import timm_structinit`: timm.create_model(NAME)')
    return 0


register_command(
    'models', "list this package's registered models (timm lists them among its own)", _add_models_arguments,
    _run_models)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(
        prog=PROG, description='Structured attention inits for timm ViTs: export, share and inspect models; list '
                               'the training recipes.')
    parser.add_argument('--version', action='version', version=f'%(prog)s {__version__}')
    subparsers = parser.add_subparsers(dest='command', metavar='COMMAND', required=True)
    for name, command in COMMANDS.items():
        # no abbreviations: `--model` (the training command's option) would silently mean --model-kwargs here
        sub = subparsers.add_parser(name, help=command.help, description=command.help, allow_abbrev=False)
        command.add_arguments(sub)
    return parser


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    return next(action.choices[command] for action in parser._actions
                if isinstance(action, argparse._SubParsersAction))


def main(argv: Optional[Sequence[str]] = None) -> int:
    """ Run the command line with `argv` (default: sys.argv[1:]) and return the exit code. """
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the command's own parser, which knows its options
        _subparser(parser, args.command).error(f'unrecognized arguments: {" ".join(unknown)}')
    # library warnings are still shown, but as plain lines
    logging.basicConfig(level=logging.WARNING, format='%(levelname)s: %(message)s')
    from .train.failures import stop_on_signals  # here: the training package is imported by a command that runs
    restore_signals = stop_on_signals()  # SIGTERM and SIGHUP as Ctrl-C: what a command was writing is removed
    try:
        return COMMANDS[args.command].run(args)
    except KeyboardInterrupt as e:
        name = f' ({e.args[0]})' if isinstance(e, RunStopped) else ''
        print(f'{PROG} {args.command}: interrupted{name}', file=sys.stderr)
        return exit_status(e)
    except BrokenPipeError:
        print(f'{PROG} {args.command}: error: {output_closed()}', file=sys.stderr)
        return 1
    except (ValueError, OSError, HubError) as e:
        print(f'{PROG} {args.command}: error: {error_line(e)}', file=sys.stderr)
        return exit_status(e)
    finally:
        restore_signals()


if __name__ == '__main__':
    sys.exit(main())
