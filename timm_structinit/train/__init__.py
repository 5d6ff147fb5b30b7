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
import math
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from timm.models import load_checkpoint, resume_checkpoint
from timm.scheduler import create_scheduler_v2, scheduler_kwargs
from timm.utils import (
    CheckpointSaver, ModelEmaV3, init_distributed_device, trim_summary, unwrap_model, update_summary,
)

from ..command_line import error_line, output_closed
from ..data import DataError, ImageReadError
from ..mass_tracking import TargetMassTracker, mass_columns
from ..seeds import seed_everything
from ..timm_patches import patched_timm
from .build import build_datasets, build_loaders, build_model, build_optimizer, data_config, read_checkpoint
from .checks import check_args
from .config import PROG, ConfigError, build_parser, parse_args, save_args
from .failures import RunStopped, post_failure, posted_failure, rank, stop_on_signals, world_size
from .resume import check_resume, resume_file, saved_lr
from .loop import mean_lr, seed_epoch, train_one_epoch, validate
from .output import (
    OutputWriteError, claim_output_dir, output_dir, plot_summary, release_output_dir, remove_unfinished_run,
    writing_output)

__all__ = ['main', 'train', 'parse_args', 'check_args', 'build_parser', 'ConfigError', 'train_one_epoch', 'validate',
           'seed_epoch', 'plot_summary']

_logger = logging.getLogger('train')


@dataclass
class _Run:
    """ What the epochs of a run work with; the output fields are set on the primary process only. """
    args: argparse.Namespace
    device: torch.device
    model: nn.Module
    model_ema: Optional[ModelEmaV3]
    optimizer: torch.optim.Optimizer
    amp_autocast: Callable
    loss_scaler: Any
    loaders: Tuple[Any, Any]  # training, evaluation
    mixup: Any
    loss_fn: nn.Module
    lr_scheduler: Any
    start_epoch: int
    num_epochs: int
    output_dir: Optional[str] = None
    continuing: bool = False
    created: Optional[str] = None  # the outermost folder this run made
    saver: Optional[CheckpointSaver] = None
    tracker: Optional[TargetMassTracker] = None
    lr_replaced: bool = False  # a new --lr took the place of the resumed one

    @property
    def primary(self) -> bool:
        return self.args.rank == 0

    @property
    def ema_evaluated(self) -> bool:
        return self.model_ema is not None and not self.args.model_ema_force_cpu


class _OutputStreamHandler(logging.StreamHandler):
    """ The log on stdout; a reader that closed it (`| head -1`) ends the run as `main` says, where logging's own
    handler would print a traceback for each later line and go on. """

    def handleError(self, record: logging.LogRecord) -> None:
        if isinstance(sys.exc_info()[1], BrokenPipeError):
            raise
        super().handleError(record)


def train(args: argparse.Namespace) -> Dict[str, Any]:
    """ Train as `args` says (already checked by `check_args`); returns the outcome and the output folder. """
    device = init_distributed_device(args)
    if not logging.root.handlers:
        handler = _OutputStreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter('%(message)s'))
        logging.root.addHandler(handler)
    logging.root.setLevel(logging.INFO if args.rank == 0 else logging.WARNING)
    # timm's own per-checkpoint and data-config messages would drown the per-epoch lines
    logging.getLogger('timm').setLevel(logging.WARNING)
    try:
        with patched_timm():  # exports load as the registered models; RandAugment on Pillow >= 13
            return _train(args, device)
    finally:
        if args.distributed and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def _train(args: argparse.Namespace, device: torch.device) -> Dict[str, Any]:
    """ The steps of a run: refuse what would fail, then data, model, optimizer, loaders, schedule, output folder,
    epochs and the final report. """
    primary = args.rank == 0
    if args.distributed:
        _logger.info(f'Distributed training: {args.world_size} processes, backend '
                     f'{torch.distributed.get_backend()}, device {device}')
    out, continuing, created = _refuse_early(args, primary)
    try:
        return _run_in(out, continuing, created, args, device)
    except BaseException:
        # a new run that stopped before its first epoch finished leaves nothing behind (its folder included)
        if primary and out is not None and not continuing and not os.path.exists(os.path.join(out, 'last.pth.tar')):
            remove_unfinished_run(out, created)
        raise
    finally:
        if primary and out is not None:
            release_output_dir(out)


