""" torchvision datasets that timm's `torch/` names do not cover: SVHN (the 2024 impulse paper) and the small datasets
of the 2025 structured-init paper, Food-101, STL-10, Flowers-102 and Oxford-IIIT Pet.

Each is torchvision's own class, read from torchvision's on-disk layout under `--data-dir` (or downloaded there with
`--dataset-download`), with two changes that a training entry point needs:

* A local copy is checked for its files, not for the checksums of the full release. torchvision compares SVHN's,
  STL-10's and Flowers-102's files to the MD5 sums of the published archives, so a copy that is a subset or was
  re-packed is reported as "not found or corrupted"; downloads are still checked against torchvision's sums.
* The image transform timm's loader sets (`dataset.transform = ...`) is applied by every class (torchvision's
  Oxford-IIIT Pet reads only the `transforms` given to its constructor).

Splits are each dataset's own; the evaluation split names timm uses (`validation`, `val`, ...) mean the dataset's
validation split where it has one (Flowers-102) and its test split otherwise, as for SVHN.
"""
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Tuple

import torchvision.datasets as tvd

from .images import read_image

__all__ = ['TorchvisionSource', 'TORCHVISION_SOURCES', 'torchvision_split', 'build_torchvision_dataset']


class LocalSVHN(tvd.SVHN):
    # torchvision's public file table without checksums: its check of a local copy (`check_integrity(path, None)`)
    # is then whether the split's file is there
    split_list = {split: [url, filename, None] for split, (url, filename, _) in tvd.SVHN.split_list.items()}

    def download(self) -> None:
        """ torchvision's download, checked against torchvision's checksum. """
        url, filename, md5 = tvd.SVHN.split_list[self.split]
        tvd.utils.download_url(url, self.root, filename, md5)


class LocalSTL10(tvd.STL10):
    def __init__(self, root: str, split: str = 'train', **kwargs: Any) -> None:
        if split in ('train', 'test'):
            # torchvision's public file lists, of this split's files alone and without checksums: its check of a local
            # copy is then whether they are there (not also the other split's and the 2.6 GB unlabeled set); a
            # download is still checked, against the archive's checksum (`tgz_md5`)
            listed = tvd.STL10.train_list[:2] if split == 'train' else tvd.STL10.test_list
            files = [[name, None] for name, _ in listed]
            self.train_list, self.test_list = (files, []) if split == 'train' else ([], files)
        super().__init__(root, split=split, **kwargs)


class LocalFlowers102(tvd.Flowers102):
    # torchvision checks a local copy only against the MD5 sums of its own download, through this private method,
    # and offers no public way to read a copy without them (its file table is private too): a copy that holds the
    # images folder and both .mat files is read as it is; a download is still checked by torchvision
    def _check_integrity(self) -> bool:
        return self._images_folder.is_dir() and all(
            (self._base_folder / self._file_dict[key][0]).is_file() for key in ('label', 'setid'))


class LocalOxfordIIITPet(tvd.OxfordIIITPet):
    """ Class labels (37 breeds) with the `transform` attribute applied, as timm's loader sets it. """

    def __getitem__(self, idx: int) -> Tuple[Any, Any]:
        image = read_image(str(self._images[idx]))
        target = self._labels[idx]
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return image, target


@dataclass(frozen=True)
class TorchvisionSource:
    """ One dataset: its class, its splits (timm's split kinds 'train' / 'test' / 'val' to the dataset's own),
    what a local copy looks like, and what it needs besides torchvision. """
    cls: Callable
    title: str
    splits: Tuple[str, ...]
    by_kind: Dict[str, str]
    layout: str
    needs_scipy: bool = False


TORCHVISION_SOURCES: Dict[str, TorchvisionSource] = {
    'svhn': TorchvisionSource(
        LocalSVHN, 'SVHN', ('train', 'test', 'extra'), {'train': 'train', 'test': 'test', 'val': 'test'},
        'train_32x32.mat / test_32x32.mat / extra_32x32.mat', needs_scipy=True),
    'food101': TorchvisionSource(
        tvd.Food101, 'Food-101', ('train', 'test'), {'train': 'train', 'test': 'test', 'val': 'test'},
        'food-101/meta/{train,test}.json and food-101/images/<class>/<id>.jpg'),
    'stl10': TorchvisionSource(
        LocalSTL10, 'STL-10', ('train', 'test'), {'train': 'train', 'test': 'test', 'val': 'test'},
        'stl10_binary/{train,test}_{X,y}.bin (and class_names.txt)'),
    'flowers102': TorchvisionSource(
        LocalFlowers102, 'Flowers-102', ('train', 'val', 'test'), {'train': 'train', 'test': 'test', 'val': 'val'},
        'flowers-102/jpg/image_NNNNN.jpg, flowers-102/imagelabels.mat and flowers-102/setid.mat', needs_scipy=True),
    'oxford_iiit_pet': TorchvisionSource(
        LocalOxfordIIITPet, 'Oxford-IIIT Pet', ('trainval', 'test'),
        {'train': 'trainval', 'test': 'test', 'val': 'test'},
        'oxford-iiit-pet/images/<Breed>_<n>.jpg and oxford-iiit-pet/annotations/{trainval,test}.txt'),
}

# timm's split names, by kind
_KINDS = {'train': ('train', 'training'), 'val': ('val', 'valid', 'validation', 'eval', 'evaluation'),
          'test': ('test',)}


def torchvision_split(name: str, split: str) -> str:
    """ The dataset's own split for `split` (its own name, or one of timm's train / validation / test names);
    ValueError naming the valid ones otherwise. """
    source = TORCHVISION_SOURCES[name]
    base = split.split('[')[0]
    if base in source.splits:
        return base
    kind = next((k for k, names in _KINDS.items() if base.lower() in names), None)
    if kind is None:
        aliases = ', '.join(f'{names[0]} means {source.by_kind[k]}' for k, names in _KINDS.items())
        raise ValueError(f'{split!r} is not a {source.title} split; valid: {", ".join(source.splits)} ({aliases})')
    return source.by_kind[kind]


def build_torchvision_dataset(name: str, root: str, split: str, download: bool = False) -> Any:
    """ torchvision's `name` dataset, split `split` (already one of its own), under `root`. RuntimeError (from
    torchvision) when no copy is there, ImportError when a reader it needs is missing. """
    source = TORCHVISION_SOURCES[name]
    root = os.fspath(Path(root).expanduser())
    if name == 'oxford_iiit_pet':
        return source.cls(root, split=split, target_types='category', download=download)
    return source.cls(root, split=split, download=download)
