""" One training epoch and one evaluation pass, with the per-epoch seeding that makes a resumed run repeat the
uninterrupted one. """
import argparse
import logging
import math
import sys
import time
from collections import OrderedDict
from contextlib import nullcontext
from typing import Callable, List, Optional, Tuple

import numpy as np
import torch
import torch.nn as nn
from timm.data import Mixup
from timm.utils import AverageMeter, ModelEmaV3, NativeScaler, accuracy, dispatch_clip_grad, random_seed, unwrap_model

from ..errors import DataError

_logger = logging.getLogger('train')


def seed_epoch(seed: int, epoch: int, rank: int = 0) -> None:
    """ Seed python, numpy and torch from (seed, epoch, rank) at the start of every epoch.

    The loader's shuffling, its workers' augmentation seeds, mixup, random erasing and dropout then depend on the
    epoch alone, not on how many epochs ran in this process, so a resumed run repeats the uninterrupted one.
    """
    epoch_seed = int(np.random.SeedSequence([seed, epoch, rank]).generate_state(1)[0])
    random_seed(epoch_seed, 0)


def mean_lr(optimizer: torch.optim.Optimizer) -> float:
    lrs = [group['lr'] for group in optimizer.param_groups]
    return sum(lrs) / len(lrs)


def _all_reduce_sum(values: List[float], device: torch.device, distributed: bool) -> List[float]:
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    if distributed:
        torch.distributed.all_reduce(tensor)
    return tensor.tolist()


def train_one_epoch(
        epoch: int, model: nn.Module, loader, optimizer: torch.optim.Optimizer, loss_fn: Callable,
        args: argparse.Namespace, device: torch.device, lr_scheduler=None, amp_autocast: Callable = nullcontext,
        loss_scaler: Optional[NativeScaler] = None, model_ema: Optional[ModelEmaV3] = None,
        mixup_fn: Optional[Mixup] = None, num_updates: int = 0, show_progress: bool = False,
) -> Tuple[OrderedDict, int]:
    """ One pass over the training loader; returns ({'loss', 'img_per_sec'}, updated num_updates).

    With `args.grad_accum_steps` N > 1, as timm's train.py: the gradients of N batches (each loss divided by N; the
    epoch's last, shorter group by its own size) make one optimizer update, and the schedule and the EMA count
    updates, not batches; a distributed run synchronizes gradients only on the update's last batch. """
    from tqdm import tqdm
    model.train()
    parameters = [p for p in model.parameters() if p.requires_grad]
    num_batches = len(loader)
    accum = max(1, int(getattr(args, 'grad_accum_steps', 1)))
    last_group_start = num_batches - (num_batches % accum or accum)
    no_sync = getattr(model, 'no_sync', None) if getattr(args, 'distributed', False) else None
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    samples = 0
    batch_time, recent_loss = AverageMeter(), AverageMeter()
    bar = tqdm(total=num_batches, desc=f'epoch {epoch + 1}', disable=not show_progress, leave=False,
               dynamic_ncols=True, file=sys.stdout)
    start = end = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    for batch_idx, (inputs, target) in enumerate(loader):
        need_update = batch_idx == num_batches - 1 or (batch_idx + 1) % accum == 0
        group = num_batches - last_group_start if batch_idx >= last_group_start else accum
        if args.no_prefetcher:
            inputs, target = inputs.to(device), target.to(device)
            if mixup_fn is not None:
                inputs, target = mixup_fn(inputs, target)
        with no_sync() if no_sync is not None and not need_update else nullcontext():
            with amp_autocast():
                loss = loss_fn(model(inputs), target)
            _backward(loss / group if group > 1 else loss, optimizer, loss_scaler, args, parameters, need_update)
        if need_update:
            num_updates = _after_update(num_updates + 1, model, optimizer, model_ema, lr_scheduler, recent_loss.avg)
        samples += inputs.size(0)
        loss_sum += loss.detach().double() * inputs.size(0)
        batch_time.update(time.perf_counter() - end)
        end = time.perf_counter()
        if batch_idx == num_batches - 1 or (batch_idx + 1) % args.log_interval == 0:
            # syncing only here keeps GPUs busy between log points
            rate = inputs.size(0) * getattr(args, 'world_size', 1) / max(batch_time.avg, 1e-9)
            _log_step(loss.item(), epoch, batch_idx, num_batches, optimizer, recent_loss, inputs.size(0), rate,
                      bar if show_progress else None)
        bar.update(1)
    bar.close()
    elapsed = time.perf_counter() - start
    total_loss, total_samples = _all_reduce_sum(
        [loss_sum.item(), float(samples)], device, getattr(args, 'distributed', False))
    if total_samples == 0:
        raise DataError('the training loader produced no batch: the training set is smaller than --batch-size '
                        '(per process, the last incomplete batch is dropped); lower --batch-size')
    return OrderedDict(loss=total_loss / total_samples, img_per_sec=total_samples / max(elapsed, 1e-9)), num_updates


