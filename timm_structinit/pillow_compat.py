""" Keep timm's RandAugment usable with Pillow >= 13.

timm's 'PosterizeIncreasing' op (in every `-inc1` RandAugment policy, e.g. 'rand-m9-mstd0.5-inc1') asks
`PIL.ImageOps.posterize` to keep 0 bits at full magnitude, and 'Posterize' does at low magnitude. Pillow before 13
returned a black image for that; Pillow 13 raises `ValueError: bits must be between or equal to 1 and 8`, which stops
training at a random batch (about 2% of PosterizeIncreasing draws at m9, mstd 0.5). This module swaps timm's posterize
op, in timm's RandAugment op table only, for one that gives the old black image at 0 bits. It is applied when
`timm_structinit` is imported, so timm's own train.py run with `--device-modules timm_structinit` is covered too, and
only when the installed Pillow rejects 0 bits.
"""
from PIL import Image, ImageOps
from timm.data import auto_augment

__all__ = ['posterize_zero_bits_safe', 'make_posterize_zero_bits_safe']

_timm_posterize = auto_augment.posterize


def posterize_zero_bits_safe(img: Image.Image, bits_to_keep: int, **kwargs) -> Image.Image:
    """ timm's posterize op, except that keeping 0 bits gives the black image Pillow < 13 returned. """
    if bits_to_keep < 1:
        return Image.new(img.mode, img.size)
    return _timm_posterize(img, bits_to_keep, **kwargs)


def _pillow_rejects_zero_bits() -> bool:
    try:
        ImageOps.posterize(Image.new('RGB', (1, 1)), 0)
    except ValueError:
        return True
    return False


def make_posterize_zero_bits_safe() -> bool:
    """ Point timm's posterize entries at `posterize_zero_bits_safe`; returns True when this Pillow needs it. """
    if not _pillow_rejects_zero_bits():
        return False
    for name, op in list(auto_augment.NAME_TO_OP.items()):
        if op is _timm_posterize:
            auto_augment.NAME_TO_OP[name] = posterize_zero_bits_safe
    return True
