""" ImageFolder datasets as timm reads them, checked: an image that cannot be decoded stops the run naming its file
(timm's dataset logs a warning and serves the next image instead), 16-bit images are scaled to 8 bits, each image is
labelled by the class folder directly under the split folder, a file reached twice through directory links is read
once, only regular files are read, and a class folder without images is refused (timm would drop the class). """
import logging
import os
import stat
from typing import Any, Tuple

from timm.data import ImageDataset

from ..errors import DataError
from .images import read_image

__all__ = ['CheckedImageDataset', 'folder_dataset']

_logger = logging.getLogger(__name__)


class CheckedImageDataset(ImageDataset):
    """ timm's ImageDataset over a folder, except that an image that cannot be decoded raises `ImageReadError`
    naming its file (timm's dataset logs a warning and serves the next image in its place), and 16-bit images are
    scaled to 8 bits (`read_image`). """

    def __getitem__(self, index: int) -> Tuple[Any, int]:
        path, target = self.reader.samples[index]
        img = read_image(path, self.input_img_mode or None)
        if self.transform is not None:
            img = self.transform(img)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return img, target


def folder_dataset(folder: str, what: str, check_classes: bool = True, **kwargs) -> CheckedImageDataset:
    """ A `CheckedImageDataset` over `folder`, each image labelled by the class folder it lies in (however deep),
    each file listed once and every one a regular file; no images at all, or (with `check_classes`) a class folder
    without images, is a DataError starting with `what` (the flag and value that named the folder). """
    from timm.data import get_img_extensions
    where = os.path.abspath(folder)
    extensions = ', '.join(get_img_extensions())
    try:
        ds = CheckedImageDataset(folder, **kwargs)
    except RuntimeError:  # timm's reader found no image
        raise DataError(f'{what}: no images found under {where} (image files end in {extensions})') from None
    except Exception as e:  # whatever else listing the folder met
        raise DataError(f'{what}: cannot list the images under {where} ({type(e).__name__}: {e})') from None
    _read_each_file_once(ds, what)  # first: a file reached through a link loop keeps its own folder's label
    if not kwargs.get('class_map'):
        _label_by_class_folder(ds, folder)
    _refuse_special_files(ds, what)
    if check_classes:
        # timm names classes after the folders that hold images, so an empty class folder silently drops its class
        used = {os.path.relpath(path, folder).split(os.sep)[0] for path, _ in ds.reader.samples}
        empty = sorted(d.name for d in os.scandir(folder)
                       if d.is_dir() and not d.name.startswith('.') and d.name not in used)
        if empty:
            raise DataError(f'{what}: class folder(s) {", ".join(empty)} under {where} hold no images (image files '
                            f'end in {extensions}); add images or remove the folder(s)')
    return ds


def _label_by_class_folder(ds: CheckedImageDataset, folder: str) -> None:
    """ Label each image by the class folder directly under `folder` that holds it: timm's reader names the class
    after the innermost folder, so `cat/extra/1.jpg` and `dog/extra/2.jpg` would both be class 'extra'. Class
    indices follow timm's order of the names (natural sort); without nested folders nothing changes. """
    from timm.utils.misc import natural_key
    tops = []
    for path, _ in ds.reader.samples:
        top = os.path.relpath(os.path.dirname(path), folder).split(os.sep)[0]
        tops.append('' if top == '.' else top)
    class_to_idx = {c: i for i, c in enumerate(sorted(set(tops), key=natural_key))}
    ds.reader.samples = [(path, class_to_idx[top]) for (path, _), top in zip(ds.reader.samples, tops)]
    ds.reader.class_to_idx = class_to_idx
    if hasattr(ds.reader, 'targets'):
        ds.reader.targets = [t for _, t in ds.reader.samples]


def _refuse_special_files(ds: CheckedImageDataset, what: str) -> None:
    """ Every image is a regular file (a FIFO, a device or a socket named x.jpg would block or never end a read);
    the files' identities (device, inode) are kept as `ds.file_ids`, so that two splits can be compared by the
    files they read, whatever the paths. """
    ids = set()
    for path, _ in ds.reader.samples:
        try:
            st = os.stat(path)
        except OSError as e:
            raise DataError(f'{what}: cannot read {os.path.abspath(path)} ({e.strerror or e})') from None
        if not stat.S_ISREG(st.st_mode):
            kind = ('a FIFO (named pipe)' if stat.S_ISFIFO(st.st_mode) else 'a socket' if stat.S_ISSOCK(st.st_mode)
                    else 'a device' if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else 'not a file')
            raise DataError(f'{what}: {os.path.abspath(path)} is {kind}, not a regular image file; only regular '
                            f'files are read: remove it or replace it by the image')
        ids.add((st.st_dev, st.st_ino))
    ds.file_ids = ids


def _read_each_file_once(ds: CheckedImageDataset, what: str) -> None:
    """ Drop the samples that are a file already listed with the same label, reached again through a directory link
    (a link loop, such as `ln -s .. DATA/train/cat/loop`, lists every image over and over); say what was dropped. """
    shortest = {}  # (file, label) -> the shortest path to it, the one through the fewest links
    for path, target in ds.reader.samples:
        key = (os.path.realpath(path), target)
        if key not in shortest or len(path) < len(shortest[key]):
            shortest[key] = path
    chosen = set(shortest.values())
    kept = [(p, t) for p, t in ds.reader.samples if p in chosen]
    dropped = [(p, t) for p, t in ds.reader.samples if p not in chosen]
    if dropped:
        _logger.warning(f'{what}: {len(dropped)} image path(s) reached through directory links are files already '
                        f'listed (e.g. {dropped[0][0]}); each file is read once: {len(kept)} images')
        ds.reader.samples = kept
        if hasattr(ds.reader, 'targets'):
            ds.reader.targets = [t for _, t in kept]
