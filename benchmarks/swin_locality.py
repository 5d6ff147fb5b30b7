""" How local Swin's window attention is, at init and after training, with and without the impulse init.

The impulse init gives every Swin head a 3 x 3 impulse in its relative position bias, yet at CPU scale it trains to
the same accuracy as timm's init (`compare_inits.py --families`). This asks whether timm's Swin learns the locality
on its own: for the two seed-0 runs of that comparison (same command, checkpoints kept), and for each model at init,
it measures per block, on 64 evenly spaced CIFAR-10 test images through the model's real forward pass:

- 3x3 mass: the attention mass each query puts inside its 3 x 3 neighbourhood in the window (queries at a window
  border see fewer neighbours), mean over heads, queries, windows and images;
- best offset: per head, the mass on the single 3 x 3 offset that head attends to most, mean over heads.

Both are reported next to what attention spread evenly over the keys each query may see would give (chance).

    python benchmarks/swin_locality.py      # trains what is missing (about half an hour a run on 2 cores), then measures
"""
import argparse
import datetime
import json
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import timm
import torch

import timm_structinit  # noqa: F401  registers the models
from timm_structinit.diagnostics import load_images
from timm_structinit.diagnostics.family_maps import swin_window_maps
from timm_structinit.inits.impulse import impulse_target
from timm_structinit.inits.swin import window_attentions

from compare_inits import ENTRIES, model_kwargs, read_summary, train_command
from results_file import write_lines

HERE = Path(__file__).resolve().parent
RUNS = ('swin', 'swin_impulse3')  # entries of compare_inits.FAMILIES, seed 0
OFFSETS = [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1)]


def offset_shares(maps: torch.Tensor, grid) -> torch.Tensor:
    """ (heads, 9): per head, the mean share of each query's attention on each 3 x 3 offset; queries whose key at
    that offset is outside the window count as 0 for it. """
    shares = torch.zeros(maps.shape[0], len(OFFSETS))
    for j, offset in enumerate(OFFSETS):
        target = impulse_target(tuple(grid), offset, 'zero')
        rows = torch.nonzero(target >= 0).flatten()
        shares[:, j] = maps[:, rows, target[rows]].sum(-1) / maps.shape[1]
    return shares


def locality(model: torch.nn.Module, images: torch.Tensor) -> List[Dict[str, float]]:
    """ Per block: 3x3 mass, best-offset mass, and both for attention spread evenly over the keys each query may see
    (a shifted window's mask hides the keys of other regions), averaged over windows as the maps are. """
    rows = []
    for (probs, mask), attn in zip(swin_window_maps(model, images), window_attentions(model)):
        maps, grid = probs.mean((0, 1)).cpu(), tuple(attn.window_size)
        logits = torch.zeros(1, *maps.shape[1:]) if mask is None else mask.float().cpu()
        shares = offset_shares(maps, grid)
        uniform = offset_shares(torch.softmax(logits, -1).mean(0, keepdim=True), grid)
        rows.append(dict(local=shares.sum(1).mean().item(), best=shares.max(1).values.mean().item(),
                         local_chance=uniform.sum().item(), best_chance=uniform.max().item()))
    return rows


def train_if_missing(name: str, data_dir: Path, work_dir: Path) -> Path:
    run = work_dir / f'{name}_s0'
    if not (run / 'last.pth.tar').exists():
        command = train_command(name, 0, data_dir, run)
        print(' '.join(command), flush=True)
        subprocess.run(command, check=True, cwd=HERE.parent)
    return run


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--data-dir', type=Path, default=HERE.parent.parent / 'shared' / 'data' / 'cifar10')
    parser.add_argument('--work-dir', type=Path, default=HERE.parent / 'output' / 'swin_locality',
                        help='where the two training runs (with their checkpoints) are, or are written')
    parser.add_argument('--out', type=Path, default=HERE / 'results' / 'swin_locality.txt')
    args = parser.parse_args(argv)
    start = time.time()
    runs = {name: train_if_missing(name, args.data_dir, args.work_dir) for name in RUNS}
    table: Dict[str, List[Dict[str, float]]] = {}
    images = None
    for name, run in runs.items():
        entry = ENTRIES[name]
        torch.manual_seed(0)
        model = timm.create_model(entry.model, **model_kwargs(entry)).eval()
        images = load_images(str(args.data_dir / 'test'), model, 64) if images is None else images
        table[f'{name} at init'] = locality(model, images)
        checkpoint = torch.load(run / 'last.pth.tar', map_location='cpu', weights_only=False)
        model.load_state_dict(checkpoint['state_dict'])
        top1 = read_summary(run / 'summary.csv')[-1]['eval_top1']
        table[f'{name} trained ({checkpoint["epoch"] + 1} epochs, top-1 {top1:.2f})'] = locality(model, images)
    blocks = len(next(iter(table.values())))
    lines = [
        f'# {__doc__.splitlines()[0].strip()}',
        f'# command: python benchmarks/swin_locality.py; date {datetime.date.today()}; torch {torch.__version__}, '
        f'timm {timm.__version__}, {platform.machine()}; {time.time() - start:.0f} s in all',
        f'# scale: {json.dumps(model_kwargs(ENTRIES["swin"]))}; runs: compare_inits.py --families recipe, seed 0, '
        f'trained with `{" ".join(train_command("swin", 0, Path("DATA"), Path("WORK") / "swin_s0")[1:])}` '
        f'(swin_impulse3: the same with its model name)',
        '# per block (stage 1: blocks 1-2, 16 x 16 tokens; stage 2: 3-4, 8 x 8; stage 3: 5-6, 4 x 4), mean over '
        'heads and 64 test images; chance = attention spread evenly over the keys a query may see in its 4 x 4 window',
        '',
        f'{"model":<48}' + ''.join(f'{"block " + str(b + 1):>12}' for b in range(blocks)),
    ]
    for key, label in (('local', '3x3 mass'), ('best', 'best-offset mass')):
        lines += ['', f'## {label}']
        lines.append(f'{"chance":<48}' + ''.join(f'{r[key + "_chance"]:>12.3f}' for r in table[next(iter(table))]))
        lines += [f'{name:<48}' + ''.join(f'{r[key]:>12.3f}' for r in rows) for name, rows in table.items()]
    write_lines(args.out, lines)
    print('\n'.join(lines))


if __name__ == '__main__':
    sys.exit(main())
