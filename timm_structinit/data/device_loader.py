""" A dataset decoded once into 8-bit tensors on the training device, and the loader that serves its epochs from
there: shuffled on the device from the run's seed, each image augmented on the device (`device_transforms`), no
worker processes and no copies per batch.

`decode_dataset` reads every image once (in parallel, through a DataLoader's workers, with a progress bar) into one
uint8 tensor (N, C, H, W) and its labels; images of different sizes, or more data than `MEMORY_SHARE` of the
device's free memory, are refused in one line that says to use `--loader timm`. `DeviceLoader` is the training or the
evaluation loader over such tensors: each epoch's order comes from (seed, epoch), each process of a distributed run
takes its shard of it (as timm's samplers: the training order padded to a multiple of the processes, the evaluation
order split without repeats), and every random draw of an epoch comes from one generator seeded by (seed, epoch,
rank), so a resumed run repeats the batches of the uninterrupted one.
"""
import math
import os
import sys
from typing import Any, Callable, Iterator, Optional, Tuple

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from ..errors import DataError

__all__ = ['MEMORY_SHARE', 'decode_dataset', 'free_memory', 'DeviceLoader', 'epoch_generator']

# the share of the device's free memory the decoded images may take: the rest is the model's, its activations' and
# the augmentation's (a batch of float copies)
MEMORY_SHARE = 0.25


def free_memory(device: torch.device) -> Optional[int]:
    """ Bytes free on `device`: the accelerator's free memory, or the system's available memory for the CPU (None
    where it cannot be read). """
    if device.type == 'cuda':
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type == 'cpu':
        try:
            with open('/proc/meminfo') as f:
                for line in f:
                    if line.startswith('MemAvailable:'):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        try:
            return os.sysconf('SC_AVPHYS_PAGES') * os.sysconf('SC_PAGE_SIZE')
        except (ValueError, OSError, AttributeError):
            return None
    return None


def _as_array(image: Any) -> np.ndarray:
    array = np.asarray(image, dtype=np.uint8)
    return array[:, :, None] if array.ndim == 2 else array


class _Decoded:
    """ A DataLoader collate: a list of (image, label) items as one uint8 array (B, H, W, C) and the labels, or the
    position and size of the first image whose size differs from the first one's. """

    def __call__(self, items):
        arrays = [_as_array(image) for image, _ in items]
        odd = next((i for i, a in enumerate(arrays) if a.shape != arrays[0].shape), None)
        if odd is not None:
            return dict(odd=odd, shape=arrays[odd].shape)
        return dict(images=torch.from_numpy(np.stack(arrays)), labels=torch.tensor([int(t) for _, t in items]))


def decode_dataset(dataset: Dataset, device: torch.device, workers: int, what: str, file_of: Callable[[int], Any],
                   show_progress: bool = True, batch_size: int = 256) -> Tuple[torch.Tensor, torch.Tensor]:
    """ Every image of `dataset` (items: a Pillow image and a label) as one uint8 tensor (N, C, H, W) on `device`,
    and the labels. DataError, before decoding the rest, for images of another size than the first (naming the file,
    `file_of(index)`) and for data larger than MEMORY_SHARE of the device's free memory. """
    from tqdm import tqdm
    count = len(dataset)
    if count == 0:
        raise DataError(f'{what}: no images to decode')
    sample = _as_array(dataset[0][0])
    needed = count * sample.nbytes
    free = free_memory(device)
    if free is not None and needed > MEMORY_SHARE * free:
        raise DataError(f'--loader device: {what} decodes to {needed / 2 ** 30:.2f} GiB ({count} images of '
                        f'{sample.shape[1]}x{sample.shape[0]}x{sample.shape[2]}), more than {MEMORY_SHARE:.0%} of the '
                        f'{free / 2 ** 30:.2f} GiB free on {device}; use --loader timm')
    images = torch.empty((count, sample.shape[2], sample.shape[0], sample.shape[1]), dtype=torch.uint8, device=device)
    labels = torch.empty(count, dtype=torch.long, device=device)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=workers, collate_fn=_Decoded())
    start = 0
    with tqdm(total=count, desc=f'decoding {what}', unit='img', disable=not show_progress, leave=False,
              file=sys.stderr, dynamic_ncols=True) as bar:
        for decoded in loader:
            odd = decoded.get('odd', 0)
            size = decoded['shape'] if 'shape' in decoded else tuple(decoded['images'].shape[1:])
            if size != sample.shape:
                raise DataError(f'--loader device: {what} holds images of different sizes ({file_of(start + odd)} is '
                                f'{size[1]}x{size[0]}, the first {sample.shape[1]}x{sample.shape[0]}); the device '
                                f'loader keeps images of one size; use --loader timm')
            batch = decoded['images']
            n = batch.shape[0]
            images[start:start + n] = batch.permute(0, 3, 1, 2).to(device)
            labels[start:start + n] = decoded['labels'].to(device)
            start += n
            bar.update(n)
    return images, labels


