""" Keep timm's RandAugment usable with Pillow >= 13.

timm's 'PosterizeIncreasing' op (in every `-inc1` RandAugment policy, e.g. 'rand-m9-mstd0.5-inc1') asks
`PIL.ImageOps.posterize` to keep 0 bits at full magnitude, and 'Posterize' does at low magnitude. Pillow before 13
returned a black image for that; Pillow 13 raises `ValueError: bits must be between or equal to 1 and 8`, which stops
training at a random batch (about 2% of PosterizeIncreasing draws at m9, mstd 0.5). The fix points the posterize
entries of timm's RandAugment op table (`timm.data.auto_augment.NAME_TO_OP`) at `posterize_zero_bits_safe`, which gives
the old black image at 0 bits, and only when the installed Pillow rejects 0 bits.

Importing the package leaves timm's table alone. The fix applies inside `posterize_zero_bits_safe_ops()`, which the
package's training command and `python -m timm_structinit.run` enter, or for the rest of the process after
`make_posterize_zero_bits_safe()`. timm's RandAugment looks an op up once, when it builds the transform, so a transform
built inside the block keeps the safe op after the block (in data loader workers too).
"""
from contextlib import contextmanager
from functools import lru_cache
from typing import Iterator, List

from PIL import Image, ImageOps
from timm.data import auto_augment

__all__ = ['posterize_zero_bits_safe', 'posterize_zero_bits_safe_ops', 'make_posterize_zero_bits_safe']

_timm_posterize = auto_augment.posterize
_process_wide = False  # make_posterize_zero_bits_safe() was called: no block restores timm's op


def posterize_zero_bits_safe(img: Image.Image, bits_to_keep: int, **kwargs) -> Image.Image:
    """ timm's posterize op, except that keeping 0 bits gives the black image Pillow < 13 returned. """
    if bits_to_keep < 1:
        return Image.new(img.mode, img.size)
    return _timm_posterize(img, bits_to_keep, **kwargs)


@lru_cache(maxsize=None)
def _pillow_rejects_zero_bits() -> bool:
    try:
        ImageOps.posterize(Image.new('RGB', (1, 1)), 0)
    except ValueError:
        return True
    return False


def _swap_in() -> List[str]:
    """ Point timm's posterize entries at `posterize_zero_bits_safe` where this Pillow needs it; the names swapped. """
    if not _pillow_rejects_zero_bits():
        return []
    swapped = [name for name, op in auto_augment.NAME_TO_OP.items() if op is _timm_posterize]
    for name in swapped:
        auto_augment.NAME_TO_OP[name] = posterize_zero_bits_safe
    return swapped


@contextmanager
def posterize_zero_bits_safe_ops() -> Iterator[bool]:
    """ Within the block, timm's RandAugment posterize ops accept 0 bits (when this Pillow needs it); timm's own op
    is back in the table on exit. Yields whether this Pillow needs the fix. """
    swapped = _swap_in()
    try:
        yield _pillow_rejects_zero_bits()
    finally:
        for name in swapped if not _process_wide else ():
            if auto_augment.NAME_TO_OP.get(name) is posterize_zero_bits_safe:
                auto_augment.NAME_TO_OP[name] = _timm_posterize


def make_posterize_zero_bits_safe() -> bool:
    """ Apply the fix for the rest of the process (timm's own scripts run by hand: see `timm_structinit.patched`);
    returns True when this Pillow needs it. """
    global _process_wide
    _swap_in()
    _process_wide = _pillow_rejects_zero_bits()
    return _process_wide
