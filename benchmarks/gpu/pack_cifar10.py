""" Pack the CIFAR-10 images a GPU setup of `compare_inits.py` needs into a folder that travels with the working tree.

The GPU machine sees only the repository (no `../shared`), and the tree that travels is limited to 64 MiB, so the
setups carry a copy of what they read: the class-balanced training images that `--train-subset N` picks on the full
copy (the package's own subset, seed 0: the packed folder then yields the same images, in the same order) and the
test images (all 10,000 unless told otherwise), as the JPEG files they are, in the same ImageFolder layout, in one
gzipped tar file (20,000 files of ~0.9 KB would take 4 KiB each on disk and 1.5 KB each in a plain tar; gzipped,
the tar is about the JPEGs' own ~18 MiB; the GPU command unpacks it in seconds). With
`--wheels`, the pip wheel of the timm release installed here goes along, for a GPU machine whose timm is older than
the package needs (benchmarks/gpu/compare_inits.sh installs it only then).

    python benchmarks/gpu/pack_cifar10.py --wheels     # .gpu-data/cifar10.tar.gz (10,000 + 10,000), .gpu-data/wheels
    python benchmarks/gpu/pack_cifar10.py --out /tmp/rehearsal/cifar10.tar.gz --train-images 100 --test-images 100

The file is written whole or not at all (a temporary file, then a rename), and replaces an earlier pack.
`.gpu-data/` is ignored by git: the images are never committed.
"""
import argparse
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DEFAULT_DATA = REPO.parent / 'shared' / 'data' / 'cifar10'
DEFAULT_OUT = REPO / '.gpu-data' / 'cifar10.tar.gz'


def chosen_files(data_dir: Path, split: str, count: int, seed: int):
    """ (path, class folder) of the images `--train-subset count` (or `--val-subset`) picks in `split`, in order;
    every image of the split when `count` is None. """
    from timm_structinit.data import ClassBalancedSubset, folder_dataset
    dataset = folder_dataset(str(data_dir / split), f'--data-dir {data_dir} ({split})')
    flag = '--train-images' if split == 'train' else '--test-images'
    indices = range(len(dataset)) if count is None else ClassBalancedSubset(dataset, count, seed, flag).indices
    samples = dataset.reader.samples
    return [(Path(samples[int(i)][0]), Path(samples[int(i)][0]).parent.name) for i in indices]


def pack(data_dir: Path, out: Path, train_images: int, test_images, seed: int) -> dict:
    """ Write the chosen images, as `cifar10/{train,test}/<class>/<file>.jpg` and `cifar10/manifest.json`, into the
    tar file `out` (written whole, then renamed into place); returns the manifest. """
    tmp = out.with_name(f'.{out.name}.partial')
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        counts, size = {}, 0
        with tarfile.open(tmp, 'w:gz', compresslevel=6) as tar:
            for split, count in (('train', train_images), ('test', test_images)):
                files = chosen_files(data_dir, split, count, seed)
                for path, label in files:
                    tar.add(path, arcname=f'cifar10/{split}/{label}/{path.name}')
                    size += path.stat().st_size
                counts[split] = len(files)
            manifest = dict(source=str(data_dir), subset_seed=seed, images=counts, bytes=size)
            text = (json.dumps(manifest, indent=1) + '\n').encode()
            info = tarfile.TarInfo('cifar10/manifest.json')
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text))
        tmp.replace(out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return manifest


def download_timm_wheel(wheels: Path) -> Path:
    """ The wheel of the timm release installed here (pure Python: it fits any machine), fetched by pip. """
    import timm
    wheels.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, '-m', 'pip', 'download', '-q', '--no-deps', '--only-binary=:all:',
                    f'timm=={timm.__version__}', '-d', str(wheels)], check=True)
    return next(wheels.glob(f'timm-{timm.__version__}-*.whl'))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--data-dir', type=Path, default=DEFAULT_DATA, help='the full CIFAR-10 ImageFolder copy')
    parser.add_argument('--out', type=Path, default=DEFAULT_OUT)
    parser.add_argument('--train-images', type=int, default=10000,
                        help='class-balanced training images (the largest --train-subset of the setups)')
    parser.add_argument('--test-images', type=int, default=None, help='class-balanced test images (default: all)')
    parser.add_argument('--subset-seed', type=int, default=0, help="the training command's --subset-seed")
    parser.add_argument('--wheels', action='store_true', help="also fetch timm's wheel into OUT/../wheels")
    args = parser.parse_args(argv)
    if not (args.data_dir / 'train').is_dir() or not (args.data_dir / 'test').is_dir():
        parser.exit(2, f'{parser.prog}: error: --data-dir {args.data_dir}: no train/ and test/ folders of '
                       'CIFAR-10 JPEGs there\n')
    for flag, value in (('--train-images', args.train_images), ('--test-images', args.test_images)):
        if value is not None and value < 10:
            parser.exit(2, f'{parser.prog}: error: {flag} {value}: must be at least 10 (one image per class)\n')
    from timm_structinit.data import DataError
    try:
        manifest = pack(args.data_dir, args.out, args.train_images, args.test_images, args.subset_seed)
    except DataError as e:
        parser.exit(2, f'{parser.prog}: error: {e}\n')
    print(f'{args.out}: {manifest["images"]["train"]} training and {manifest["images"]["test"]} test images, '
          f'{manifest["bytes"] / 2 ** 20:.1f} MiB of JPEGs; {args.out.stat().st_size / 2 ** 20:.1f} MiB in all')
    if args.wheels:
        wheel = download_timm_wheel(args.out.parent / 'wheels')
        print(f'{wheel}: {wheel.stat().st_size / 2 ** 20:.1f} MiB')
    return 0


if __name__ == '__main__':
    sys.exit(main())
