""" Split names and split folders: the synonyms timm's folder reader searches, the kind of split a name means, and
the folder that holds a split, refused rather than falling back to the whole root. `DataError`, the error every check
of the data raises, is re-exported here from `errors`. """
import os

from ..errors import DataError

__all__ = ['DataError', 'TRAIN_SPLITS', 'EVAL_SPLITS', 'resolve_split_folder']
# split synonyms, searched in this order, as timm's folder reader does
TRAIN_SPLITS = ('train', 'training')
EVAL_SPLITS = ('val', 'valid', 'validation', 'eval', 'evaluation')


def _split_kind(split: str) -> str:
    name = split.split('[')[0].lower()
    if name in TRAIN_SPLITS:
        return 'train'
    if name in EVAL_SPLITS or name == 'test':
        return 'test'
    return name


def resolve_split_folder(root: str, split: str, flag: str) -> str:
    """ Return the sub-folder of `root` holding `split`, or raise DataError; never fall back to `root` itself. """
    if not os.path.isdir(root):
        raise DataError(f'--data-dir {root!r} is not a directory (looked for {os.path.abspath(root)})')
    name = split.split('[')[0]
    synonyms = TRAIN_SPLITS if name in TRAIN_SPLITS else EVAL_SPLITS if name in EVAL_SPLITS else ()
    candidates = [name] + [s for s in synonyms if s != name]
    for candidate in candidates:
        path = os.path.join(root, candidate)
        if os.path.isdir(path):
            return path
    present = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    looked = ', '.join(repr(c) for c in candidates)
    hint = ''
    if flag == '--val-split' and 'test' in present:
        hint = ' Pass --val-split test to evaluate on its test folder.'
    raise DataError(
        f'{flag} {split!r}: {os.path.abspath(root)} has no split folder {looked}; it has: '
        f'{", ".join(present) or "no sub-folders"}.{hint} Refusing to read the whole directory, which would mix '
        f'splits (and evaluate on training images).')
