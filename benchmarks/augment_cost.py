""" What one augmented training image costs a CPU core: timm's pipeline (decode the JPEG, then timm's training transform
in Pillow, then the uint8 tensor its prefetcher takes) against the device loader's (the images already decoded; its
training transform on a batch of CPU tensors, one torch thread), for the 2024 recipe's transform (32 px:
RandomResizedCrop 0.08-1, flip, rand-m9-mstd0.5-inc1) and the 2025 recipes' (32 px CIFAR images to 224 px, the same
augmentation). CPU time of this process (`time.process_time`), so a busy machine slows both sides alike.

Beside each ratio, a floor that any batched version of the transform pays on a CPU core, against an eighth of timm's
cost: the crop and resize through torch's fastest CPU resampler (`F.interpolate` on 8-bit images, antialiased, one
call per crop: vectorised code ported from Pillow-SIMD), and, for the geometric ops RandAugment applies per image on
average (a third of an op for `rand-m9-mstd0.5-inc1`: 2 layers, probability 0.5, 5 of its 15 ops), one resampling at
the output size through torch's fastest general sampler (`F.grid_sample`, bilinear, on float images; costed as a
translation, the cheapest of them). The ops that only change values (tables, blends) are left out of it.

    python benchmarks/augment_cost.py --out benchmarks/results/augment_cost.txt
"""
import argparse
import os
import platform
import shlex
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Tuple

import numpy as np
import PIL
import timm
import torch
from PIL import Image
from timm.data import create_transform

from timm_structinit.data.batch_rand_augment import GEOMETRIC_OPS, BatchRandAugment
from timm_structinit.data.device_transforms import DeviceTrainTransform
from timm_structinit.data.pillow_compat import posterize_zero_bits_safe_ops
from results_file import Report

