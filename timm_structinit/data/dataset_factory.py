""" The dataset factory of the training command: timm's factory plus the few sources it lacks, with strict split checks.

* ImageFolder directories (`dataset=''`) are read by timm's ImageDataset (see `CheckedImageDataset`, in
  `image_folder`); `torch/cifar10`, `torch/cifar100` and the other `torch/` names go through
  `timm.data.create_dataset`. Split folders are resolved first (`splits`): timm falls back to the whole root when a
  split folder is missing, which would evaluate on training images, so a missing split is refused, and so is a
  class folder without images (timm would drop the class).
* `torch/svhn` (or `svhn`), `torch/food101`, `torch/stl10`, `torch/flowers102`, `torch/oxford_iiit_pet`:
  torchvision datasets timm's factory does not cover (`torchvision_data`), each with its own splits.
* `sklearn/digits` (`digits`): scikit-learn's bundled handwritten digits (1,797 real 8x8 grayscale images, 10
  classes), which needs no download. A fixed stratified split gives 1,347 training and 450 test images; images are
  upscaled to the model's input size and repeated to 3 channels (or kept gray for 1-channel models).
* `CheckedImageDataset`: timm's ImageDataset, except that an unreadable image stops the run naming its file
  (timm logs a warning and silently serves the next image instead), an image with more than 8 bits per sample
  (16-bit PNG or TIFF) is scaled to 8 bits instead of clipped to white, and a file reached twice through directory
  links (a link loop) is read once.
* `ClassBalancedSubset`: a deterministic, class-balanced subset for CPU-scale runs.

Every failure to find data raises `DataError` with the flag and path that would fix it; an image that cannot be
decoded during training raises `ImageReadError` with its path.
"""
import os
import urllib.error
from typing import Dict, List, Optional, Sequence

import numpy as np
from torch.utils.data import Dataset

from .digits import DigitsDataset
from .image_folder import CheckedImageDataset, folder_dataset
from .images import ImageReadError, read_image  # noqa: F401  part of this module's API
from .splits import EVAL_SPLITS, TRAIN_SPLITS, DataError, resolve_split_folder  # noqa: F401  part of this API
from .torchvision_data import TORCHVISION_SOURCES, build_torchvision_dataset, torchvision_split

__all__ = [
    'DataError', 'ImageReadError', 'DigitsDataset', 'CheckedImageDataset',
    'ClassBalancedSubset', 'build_dataset', 'folder_dataset', 'dataset_targets', 'dataset_classes',
    'resolve_split_folder', 'check_dataset_name', 'named_item_reads', 'item_file', 'TORCH_DATASETS', 'TRAIN_SPLITS',
    'EVAL_SPLITS',
]


# the torchvision datasets timm's factory maps under 'torch/', then those `torchvision_data` adds
TIMM_TORCH_DATASETS = ('cifar10', 'cifar100', 'mnist', 'kmnist', 'fashion_mnist', 'qmnist')
TORCH_DATASETS = TIMM_TORCH_DATASETS + tuple(TORCHVISION_SOURCES)
# CIFAR-10 as an ImageFolder (train/ and test/, one folder per class) needs no download; DIR is the user's copy
CIFAR10_FOLDER_HINT = "--dataset '' --data-dir DIR --train-split train --val-split test, DIR holding train/ and test/"


def check_dataset_name(name: str) -> str:
    """ Validate a `--dataset` name (before any data is touched) and return its kind: folder, torch (timm's
    factory), torchvision (`torchvision_data`), digits, hfds. """
    prefix, sep, rest = name.partition('/')
    if not name:
        return 'folder'
    if name.lower() == 'svhn':
        return 'torchvision'
    if name.lower() == 'sklearn/digits':
        return 'digits'
    if sep and prefix.lower() == 'torch':
        if rest.lower() in TORCHVISION_SOURCES:
            return 'torchvision'
        if rest.lower() in TIMM_TORCH_DATASETS:
            return 'torch'
        raise DataError(f'--dataset {name!r}: unknown torch dataset {rest!r}; valid: '
                        + ', '.join(f'torch/{n}' for n in TORCH_DATASETS))
    if sep and prefix.lower() == 'hfds':
        return 'hfds'
    raise DataError(
        f"--dataset {name!r} is not supported; valid: '' (an ImageFolder directory given by --data-dir), "
        + ', '.join(f'torch/{n}' for n in TORCH_DATASETS) + ', svhn, sklearn/digits, hfds/<name>')


