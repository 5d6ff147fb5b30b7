""" The run's output folder: chosen without overwriting another run's files, cleaned when a run leaves nothing to
resume, and its summary drawn to a figure. """
import argparse
import csv
import os
from datetime import datetime
from typing import List, Optional, Tuple

from ..figures import new_figure, save_figure
from .checks import resume_path
from .config import ConfigError

# files this entry point writes into an output directory; --overwrite removes exactly these
_OUTPUT_FILES = ('summary.csv', 'summary.png', 'target_mass.csv', 'target_mass.png', 'args.yaml', 'last.pth.tar',
                 'model_best.pth.tar', 'tmp.pth.tar')


def output_dir(args: argparse.Namespace) -> Tuple[str, bool]:
    """ Decide the output folder; returns (path, continuing) and refuses to write into a used folder. """
    root = args.output or './output/train'
    resume_dir = os.path.dirname(os.path.abspath(resume_path(args.resume))) if args.resume else None
    if args.experiment:
        path = os.path.join(root, args.experiment)
    elif resume_dir is not None:
        path = resume_dir  # continue in the folder of the checkpoint
    else:
        path = os.path.join(root, '-'.join([datetime.now().strftime('%Y%m%d-%H%M%S'), args.model.replace('/', '_')]))
    continuing = resume_dir is not None and os.path.abspath(path) == resume_dir
    _check_writable_folder(path, args.output)
    used = os.path.isdir(path) and any(os.scandir(path))
    if used and not continuing and not args.overwrite:
        last = os.path.join(path, 'last.pth.tar')
        resume = f'pass --resume {last} to continue that run, ' if os.path.isfile(last) else (
            'it holds no checkpoint, so there is nothing to resume; ')
        raise ConfigError(f'output folder {os.path.abspath(path)} already exists and is not empty; {resume}pass '
                          f'--overwrite to replace its files, or another --experiment')
    return path, continuing


def _check_writable_folder(path: str, output: str) -> None:
    """ Refuse an output folder that is a file, or lies in a folder this process cannot write. """
    flag = f'--output {output!r}' if output else f'output folder {path}'
    missing = first_missing(path)
    existing = os.path.dirname(missing) if missing else os.path.abspath(path)
    if not os.path.isdir(existing):
        raise ConfigError(f'{flag}: {existing} is a file, not a folder')
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f'{flag}: no permission to write in {existing}')


def first_missing(path: str) -> Optional[str]:
    """ The outermost folder of `path` that does not exist yet (None if `path` exists). """
    missing, path = None, os.path.abspath(path)
    while not os.path.exists(path):
        missing, path = path, os.path.dirname(path)
    return missing


def _run_files(path: str) -> List[str]:
    """ The files of `path` this entry point writes. """
    return [os.path.join(path, name) for name in os.listdir(path)
            if name in _OUTPUT_FILES or (name.startswith('checkpoint-') and name.endswith('.pth.tar'))]


def prepare_output_dir(path: str, continuing: bool, overwrite: bool) -> None:
    os.makedirs(path, exist_ok=True)
    if overwrite and not continuing:
        for file in _run_files(path):
            os.remove(file)


def remove_unfinished_run(path: str, created: Optional[str]) -> None:
    """ A new run that stopped before its first checkpoint: remove the files it wrote, and the folders it made. """
    for file in _run_files(path):
        os.remove(file)
    path = os.path.abspath(path)
    while created is not None and path.startswith(created) and not os.listdir(path):
        os.rmdir(path)
        path = os.path.dirname(path)


def plot_summary(summary_csv: str, png_path: str) -> str:
    """ Draw training/eval loss and eval accuracy per epoch from a summary CSV into a PNG; returns the PNG path. """
    with open(summary_csv, newline='') as f:
        rows = [r for r in csv.DictReader(f) if r.get('epoch') not in (None, '', 'epoch')]
    if not rows:
        raise ValueError(f'{summary_csv} has no epochs to plot')
    epochs = [int(r['epoch']) + 1 for r in rows]  # counted from 1, as the log prints them
    fig = new_figure(figsize=(10, 4), dpi=100)
    ax_loss, ax_acc = fig.subplots(1, 2)
    curves = ((ax_loss, 'train_loss', 'train'), (ax_loss, 'eval_loss', 'eval'),
              (ax_loss, 'eval_ema_loss', 'eval (EMA)'), (ax_acc, 'eval_top1', 'top-1'), (ax_acc, 'eval_top5', 'top-5'),
              (ax_acc, 'eval_ema_top1', 'top-1 (EMA)'))
    for ax, name, label in curves:
        if name in rows[0]:
            ax.plot(epochs, [float(r[name]) for r in rows], marker='.', label=label)
    ax_loss.set(xlabel='epoch', ylabel='loss', title='loss')
    ax_acc.set(xlabel='epoch', ylabel='accuracy (%)', title='eval accuracy')
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(os.path.basename(os.path.dirname(os.path.abspath(summary_csv))), fontsize=9)
    save_figure(fig, png_path)
    return png_path
