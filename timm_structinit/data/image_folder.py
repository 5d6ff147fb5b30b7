""" ImageFolder datasets as timm reads them, checked: an image that cannot be decoded stops the run naming its file
(timm's dataset logs a warning and serves the next image instead), 16-bit images are scaled to 8 bits, each image is
labelled by the class folder directly under the split folder, a file reached twice (through directory links, or as
hard links) is read once and one that two class folders reach is refused, only regular files are read, a link that
leads nowhere is named, the files timm passes over (other extensions) are counted by kind, and a class folder without
images is refused (timm would drop the class). """
import logging
import os
import stat
from collections import Counter
from typing import Any, Dict, List, Tuple

from timm.data import ImageDataset

from ..errors import DataError
from ..utils.words import counted, plural
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
    each file listed once under one label and every one a regular file; no images at all, a link that leads nowhere,
    or (with `check_classes`) a class folder without images, is a DataError starting with `what` (the flag and value
    that named the folder). Files of kinds timm does not read are counted in a warning. """
    from timm.data import get_img_extensions
    where = os.path.abspath(folder)
    extensions = ', '.join(get_img_extensions())
    skipped = _survey(folder, what)
    try:
        ds = CheckedImageDataset(folder, **kwargs)
    except RuntimeError:  # timm's reader found no image
        raise DataError(f'{what}: no images found under {where} (image files end in {extensions})'
                        + (f'; it holds {skipped}, which are not read' if skipped else '')) from None
    except Exception as e:  # whatever else listing the folder met
        raise DataError(f'{what}: cannot list the images under {where} ({type(e).__name__}: {e})') from None
    if skipped:
        _logger.warning(f'{what}: {skipped} under {where} are passed over (timm reads {extensions}); convert the '
                        f'images among them to one of those to train on them')
    if not kwargs.get('class_map'):
        _label_by_class_folder(ds, folder)
    _read_each_file_once(ds, folder, what)
    if check_classes:
        # timm names classes after the folders that hold images, so an empty class folder silently drops its class
        used = {os.path.relpath(path, folder).split(os.sep)[0] for path, _ in ds.reader.samples}
        empty = sorted(d.name for d in os.scandir(folder)
                       if d.is_dir() and not d.name.startswith('.') and d.name not in used)
        if empty:
            raise DataError(f'{what}: {plural(len(empty), "class folder")} {", ".join(empty)} under {where} '
                            f'{"holds" if len(empty) == 1 else "hold"} no images (image files end in {extensions}); '
                            f'add images or remove {"it" if len(empty) == 1 else "them"}')
    return ds


def _survey(folder: str, what: str) -> str:
    """ What timm's listing passes over without a word: a link that leads nowhere (a class folder linked to a folder
    that is gone would silently drop its class) is refused, naming it; the files of other kinds are returned as a
    count by extension ('' when none). Each real folder is walked once, whatever links lead back to it. """
    from timm.data import get_img_extensions
    read, kinds, seen = get_img_extensions(as_set=True), Counter(), set()
    for root, dirs, files in os.walk(folder, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        for name in dirs + files:  # os.walk lists a link that leads nowhere among the files
            path = os.path.join(root, name)
            if os.path.islink(path) and not os.path.exists(path):
                raise DataError(f'{what}: {os.path.abspath(path)} is a link to {os.readlink(path)}, which does not '
                                f'exist; fix the link or remove it')
        kinds.update(os.path.splitext(name)[1].lower() or '(no extension)' for name in files
                     if not name.startswith('.') and os.path.splitext(name)[1].lower() not in read)
    return ', '.join(counted(count, f'{kind} file') for kind, count in kinds.most_common())


def _label_by_class_folder(ds: CheckedImageDataset, folder: str) -> None:
    """ Label each image by the class folder directly under `folder` that holds it: timm's reader names the class
    after the innermost folder, so `cat/extra/1.jpg` and `dog/extra/2.jpg` would both be class 'extra'. Class
    indices follow timm's order of the names (natural sort); without nested folders nothing changes. """
    from timm.utils.misc import natural_key
    tops = [_class_folder(path, folder) for path, _ in ds.reader.samples]
    class_to_idx = {c: i for i, c in enumerate(sorted(set(tops), key=natural_key))}
    ds.reader.samples = [(path, class_to_idx[top]) for (path, _), top in zip(ds.reader.samples, tops)]
    ds.reader.class_to_idx = class_to_idx
    if hasattr(ds.reader, 'targets'):
        ds.reader.targets = [t for _, t in ds.reader.samples]


