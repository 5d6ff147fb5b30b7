""" Reading one image file as the package's datasets do: 16-bit images scaled to 8 bits instead of clipped, and
every failure to decode one line naming the file (`ImageReadError`), so that a run stops on a bad image instead of
serving another in its place. """
import os
import stat
from typing import Optional

import numpy as np
from PIL import Image

from ..errors import ImageReadError

__all__ = ['ImageReadError', 'read_image']


# Pillow modes with more than 8 bits per sample, which `convert('RGB')` clips at 255 instead of scaling: 16-bit
# grayscale (PNG, TIFF), and 32-bit integers holding 16-bit values (older Pillow reads 16-bit PNG so)
_SIXTEEN_BIT_MODES = ('I;16', 'I;16B', 'I;16L', 'I;16N', 'I')


def _to_8_bits(img: Image.Image, path: str) -> Image.Image:
    """ A 16-bit grayscale image scaled to 8 bits ('L'); ImageReadError for values outside the 16-bit range. """
    values = np.asarray(img)
    if values.size and (values.min() < 0 or values.max() > 65535):
        raise ImageReadError(f'image {os.path.abspath(path)} has {img.mode!r} pixels outside the 16-bit range '
                             f'({values.min()}..{values.max()}); save it with 8 or 16 bits per channel')
    return Image.fromarray(np.round(values.astype(np.float64) * (255.0 / 65535.0)).astype(np.uint8), mode='L')


def read_image(path: str, mode: Optional[str] = 'RGB') -> Image.Image:
    """ The image at `path` in `mode` (None: as stored), 16-bit images scaled to 8 bits; ImageReadError naming the
    file when it cannot be decoded, is a decompression bomb by Pillow's limit, or has floating-point pixels. """
    where = os.path.abspath(path)
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # opening a FIFO would wait for a writer forever
            raise ImageReadError(f'image {where} is not a regular file; only regular files are read')
        with Image.open(path) as img:
            if img.mode in _SIXTEEN_BIT_MODES:
                img = _to_8_bits(img, path)
            elif img.mode == 'F':
                raise ImageReadError(f'image {where} has floating-point pixels (mode F), whose range is unknown; '
                                     f'save it with 8 or 16 bits per channel')
            return img.convert(mode) if mode else img.copy()
    except Image.DecompressionBombError as e:  # not an OSError
        raise ImageReadError(f'image {where} is refused by Pillow as a decompression bomb ({e}); Pillow\'s limit '
                             f'is PIL.Image.MAX_IMAGE_PIXELS = {Image.MAX_IMAGE_PIXELS} pixels (x2); resize the '
                             f'image or raise that limit') from None
    except OSError as e:  # PIL's decode errors: a truncated, corrupt or unreadable file
        raise ImageReadError(f'cannot read image {where} ({e}); replace or remove it') from None
