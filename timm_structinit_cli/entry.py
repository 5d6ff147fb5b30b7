""" The console entry points of `timm-structinit` and `timm-structinit-train`: the arguments are parsed here, where
`--help`, `--version` and a usage error end the command before torch and timm are imported (seconds); a valid
command line then imports the package and runs (`timm_structinit.cli.run_parsed`, `timm_structinit.train.main`). """
import os
import sys
from typing import Optional, Sequence

__all__ = ['structinit', 'train']


def structinit(argv: Optional[Sequence[str]] = None) -> int:
    """ `timm-structinit`: parse, then run the subcommand; returns the exit status. """
    from .structinit_parser import parse
    args = parse(argv)
    from timm_structinit.cli import run_parsed
    return run_parsed(args)


def train(argv: Optional[Sequence[str]] = None) -> int:
    """ `timm-structinit-train`: check and parse the command line (its `-c` file is read by the run), then train;
    returns the exit status. """
    from .train_parser import PROG, build_parser, command_line_problem
    argv = list(sys.argv[1:] if argv is None else argv)
    problem = command_line_problem(argv)
    if problem:
        if not _other_process_of_a_launch():  # said once, by rank 0, as the run's own errors are
            print(f'{PROG}: error: {problem}', file=sys.stderr)
        return 2
    build_parser().parse_args(argv)
    from timm_structinit.train import main
    return main(argv)


def _other_process_of_a_launch() -> bool:
    """ This process is one of several a launcher (torchrun) started, and not the one of rank 0. """
    size, rank = os.environ.get('WORLD_SIZE', ''), os.environ.get('RANK', '0') or '0'
    return (size.isdigit() and rank.isdigit() and 0 < int(rank) < int(size)
            and bool(os.environ.get('MASTER_ADDR') and os.environ.get('MASTER_PORT')))
