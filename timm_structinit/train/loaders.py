""" The run's training and evaluation loaders, and its training loss, by `--loader`:

* `timm` (the default): timm's `create_loader`, images read and augmented in worker processes that live through the
  whole run (`persistent_workers`); each image's augmentation is drawn from a seed of (seed, epoch, index) and each
  batch's mixup from (seed, epoch, first index) (`data.epoch_seeded`), so the batches are the same whatever
  `--workers` says and a resumed run repeats the uninterrupted one;
* `device`: the images decoded once into tensors on the training device and augmented there, per image
  (`data.device_loader`, `data.device_transforms`), with timm's own `Mixup`/`CutMix` and `RandomErasing`.
"""
import argparse
import logging
import os
from typing import Any, Dict, Tuple

import torch
import torch.nn as nn
from timm.data import FastCollateMixup, Mixup, create_loader
from timm.data.random_erasing import RandomErasing
from timm.data.loader import fast_collate
from timm.loss import LabelSmoothingCrossEntropy, SoftTargetCrossEntropy
from torch.utils.data.dataloader import default_collate

from timm_structinit_cli.workers import loader_workers, usable_cores  # the count --help says

from ..data import item_file
from ..data.device_loader import DeviceLoader, decode_dataset
from ..data.device_transforms import DeviceEvalTransform, DeviceTrainTransform
from ..data.epoch_seeded import EpochSeededCollate, EpochSeededDataset, seed_loader_order
from ..errors import DataError
from ..utils.words import counted
from .checks import mixup_active
from .failures import quiet_worker_starts

__all__ = ['build_loaders', 'usable_cores', 'loader_workers']

_logger = logging.getLogger('train')


def _mixup(args: argparse.Namespace, in_collate: bool):
    """ timm's Mixup/CutMix, None when off; in the collate (on uint8 batches) where timm's prefetcher runs. """
    if not mixup_active(args):
        return None
    return (FastCollateMixup if in_collate else Mixup)(
        mixup_alpha=args.mixup, cutmix_alpha=args.cutmix, cutmix_minmax=args.cutmix_minmax, prob=args.mixup_prob,
        switch_prob=args.mixup_switch_prob, mode=args.mixup_mode, label_smoothing=args.smoothing,
        num_classes=args.num_classes)


def _loss(args: argparse.Namespace, mixup, device: torch.device) -> nn.Module:
    if mixup is not None:
        loss_fn = SoftTargetCrossEntropy()  # smoothing is folded into the mixed targets
    elif args.smoothing:
        loss_fn = LabelSmoothingCrossEntropy(smoothing=args.smoothing)
    else:
        loss_fn = nn.CrossEntropyLoss()
    return loss_fn.to(device)


def build_loaders(args: argparse.Namespace, config: Dict[str, Any], dataset_train, dataset_eval,
                  device: torch.device):
    """ (train loader, eval loader, loader options, mixup or None, training loss). The loader options are those of
    timm's evaluation loader (the target-mass tracker reads images through them, whichever loader trains). """
    workers, pin_memory = loader_workers(args.workers), args.pin_mem and device.type not in ('cpu', 'mps')
    if workers < args.workers:
        _logger.info(f'Loader: {counted(workers, "worker process")} per training process ({args.workers} asked for; '
                     f'{counted(usable_cores(), "core")} here)')
    eval_options = dict(
        input_size=config['input_size'], mean=config['mean'], std=config['std'], num_workers=workers,
        distributed=args.distributed, pin_memory=pin_memory, device=device, use_prefetcher=not args.no_prefetcher,
        interpolation=config['interpolation'], crop_pct=config['crop_pct'])
    if args.loader == 'device':
        loader_train, loader_eval, mixup = _device_loaders(args, config, dataset_train, dataset_eval, device, workers)
    else:
        loader_train, loader_eval, mixup = _timm_loaders(args, config, dataset_train, dataset_eval, eval_options)
    if len(loader_train) == 0:
        raise DataError(f'{len(dataset_train)} training images make no full batch of --batch-size '
                        f'{args.batch_size} per process; lower --batch-size')
    return loader_train, loader_eval, eval_options, mixup, _loss(args, mixup, device)