def _class_folder(path: str, folder: str) -> str:
    top = os.path.relpath(os.path.dirname(path), folder).split(os.sep)[0]
    return '' if top == '.' else top


def _file_id(path: str, what: str) -> Tuple[int, int]:
    """ The file's identity (device, inode); DataError for one that is not a regular file (a FIFO, a device or a
    socket named x.jpg would block or never end a read) or cannot be reached. """
    try:
        st = os.stat(path)
    except OSError as e:
        raise DataError(f'{what}: cannot read {os.path.abspath(path)} ({e.strerror or e})') from None
    if not stat.S_ISREG(st.st_mode):
        kind = ('a FIFO (named pipe)' if stat.S_ISFIFO(st.st_mode) else 'a socket' if stat.S_ISSOCK(st.st_mode)
                else 'a device' if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else 'not a file')
        raise DataError(f'{what}: {os.path.abspath(path)} is {kind}, not a regular image file; only regular '
                        f'files are read: remove it or replace it by the image')
    return st.st_dev, st.st_ino


def _read_each_file_once(ds: CheckedImageDataset, folder: str, what: str) -> None:
    """ Each file (by identity: a link, a hard link, a path through a directory link) once: a path through a link
    back to a folder it already passed (a link loop, such as `ln -s .. DATA/train/cat/loop`, lists every image over
    and over) is dropped, the same file under one label is kept by its shortest path, and a file under two labels
    (a class folder linked to another) is refused, naming it. The identities are kept as `ds.file_ids`, so that two
    splits can be compared by the files they read, whatever the paths. """
    loops: Dict[str, bool] = {}
    by_file: Dict[Tuple[int, int], List[Tuple[str, int]]] = {}
    for path, target in ds.reader.samples:
        parent = os.path.dirname(path)
        if parent not in loops:
            loops[parent] = _revisits(parent, folder)
        if not loops[parent]:
            by_file.setdefault(_file_id(path, what), []).append((path, target))
    names = {i: c for c, i in getattr(ds.reader, 'class_to_idx', {}).items()} if isinstance(
        getattr(ds.reader, 'class_to_idx', None), dict) else {}
    for entries in by_file.values():
        (first, label), other = entries[0], next(((p, t) for p, t in entries if t != entries[0][1]), None)
        if other is not None:
            raise DataError(f'{what}: the file {os.path.realpath(first)} carries two labels, class '
                            f'{names.get(label, label)!r} as {first} and class {names.get(other[1], other[1])!r} as '
                            f'{other[0]} (linked or hard-linked into both class folders?); each file must lie in one '
                            f'class: remove the link in the wrong class')
    chosen = {min((p for p, _ in entries), key=len) for entries in by_file.values()}
    kept = [(p, t) for p, t in ds.reader.samples if p in chosen]
    dropped = len(ds.reader.samples) - len(kept)
    if dropped:
        _logger.warning(f'{what}: {counted(dropped, "image path")} reached through directory links (or links to a '
                        f'file already listed) {"is a file" if dropped == 1 else "are files"} already listed; each '
                        f'file is read once: {counted(len(kept), "image")}')
        ds.reader.samples = kept
        if hasattr(ds.reader, 'targets'):
            ds.reader.targets = [t for _, t in kept]
    ds.file_ids = set(by_file)


def _revisits(parent: str, folder: str) -> bool:
    """ Whether the folder path `parent` (under `folder`) passes through a link back to a folder it already passed,
    `folder` itself or one above it included. """
    real_folder = os.path.realpath(folder)
    passed = {real_folder, *(p for p in _ancestors(real_folder))}
    path = folder
    for part in os.path.relpath(parent, folder).split(os.sep):
        if part in ('', '.'):
            continue
        path = os.path.join(path, part)
        real = os.path.realpath(path)
        if real in passed:
            return True
        passed.add(real)
    return False


def _ancestors(path: str) -> List[str]:
    parents = []
    while os.path.dirname(path) != path:
        path = os.path.dirname(path)
        parents.append(path)
    return parents