def _backward(scaled: torch.Tensor, optimizer: torch.optim.Optimizer, loss_scaler: Optional[NativeScaler],
              args: argparse.Namespace, parameters: List[torch.Tensor], need_update: bool) -> None:
    """ Add the batch's (scaled) loss gradient; on an update's last batch, clip as --clip-grad says and step. """
    if loss_scaler is not None:
        loss_scaler(scaled, optimizer, clip_grad=args.clip_grad, clip_mode=args.clip_mode,
                    parameters=parameters, need_update=need_update)
    else:
        scaled.backward()
        if need_update:
            if args.clip_grad is not None:
                dispatch_clip_grad(parameters, args.clip_grad, mode=args.clip_mode)
            optimizer.step()


def _after_update(num_updates: int, model: nn.Module, optimizer: torch.optim.Optimizer,
                  model_ema: Optional[ModelEmaV3], lr_scheduler, recent_loss: float) -> int:
    """ After update `num_updates`: clear the gradients, update the EMA and the schedule, which count updates. """
    optimizer.zero_grad(set_to_none=True)
    if model_ema is not None:
        model_ema.update(unwrap_model(model), step=num_updates)
    if lr_scheduler is not None:
        lr_scheduler.step_update(num_updates=num_updates, metric=recent_loss)
    return num_updates


def _log_step(loss: float, epoch: int, batch_idx: int, num_batches: int, optimizer: torch.optim.Optimizer,
              recent_loss: AverageMeter, batch_size: int, rate: float, bar) -> None:
    """ Stop on a non-finite loss, else show the loss on the progress bar or in a log line. """
    if not math.isfinite(loss):
        raise FloatingPointError(f'training loss is {loss} in epoch {epoch + 1}, batch {batch_idx + 1}; lower --lr '
                                 f'(now {mean_lr(optimizer):.3g}) or set --clip-grad')
    recent_loss.update(loss, batch_size)
    if bar is not None:
        bar.set_postfix(loss=f'{loss:.4f}', lr=f'{mean_lr(optimizer):.2e}', img_s=f'{rate:.0f}')
    else:
        done = batch_idx + 1
        _logger.info(f'Train: epoch {epoch + 1} [{done:>4d}/{num_batches} ({100. * done / num_batches:>3.0f}%)]'
                     f'  loss {loss:.4f} ({recent_loss.avg:.4f})  lr {mean_lr(optimizer):.3e}  {rate:.1f} img/s')


@torch.no_grad()
def validate(model: nn.Module, loader, args: argparse.Namespace, device: torch.device,
             amp_autocast: Callable = nullcontext, num_classes: int = 1000) -> OrderedDict:
    """ Loss, top-1 and top-5 (in %) over the evaluation loader, each image counted once across processes. """
    model.eval()
    topk = (1, min(5, num_classes))
    sampler = getattr(getattr(loader, 'loader', loader), 'sampler', None)
    # the distributed eval sampler pads ranks to equal length with repeats at the end; count only real samples
    remaining = getattr(sampler, 'num_valid_samples', None)
    loss_fn = nn.CrossEntropyLoss(reduction='sum')
    loss_sum = correct1 = correct5 = count = 0.
    for inputs, target in loader:
        if args.no_prefetcher:
            inputs, target = inputs.to(device), target.to(device)
        with amp_autocast():
            output = model(inputs)
        if remaining is not None:
            keep = min(int(remaining), output.size(0))
            remaining -= keep
            output, target = output[:keep], target[:keep]
            if keep == 0:
                continue
        n = output.size(0)
        loss_sum += loss_fn(output.float(), target).item()
        acc1, acc5 = accuracy(output, target, topk=topk)
        correct1 += acc1.item() * n / 100.
        correct5 += acc5.item() * n / 100.
        count += n
    loss_sum, correct1, correct5, count = _all_reduce_sum(
        [loss_sum, correct1, correct5, count], device, getattr(args, 'distributed', False))
    count = max(count, 1.)
    return OrderedDict(loss=loss_sum / count, top1=100. * correct1 / count, top5=100. * correct5 / count,
                       count=int(round(count)))