REPO = Path(__file__).resolve().parents[1]
SHARED_CIFAR10 = REPO.parent / 'shared' / 'data' / 'cifar10'
# the recipes' transforms: (input size, RandAugment, mean, std)
TRANSFORMS = {
    '2024 (32 px)': (32, 'rand-m9-mstd0.5-inc1', (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    '2025 (32 -> 224 px)': (224, 'rand-m9-mstd0.5-inc1', (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}


def timm_cost(files, size: int, aa: str, repeats: int) -> float:
    """ CPU seconds per image of timm's pipeline as its workers run it: decode, transform, to a uint8 tensor. """
    with posterize_zero_bits_safe_ops():  # as the training command runs timm's RandAugment (its ops bind at build)
        transform = create_transform(size, is_training=True, auto_augment=aa, interpolation='random',
                                     use_prefetcher=True)
        start = time.process_time()
        for _ in range(repeats):
            for path in files:
                with Image.open(path) as image:
                    transform(image.convert('RGB'))
        return (time.process_time() - start) / (repeats * len(files))


def device_cost(files, size: int, aa: str, mean, std, batch: int, repeats: int) -> float:
    """ CPU seconds per image of the device loader's transform on batches of CPU tensors (decoding excluded: it
    happens once per run). """
    images = torch.stack([torch.from_numpy(np.asarray(Image.open(p).convert('RGB')).copy()).permute(2, 0, 1)
                          for p in files])
    transform = DeviceTrainTransform((3, size, size), (0.08, 1.0), (3 / 4, 4 / 3), 0.5, 0.0, 0.4, aa, 'random',
                                     mean, std)
    generator = torch.Generator().manual_seed(0)
    transform(images[:batch], generator)  # warm-up
    start = time.process_time()
    done = 0
    for _ in range(repeats):
        for first in range(0, len(images) - batch + 1, batch):
            transform(images[first:first + batch], generator)
            done += batch
    return (time.process_time() - start) / done


def floor_cost(files, size: int, aa: str, repeats: int) -> Tuple[float, float]:
    """ CPU seconds per image that any batched version of the transform pays at least: (the crop and resize through
    torch's 8-bit resampler, bilinear and bicubic alternately, on the crops timm's RandomResizedCrop draws; one
    resampling at the output size through torch's fastest general sampler, `grid_sample` bilinear on float images,
    times the geometric ops RandAugment applies per image on average, each costed as a translation). """
    import torch.nn.functional as F
    from timm.data.transforms import RandomResizedCropAndInterpolation
    images = [torch.from_numpy(np.asarray(Image.open(p).convert('RGB')).copy()).permute(2, 0, 1)[None] for p in files]
    crops = []
    for image in images:
        top, left, height, width = RandomResizedCropAndInterpolation.get_params(image[0], (0.08, 1.0), (3 / 4, 4 / 3))
        crops.append(image[:, :, top:top + height, left:left + width])
    start = time.process_time()
    for _ in range(repeats):
        resized = [F.interpolate(crop, size=(size, size), mode=('bilinear', 'bicubic')[i % 2], antialias=True)
                   for i, crop in enumerate(crops)]
    resize = (time.process_time() - start) / (repeats * len(crops))
    # the policy's geometric ops applied per image: layers x the mean over ops of (op probability, if geometric)
    augment = BatchRandAugment(aa, dict(translate_const=int(size * 0.45), img_mean=(128, 128, 128)))
    geometric = augment.num_layers * sum(op.prob for op in augment.ops if op.name in GEOMETRIC_OPS) / len(augment.ops)
    batch = torch.cat(resized[:64]).float()
    # a translation, the cheapest of the geometric ops to sample (a rotation costs about 1.6 times as much here)
    theta = torch.tensor([[1.0, 0.0, 0.1], [0.0, 1.0, 0.0]]).expand(len(batch), 2, 3)
    grid = F.affine_grid(theta, list(batch.shape), align_corners=False)  # not timed: its cost is not counted
    start = time.process_time()
    for _ in range(repeats):
        F.grid_sample(batch, grid, mode='bilinear', padding_mode='border', align_corners=False)
    sample = (time.process_time() - start) / (repeats * len(batch))
    return resize, geometric * sample


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--data-dir', type=Path, default=SHARED_CIFAR10)
    parser.add_argument('--images', type=int, default=1024, help='training images read (class-sorted, spread)')
    parser.add_argument('--batch-size', type=int, default=256)
    parser.add_argument('--repeats', type=int, default=2, help='passes over the images per measurement')
    parser.add_argument('--rounds', type=int, default=3, help='measurements of each side, in alternating order')
    parser.add_argument('--out', default='')
    args = parser.parse_args()
    torch.set_num_threads(1)
    files = sorted((args.data_dir / 'train').glob('*/*.jpg'))
    files = files[::max(1, len(files) // args.images)][:args.images]
    report = Report([f'# command: python {shlex.join(sys.argv)}',
             f'# date: {datetime.now().isoformat(timespec="seconds")}; {platform.processor() or platform.machine()}, '
             f'{os.cpu_count()} CPUs, 1 torch thread; torch {torch.__version__}, timm {timm.__version__}, '
             f'Pillow {PIL.__version__}',
             f'# {len(files)} CIFAR-10 training images from {args.data_dir}; CPU time per image of this process; '
             f'device loader batches of {args.batch_size}; {args.rounds} rounds in alternating order, medians'])
    for name, (size, aa, mean, std) in TRANSFORMS.items():
        # rounds in alternating order, medians: this machine's speed drifts by tens of percent within minutes
        theirs, ours, ratios = [], [], []
        for round_ in range(args.rounds):
            order = (0, 1) if round_ % 2 == 0 else (1, 0)
            costs = {}
            for side in order:
                costs[side] = (timm_cost(files, size, aa, args.repeats) if side == 0 else
                               device_cost(files, size, aa, mean, std, args.batch_size, args.repeats))
            theirs.append(costs[0])
            ours.append(costs[1])
            ratios.append(costs[0] / costs[1])
        theirs, ours = statistics.median(theirs), statistics.median(ours)
        report.add(f'{name:20s} timm pipeline {theirs * 1e6:8.1f} us/image ({1 / theirs:7.0f} images/s per core); '
                     f'device loader {ours * 1e6:8.1f} us/image ({1 / ours:7.0f} images/s per core); '
                   f'ratio {theirs / ours:.2f} (medians; by round {" ".join(f"{r:.2f}" for r in ratios)})')
        resize, geometry = floor_cost(files, size, aa, args.repeats)
        report.add(f'{"":20s} floor {(resize + geometry) * 1e6:.1f} us/image: the resize through torch\'s 8-bit '
                     f'resampler {resize * 1e6:.1f}, RandAugment\'s geometric ops through grid_sample '
                   f'{geometry * 1e6:.1f}; an eighth of timm\'s pipeline: {theirs / 8 * 1e6:.1f} us/image')
    report.write(args.out)


if __name__ == '__main__':
    main()