def _run_in(out: Optional[str], continuing: bool, created: Optional[str], args: argparse.Namespace,
            device: torch.device) -> Dict[str, Any]:
    """ The run in its claimed output folder (on the primary; None elsewhere). """
    primary = args.rank == 0
    # data first: a missing dataset fails in a second, before a model is built
    if args.distributed and args.dataset_download and not primary:
        torch.distributed.barrier()  # let the primary download alone
    dataset_train, dataset_eval = build_datasets(args)
    if args.distributed and args.dataset_download and primary:
        torch.distributed.barrier()
    seed_everything(args.seed, args.rank)
    model = build_model(args)
    config = data_config(args, model, (dataset_train, dataset_eval))
    _logger.info(f'Model {args.model}: {sum(p.numel() for p in model.parameters()) / 1e6:.3f}M parameters, '
                 f'{args.num_classes} classes, input {tuple(config["input_size"])}; {len(dataset_train)} training / '
                 f'{len(dataset_eval)} evaluation images')
    model.to(device)
    optimizer, amp_autocast, loss_scaler = build_optimizer(args, model, device)
    start_epoch, model_ema, lr_replaced = _restore(args, model, optimizer, loss_scaler, primary)
    if args.torchcompile:  # as timm's train.py: compiled before DDP wraps it, so DDP stays out of the graph
        _logger.info(f'Compiling the model with torch.compile (backend {args.torchcompile}, mode '
                     f'{args.torchcompile_mode or "default"})')
        model = torch.compile(model, backend=args.torchcompile, mode=args.torchcompile_mode)
    if args.distributed:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == 'cuda' else None)
    loader_train, loader_eval, eval_options, mixup, loss_fn = build_loaders(
        args, config, dataset_train, dataset_eval, device)
    updates_per_epoch = updates_in(len(loader_train), args.grad_accum_steps)
    lr_scheduler, num_epochs = create_scheduler_v2(
        optimizer, **scheduler_kwargs(args, decreasing_metric=args.eval_metric == 'loss'),
        updates_per_epoch=updates_per_epoch)
    if lr_scheduler is not None and start_epoch > 0:
        if args.sched_on_updates:
            lr_scheduler.step_update(start_epoch * updates_per_epoch)
        else:
            lr_scheduler.step(start_epoch)
    run = _Run(args, device, model, model_ema, optimizer, amp_autocast, loss_scaler, (loader_train, loader_eval),
               mixup, loss_fn, lr_scheduler, start_epoch, num_epochs, out, continuing, created,
               lr_replaced=lr_replaced)
    if primary:
        _open_output(run, dataset_eval, eval_options)
    history, eval_metrics = _run_epochs(run)
    return _finish(run, history, eval_metrics)


