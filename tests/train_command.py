""" The training command run in-process by the tests, its one error line, whether a run folder's lock is free, and
the tiny model, options and image folder that the tests of the command's mechanisms train with. """
import csv
import os
from pathlib import Path

import torch
from filelock import FileLock, Timeout
from PIL import Image

from interrupts import stop_if_interrupted
from timm_structinit import train as train_mod


# a model of a few thousand weights, and options that train it in a second on a CPU
TINY_KWARGS = ['embed_dim=16', 'depth=1', 'num_heads=2', 'patch_size=8']
TINY = ['--model', 'vit_tiny_patch2_32_mimetic', '--model-kwargs', *TINY_KWARGS]
FAST = ['--opt', 'adamw', '--lr', '1e-3', '--warmup-epochs', '0', '--workers', '0', '--batch-size', '8',
        '--log-interval', '1000']
ENV = dict(os.environ, OMP_NUM_THREADS='1', PYTHONUNBUFFERED='1')  # for the command in a child process
# a run of two epochs on 32 of the bundled digits (evaluated on 20), for the tests that stop, damage and resume it
RUN = [*TINY, '--dataset', 'sklearn/digits', '--val-split', 'test', '--train-subset', '32', '--val-subset', '20',
       '--opt', 'sgd', '--lr', '0.01', '--warmup-epochs', '0', '--workers', '0', '--batch-size', '16',
       '--log-interval', '1000', '--epochs', '2']


def two_class_folder(root: Path, per_class: int, size: int, fmt: str = 'png') -> Path:
    """ An image folder of `train/` and `test/`, classes cat and dog, `per_class` plain images of `size` px each. """
    for split in ('train', 'test'):
        for c, cls in enumerate(('cat', 'dog')):
            (root / split / cls).mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                Image.new('RGB', (size, size), (40 * i, 80 + 60 * c, 120)).save(root / split / cls / f'{i}.{fmt}')
    return root


def run_main(argv, capsys):
    """ (exit code, stdout, stderr) of `timm-structinit-train ARGV`, run in this process; a Ctrl-C the command took
    as its own stops pytest here. """
    code = train_mod.main([str(a) for a in argv])
    stop_if_interrupted()
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    """ The single non-empty line of `err`, after checking that it is the only one and no traceback. """
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and 'Traceback' not in err, err
    return lines[0]


def lock_is_free(run_folder) -> bool:
    """ Whether the lock file a run leaves in `run_folder` is there and held by no process (filelock's own test: an
    acquire that does not wait). """
    path = run_folder / '.timm-structinit.lock'
    if not path.is_file():
        return False
    try:
        with FileLock(str(path), timeout=0, preserve_lock_file=True):
            return True
    except Timeout:
        return False


def read_summary(path: Path):
    """ The rows of a run's summary.csv, a dict per finished epoch. """
    with open(path, newline='') as f:
        return list(csv.DictReader(f))


def checkpoint(path: Path) -> dict:
    """ A checkpoint the training command wrote, as it saved it (optimizer and EMA included). """
    return torch.load(path, map_location='cpu', weights_only=False)
