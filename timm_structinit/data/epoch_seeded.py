""" Loader workers that live through the whole run, with each image's augmentation drawn from a seed of (run seed,
epoch, image index) alone.

timm's loader draws an image's augmentation from its worker's random state, so what an image gets depends on how
many workers there are and on which of them reads it; restarting the workers every epoch (and seeding them from the
epoch) made a resumed run repeat the uninterrupted one, at the price of starting them anew each epoch.
`EpochSeededDataset` seeds Python's, numpy's and torch's CPU generators from (seed, epoch, index) before each image's
transform (and from (seed, epoch, index, copy) for the further copies of an image that repeated augmentation,
`--aug-repeats`, reads in one epoch: `CopyNumberedRepeatAugSampler` numbers them, so that each copy gets a draw of
its own, as timm's workers give it), `EpochSeededCollate` seeds them from (seed, epoch, first index) before the
batch is collated (timm's `FastCollateMixup` draws there, and goes off at `--mixup-off-epoch` in every worker), and
`seed_loader_order` gives the loader its own generators, so that the order of an epoch comes from (seed, epoch) and
creating an iterator draws nothing from the process's generators (a persistent loader creates one iterator, a fresh
one an iterator per epoch): the batches are then the same whatever `--workers` says, in every epoch, and the workers
can stay (`persistent_workers`). In the main process (`--workers 0`) the generators' states are put back after each
use, so the rest of the run draws as it would without the loader.
"""
import math
import multiprocessing
import random
from contextlib import contextmanager
from typing import Any, Callable, Iterator, List, Sequence

import numpy as np
import torch
from timm.data.distributed_sampler import RepeatAugSampler
from torch.utils.data import DataLoader, Dataset, RandomSampler, get_worker_info

__all__ = ['item_seed', 'copy_seed', 'EpochSeededDataset', 'EpochSeededCollate', 'EpochSeededRandomSampler',
           'CopyNumberedRepeatAugSampler', 'seed_loader_order']

_MASK = (1 << 64) - 1
_COLLATE = 0x9E3779B97F4A7C15  # a stream of seeds apart from the images' own


def _mix(value: int) -> int:
    """ splitmix64's finalizer: nearby inputs give unrelated 64-bit outputs. """
    value = (value + 0x9E3779B97F4A7C15) & _MASK
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK
    return value ^ (value >> 31)


def item_seed(seed: int, epoch: int, index: int) -> int:
    """ A 63-bit seed of (seed, epoch, index) alone. """
    return _mix(_mix(_mix(seed & _MASK) ^ epoch) ^ index) >> 1


def copy_seed(seed: int, epoch: int, index: int, copy: int) -> int:
    """ The seed of copy `copy` of image `index` in an epoch: `item_seed` for the first copy (0), so that a run
    without repeated augmentation draws as before, and one of (seed, epoch, index, copy) for each further one. """
    first = item_seed(seed, epoch, index)
    return first if copy == 0 else _mix(first ^ _mix(copy)) >> 1


def _seed_generators(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed & 0xFFFFFFFF)
    torch.default_generator.manual_seed(seed)  # the CPU generator only: an accelerator's stays as it is


@contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """ The CPU generators seeded for the block; in the main process their states are put back after it. """
    if get_worker_info() is not None:  # a worker's generators serve the loader alone
        _seed_generators(seed)
        yield
        return
    saved = random.getstate(), np.random.get_state(), torch.random.get_rng_state()
    _seed_generators(seed)
    try:
        yield
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        torch.random.set_rng_state(saved[2])


class EpochSeededDataset(Dataset):
    """ `dataset` whose items are (image, label, index), each transformed under the seed of (seed, epoch, index);
    `set_epoch` tells the workers, which keep running, the epoch (through shared memory). The transform timm's
    loader factory sets is set on `dataset`. """

    def __init__(self, dataset: Dataset, seed: int):
        self.dataset, self.seed = dataset, seed
        self._epoch = multiprocessing.RawValue('q', 0)

    @property
    def epoch(self) -> int:
        return self._epoch.value

    def set_epoch(self, epoch: int) -> None:
        self._epoch.value = epoch

    @property
    def transform(self) -> Any:
        return self.dataset.transform

    @transform.setter
    def transform(self, transform: Any) -> None:
        self.dataset.transform = transform

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key):
        """ key: the image's index, or (index, copy) from `CopyNumberedRepeatAugSampler`. """
        index, copy = key if isinstance(key, tuple) else (key, 0)
        with _seeded(copy_seed(self.seed, self.epoch, index, copy)):
            image, label = self.dataset[index]
        return image, label, index