def _timm_loaders(args: argparse.Namespace, config: Dict[str, Any], dataset_train, dataset_eval,
                  eval_options: Dict[str, Any], persistent: bool = True) -> Tuple[Any, Any, Any]:
    """ timm's loaders, their workers kept through the run (`persistent`; benchmarks/data_path.py measures them
    without), each image and batch drawn from its own seed. """
    mixup = _mixup(args, in_collate=not args.no_prefetcher)
    seeded = EpochSeededDataset(dataset_train, args.seed)
    inner = mixup if mixup is not None and not args.no_prefetcher else (
        default_collate if args.no_prefetcher else fast_collate)
    persistent = persistent and eval_options['num_workers'] > 0
    train_interpolation = (not args.no_aug and args.train_interpolation) or config['interpolation']
    loader_train = create_loader(
        seeded, batch_size=args.batch_size, is_training=True, no_aug=args.no_aug, re_prob=args.reprob,
        re_mode=args.remode, re_count=args.recount, re_split=args.resplit, train_crop_mode=args.train_crop_mode,
        scale=args.scale, ratio=args.ratio, hflip=args.hflip, vflip=args.vflip, color_jitter=args.color_jitter,
        auto_augment=args.aa, interpolation=train_interpolation, num_aug_repeats=args.aug_repeats,
        collate_fn=EpochSeededCollate(inner, seeded, args.mixup_off_epoch), persistent_workers=persistent,
        **{k: v for k, v in eval_options.items() if k not in ('interpolation', 'crop_pct')})
    loader_eval = create_loader(
        dataset_eval, batch_size=args.validation_batch_size or args.batch_size, is_training=False,
        persistent_workers=persistent, **eval_options)
    quiet_worker_starts(loader_train), quiet_worker_starts(loader_eval)
    seed_loader_order(loader_train, args.seed), seed_loader_order(loader_eval, args.seed)
    train_sampler = getattr(getattr(loader_train, 'loader', loader_train), 'sampler', None)
    if hasattr(train_sampler, 'seed'):
        train_sampler.seed = args.seed  # timm builds the DistributedSampler with seed 0; follow --seed
    return loader_train, loader_eval, mixup


def _device_loaders(args: argparse.Namespace, config: Dict[str, Any], dataset_train, dataset_eval,
                    device: torch.device, workers: int) -> Tuple[Any, Any, Any]:
    """ The datasets decoded onto the training device, and loaders that augment there. """
    primary = args.rank == 0
    decoded = [decode_dataset(dataset, device, workers, what, lambda i, d=dataset: item_file(d, i),
                              show_progress=primary and os.isatty(2))
               for dataset, what in ((dataset_train, f'--train-split {args.train_split!r}'),
                                     (dataset_eval, f'--val-split {args.val_split!r}'))]
    train_size = tuple(decoded[0][0].shape[1:])
    _logger.info(f'Loader: {len(dataset_train) + len(dataset_eval)} images of {train_size[2]}x{train_size[1]} '
                 f'decoded onto {device} ({sum(d[0].numel() for d in decoded) / 2 ** 20:.1f} MiB)')
    train_interpolation = (not args.no_aug and args.train_interpolation) or config['interpolation']
    evaluate = DeviceEvalTransform(config['input_size'], config['crop_pct'], config['interpolation'],
                                   config['mean'], config['std'], device)
    mixup = _mixup(args, in_collate=False)
    # timm's order: its prefetcher erases the batch its collate has mixed; with --no-prefetcher each image is erased in
    # the transform and the batch mixed after (the erasing then reaches both images of a mix)
    erase_after_mix = mixup is not None and not args.no_prefetcher
    splits = 2 if args.resplit else 0
    if args.no_aug:  # as timm's transforms_noaug_train: resize to the input size, no crop_pct, no erasing
        transform = DeviceEvalTransform(config['input_size'], 1.0, train_interpolation, config['mean'],
                                        config['std'], device, squash=True)
    else:
        transform = DeviceTrainTransform(
            config['input_size'], args.scale, args.ratio, args.hflip, args.vflip, args.color_jitter, args.aa,
            train_interpolation, config['mean'], config['std'], re_prob=0.0 if erase_after_mix else args.reprob,
            re_mode=args.remode, re_count=args.recount, re_num_splits=splits, device=device)
    after_mix = None
    if erase_after_mix and args.reprob > 0 and not args.no_aug:
        after_mix = RandomErasing(args.reprob, mode=args.remode, max_count=args.recount, num_splits=splits,
                                  device=device)
    shards = dict(seed=args.seed, rank=args.rank, world_size=args.world_size)
    loader_train = DeviceLoader(*decoded[0], args.batch_size, transform, shuffle=True, mixup=mixup, erasing=after_mix,
                                **shards)
    loader_eval = DeviceLoader(*decoded[1], args.validation_batch_size or args.batch_size, evaluate,
                               shuffle=False, **shards)
    return loader_train, loader_eval, mixup
