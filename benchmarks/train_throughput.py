""" Training throughput: a registered structured-init ViT vs the same timm architecture, same entry point and loop.

Both models go through `timm_structinit.train.main` on the same data, options and seed; the only difference is the
model. The plugin side is a registered model (`vit_tiny_patch2_32_gap_sincos`: average pooling, fixed sin-cos
position embedding); the plain side is timm's own `VisionTransformer` (`vit_tiny_patch16_224` rebuilt with the same
width, depth, heads, patch and pooling, learned position embedding), which uses no code of this package. Runs
alternate plain / plugin, in the order ABBA (odd rounds start with the plugin) so that both machine drift and any
order effect spread evenly, the first epoch of each run is discarded (warm-up), and the
train-phase images/second of the rest (timm's summary CSV, evaluation excluded) are compared by median, and round by
round (each round's plugin median over its timm median, whose median over rounds is what a drifting machine load
leaves least touched).

    python benchmarks/train_throughput.py --out benchmarks/results/train_throughput.txt
"""
import argparse
import csv
import io
import os
import platform
import shlex
import statistics
import sys
import tempfile
from contextlib import redirect_stdout
from datetime import datetime
from pathlib import Path

import torch
import timm

from timm_structinit.train import main as train_main
from results_file import Report

REPO = Path(__file__).resolve().parents[1]
SHARED_CIFAR10 = REPO.parent / 'shared' / 'data' / 'cifar10'


def pairs(args):
    """ (label, model, model_kwargs) of each side; identical architecture apart from the position embedding. """
    geometry = [f'patch_size={args.patch_size}', f'embed_dim={args.embed_dim}', f'depth={args.depth}',
                f'num_heads={args.num_heads}']
    out = {
        'gap': [
            ('timm vit (avg pool)', 'vit_tiny_patch16_224',
             ['img_size=32', *geometry, 'class_token=False', 'global_pool=avg']),
            ('plugin vit_tiny_patch2_32_gap_sincos', 'vit_tiny_patch2_32_gap_sincos', geometry),
        ],
        'token': [
            ('timm vit (class token)', 'vit_tiny_patch16_224', ['img_size=32', *geometry]),
            ('plugin vit_tiny_patch2_32_mimetic', 'vit_tiny_patch2_32_mimetic', geometry),
        ],
    }
    return [out[name] for name in args.pairs]


def run_once(model, model_kwargs, args, workdir, tag):
    argv = [
        '--model', model, '--model-kwargs', *model_kwargs,
        '--img-size', '32', '--crop-pct', '1.0', '--mean', '0.4914', '0.4822', '0.4465',
        '--std', '0.2470', '0.2435', '0.2616', '--interpolation', 'bicubic', '--train-interpolation', 'bicubic',
        '--epochs', str(args.epochs), '--batch-size', str(args.batch_size), '--opt', 'adamw', '--lr', '1e-3',
        '--weight-decay', '0.05', '--warmup-epochs', '0', '--workers', str(args.workers), '--seed', '0',
        '--device', args.device, *(['--amp'] if args.device == 'cuda' else []),
        '--log-interval', '100000', '--output', str(workdir), '--experiment', tag,
    ]
    if args.data == 'digits':
        argv += ['--dataset', 'sklearn/digits', '--val-split', 'test', '--val-subset', '100', '--hflip', '0']
    else:
        argv += ['--data-dir', str(args.data_dir), '--val-split', 'test', '--train-subset', str(args.train_subset),
                 '--val-subset', '100']
    with redirect_stdout(io.StringIO()):
        code = train_main(argv)
    if code != 0:
        raise SystemExit(f'training run failed ({code}): {shlex.join(argv)}')
    with open(workdir / tag / 'summary.csv', newline='') as f:
        rates = [float(r['train_img_per_sec']) for r in csv.DictReader(f)]
    return rates[1:]  # the first epoch pays one-time costs


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--pairs', nargs='+', default=['gap', 'token'], choices=['gap', 'token'])
    parser.add_argument('--data', default='cifar10', choices=['cifar10', 'digits'])
    parser.add_argument('--data-dir', default=str(SHARED_CIFAR10))
    parser.add_argument('--train-subset', type=int, default=2560)
    parser.add_argument('--epochs', type=int, default=3, help='epochs per run; the first is discarded')
    parser.add_argument('--rounds', type=int, default=3, help='alternating plain/plugin runs per side (ABBA order)')
    parser.add_argument('--batch-size', type=int, default=128)
    parser.add_argument('--workers', type=int, default=0)
    parser.add_argument('--patch-size', type=int, default=4)
    parser.add_argument('--embed-dim', type=int, default=128)
    parser.add_argument('--depth', type=int, default=6)
    parser.add_argument('--num-heads', type=int, default=4)
    parser.add_argument('--threads', type=int, default=0, help='torch intra-op threads (0: torch default)')
    parser.add_argument('--device', default='cpu', help='cpu, or cuda (there with AMP, --amp)')
    parser.add_argument('--out', default='', help='also write the report to this file')
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    report = Report([
        f'# command: python {shlex.join(sys.argv)}',
        f'# date: {datetime.now().isoformat(timespec="seconds")}',
        f'# device {torch.cuda.get_device_name() if args.device == "cuda" else "cpu"}; '
        f'torch {torch.__version__}, timm {timm.__version__}, python {platform.python_version()}, '
        f'{os.cpu_count()} CPUs, {torch.get_num_threads()} torch threads, OMP_NUM_THREADS='
        f'{os.environ.get("OMP_NUM_THREADS", "unset")}',
        f'# data: {args.data}' + (f' ({args.data_dir}, {args.train_subset}-image class-balanced subset)'
                                   if args.data == 'cifar10' else ' (1,347 training images)')
        + f'; batch {args.batch_size}, {args.workers} loader workers; ViT width {args.embed_dim}, depth {args.depth}, '
          f'{args.num_heads} heads, patch {args.patch_size} on 32x32; AdamW',
        f'# per run: {args.epochs} epochs, the first discarded; {args.rounds} alternating rounds; train img/s',
    ])
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for p, pair in enumerate(pairs(args)):
            rates = {label: [] for label, _, _ in pair}
            round_ratios = []
            for r in range(args.rounds):
                round_rates = {}
                # counterbalanced (ABBA): odd rounds run the plugin first, so an order effect cancels too
                for i, (label, model, kwargs) in (enumerate(pair) if r % 2 == 0 else reversed(list(enumerate(pair)))):
                    got = run_once(model, kwargs, args, workdir, f'{p}-{r}-{i}-{model}')
                    rates[label] += got
                    round_rates[i] = statistics.median(got)
                    report.add(f'round {r + 1} {label:<40s} ' + ' '.join(f'{v:7.1f}' for v in got))
                round_ratios.append(round_rates[1] / round_rates[0])
            (plain, plain_rates), (plugin, plugin_rates) = rates.items()
            m_plain, m_plugin = statistics.median(plain_rates), statistics.median(plugin_rates)
            summary = [
                f'{label:<40s} median {statistics.median(values):7.1f} img/s '
                f'(min {min(values):.1f}, max {max(values):.1f})' for label, values in rates.items()]
            summary.append(f'ratio plugin / timm: {m_plugin / m_plain:.3f} (medians); paired by round (the machine\'s '
                           f'drift cancels): median {statistics.median(round_ratios):.3f}, rounds '
                           + ' '.join(f'{v:.3f}' for v in round_ratios))
            report.add(*summary)
    report.write(args.out)


if __name__ == '__main__':
    main()
