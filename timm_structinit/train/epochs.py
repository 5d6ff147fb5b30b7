""" The epochs of a training run: each epoch trained, evaluated as --val-interval says, its summary row, checkpoint
and line written by the primary process, an interrupt reported with what there is to resume, and the run's outcome.
`Run` holds what the epochs work with. """
import argparse
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.nn as nn
from timm.utils import CheckpointSaver, ModelEmaV3, unwrap_model, update_summary

from ..diagnostics.mass_tracking import TargetMassTracker, mass_columns
from .failures import RunStopped, posted_failure, stops_held
from .loop import mean_lr, seed_epoch, train_one_epoch, validate
from ..utils.run_folder import holds_finished_epoch, resumable_checkpoint
from .output import plot_summary, writing_output

__all__ = ['Run', 'run_epochs', 'finish_run', 'updates_in']


@dataclass
class Run:
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


def updates_in(num_batches: int, grad_accum_steps: int) -> int:
    """ Optimizer updates in an epoch of `num_batches` batches (the last, shorter group of batches is one too). """
    return -(-num_batches // max(1, grad_accum_steps))


def run_epochs(run: Run) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
    """ Train and evaluate the remaining epochs; returns the per-epoch rows and the last evaluation. """
    args, (loader_train, _) = run.args, run.loaders
    train_sampler = getattr(getattr(loader_train, 'loader', loader_train), 'sampler', None)
    loader_dataset = getattr(getattr(loader_train, 'loader', loader_train), 'dataset', None)
    history: List[Dict[str, Any]] = []
    eval_metrics: Dict[str, Any] = {}
    num_updates = run.start_epoch * updates_in(len(loader_train), args.grad_accum_steps)
    epoch = run.start_epoch - 1
    try:
        for epoch in range(run.start_epoch, run.num_epochs):
            epoch_start = time.perf_counter()
            seed_epoch(args.seed, epoch, args.rank)
            # whatever in the training loader draws from the epoch: timm's distributed sampler, the per-image seeds
            # of timm's loader, the device loader's order and augmentation
            for follower in (train_sampler, loader_dataset, loader_train):
                if hasattr(follower, 'set_epoch'):
                    follower.set_epoch(epoch)
            if run.mixup is not None and args.mixup_off_epoch and epoch >= args.mixup_off_epoch:
                run.mixup.mixup_enabled = False
            train_metrics, num_updates = train_one_epoch(
                epoch, run.model, loader_train, run.optimizer, run.loss_fn, args, run.device,
                lr_scheduler=run.lr_scheduler, amp_autocast=run.amp_autocast, loss_scaler=run.loss_scaler,
                model_ema=run.model_ema, mixup_fn=run.mixup if args.no_prefetcher and args.loader == 'timm' else None,
                num_updates=num_updates, show_progress=run.primary and sys.stdout.isatty())
            train_metrics['threads'] = torch.get_num_threads()  # summary.csv: the torch threads of each epoch
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


def _evaluate(run: Run) -> Tuple[Dict[str, Any], float]:
    """ The evaluation metrics (the EMA's prefixed ema_) and the one ranking checkpoints: as in timm, the EMA's
    when it is evaluated. """
    args, loader_eval = run.args, run.loaders[1]
    metrics = validate(run.model, loader_eval, args, run.device, run.amp_autocast, args.num_classes)
    if not run.ema_evaluated:
        return metrics, metrics[args.eval_metric]
    ema_metrics = validate(run.model_ema, loader_eval, args, run.device, run.amp_autocast, args.num_classes)
    metrics.update((f'ema_{k}', v) for k, v in ema_metrics.items() if k != 'count')
    return metrics, ema_metrics[args.eval_metric]


def _save_epoch(run: Run, epoch: int, train_metrics: Dict[str, float], eval_metrics: Dict[str, Any], metric: float,
                lr: float, epoch_time: float) -> None:
    """ Summary row, checkpoint, the epoch's line and, with --plot, the figures. """
    out = run.output_dir
    summary_csv = os.path.join(out, 'summary.csv')
    # the epoch's row and checkpoint written whole: a stop meanwhile is raised once both are (timm's saver deletes
    # last.pth.tar before it renames the new one into place; stopped in between, the run would keep no checkpoint)
    with writing_output(out), stops_held():
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


def _stopped(run: Run, epoch: int, interrupted: Optional[BaseException]) -> None:
    """ A run stopped in `epoch`: an interrupt (Ctrl-C, SIGTERM, SIGHUP) says what there is to resume, unless another
    process's failure stopped it (that one's line is printed instead); `training_run` removes what a new run left. """
    if not run.primary or interrupted is None or (run.args.distributed and posted_failure(wait=1.0) is not None):
        return
    interrupted.reported = True
    kept = resumable_checkpoint(run.output_dir)  # last.pth.tar, else the latest epoch's checkpoint-N.pth.tar
    signal_name = f' ({interrupted.args[0]})' if isinstance(interrupted, RunStopped) else ''
    where = f'interrupted{signal_name} in epoch {epoch + 1}/{run.num_epochs}'
    if kept is not None:
        print(f'{where}; the last finished epoch is in {kept} (continue with --resume {kept})', file=sys.stderr)
    elif holds_finished_epoch(run.output_dir):
        print(f'{where}; the results of its finished epochs are kept in {run.output_dir}, but no checkpoint to '
              f'resume from', file=sys.stderr)
    elif run.args.resume:
        print(f'{where}, before it finished: nothing was kept; continue again with --resume {run.args.resume}',
              file=sys.stderr)
    else:
        print(f'{where}, before any epoch finished: nothing to resume, and nothing was kept', file=sys.stderr)


def finish_run(run: Run, history: List[Dict[str, Any]], eval_metrics: Dict[str, Any]) -> Dict[str, Any]:
    """ The run's outcome; the primary prints the best and the final accuracy. """
    args, saver = run.args, run.saver
    if args.log_wandb and run.primary:
        import wandb
        wandb.finish()
    if not history:  # the checkpoint had already reached the final epoch: report its accuracy, of the weights the
        # epochs evaluate (not an EMA kept on the CPU, which timm does not evaluate)
        eval_metrics = validate(run.model_ema if run.ema_evaluated else run.model, run.loaders[1], args,
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
