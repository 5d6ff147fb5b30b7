""" What `--resume` restores, checked against this run before any work: the checkpoint is a training checkpoint (not
weights alone), its epoch lies in the run's range, its optimizer state has the kind, parameter groups and
hyperparameters of the optimizer this command builds, and the summary it continues logs the columns this run writes.
A checkpoint that fails a check is refused with one line; where starting a new optimizer is the way out, the line
says `--no-resume-opt`.

timm's `resume_checkpoint` loads whatever it finds: an optimizer state of another kind fails in the first step with
a KeyError, a negative epoch reaches the schedule, and a plain state dict restarts at epoch 0 in the old folder.
"""
import argparse
import csv
import os
from typing import Any, List, Mapping, Optional

import torch
from timm.models import clean_state_dict

from ..errors import ConfigError
from ..utils.file_schema import CheckpointBookkeeping, SummaryRow, TargetMassRow, check_value, read_csv
from ..utils.words import counted
from .build import check_checkpoint_fits
from .inputs import resume_file, saved_args

__all__ = ['RUN_CHECKPOINTS', 'resume_file', 'continues_in_folder', 'start_epoch_of', 'restore_checkpoint',
           'check_resume', 'optimizer_differences', 'saved_args', 'saved_lr']

# the checkpoints a run writes into its folder: resuming one of them continues that run there
RUN_CHECKPOINTS = ('last.pth.tar', 'model_best.pth.tar')


def continues_in_folder(resume: str) -> bool:
    """ Whether the checkpoint is one a run wrote into its own folder (last, best or a numbered one), so that the
    run goes on there; a checkpoint under another name is a start point, and its run goes into a new folder. """
    name = os.path.basename(resume_file(resume))
    return name in RUN_CHECKPOINTS or (name.startswith('checkpoint-') and name.endswith('.pth.tar'))


def saved_lr(meta: Mapping[str, Any]) -> Optional[float]:
    value = saved_args(meta).get('lr')
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def start_epoch_of(meta: Mapping[str, Any]) -> int:
    """ The epoch a run resumed from `meta` starts at, as timm's `resume_checkpoint` counts it. """
    epoch = meta['epoch']
    return epoch + 1 if meta.get('version', 1) > 1 else epoch


def restore_checkpoint(model: torch.nn.Module, meta: Mapping[str, Any], optimizer: Optional[torch.optim.Optimizer],
                       loss_scaler: Any) -> int:
    """ Load a training checkpoint's content into the model, the optimizer and the loss scaler (each when given), as
    timm's `resume_checkpoint` does from a path (the run read the file once, for its checks); returns the epoch to
    start from. """
    model.load_state_dict(clean_state_dict(meta['state_dict']))
    if optimizer is not None and 'optimizer' in meta:
        optimizer.load_state_dict(meta['optimizer'])
    if loss_scaler is not None and loss_scaler.state_dict_key in meta:
        loss_scaler.load_state_dict(meta[loss_scaler.state_dict_key])
    return start_epoch_of(meta)


def check_resume(args: argparse.Namespace, meta: Any, out: str, continuing: bool,
                 model: Optional[torch.nn.Module]) -> None:
    """ Refuse a --resume checkpoint this run cannot continue (ConfigError naming the checkpoint, what differs and
    the way out); `meta` is its content, `out` the run's folder, `continuing` whether the run goes on in it, and
    `model` the model this command builds, on the meta device (None when it is not built there). """
    flag = f'--resume {args.resume!r}'
    state_dict = meta.get('state_dict') if isinstance(meta, dict) else None
    epoch = meta.get('epoch') if isinstance(meta, dict) else None
    if not isinstance(state_dict, Mapping) or not isinstance(epoch, int) or isinstance(epoch, bool):
        what = 'weights only (a state dict)' if isinstance(meta, Mapping) and 'state_dict' not in meta else (
            f'a {type(meta).__name__} without a training epoch')
        raise ConfigError(f'{flag} holds {what}, not a training checkpoint to continue; start from its weights with '
                          f'--initial-checkpoint {args.resume}')
    start = start_epoch_of(meta)
    last_epoch = args.epochs + args.cooldown_epochs
    if epoch < 0 or start > last_epoch:
        raise ConfigError(f'{flag} records epoch {epoch}, outside this run: it would start at epoch {start + 1} of '
                          f'{last_epoch}; valid: a checkpoint of epoch 0..{last_epoch - 1} (raise --epochs to '
                          f'continue past {last_epoch})')
    check_value(flag, meta, CheckpointBookkeeping, 'it is not the bookkeeping a run writes into its checkpoints; '
                'resume from another checkpoint of the run (checkpoint-N.pth.tar), or start from its weights with '
                f'--initial-checkpoint {resume_file(args.resume)}')
    if model is not None:  # the weights fit the model this command builds: names and shapes
        check_checkpoint_fits(model, clean_state_dict(dict(state_dict)), '--resume', args.resume, args, meta)
    if not args.no_resume_opt:
        differences = optimizer_differences(args, meta, model)
        if differences:
            raise ConfigError(f'{flag}: its optimizer state does not fit the optimizer of this command '
                              f'({"; ".join(differences)}); pass the options it was trained with, or --no-resume-opt '
                              f'to start a new optimizer from the resumed weights')
    if continuing:
        _check_run_files(out)
        _check_columns(args, os.path.join(out, 'summary.csv'))