class EpochSeededCollate:
    """ A collate of `EpochSeededDataset` items: the indices dropped, the inner collate (timm's `fast_collate`,
    `FastCollateMixup` or torch's default) run under the seed of (seed, epoch, the batch's first index). From epoch
    `mixup_off_epoch` on (when > 0), a mixing collate mixes no more (`--mixup-off-epoch`): each worker holds its own
    copy of the collate, which the main process's `mixup_enabled = False` does not reach, and the epoch does. """

    def __init__(self, collate: Callable[[List[Any]], Any], dataset: EpochSeededDataset, mixup_off_epoch: int = 0):
        self.collate, self.dataset, self.mixup_off_epoch = collate, dataset, mixup_off_epoch

    def __call__(self, items: Sequence[Any]) -> Any:
        mixes = getattr(self.collate, 'mixup_enabled', False)
        if mixes and self.mixup_off_epoch and self.dataset.epoch >= self.mixup_off_epoch:
            self.collate.mixup_enabled = False
        seed = item_seed(self.dataset.seed ^ _COLLATE, self.dataset.epoch, items[0][2])
        with _seeded(seed):
            return self.collate([item[:2] for item in items])


class EpochSeededRandomSampler(RandomSampler):
    """ torch's RandomSampler whose order comes from (seed, epoch) alone (`set_epoch`), not from the state of the
    process's generator when an iterator starts. """

    order_seed = 0

    def set_epoch(self, epoch: int) -> None:
        self.generator = torch.Generator()
        self.generator.manual_seed(item_seed(self.order_seed, epoch, -1 & _MASK))


class CopyNumberedRepeatAugSampler(RepeatAugSampler):
    """ timm's RepeatAugSampler whose items are (index, copy): the same images in the same order, each with the number
    of the times it came earlier in the epoch's whole order (every process's share of it), so that each copy of an
    image is augmented with its own draw on any process, two copies on one process included. The order follows
    `order_seed` as torch's DistributedSampler follows its seed (timm's orders by the epoch alone, as here with 0). """

    order_seed = 0

    def _slot_sizes(self, count: int):
        """ For each position of the epoch's repeated order before padding, (the position of the first copy of its
        image, how many copies of that image the order holds): the order repeats each image of the shuffled list
        in consecutive positions, `num_repeats` times (a fractional count: as many as timm's `i // num_repeats`
        gives it). """
        repeats = self.num_repeats
        if isinstance(repeats, float) and not repeats.is_integer():
            slots = [int(i // repeats) for i in range(math.ceil(repeats * count))]
        else:
            slots = [i // int(repeats) for i in range(int(repeats) * count)]
        first, size = {}, {}
        for position, slot in enumerate(slots):
            first.setdefault(slot, position)
            size[slot] = size.get(slot, 0) + 1
        return [(first[slot], size[slot]) for slot in slots]

    def __iter__(self):
        epoch = self.epoch
        self.epoch = self.order_seed + epoch  # timm seeds the shuffle with the epoch: seed + epoch, as torch's
        try:
            indices = list(super().__iter__())
        finally:
            self.epoch = epoch
        slots = self._slot_sizes(len(self.dataset))
        length = len(slots)
        positions = range(self.rank, self.total_size, self.num_replicas)[:self.num_selected_samples]
        assert len(positions) == len(indices)
        for index, position in zip(indices, positions):
            first, size = slots[position % length]
            yield index, (position // length) * size + position % length - first


def seed_loader_order(loader: DataLoader, seed: int) -> DataLoader:
    """ Give `loader` (timm's PrefetchLoader unwrapped) generators of its own: its workers' base seed from a private
    generator, and a shuffling order of (seed, epoch) where it shuffles with torch's RandomSampler (timm's
    distributed samplers already follow `set_epoch`). Returns `loader`. """
    inner = getattr(loader, 'loader', loader)
    inner.generator = torch.Generator()
    inner.generator.manual_seed(item_seed(seed, 0, _COLLATE))
    sampler = getattr(inner, 'sampler', None)
    if type(sampler) is RandomSampler:
        sampler.__class__ = EpochSeededRandomSampler  # the same instance: the loader's batch sampler keeps it
        sampler.order_seed = seed
        sampler.set_epoch(0)
    elif type(sampler) is RepeatAugSampler:
        sampler.__class__ = CopyNumberedRepeatAugSampler
        sampler.order_seed = seed
    return loader
