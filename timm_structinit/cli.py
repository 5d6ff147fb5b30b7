""" The `timm-structinit` command line: one argparse subcommand per task.

    timm-structinit export MODEL DIR [--seed N] [--model-kwargs k=v ...] [--checkpoint PATH [--use-ema]] [--force]
    timm-structinit push MODEL --repo-id ORG/NAME [same build options] [--private] [--revision BRANCH]
                         [--commit-message TEXT] [--dry-run]
    timm-structinit show MODEL [same build options] [--init NAME [--init-kwargs k=v ...]] [--layer L]
                         [--images DIR] [--num-images N] [--out FIG.png]
    timm-structinit recipes [NAME [--path]]
    timm-structinit models [FILTER]
    timm-structinit compare --out DIR [--data-dir DIR] [--model M] [--inits ...] [--seeds N] [training options]

A subcommand is a `Command`: a help line, a function adding its arguments to its parser and a function running it
(returning the exit code). `register_command` adds one; `main` builds the parser from the registry, so a new
subcommand needs no change here beyond its own two functions and one `register_command` call. The package's own
subcommands declare their options in `timm_structinit_cli.structinit_parser`, whose console entry point parses the
command line before torch and timm are imported and then calls `run_parsed`.

Every expected failure prints one line, `timm-structinit <command>: error: ...`, to stderr. The exit status is 2
when the input is wrong (a usage error, an invalid argument, an unreadable checkpoint or image folder, a target
that is not empty or not writable) and 1 when the work itself failed (a full disk, a Hub or network error).
"""
import argparse
import logging
import sys
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence

from timm_structinit_cli import structinit_parser
from timm_structinit_cli.structinit_parser import PROG, SUBCOMMANDS

from .errors import HubError, ImageReadError, RunStopped, StreamWriteError, exit_status
from .utils.command_line import (  # noqa: F401  part of this API
    CommandLogFormatter, OneLineArgumentParser, error_line, guard_streams, output_closed, running_command, say,
    stream_failed)
from .utils.kwargs import ParseKwargs, format_kwargs  # noqa: F401  part of this module's API
from .utils.startup import working_folder_gone

__all__ = ['Command', 'COMMANDS', 'register_command', 'build_parser', 'main', 'run_parsed', 'ParseKwargs',
           'format_kwargs', 'OneLineArgumentParser', 'error_line', 'exit_status', 'output_closed']


@dataclass(frozen=True)
class Command:
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    # the options it does not know go to `args.train_options` (compare passes them to the training command)
    passes_options: bool = False


# subcommand name -> Command, in the order `--help` lists them
COMMANDS: Dict[str, Command] = {}


def register_command(
        name: str,
        help: str,
        add_arguments: Callable[[argparse.ArgumentParser], None],
        run: Callable[[argparse.Namespace], int],
        passes_options: bool = False,
) -> Command:
    """ Add subcommand `name`: `add_arguments(parser)` declares its options, `run(args)` returns the exit code; with
    `passes_options`, the options it does not declare are left in `args.train_options` instead of refused. """
    command = Command(help=help, add_arguments=add_arguments, run=run, passes_options=passes_options)
    COMMANDS[name] = command
    return command


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


def _check_figure_path(out: str) -> None:
    """ A figure can be written at `out`: an image format matplotlib writes, not a folder, in a writable folder. """
    import os
    formats = ('png', 'pdf', 'svg', 'jpg', 'jpeg', 'eps', 'ps', 'tif', 'tiff', 'webp')
    ext = os.path.splitext(out)[1].lower().lstrip('.')
    if ext not in formats:
        raise ValueError(f'--out {out!r} is not a figure file; valid endings: {", ".join("." + f for f in formats)}')
    if os.path.isdir(out):
        raise IsADirectoryError(f'--out {out!r} is a folder; give a file name such as {os.path.join(out, "map.png")}')
    from .utils.write_failures import path_too_long
    too_long = path_too_long(os.path.join(os.path.dirname(os.path.abspath(out)), f'.{os.path.basename(out)}.0-0.tmp'))
    if too_long:
        raise ValueError(f'--out {out[:120]!r}... cannot be written: {too_long}; choose a shorter path')
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
    from .inits.heads import model_layouts
    from .inits.mixer import token_mixing_blocks
    blocks = token_mixing_blocks(model)
    return len(blocks) if blocks else len(model_layouts(model))


def _run_recipes(args: argparse.Namespace) -> int:
    from .recipes import list_recipes, recipe_path, recipe_summary
    if args.name is None:
        if args.path:
            raise ValueError('--path needs a recipe NAME')
        names = list_recipes()
        rows = [('RECIPE', 'MODEL', 'DATA', 'IMAGE', 'EPOCHS', 'BATCH')]
        rows += [(name, *(str(value) for value in recipe_summary(name).values())) for name in names]
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            print('  '.join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
        print(f'\n{len(names)} recipes (BATCH is per process; the header of each says where it comes from: '
              f'{PROG} recipes NAME); train with one: timm-structinit-train -c NAME [flags overriding it]')
        return 0
    path = recipe_path(args.name)
    print(path if args.path else path.read_text(encoding='utf-8'), end='\n' if args.path else '')
    return 0


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


def _run_compare(args: argparse.Namespace) -> int:
    from .compare.command import run
    return run(args)


_RUNS = {'export': _run_export, 'push': _run_push, 'show': _run_show, 'recipes': _run_recipes, 'models': _run_models,
         'compare': _run_compare}
for _name, _sub in SUBCOMMANDS.items():
    register_command(_name, _sub.help, _sub.add_arguments, _RUNS[_name], _sub.passes_options)


def build_parser() -> argparse.ArgumentParser:
    """ The parser of every registered subcommand. """
    return structinit_parser.build_parser(COMMANDS)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """ Run the command line with `argv` (default: sys.argv[1:]) and return the exit code. """
    return run_parsed(structinit_parser.parse(argv, COMMANDS))


def run_parsed(args: argparse.Namespace) -> int:
    """ Run the subcommand `args` names, its arguments parsed; every expected failure is one line. """
    # library warnings are still shown, as plain lines labelled with the command
    label = f'{PROG} {args.command}'
    if not logging.root.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(CommandLogFormatter(label))
        logging.root.addHandler(handler)
        logging.root.setLevel(logging.WARNING)
    from .train.failures import stop_on_signals  # here: the training package is imported by a command that runs
    # SIGTERM, SIGHUP and SIGUSR1 as Ctrl-C: what a command was writing is removed
    restore_signals, restore_streams = stop_on_signals(), guard_streams()
    try:
        with running_command(label):
            status = COMMANDS[args.command].run(args)
        sys.stdout.flush()  # output to a file or device fails here, not at exit
        return status
    except KeyboardInterrupt as e:
        name = f' ({e.args[0]})' if isinstance(e, RunStopped) else ''
        say(f'{PROG} {args.command}: interrupted{name}{getattr(e, "hint", "")}')  # what it left to finish
        return exit_status(e)
    except BrokenPipeError:
        say(f'{PROG} {args.command}: error: {output_closed()}')
        return 1
    except StreamWriteError as e:
        say(f'{PROG} {args.command}: error: {stream_failed(e)}')
        return 1
    except (ValueError, OSError, HubError, ImageReadError) as e:
        gone = working_folder_gone() if isinstance(e, FileNotFoundError) else None
        say(f'{PROG} {args.command}: error: {gone or error_line(e)}')
        return 1 if gone else exit_status(e)
    finally:
        restore_signals()
        restore_streams()


if __name__ == '__main__':
    sys.exit(main())
