""" scikit-learn's bundled handwritten digits (`--dataset sklearn/digits`) as an image classification dataset, which
needs no download: 1,797 real 8x8 grayscale images in 10 classes, split once with a fixed seed. """
from typing import Any, List, Tuple

import numpy as np
from PIL import Image
from torch.utils.data import Dataset

from ..errors import DataError
from .splits import _split_kind

__all__ = ['DigitsDataset']


class DigitsDataset(Dataset):
    """ scikit-learn's handwritten digits as an image classification dataset.

    The 1,797 real 8x8 images (16 gray levels) are split once, stratified by class with a fixed seed, into 1,347
    training and 450 test images, fixed by a seed. Images are upscaled (bicubic) to `img_size` and
    returned as RGB PIL images so timm's transforms apply unchanged (gray 'L' images with `input_img_mode='L'`).
    """
    num_test = 450
    split_seed = 0
    classes = [str(i) for i in range(10)]

    def __init__(self, split: str = 'train', img_size: int = 32, transform=None, target_transform=None,
                 input_img_mode: str = 'RGB') -> None:
        try:
            from sklearn.datasets import load_digits
            from sklearn.model_selection import train_test_split
        except ImportError as e:
            raise DataError(
                "--dataset sklearn/digits needs scikit-learn: pip install 'timm-structinit[data]'") from e
        kind = _split_kind(split)
        if kind not in ('train', 'test'):
            raise DataError(f'split {split!r} is not valid for sklearn/digits; valid: train, test (or val)')
        digits = load_digits()
        index = np.arange(len(digits.target))
        train_idx, test_idx = train_test_split(
            index, test_size=self.num_test, stratify=digits.target, random_state=self.split_seed)
        self.indices = np.sort(train_idx if kind == 'train' else test_idx)
        # 0..16 gray levels to 0..255
        self.images = np.round(digits.images[self.indices] * (255. / 16.)).astype(np.uint8)
        self.targets: List[int] = [int(t) for t in digits.target[self.indices]]
        self.split = kind
        self.img_size = img_size
        self.input_img_mode = input_img_mode  # 'L' for 1-channel models, as timm's ImageDataset names it
        self.transform = transform
        self.target_transform = target_transform

    def set_img_size(self, img_size: int) -> None:
        """ Upscale to this size; the entry point sets it to the model's input size once the model is known. """
        self.img_size = int(img_size)

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> Tuple[Any, int]:
        img = Image.fromarray(self.images[index], mode='L')
        if self.img_size != img.size[0]:
            img = img.resize((self.img_size, self.img_size), Image.BICUBIC)
        img = img.convert(self.input_img_mode)
        target = self.targets[index]
        if self.transform is not None:
            img = self.transform(img)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return img, target
