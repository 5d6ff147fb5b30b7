""" What one augmented training image costs a CPU core: timm's pipeline (decode the JPEG, then timm's training transform
in Pillow, then the uint8 tensor its prefetcher takes) against the device loader's (the images already decoded; its
training transform on a batch of CPU tensors, one torch thread), for the 2024 recipe's transform (32 px:
RandomResizedCrop 0.08-1, flip, rand-m9-mstd0.5-inc1) and the 2025 recipes' (32 px CIFAR images to 224 px, the same
augmentation). CPU time of this process (`time.process_time`), so a busy machine slows both sides alike.

    python benchmarks/augment_cost.py --out benchmarks/results/augment_cost.txt
"""
import argparse
import os
import platform
import shlex
import sys
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import PIL
import timm
import torch
from PIL import Image
from timm.data import create_transform

from timm_structinit.data.device_transforms import DeviceTrainTransform
from timm_structinit.data.pillow_compat import posterize_zero_bits_safe_ops
from results_file import write_lines

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--data-dir', type=Path, default=SHARED_CIFAR10)
    parser.add_argument('--images', type=int, default=1024, help='training images read (class-sorted, spread)')
    parser.add_argument('--batch-size', type=int, default=256)
    parser.add_argument('--repeats', type=int, default=2)
    parser.add_argument('--out', default='')
    args = parser.parse_args()
    torch.set_num_threads(1)
    files = sorted((args.data_dir / 'train').glob('*/*.jpg'))
    files = files[::max(1, len(files) // args.images)][:args.images]
    lines = [f'# command: python {shlex.join(sys.argv)}',
             f'# date: {datetime.now().isoformat(timespec="seconds")}; {platform.processor() or platform.machine()}, '
             f'{os.cpu_count()} CPUs, 1 torch thread; torch {torch.__version__}, timm {timm.__version__}, '
             f'Pillow {PIL.__version__}',
             f'# {len(files)} CIFAR-10 training images from {args.data_dir}; CPU time per image of this process; '
             f'device loader batches of {args.batch_size}']
    for name, (size, aa, mean, std) in TRANSFORMS.items():
        theirs = timm_cost(files, size, aa, args.repeats)
        ours = device_cost(files, size, aa, mean, std, args.batch_size, args.repeats)
        lines.append(f'{name:20s} timm pipeline {theirs * 1e6:8.1f} us/image ({1 / theirs:7.0f} images/s per core); '
                     f'device loader {ours * 1e6:8.1f} us/image ({1 / ours:7.0f} images/s per core); '
                     f'ratio {theirs / ours:.2f}')
        print(lines[-1], flush=True)
    if args.out:
        write_lines(args.out, lines)


if __name__ == '__main__':
    main()