def _per_class(sizes: List[int], num_samples: int, fill: bool) -> List[int]:
    """ Samples per class of `sizes` samples each: `num_samples // num_classes`, the remainder one each to the first
    classes; with `fill`, a class holding fewer than that gives all it holds, and the other classes share what it
    lacks in the same way (a class holding enough gets what it would get without `fill`, where none is short). """
    counts, classes = [0] * len(sizes), list(range(len(sizes)))
    while classes:
        share = [num_samples // len(classes) + int(i < num_samples % len(classes)) for i in range(len(classes))]
        short = [c for c, n in zip(classes, share) if sizes[c] < n] if fill else []
        if not short:
            for c, n in zip(classes, share):
                counts[c] = n
            break
        for c in short:
            counts[c] = sizes[c]
        num_samples -= sum(sizes[c] for c in short)
        classes = [c for c in classes if c not in short]
    return counts


class ClassBalancedSubset(Dataset):
    """ A deterministic subset with (nearly) the same number of samples per class.

    `num_samples // num_classes` per class, the remainder going one each to the first classes; samples are drawn
    without replacement by a generator seeded with `seed`, and kept in the dataset's original order. A class holding
    fewer than its share is refused, or with `fill` gives all it holds, the others making up the count. The wrapped
    dataset's `transform` is shared, so timm's loader factory can set it on the subset.
    """

    def __init__(self, dataset: Dataset, num_samples: int, seed: int = 0, flag: str = '--train-subset',
                 fill: bool = False) -> None:
        targets = np.asarray(dataset_targets(dataset))
        if not 0 < num_samples:
            raise DataError(f'{flag} {num_samples} must be a positive number of samples')
        if num_samples > len(targets):
            raise DataError(f'{flag} {num_samples} is larger than the dataset ({len(targets)} samples)')
        classes = np.unique(targets)
        per_class = _per_class([int(np.count_nonzero(targets == cls)) for cls in classes], num_samples, fill)
        rng = np.random.default_rng(seed)
        chosen = []
        for cls, count in zip(classes, per_class):
            members = np.flatnonzero(targets == cls)
            if count > len(members):
                raise DataError(
                    f'{flag} {num_samples}: class {cls} has only {len(members)} samples, {count} needed for a '
                    f'class-balanced subset; use at most {len(classes) * min(np.bincount(targets)[classes])}')
            chosen.append(rng.permutation(members)[:count])
        self.dataset = dataset
        self.indices = np.sort(np.concatenate(chosen)) if chosen else np.zeros(0, dtype=np.int64)
        self.targets = targets[self.indices].tolist()

    @property
    def transform(self):
        return self.dataset.transform

    @transform.setter
    def transform(self, transform) -> None:
        self.dataset.transform = transform

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int):
        return self.dataset[int(self.indices[index])]


def dataset_targets(dataset: Dataset) -> Sequence[int]:
    """ Integer labels of every sample, read without decoding images. """
    if isinstance(dataset, (ClassBalancedSubset, DigitsDataset)):
        return dataset.targets
    reader = getattr(dataset, 'reader', None)
    if reader is not None and hasattr(reader, 'samples'):  # timm folder reader
        return [int(t) for _, t in reader.samples]
    # torchvision: targets; SVHN, STL-10: labels; Food-101, Flowers-102, Oxford-IIIT Pet: _labels
    for attr in ('targets', 'labels', '_labels'):
        values = getattr(dataset, attr, None)
        if values is not None:
            return [int(t) for t in (values.tolist() if hasattr(values, 'tolist') else values)]
    raise DataError(f'cannot read the labels of {type(dataset).__name__}, so it cannot be subset by class')


def dataset_classes(dataset: Dataset) -> Optional[List[str]]:
    """ Class names in label order when the dataset knows them, else None. """
    base = dataset.dataset if isinstance(dataset, ClassBalancedSubset) else dataset
    reader = getattr(base, 'reader', None)
    if reader is not None and hasattr(reader, 'class_to_idx'):
        return [c for c, _ in sorted(reader.class_to_idx.items(), key=lambda kv: kv[1])]
    classes = getattr(base, 'classes', None)
    return list(classes) if classes is not None else None


def _missing_copy_error(name: str, root: str, download: bool, cause: BaseException) -> DataError:
    import torchvision.datasets as tvd
    cls = {'cifar10': tvd.CIFAR10, 'cifar100': tvd.CIFAR100}.get(name)
    expected = getattr(cls, 'base_folder', None) if cls is not None else None
    if name in TORCHVISION_SOURCES:
        expected = TORCHVISION_SOURCES[name].layout
    where = os.path.abspath(root)
    what = f'{where}/{expected}' if expected else where
    hint = f' Or train on an ImageFolder copy: {CIFAR10_FOLDER_HINT}.' if name == 'cifar10' else ''
    if download:
        return DataError(
            f'could not download torch/{name} into --data-dir {where} ({type(cause).__name__}: {cause}). Without '
            f'internet, put a local copy at {what} and drop --dataset-download.{hint}')
    return DataError(
        f'torch/{name}: no local copy under --data-dir {where} (expected {what}). Fix: point --data-dir at the '
        f'folder that holds it, or add --dataset-download to fetch it (needs internet).{hint}')