def _check_run_files(out: str) -> None:
    """ The files of the run a resume continues, which it reads back and appends to, held to their schema
    (`utils.file_schema`): its summary and, for an impulse run, its target mass per epoch. """
    for name, row in (('summary.csv', SummaryRow), ('target_mass.csv', TargetMassRow)):
        path = os.path.join(out, name)
        if os.path.lexists(path):
            read_csv(path, row, f'it is not what the run wrote: put back the file the run wrote, or delete it (it then '
                                f'starts again at the resumed epoch) and resume again')


def _expected_optimizer(args: argparse.Namespace, model: torch.nn.Module) -> torch.optim.Optimizer:
    """ The optimizer this command builds, over `model` (on the meta device). """
    from timm.optim import create_optimizer_v2, optimizer_kwargs
    options = optimizer_kwargs(cfg=args)
    options.update(lr=args.lr or 1.0)  # the learning rate is not compared: a new --lr is taken (see `saved_lr`)
    return create_optimizer_v2(model, **options, **args.opt_kwargs)


# what a parameter group holds besides its hyperparameters, and the learning rate a new --lr may change
_NOT_COMPARED = ('params', 'lr', 'initial_lr')


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def optimizer_differences(args: argparse.Namespace, meta: Mapping[str, Any],
                          model: Optional[torch.nn.Module]) -> List[str]:
    """ How the checkpoint's optimizer state differs from the optimizer this command builds ([] when it fits):
    the optimizer's name, the parameter groups (number, sizes) and each group's hyperparameters. """
    state = meta.get('optimizer')
    if not isinstance(state, Mapping) or not isinstance(state.get('param_groups'), list):
        return ['the checkpoint holds no optimizer state']
    differences = []
    trained_with = saved_args(meta).get('opt')
    if isinstance(trained_with, str) and trained_with.lower() != args.opt.lower():
        differences.append(f'it was trained with --opt {trained_with}, this command has --opt {args.opt}')
    if model is None:
        return differences
    try:
        expected = _expected_optimizer(args, model).state_dict()['param_groups']
    except Exception:  # check_args built this optimizer already, over a stand-in
        return differences
    saved = state['param_groups']
    sizes = [len(g.get('params', ())) if isinstance(g, Mapping) else None for g in saved]
    if sizes != [len(g['params']) for g in expected]:
        differences.append(f'{counted(len(saved), "parameter group")} of {sizes} tensors in the checkpoint, '
                           f'{len(expected)} of {[len(g["params"]) for g in expected]} here')
        return differences
    for i, (old, new) in enumerate(zip(saved, expected)):
        keys = (set(old) | set(new)) - set(_NOT_COMPARED)
        changed = sorted(k for k in keys if k not in old or k not in new or not _same(old[k], new[k]))
        if changed:
            shown = ', '.join(f'{k} {old.get(k, "(none)")!r} -> {new.get(k, "(none)")!r}' for k in changed[:4])
            differences.append(f'group {i}: {shown}')
            break  # the first group says enough
    return differences


def _check_columns(args: argparse.Namespace, summary_csv: str) -> None:
    """ The summary the run continues logs the EMA's columns exactly when this command evaluates an EMA (rows of
    another width under its header would shift every column after them). """
    try:
        with open(summary_csv, newline='') as f:
            header = next(csv.reader(f), [])
    except (OSError, csv.Error, UnicodeDecodeError):
        return  # no summary yet (or one timm's trim_summary rewrites)
    logged = any(name.startswith('eval_ema_') for name in header)
    evaluated = bool(args.model_ema) and not args.model_ema_force_cpu
    if header and logged != evaluated:
        now = 'evaluates an EMA (--model-ema)' if evaluated else 'evaluates no EMA'
        before = 'with' if logged else 'without'
        raise ConfigError(f'--resume {args.resume!r}: the run in {os.path.dirname(summary_csv)} logged its epochs '
                          f'{before} EMA columns ({summary_csv}), but this command {now}; resume with the EMA options '
                          f'it was trained with, or continue into a new folder with --experiment NAME')
