""" What a training run's folder holds of its finished epochs, in the names timm's CheckpointSaver writes: read by the
training command (what a stop keeps, what `--resume FOLDER` continues from, what a stopped new run may remove) and by
`compare` (what a stopped run resumes from, which folder it must not remove). The os module only: compare reads a
run's folder without importing the training command. """
import os
import re
from typing import Optional

__all__ = ['is_epoch_checkpoint', 'resumable_checkpoint', 'holds_finished_epoch']

_EPOCH_CHECKPOINT = re.compile(r'checkpoint-(\d+)\.pth\.tar')


def is_epoch_checkpoint(name: str) -> bool:
    """ A `checkpoint-N.pth.tar` of timm's CheckpointSaver. """
    return name.startswith('checkpoint-') and name.endswith('.pth.tar')


def resumable_checkpoint(folder: str) -> Optional[str]:
    """ The checkpoint a run's folder resumes from: its last.pth.tar, or where that is missing (a process killed
    while timm's saver replaced it) the checkpoint-N.pth.tar of its latest epoch; None when it holds neither. """
    last = os.path.join(folder, 'last.pth.tar')
    if os.path.isfile(last):
        return last
    numbered = [(int(m.group(1)), name) for name in (os.listdir(folder) if os.path.isdir(folder) else ())
                for m in [_EPOCH_CHECKPOINT.fullmatch(name)] if m]
    return os.path.join(folder, max(numbered)[1]) if numbered else None


def holds_finished_epoch(path: str) -> bool:
    """ Whether a run folder holds anything of a finished epoch: a checkpoint (last, best or numbered) or a row of its
    summary. Such a folder is never removed, whatever stopped the run and when. """
    names = set(os.listdir(path)) if os.path.isdir(path) else set()
    if names & {'last.pth.tar', 'model_best.pth.tar'} or any(is_epoch_checkpoint(n) for n in names):
        return True
    try:
        with open(os.path.join(path, 'summary.csv'), newline='') as f:
            return sum(1 for line in f if line.strip()) > 1  # a header and a row
    except (OSError, UnicodeDecodeError):
        return 'summary.csv' in names