def updates_in(num_batches: int, grad_accum_steps: int) -> int:
    """ Optimizer updates in an epoch of `num_batches` batches (the last, shorter group of batches is one too). """
    return -(-num_batches // max(1, grad_accum_steps))


def _refuse_early(args: argparse.Namespace, primary: bool) -> Tuple[Optional[str], bool, Optional[str]]:
    """ The output folder, claimed for this run (`claim_output_dir`), whether it continues a run, and the outermost
    folder the claim made; a used folder or a checkpoint of another model is refused before any data is loaded, by
    every process, so none waits on the others forever. """
    error, out, continuing, created = None, None, False, None
    if primary:
        try:
            out, continuing = output_dir(args)
            meta = read_checkpoint(resume_file(args.resume), '--resume') if args.resume else None
            arch = meta.get('arch') if isinstance(meta, dict) else None
            if arch is not None and arch != args.model:
                raise ConfigError(f'--resume {args.resume!r} holds a {arch!r} checkpoint, but --model is '
                                  f'{args.model!r}')
            if args.resume:
                check_resume(args, meta, out, continuing)
            created = claim_output_dir(out, continuing, args.overwrite)
        except ConfigError as e:
            error = str(e)
    if args.distributed:
        box = [error]
        torch.distributed.broadcast_object_list(box, src=0)
        error = box[0]
    if error:
        if created is not None or (out is not None and os.path.isdir(out)):
            release_output_dir(out)
        raise ConfigError(error)
    return out, continuing, created


def _restore(args: argparse.Namespace, model: nn.Module, optimizer, loss_scaler, primary: bool):
    """ (epoch to start from, EMA or None), both from the --resume checkpoint when there is one. """
    start_epoch, lr_replaced = 0, False
    if args.resume:
        path = resume_file(args.resume)
        try:  # checked by `check_resume`; what torch.load meets in the tensors themselves is still the file's
            start_epoch = resume_checkpoint(
                model, path, optimizer=None if args.no_resume_opt else optimizer,
                loss_scaler=loss_scaler, log_info=primary) or 0
        except Exception as e:
            raise ConfigError(f'--resume {args.resume!r} cannot be restored ({type(e).__name__}: '
                              f'{error_line(e)[:300]})') from None
        old_lr = saved_lr(read_checkpoint(path, '--resume'))
        if not args.no_resume_opt and old_lr is not None and not math.isclose(old_lr, args.lr, rel_tol=1e-9):
            # the restored state holds the old rate, which the schedule would keep: the new one is taken, and said
            for group in optimizer.param_groups:
                group['lr'] = group['initial_lr'] = args.lr
            lr_replaced = True
            _logger.info(f'Learning rate {args.lr:.6g} replaces the checkpoint\'s {old_lr:.6g} from epoch '
                         f'{start_epoch + 1} on (recorded in args.yaml)')
    model_ema = None
    if args.model_ema:
        model_ema = ModelEmaV3(model, decay=args.model_ema_decay, use_warmup=args.model_ema_warmup,
                               device='cpu' if args.model_ema_force_cpu else None)
        if args.resume:
            try:
                load_checkpoint(model_ema.module, resume_file(args.resume), use_ema=True)
            except Exception as e:
                raise ConfigError(f'--resume {args.resume!r}: its EMA weights cannot be restored '
                                  f'({type(e).__name__}: {error_line(e)[:300]})') from None
    return start_epoch, model_ema, lr_replaced


def _open_output(run: _Run, dataset_eval, eval_options: Dict[str, Any]) -> None:
    """ Make the output folder, the checkpoint saver, the summary (cut back to the resumed epoch) and args.yaml. """
    args, out = run.args, run.output_dir
    run.saver = CheckpointSaver(
        model=run.model, optimizer=run.optimizer, args=args, model_ema=run.model_ema, amp_scaler=run.loss_scaler,
        checkpoint_dir=out, recovery_dir=out, decreasing=args.eval_metric == 'loss', max_history=args.checkpoint_hist)
    if run.continuing:
        run.saver.load_state_dict_from_checkpoint(resume_file(args.resume))
    with writing_output(out):
        trim_summary(os.path.join(out, 'summary.csv'), run.start_epoch)
        if not run.continuing or run.lr_replaced or not os.path.exists(os.path.join(out, 'args.yaml')):
            save_args(args, os.path.join(out, 'args.yaml'))
    if args.log_wandb:  # as timm's train.py; the run folder goes to ./wandb (or $WANDB_DIR)
        import wandb
        wandb.init(project=args.wandb_project, config=vars(args), tags=args.wandb_tags or None,
                   name=os.path.basename(os.path.abspath(out)))
    todo = f'epochs {run.start_epoch + 1}..{run.num_epochs}' if run.start_epoch < run.num_epochs else 'no epoch left'
    _logger.info(f'Output: {os.path.abspath(out)}; {todo} of {run.num_epochs}')
    if TargetMassTracker.applies_to(unwrap_model(run.model)):
        # an impulse model: follow the mass on its targets from the start (or the resumed epoch) on
        run.tracker = TargetMassTracker(dataset_eval, eval_options, out, run.start_epoch)
        if not any(r['epoch'] == run.start_epoch for r in run.tracker.rows):
            with writing_output(out):
                first = run.tracker.measure(unwrap_model(run.model), run.start_epoch)
            print(f'target mass at epoch {run.start_epoch}: {first["mean"]:.3f} (layers '
                  f'{" ".join(f"{v:.2f}" for k, v in first.items() if k.startswith("layer"))})', flush=True)


def _run_epochs(run: _Run) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
    """ Train and evaluate the remaining epochs; returns the per-epoch rows and the last evaluation. """
    args, (loader_train, _) = run.args, run.loaders
    train_sampler = getattr(getattr(loader_train, 'loader', loader_train), 'sampler', None)
    history: List[Dict[str, Any]] = []
    eval_metrics: Dict[str, Any] = {}
    num_updates = run.start_epoch * updates_in(len(loader_train), args.grad_accum_steps)
    epoch = run.start_epoch - 1
    try:
        for epoch in range(run.start_epoch, run.num_epochs):
            epoch_start = time.perf_counter()
            seed_epoch(args.seed, epoch, args.rank)
            if hasattr(train_sampler, 'set_epoch'):
                train_sampler.set_epoch(epoch)
            if run.mixup is not None and args.mixup_off_epoch and epoch >= args.mixup_off_epoch:
                run.mixup.mixup_enabled = False
            train_metrics, num_updates = train_one_epoch(
                epoch, run.model, loader_train, run.optimizer, run.loss_fn, args, run.device,
                lr_scheduler=run.lr_scheduler, amp_autocast=run.amp_autocast, loss_scaler=run.loss_scaler,
                model_ema=run.model_ema, mixup_fn=run.mixup if args.no_prefetcher else None,
                num_updates=num_updates, show_progress=run.primary and sys.stdout.isatty())
            lr = mean_lr(run.optimizer)
            if (epoch + 1) % args.val_interval and epoch + 1 != run.num_epochs:
                # as timm's --val-interval: no evaluation, summary row or checkpoint in this epoch
                if run.lr_scheduler is not None:
                    run.lr_scheduler.step(epoch + 1, None)
                if run.primary:
                    print(f'epoch {epoch + 1:>3d}/{run.num_epochs}  train loss {train_metrics["loss"]:.4f}  '
                          f'lr {lr:.2e}  {train_metrics["img_per_sec"]:.0f} img/s  '
                          f'{time.perf_counter() - epoch_start:.1f}s', flush=True)
                continue
            eval_metrics, metric = _evaluate(run)
            if run.lr_scheduler is not None:
                run.lr_scheduler.step(epoch + 1, metric)
            history.append({'epoch': epoch, **{f'train_{k}': v for k, v in train_metrics.items()},
                            **{f'eval_{k}': v for k, v in eval_metrics.items()}, 'lr': lr})
            if run.primary:
                _save_epoch(run, epoch, train_metrics, eval_metrics, metric, lr, time.perf_counter() - epoch_start)
    except BaseException as e:
        _stopped(run, epoch, e if isinstance(e, KeyboardInterrupt) else None)
        raise
    return history, eval_metrics


def _evaluate(run: _Run) -> Tuple[Dict[str, Any], float]:
    """ The evaluation metrics (the EMA's prefixed ema_) and the one ranking checkpoints: as in timm, the EMA's
    when it is evaluated. """
    args, loader_eval = run.args, run.loaders[1]
    metrics = validate(run.model, loader_eval, args, run.device, run.amp_autocast, args.num_classes)
    if not run.ema_evaluated:
        return metrics, metrics[args.eval_metric]
    ema_metrics = validate(run.model_ema, loader_eval, args, run.device, run.amp_autocast, args.num_classes)
    metrics.update((f'ema_{k}', v) for k, v in ema_metrics.items() if k != 'count')
    return metrics, ema_metrics[args.eval_metric]


def _save_epoch(run: _Run, epoch: int, train_metrics: Dict[str, float], eval_metrics: Dict[str, Any], metric: float,
                lr: float, epoch_time: float) -> None:
    """ Summary row, checkpoint, the epoch's line and, with --plot, the figures. """
    out = run.output_dir
    summary_csv = os.path.join(out, 'summary.csv')
    with writing_output(out):
        mass = run.tracker.measure(unwrap_model(run.model), epoch + 1) if run.tracker is not None else None
        update_summary(epoch, train_metrics, {**{k: v for k, v in eval_metrics.items() if k != 'count'},
                                              **mass_columns(mass)}, summary_csv, lr=lr, log_wandb=run.args.log_wandb)
        run.saver.save_checkpoint(epoch, metric=metric)
    ema_text = f'  ema top-1 {eval_metrics["ema_top1"]:.2f}%' if 'ema_top1' in eval_metrics else ''
    print(f'epoch {epoch + 1:>3d}/{run.num_epochs}  train loss {train_metrics["loss"]:.4f}  '
          f'eval loss {eval_metrics["loss"]:.4f}  top-1 {eval_metrics["top1"]:.2f}%{ema_text}  '
          f'lr {lr:.2e}  {train_metrics["img_per_sec"]:.0f} img/s  {epoch_time:.1f}s'
          + (f'  target mass {mass["mean"]:.3f}' if mass is not None else ''), flush=True)
    if run.args.plot:
        with writing_output(out):
            plot_summary(summary_csv, os.path.join(out, 'summary.png'))
            if run.tracker is not None:
                run.tracker.plot(os.path.join(out, 'target_mass.png'), run.args.model)


def _stopped(run: _Run, epoch: int, interrupted: Optional[BaseException]) -> None:
    """ A run stopped in `epoch`: an interrupt (Ctrl-C, SIGTERM, SIGHUP) says what there is to resume, unless another
    process's failure stopped it (that one's line is printed instead); `_train` removes what a new run left. """
    if not run.primary or interrupted is None or (run.args.distributed and posted_failure(wait=1.0) is not None):
        return
    interrupted.reported = True
    last = os.path.join(run.output_dir, 'last.pth.tar')
    signal_name = f' ({interrupted.args[0]})' if isinstance(interrupted, RunStopped) else ''
    where = f'interrupted{signal_name} in epoch {epoch + 1}/{run.num_epochs}'
    if os.path.exists(last):
        print(f'{where}; the last finished epoch is in {last} (continue with --resume {last})', file=sys.stderr)
    elif run.args.resume:
        print(f'{where}, before it finished: nothing was kept; continue again with --resume {run.args.resume}',
              file=sys.stderr)
    else:
        print(f'{where}, before any epoch finished: nothing to resume, and nothing was kept', file=sys.stderr)


def _finish(run: _Run, history: List[Dict[str, Any]], eval_metrics: Dict[str, Any]) -> Dict[str, Any]:
    """ The run's outcome; the primary prints the best and the final accuracy. """
    args, saver = run.args, run.saver
    if args.log_wandb and run.primary:
        import wandb
        wandb.finish()
    if not history:  # the checkpoint had already reached the final epoch: report its accuracy
        eval_metrics = validate(run.model_ema if run.model_ema is not None else run.model, run.loaders[1], args,
                                run.device, run.amp_autocast, args.num_classes)
    if run.primary:
        parts = []
        if saver.best_metric is not None:
            name = {'top1': 'top-1', 'top5': 'top-5', 'loss': 'loss'}[args.eval_metric]
            name += ' (EMA)' if run.ema_evaluated else ''
            unit = '' if args.eval_metric == 'loss' else '%'
            parts.append(f'best {name} {saver.best_metric:.2f}{unit} (epoch {saver.best_epoch + 1})')
        parts.append(f'final top-1 {eval_metrics["top1"]:.2f}% on {eval_metrics.get("count", 0)} '
                     f'{args.val_split} images')
        print(f'Done: {", ".join(parts)}; output in {os.path.abspath(run.output_dir)}', flush=True)
    return dict(output_dir=run.output_dir, history=history, final=dict(eval_metrics), num_epochs=run.num_epochs,
                best_metric=saver.best_metric if saver is not None else None,
                best_epoch=saver.best_epoch if saver is not None else None)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """ Console entry point; returns the exit status: 2 for invalid arguments or data, 1 for a failure during
    training, each with a one-line error; 128 + the signal's number when stopped by SIGINT, SIGTERM or SIGHUP. In a
    distributed run, only the process of rank 0 prints, the first failure of any process. """
    argv = list(sys.argv[1:] if argv is None else argv)
    restore_signals = stop_on_signals()
    try:
        args = parse_args(argv)
        check_args(args)
        train(args)
    except (ConfigError, DataError) as e:
        return _failed(2, e)
    except (FloatingPointError, ImageReadError, OutputWriteError) as e:
        return _failed(1, e)
    except BrokenPipeError:
        return _failed(1, BrokenPipeError(output_closed()))
    except (MemoryError, torch.OutOfMemoryError) as e:
        return _failed(1, _out_of_memory(e))
    except KeyboardInterrupt as e:
        status = 128 + getattr(e, 'signum', signal.SIGINT)
        peer_status = _peer_failed(None)
        if peer_status is not None:
            return peer_status
        if rank() == 0 and not getattr(e, 'reported', False):  # stopped before the epochs: nothing was written
            name = f' ({e.args[0]})' if isinstance(e, RunStopped) else ''
            print(f'interrupted{name} before training started: nothing was kept', file=sys.stderr)
        return status
    except RuntimeError as e:  # in a distributed run, a collective operation whose peer is gone
        status = _peer_failed(None) if world_size() > 1 else None
        if status is not None:
            return status
        if _is_allocation_failure(e):  # the CPU allocator's (and other backends') out of memory
            return _failed(1, _out_of_memory(e))
        raise
    finally:
        restore_signals()
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
        print(line, file=sys.stderr)
    return status


def _peer_failed(status: Optional[int]) -> Optional[int]:
    """ The exit status when another process's failure stopped this one (rank 0 prints its line), else `status`. """
    peer = posted_failure() if world_size() > 1 else None
    if peer is None:
        return status
    if rank() == 0:
        print(peer[2], file=sys.stderr)
    return peer[1]
