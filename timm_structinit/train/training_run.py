""" One training run, from its checked arguments to its outcome: what would fail is refused first (a used output
folder, a checkpoint of another model), then the data, the model, the optimizer, what --resume restores, the loaders,
the schedule and the output folder, then the epochs (`epochs`). A new run that stops before its first epoch leaves
nothing behind. """
import argparse
import logging
import math
import os
from typing import Any, Dict, Optional, Tuple

import torch
import torch.nn as nn
from timm.scheduler import create_scheduler_v2, scheduler_kwargs
from timm.utils import CheckpointSaver, ModelEmaV3, trim_summary, unwrap_model

from ..diagnostics.mass_tracking import TargetMassTracker
from ..errors import ConfigError
from ..utils.command_line import error_line
from ..utils.seeds import seed_everything
from .build import build_datasets, build_model, build_optimizer, data_config
from .config import save_args
from .epochs import Run, finish_run, run_epochs, updates_in
from .inputs import RunInputs, ema_state_dict
from .loaders import build_loaders, usable_cores
from .output import claim_output_dir, output_dir, release_output_dir, remove_unfinished_run, writing_output
from .resume import check_resume, restore_checkpoint, saved_lr
from .thread_count import choose_threads

_logger = logging.getLogger('train')


def _train(args: argparse.Namespace, inputs: RunInputs, device: torch.device) -> Dict[str, Any]:
    """ The steps of a run: refuse what would fail, then data, model, optimizer, loaders, schedule, output folder,
    epochs and the final report; `inputs` are what `check_args` read. """
    primary = args.rank == 0
    if args.distributed:
        _logger.info(f'Distributed training: {args.world_size} processes, backend '
                     f'{torch.distributed.get_backend()}, device {device}')
    out, continuing, created = _refuse_early(args, inputs, primary)
    try:
        return _run_in(out, continuing, created, args, inputs, device)
    except BaseException:
        # a new run that stopped before its first epoch finished leaves nothing behind (its folder included); one
        # that finished an epoch keeps all of it (`remove_unfinished_run` checks)
        if primary and out is not None and not continuing:
            remove_unfinished_run(out, created)
        raise
    finally:
        if primary and out is not None:
            release_output_dir(out)


def _run_in(out: Optional[str], continuing: bool, created: Optional[str], args: argparse.Namespace,
            inputs: RunInputs, device: torch.device) -> Dict[str, Any]:
    """ The run in its claimed output folder (on the primary; None elsewhere). """
    primary = args.rank == 0
    # data first: a missing dataset fails in a second, before a model is built
    if args.distributed and args.dataset_download and not primary:
        torch.distributed.barrier()  # let the primary download alone
    dataset_train, dataset_eval = build_datasets(args)
    if args.distributed and args.dataset_download and primary:
        torch.distributed.barrier()
    seed_everything(args.seed, args.rank)
    model = build_model(args, inputs)
    _record_init_seed(args, model)
    config = data_config(args, model, (dataset_train, dataset_eval))
    _logger.info(f'Model {args.model}: {sum(p.numel() for p in model.parameters()) / 1e6:.3f}M parameters, '
                 f'{args.num_classes} classes, input {tuple(config["input_size"])}; {len(dataset_train)} training / '
                 f'{len(dataset_eval)} evaluation images')
    model.to(device)
    optimizer, amp_autocast, loss_scaler = build_optimizer(args, model, device)
    start_epoch, model_ema, lr_replaced = _restore(args, inputs, model, optimizer, loss_scaler)
    # the thread count this process trains with (args.yaml records it): the user's, or the fastest of a probe
    threads = choose_threads(args, model, config['input_size'], device, amp_autocast, usable_cores())
    args.threads = threads.threads
    if primary:
        _logger.info(threads.describe())
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
    run = Run(args, device, model, model_ema, optimizer, amp_autocast, loss_scaler, (loader_train, loader_eval),
              mixup, loss_fn, lr_scheduler, start_epoch, num_epochs, out, continuing, created,
              lr_replaced=lr_replaced)
    if primary:
        _open_output(run, inputs, dataset_eval, eval_options)
    history, eval_metrics = run_epochs(run)
    return finish_run(run, history, eval_metrics)