def epoch_generator(seed: int, epoch: int, rank: int, device: torch.device) -> torch.Generator:
    """ A generator on `device` seeded from (seed, epoch, rank) alone. """
    generator = torch.Generator(device=device)
    generator.manual_seed(int(np.random.SeedSequence([seed, epoch, rank]).generate_state(1, np.uint64)[0] >> 1))
    return generator


class DeviceLoader:
    """ Batches of (images, labels) from decoded tensors, transformed on their device.

    `transform(uint8 batch, generator)` gives the model's input; `mixup(images, labels)` (timm's `Mixup`), when given,
    mixes the transformed batch and gives soft labels; `erasing` (timm's `RandomErasing`), when given, erases in the
    mixed batch, as timm's prefetcher erases after its collate has mixed (with `--no-prefetcher` timm erases each image
    in its transform, before the training loop mixes: the transform's own erasing is that order). Training loaders
    (`shuffle=True`) drop the last incomplete batch and shard a padded order; evaluation loaders keep every image once.
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, batch_size: int, transform: Callable,
                 shuffle: bool, seed: int, rank: int = 0, world_size: int = 1, mixup: Optional[Callable] = None,
                 erasing: Optional[Callable] = None):
        self.images, self.labels, self.batch_size = images, labels, batch_size
        self.transform, self.shuffle, self.mixup, self.erasing = transform, shuffle, mixup, erasing
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _shard_size(self) -> int:
        count = len(self.labels)
        if self.shuffle:
            return math.ceil(count / self.world_size)
        return len(range(self.rank, count, self.world_size))

    def __len__(self) -> int:
        size = self._shard_size()
        return size // self.batch_size if self.shuffle else math.ceil(size / self.batch_size)

    def _order(self) -> torch.Tensor:
        count, device = len(self.labels), self.labels.device
        if not self.shuffle:
            return torch.arange(self.rank, count, self.world_size, device=device)
        shared = epoch_generator(self.seed, self.epoch, -1 % 2 ** 31, device)  # the same order in every process
        order = torch.randperm(count, generator=shared, device=device)
        total = self._shard_size() * self.world_size
        if total > count:  # as DistributedSampler: repeat the head so that every process gets as many
            order = torch.cat([order, order[:total - count]])
        return order[self.rank::self.world_size]

    def __iter__(self) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
        order = self._order()
        generator = epoch_generator(self.seed, self.epoch, self.rank, self.images.device)
        for start in range(0, len(self) * self.batch_size, self.batch_size):
            index = order[start:start + self.batch_size]
            images = self.transform(self.images[index], generator)
            labels = self.labels[index]
            if self.mixup is not None:
                images, labels = self.mixup(images, labels)
            if self.erasing is not None:
                images = self.erasing(images)
            yield images, labels
