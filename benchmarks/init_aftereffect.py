""" Whether building an init model leaves the process slower: a timm ViT's training-step rate in one process, before
and after `timm.create_model` of a registered init model (which runs the init), against the same process building a
model without an init.

Each trial is a fresh process: 4 timed blocks of training steps of timm's own ViT (the benchmark's width, depth, heads
and patch on 32 px, random batches, AdamW), then one model built, then 4 more blocks; the trial's ratio is the median
rate after over the median rate before. Trials alternate the built model, so the machine's drift falls on both
alike. `--package DIR` runs the trials with the package found in DIR instead (an older checkout, to compare).

    python benchmarks/init_aftereffect.py --out benchmarks/results/init_aftereffect.txt
"""
import argparse
import os
import platform
import shlex
import statistics
import subprocess
import sys
from datetime import datetime

import timm
import torch

from results_file import Report

TRIAL = r'''
import statistics, sys, time
import timm, torch
import timm_structinit
built, width, depth, heads, patch, batch, steps = sys.argv[1], *map(int, sys.argv[2:8])
geometry = dict(patch_size=patch, embed_dim=width, depth=depth, num_heads=heads, num_classes=10)
torch.manual_seed(0)
model = timm.create_model('vit_tiny_patch16_224', img_size=32, **geometry)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))

def rate():
    start = time.perf_counter()
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return steps * batch / (time.perf_counter() - start)

rate()
before = [rate() for _ in range(4)]
timm.create_model(built, **geometry)
after = [rate() for _ in range(4)]
print(statistics.median(before), statistics.median(after))
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--models', nargs='+', default=['vit_tiny_patch2_32_sincos', 'vit_tiny_patch2_32_mimetic',
                                                        'vit_tiny_patch2_32_impulse3'],
                        help='registered models built between the blocks (the first: one without an init)')
    parser.add_argument('--trials', type=int, default=4, help='fresh processes per model')
    parser.add_argument('--embed-dim', type=int, default=128)
    parser.add_argument('--depth', type=int, default=6)
    parser.add_argument('--num-heads', type=int, default=4)
    parser.add_argument('--patch-size', type=int, default=4)
    parser.add_argument('--batch-size', type=int, default=128)
    parser.add_argument('--steps', type=int, default=6, help='training steps per timed block')
    parser.add_argument('--package', default='', help='import timm_structinit from this folder instead')
    parser.add_argument('--out', default='')
    args = parser.parse_args()
    env = dict(os.environ)
    if args.package:
        env['PYTHONPATH'] = os.pathsep.join(filter(None, [args.package, env.get('PYTHONPATH', '')]))
    probe = subprocess.run([sys.executable, '-c', 'import timm_structinit; print(timm_structinit.__file__)'],
                           env=env, capture_output=True, text=True, check=True).stdout.strip()
    report = Report([f'# command: python {shlex.join(sys.argv)}',
             f'# date: {datetime.now().isoformat(timespec="seconds")}; {platform.processor() or platform.machine()}, '
             f'{os.cpu_count()} CPUs, {torch.get_num_threads()} torch threads; torch {torch.__version__}, '
             f'timm {timm.__version__}; package {probe}',
             f'# timm ViT width {args.embed_dim}, depth {args.depth}, {args.num_heads} heads, patch {args.patch_size} '
             f'on 32 px, batch {args.batch_size}, AdamW; {args.steps} steps per block; ratio = median img/s of 4 '
             f'blocks after building the model / of 4 blocks before, one fresh process per trial'])
    ratios = {name: [] for name in args.models}
    for trial in range(args.trials):
        for name in args.models:
            argv = [name, args.embed_dim, args.depth, args.num_heads, args.patch_size, args.batch_size, args.steps]
            out = subprocess.run([sys.executable, '-c', TRIAL, *map(str, argv)], env=env, capture_output=True,
                                 text=True, check=True).stdout.split()
            before, after = float(out[-2]), float(out[-1])
            ratios[name].append(after / before)
            report.add(f'trial {trial + 1} {name:<32s} before {before:7.1f} img/s  after {after:7.1f} img/s  '
                       f'ratio {after / before:.3f}')
    for name, values in ratios.items():
        report.add(f'{name:<32s} median ratio {statistics.median(values):.3f} '
                   f'(trials {" ".join(f"{v:.3f}" for v in values)})')
    report.write(args.out)


if __name__ == '__main__':
    main()