def _record_init_seed(args: argparse.Namespace, model: nn.Module) -> None:
    """ The seed a structured init drew from torch's generator (seeded with --seed) when model_kwargs did not fix
    one, kept with the run's arguments in its checkpoints (args.struct_init_seed), so that an export of them names
    the init training started from and builds it again. """
    record = getattr(model, 'struct_init_record', None)
    if record is not None and 'seed' in record and 'struct_init_seed' not in args.model_kwargs:
        args.struct_init_seed = int(record['seed'])


def _refuse_early(args: argparse.Namespace, inputs: RunInputs,
                  primary: bool) -> Tuple[Optional[str], bool, Optional[str]]:
    """ The output folder, claimed for this run (`claim_output_dir`), whether it continues a run, and the outermost
    folder the claim made; a used folder or a checkpoint this run cannot continue is refused before any data is
    loaded, by every process, so none waits on the others forever. """
    error, out, continuing, created = None, None, False, None
    if primary:
        try:
            out, continuing = output_dir(args)
            if args.resume:
                check_resume(args, inputs.resume, out, continuing, inputs.check_model)
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


def _restore(args: argparse.Namespace, inputs: RunInputs, model: nn.Module, optimizer, loss_scaler):
    """ (epoch to start from, EMA or None, whether a new --lr replaced the checkpoint's), from the --resume
    checkpoint's content when there is one. """
    start_epoch, lr_replaced = 0, False
    if args.resume:
        try:  # checked by `check_resume`; what the tensors themselves hold is still the file's
            start_epoch = restore_checkpoint(model, inputs.resume, None if args.no_resume_opt else optimizer,
                                             loss_scaler)
        except Exception as e:
            raise ConfigError(f'--resume {args.resume!r} cannot be restored ({type(e).__name__}: '
                              f'{error_line(e)[:300]})') from None
        old_lr = saved_lr(inputs.resume)
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
                model_ema.module.load_state_dict(ema_state_dict(inputs.resume))
            except Exception as e:
                raise ConfigError(f'--resume {args.resume!r}: its EMA weights cannot be restored '
                                  f'({type(e).__name__}: {error_line(e)[:300]})') from None
    return start_epoch, model_ema, lr_replaced


def _open_output(run: Run, inputs: RunInputs, dataset_eval, eval_options: Dict[str, Any]) -> None:
    """ Make the output folder, the checkpoint saver, the summary (cut back to the resumed epoch) and args.yaml. """
    args, out = run.args, run.output_dir
    run.saver = CheckpointSaver(
        model=run.model, optimizer=run.optimizer, args=args, model_ema=run.model_ema, amp_scaler=run.loss_scaler,
        checkpoint_dir=out, recovery_dir=out, decreasing=args.eval_metric == 'loss', max_history=args.checkpoint_hist)
    if run.continuing:
        _restore_saver(run.saver, inputs)
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
            if first is not None:  # None: the tracking said in one line that it is off
                print(f'target mass at epoch {run.start_epoch}: {first["mean"]:.3f} (layers '
                      f'{" ".join(f"{v:.2f}" for k, v in first.items() if k.startswith("layer"))})', flush=True)


def _restore_saver(saver: CheckpointSaver, inputs: RunInputs) -> None:
    """ The saver's history and best metric, from the checkpoint's content, as timm's
    `load_state_dict_from_checkpoint` restores them from a path (this run read the file once, for its checks). """
    state = inputs.resume.get('saver') if isinstance(inputs.resume, dict) else None
    if state is None:
        _logger.warning(f"No checkpoint history in '{inputs.resume_file}', ranked checkpoints start fresh.")
        return
    saver.load_state_dict(state)
