""" Tiny ImageFolder splits whose classes a model can tell apart: each class leans on one colour channel. """
from pathlib import Path
from typing import Mapping, Sequence

import torch
from PIL import Image


def write_colour_coded_splits(root: Path, classes: Sequence[str], counts: Mapping[str, int]) -> Path:
    """ `root/SPLIT/CLASS/I.png`, `counts[SPLIT]` 32x32 images per class, drawn from a generator seeded with 0. """
    g = torch.Generator().manual_seed(0)
    for split, count in counts.items():
        for c, name in enumerate(classes):
            (root / split / name).mkdir(parents=True)
            for i in range(count):
                pixels = torch.rand(32, 32, 3, generator=g) * 80
                pixels[..., c] += 160  # class c leans on colour channel c
                Image.fromarray(pixels.byte().numpy()).save(root / split / name / f'{i}.png')
    return root