def build_dataset(
        name: str,
        root: Optional[str],
        split: str,
        flag: str,
        download: bool = False,
        class_map: Optional[Dict[str, int]] = None,
) -> Dataset:
    """ Build one split of a dataset; `flag` names the split option (--train-split or --val-split) for errors. Any
    failure of the reader (timm's, torchvision's, numpy's, scipy's, JSON's) on the files is a DataError naming the
    dataset and the reader's message, and so is, as ImageReadError, any failure to read an item later
    (`named_item_reads`). """
    what = f'{flag} {split!r}'
    kind = check_dataset_name(name)
    if kind == 'digits':
        return DigitsDataset(split)
    if not root:
        raise DataError(f'--dataset {name!r} needs --data-dir (the folder holding the data)')
    if kind == 'folder':
        folder = resolve_split_folder(root, split, flag)
        return named_item_reads(folder_dataset(folder, what, split=split, class_map=class_map or ''), what)
    short = name.split('/')[-1].lower()
    try:
        dataset = _build_source(name, kind, short, root, split, flag, download)
        _check_labels(dataset, f'{name} {what} under --data-dir {os.path.abspath(root)}')
        return named_item_reads(dataset, f'{name} {what}')
    except DataError:
        raise
    except Exception as e:
        if download or isinstance(e, (FileNotFoundError, urllib.error.URLError)) or (
                isinstance(e, RuntimeError) and 'not found' in str(e).lower()):
            raise _missing_copy_error(short, root, download, e) from e
        # a copy that is there but that its reader cannot parse (a truncated or foreign file)
        raise DataError(f'{name} {what} under --data-dir {os.path.abspath(root)} cannot be read '
                        f'({type(e).__name__}: {" ".join(str(e).split())[:300]}); replace the damaged file, or '
                        f'download the dataset again (--dataset-download)') from None


def _check_labels(dataset: Dataset, what: str) -> None:
    """ Every label names one of the dataset's classes (a damaged label file reads as numbers out of range, which
    would fail in the loss of the first step). """
    try:
        targets = np.asarray(dataset_targets(dataset))
    except DataError:
        return  # a dataset that does not list its labels
    classes = dataset_classes(dataset)
    if targets.size and (targets.min() < 0 or (classes is not None and targets.max() >= len(classes))):
        valid = f'0..{len(classes) - 1} ({len(classes)} classes)' if classes is not None else '>= 0'
        raise DataError(f'{what}: labels {targets.min()}..{targets.max()} lie outside the classes ({valid}); its '
                        f'label file is damaged: replace it, or download the dataset again (--dataset-download)')


def _build_source(name: str, kind: str, short: str, root: str, split: str, flag: str, download: bool) -> Dataset:
    from timm.data import create_dataset
    if kind == 'hfds':
        return create_dataset(name, root=root, split=split, download=download)
    if kind == 'torchvision':
        try:
            own_split = torchvision_split(short, split)
        except ValueError as e:
            raise DataError(f'{flag} {e}') from None
        try:
            return build_torchvision_dataset(short, root, own_split, download=download)
        except ImportError as e:
            raise DataError(f'{TORCHVISION_SOURCES[short].title} is stored in .mat files and needs scipy: '
                            f'pip install scipy') from e
    return create_dataset(name, root=root, split=split, download=download)


def _named_getitem(base: type):
    """ `base.__getitem__` for `named_item_reads`: any failure to read an item is an ImageReadError naming the
    dataset, the item and its file where the dataset knows it. """
    def __getitem__(self, index):
        try:
            return base.__getitem__(self, index)
        except (ImageReadError, DataError):
            raise
        except Exception as e:
            file = item_file(self, index)
            where = f' ({file})' if file else ''
            raise ImageReadError(f'{getattr(self, "read_what", "dataset")}: cannot read item {index}{where}: '
                                 f'{type(e).__name__}: {" ".join(str(e).split())[:300]}') from None
    return __getitem__


_NAMED_CLASSES: Dict[type, type] = {}


def _named_class(cls: type) -> type:
    """ `cls` with its item reads named, made once per class and kept under a module-level name, so that a loader
    worker started by spawn can unpickle its instances. (A subclass with only a method of its own: an instance's
    class can be swapped for it.) """
    if cls not in _NAMED_CLASSES:
        name = f'_Named{cls.__name__}_{len(_NAMED_CLASSES)}'
        named = type(name, (cls,), {'__getitem__': _named_getitem(cls), '__module__': __name__,
                                    '__qualname__': name})
        globals()[name] = _NAMED_CLASSES[cls] = named
    return _NAMED_CLASSES[cls]


def named_item_reads(dataset: Dataset, what: str) -> Dataset:
    """ Make every item read of `dataset` (the same instance: timm's and torchvision's attributes stay) fail as one
    ImageReadError naming `what`, the item and its file, whatever the reader raises. Returns `dataset`. """
    if type(dataset) not in _NAMED_CLASSES.values():
        dataset.__class__ = _named_class(type(dataset))
    dataset.read_what = what
    return dataset


def item_file(dataset: Dataset, index: int) -> Optional[str]:
    """ The file item `index` is read from, where the dataset lists one per item (timm's folder reader,
    torchvision's Food-101, Flowers-102, Oxford-IIIT Pet), else None. """
    try:
        samples = getattr(getattr(dataset, 'reader', None), 'samples', None)
        if samples is not None:
            return os.path.abspath(samples[index][0])
        for attr in ('_image_files', '_images'):
            files = getattr(dataset, attr, None)
            if files is not None:
                return os.path.abspath(files[index])
    except (IndexError, TypeError):
        pass
    return None
