""" timm-structinit-train: train timm image classifiers (and this package's structured-init ViTs) from the CLI.

Everything but the loop is a timm component (data, optimizer and scheduler factories, losses, ModelEmaV3,
CheckpointSaver, summary CSV, distributed setup), and the options and YAML keys are those of timm's train.py:

    timm-structinit-train -c configs/digits.yaml
    torchrun --nproc_per_node=2 -m timm_structinit.train -c configs/quick_cifar10.yaml

Unlike timm's script, a missing split folder is an error (timm would evaluate on the whole root), a used output
folder is refused unless `--resume` or `--overwrite`, every epoch is seeded from (seed, epoch, rank) so a resumed run
repeats the uninterrupted one, and distributed validation counts each image once. timm's own train.py runs with
this package's models as `python -m timm_structinit.run path/to/train.py ...`.
"""
import argparse
import logging
import sys
from typing import Any, Dict, Optional, Sequence

import torch
from timm.utils import init_distributed_device

from ..errors import (
    WORK_FAILED, ConfigError, DataError, ImageReadError, OutputWriteError, RunStopped, StreamWriteError, exit_status)
from ..utils.command_line import (
    CommandLogFormatter, CommandLogHandler, error_line, guard_streams, output_closed, say, stream_failed)
from ..utils.seeds import seed_everything  # noqa: F401  part of this module's API
from ..utils.startup import working_folder_gone
from ..utils.timm_patches import patched_timm
from .checks import check_args
from .config import PROG, build_parser, parse_args
from .failures import post_failure, posted_failure, rank, stop_on_signals, world_size
from .inputs import RunInputs, read_inputs
from .loop import seed_epoch, train_one_epoch, validate
from .output import plot_summary
from .training_run import _train

__all__ = ['main', 'train', 'parse_args', 'check_args', 'build_parser', 'ConfigError', 'train_one_epoch', 'validate',
           'seed_epoch', 'plot_summary']


_logger = logging.getLogger('train')


def train(args: argparse.Namespace, inputs: Optional[RunInputs] = None) -> Dict[str, Any]:
    """ Train as `args` says, already checked by `check_args`, from the inputs it returned (read again when not
    given); returns the outcome and the output folder. """
    if inputs is None:
        inputs = read_inputs(args)
    device = init_distributed_device(args)
    if not logging.root.handlers:
        handler = CommandLogHandler(sys.stdout)  # a closed or full stdout ends the run as `main` says
        handler.setFormatter(CommandLogFormatter(PROG, labelled=logging.WARNING))  # warnings name the command
        logging.root.addHandler(handler)
    logging.root.setLevel(logging.INFO if args.rank == 0 else logging.WARNING)
    # timm's own per-checkpoint and data-config messages would drown the per-epoch lines
    logging.getLogger('timm').setLevel(logging.WARNING)
    try:
        with patched_timm():  # exports load as the registered models; RandAugment on Pillow >= 13
            return _train(args, inputs, device)
    finally:
        if args.distributed and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def main(argv: Optional[Sequence[str]] = None) -> int:
    """ Console entry point; returns the exit status: 2 for invalid arguments or data, 1 for a failure during
    training, each with a one-line error; 128 + the signal's number when stopped by SIGINT or a --stop-signals one. In a
    distributed run, only the process of rank 0 prints, the first failure of any process. """
    argv = list(sys.argv[1:] if argv is None else argv)
    restore_signals, restore_streams = stop_on_signals(), guard_streams()
    try:
        args = parse_args(argv)
        restore_signals()  # the stop signals the run names (--stop-signals) take over from the defaults
        restore_signals = stop_on_signals(args.stop_signals)
        train(args, check_args(args))
        sys.stdout.flush()  # output to a file or device fails here, inside the run, not at exit
    except (ConfigError, DataError, FloatingPointError, ImageReadError, OutputWriteError) as e:
        return _failed(exit_status(e), e)
    except BrokenPipeError:
        return _failed(WORK_FAILED, BrokenPipeError(output_closed()))
    except StreamWriteError as e:
        return _failed(WORK_FAILED, RuntimeError(stream_failed(e)))
    except FileNotFoundError as e:
        gone = working_folder_gone()  # every relative path fails once it is gone: name it, not the path that failed
        if gone is None:
            raise
        return _failed(WORK_FAILED, RuntimeError(gone))
    except (MemoryError, torch.OutOfMemoryError) as e:
        return _failed(WORK_FAILED, _out_of_memory(e))
    except KeyboardInterrupt as e:
        status = exit_status(e)
        peer_status = _peer_failed(None)
        if peer_status is not None:
            return peer_status
        if rank() == 0 and not getattr(e, 'reported', False):  # stopped before the epochs: nothing was written
            name = f' ({e.args[0]})' if isinstance(e, RunStopped) else ''
            say(f'interrupted{name} before training started: nothing was kept')
        return status
    except RuntimeError as e:  # in a distributed run, a collective operation whose peer is gone
        status = _peer_failed(None) if world_size() > 1 else None
        if status is not None:
            return status
        if _is_allocation_failure(e):  # the CPU allocator's (and other backends') out of memory
            return _failed(WORK_FAILED, _out_of_memory(e))
        raise
    finally:
        restore_signals()
        restore_streams()
    return 0


# what torch's allocators say when they run out of memory as a plain RuntimeError (CPU, MPS, XPU)
_ALLOCATION_FAILURES = ("can't allocate memory", 'out of memory', 'not enough memory')


def _is_allocation_failure(error: BaseException) -> bool:
    text = str(error).lower()
    return any(phrase in text for phrase in _ALLOCATION_FAILURES)


def _out_of_memory(error: BaseException) -> Exception:
    """ One line for an allocation that failed during the work: the allocator's first line, and what to lower. """
    first = next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)
    return RuntimeError(f'out of memory ({first[:200]}); lower --batch-size (or -vb for evaluation), or train a '
                        f'smaller model')


def _failed(status: int, error: BaseException) -> int:
    line = f'{PROG}: error: {error_line(error)}'
    post_failure(status, line)
    if rank() == 0:
        say(line)
    return status


def _peer_failed(status: Optional[int]) -> Optional[int]:
    """ The exit status when another process's failure stopped this one (rank 0 prints its line), else `status`. """
    peer = posted_failure() if world_size() > 1 else None
    if peer is None:
        return status
    if rank() == 0:
        print(peer[2], file=sys.stderr)
    return peer[1]
