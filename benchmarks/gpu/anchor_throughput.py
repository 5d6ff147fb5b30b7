""" Speed against timm's own scripts: a registered model trained with `timm-structinit-train` against the same
architecture in plain timm trained with timm's train.py, and both through timm's benchmark.py for inference.

Both trainers get the same arguments (batch, AMP dtype, loader workers, pinned memory, optimizer, augmentation: the
defaults of the two parsers are the same) on the same synthetic ImageFolder, each in its own process, alternating
ours / timm's. The first epoch of each run is warm-up (CUDA context, kernel selection, loader workers) and is
discarded; the training images/s of an epoch is its images over its training wall time: `train_img_per_sec` of our
summary.csv, and for timm's train.py the epoch's last log line (images per update over the mean update time; it syncs
the GPU every step). Inference is timm's benchmark.py (`infer_samples_per_sec`), ours through
`python -m timm_structinit.run`, the plain twin run directly. Reported: medians and the ratio ours / timm.

    python benchmarks/gpu/anchor_throughput.py --scripts path/to/timm-scripts --device cuda --amp-dtype bfloat16 \\
        --out benchmarks/results/gpu/anchor_throughput.txt --json anchor_throughput.json
"""
import argparse
import csv
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ for results_file
from results_file import write_lines  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
# registered model -> (plain timm model, its --model-kwargs, its other options, input size); both sides get
# --num-classes 10. timm's scripts pass global_pool themselves (--gp), so it cannot be a model kwarg there.
PAIRS = {
    'vit_tiny_patch2_32_impulse3': (
        'vit_tiny_patch16_224', ['img_size=32', 'patch_size=2', 'class_token=False'], ['--gp', 'avg'], 32),
    'vit_base_patch16_224_mimetic': ('vit_base_patch16_224', [], [], 224),
}
NUM_CLASSES = 10
# training images per input size: epochs of a few seconds on one H100 (ViT-T/2 at 32 px runs ~10x more images/s)
TRAIN_IMAGES = {32: 12288, 224: 3072}
# timm's train.py: "Train: EPOCH [ IDX/N (PCT%)]  Loss: ...  Time: ...s, RATE/s  (AVG_TIME s, AVG_RATE/s)"
TIMM_TRAIN_LINE = re.compile(r'Train: (\d+) \[\s*(\d+)/(\d+).*?\(\s*[\d.]+s,\s*([\d.]+)/s\)')


def make_image_folder(root: Path, size: int, train: int, val: int) -> Path:
    """ train/ and val/ splits of NUM_CLASSES classes of smooth random RGB images (JPEG), the same for every run. """
    from PIL import Image
    g = torch.Generator().manual_seed(0)
    for split, count in (('train', train), ('val', val)):
        for c in range(NUM_CLASSES):
            (root / split / f'c{c}').mkdir(parents=True, exist_ok=True)
        for i in range(count):
            low = (torch.rand(3, 8, 8, generator=g) * 255).byte()
            image = Image.fromarray(low.permute(1, 2, 0).numpy()).resize((size, size), Image.BILINEAR)
            image.save(root / split / f'c{i % NUM_CLASSES}' / f'{i}.jpg', quality=90)
    return root


def common_args(args, folder: Path, size: int) -> list:
    argv = ['--data-dir', folder, '--train-split', 'train', '--val-split', 'val', '--num-classes', NUM_CLASSES,
            '--input-size', 3, size, size, '--batch-size', args.batch_size, '--validation-batch-size',
            args.batch_size, '--workers', args.workers, '--pin-mem', '--epochs', args.epochs, '--opt', 'adamw',
            '--lr', '1e-3', '--weight-decay', '0.05', '--warmup-epochs', 0, '--sched', 'cosine',
            '--log-interval', 1_000_000, '--checkpoint-hist', 1, '--seed', 0, '--device', args.device]
    if args.amp_dtype:
        argv += ['--amp', '--amp-dtype', args.amp_dtype]
    return [str(a) for a in argv]


def model_kwargs(args, kwargs: list) -> list:
    """ --model-kwargs of one side: its own geometry, then the extra kwargs both sides get. """
    both = [*kwargs, *args.model_kwargs]
    return ['--model-kwargs', *both] if both else []


def run(cmd, cwd: Path, log: list) -> str:
    log.append(f'$ {shlex.join(cmd)}')
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=dict(os.environ, PYTHONUNBUFFERED='1'))
    if result.returncode != 0:
        raise SystemExit(f'failed ({result.returncode}): {shlex.join(cmd)}\n{result.stdout[-2000:]}\n'
                         f'{result.stderr[-3000:]}')
    return result.stdout + result.stderr


def ours_train(args, name: str, size: int, folder: Path, work: Path, tag: str, log: list) -> list:
    argv = [sys.executable, '-m', 'timm_structinit.train', '--model', name, *model_kwargs(args, []),
            *common_args(args, folder, size), '--output', str(work), '--experiment', tag]
    run(argv, work, log)
    with open(work / tag / 'summary.csv', newline='') as f:
        return [float(r['train_img_per_sec']) for r in csv.DictReader(f)][1:]


def timm_train(args, plain: str, kwargs: list, options: list, size: int, folder: Path, work: Path, tag: str,
               log: list) -> list:
    argv = [sys.executable, str(Path(args.scripts) / 'train.py'), '--model', plain, *model_kwargs(args, kwargs),
            *options,
            *common_args(args, folder, size), '--output', str(work), '--experiment', tag]
    out = run(argv, work, log)
    last = {}
    for m in TIMM_TRAIN_LINE.finditer(out):
        last[int(m.group(1))] = float(m.group(4))  # the epoch's last line: mean over the epoch
    if len(last) != args.epochs:
        raise SystemExit(f"timm's train.py logged {len(last)} of {args.epochs} epochs; its output:\n{out[-3000:]}")
    return [last[e] for e in sorted(last)][1:]


def benchmark(args, model: str, kwargs: list, options: list, size: int, ours: bool, work: Path, tag: str,
              log: list) -> float:
    results = work / f'{tag}.json'
    script = str(Path(args.scripts) / 'benchmark.py')
    prefix = [sys.executable, '-m', 'timm_structinit.run', script] if ours else [sys.executable, script]
    argv = [*prefix, '--model', model, '--bench', 'inference', '--device', args.device, '-b', str(args.batch_size),
            '--img-size', str(size), '--num-classes', str(NUM_CLASSES), '--num-warm-iter', str(args.warm_iter),
            '--num-bench-iter', str(args.bench_iter), '--results-file', str(results), '--results-format', 'json']
    if args.amp_dtype:
        argv += ['--amp', '--amp-dtype', args.amp_dtype]
    run([*argv, *options, *model_kwargs(args, kwargs)], work, log)
    result = json.loads(results.read_text())
    return float((result[0] if isinstance(result, list) else result)['infer_samples_per_sec'])


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--scripts', required=True, help="folder of timm's train.py and benchmark.py")
    parser.add_argument('--models', nargs='+', default=list(PAIRS), choices=list(PAIRS))
    parser.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    parser.add_argument('--amp-dtype', default='bfloat16', choices=['bfloat16', 'float16', ''],
                        help="AMP dtype ('' for float32)")
    parser.add_argument('--batch-size', type=int, default=128)
    parser.add_argument('--workers', type=int, default=8)
    parser.add_argument('--epochs', type=int, default=3, help='epochs per training run; the first is discarded')
    parser.add_argument('--rounds', type=int, default=1, help='alternating ours / timm runs per model')
    parser.add_argument('--train-images', type=int, default=None,
                        help=f'synthetic training images (default: {TRAIN_IMAGES} by input size)')
    parser.add_argument('--warm-iter', type=int, default=10)
    parser.add_argument('--bench-iter', type=int, default=40)
    parser.add_argument('--model-kwargs', nargs='*', default=[],
                        help='extra arguments for both sides (e.g. depth=2 for a short rehearsal)')
    parser.add_argument('--skip', nargs='*', default=[], choices=['train', 'infer'])
    parser.add_argument('--out', default='')
    parser.add_argument('--json', default='')
    args = parser.parse_args(argv)
    if not (Path(args.scripts) / 'train.py').is_file():
        parser.error(f"--scripts {args.scripts!r}: no train.py there (timm's scripts ship in timm's repository)")

    import timm
    device_name = torch.cuda.get_device_name() if args.device.startswith('cuda') else platform.processor() or 'cpu'
    lines = [
        f'# command: python {shlex.join(sys.argv)}',
        f'# date: {datetime.now(timezone.utc).isoformat(timespec="seconds")}',
        f'# device: {args.device} ({device_name}); torch {torch.__version__}, timm {timm.__version__}, python '
        f'{platform.python_version()}, {os.cpu_count()} CPUs',
        f'# batch {args.batch_size}, AMP {args.amp_dtype or "off (float32)"}, {args.workers} loader workers, pinned '
        f'memory; {args.train_images or TRAIN_IMAGES} synthetic JPEGs, {args.epochs} epochs per run (the first '
        f'discarded), {args.rounds} alternating round(s); inference: benchmark.py, {args.bench_iter} batches after '
        f'{args.warm_iter}' + (f'; extra model kwargs {" ".join(args.model_kwargs)}' if args.model_kwargs else ''),
    ]
    print('\n'.join(lines), flush=True)
    report = {'device': device_name, 'torch': torch.__version__, 'timm': timm.__version__,
              'date': datetime.now(timezone.utc).isoformat(timespec='seconds'), 'batch_size': args.batch_size,
              'amp_dtype': args.amp_dtype, 'workers': args.workers, 'models': {}}
    log = []

    def save():  # after each model, so that a run stopped at its time limit keeps what it measured
        report['commands'] = log
        if args.out:
            write_lines(args.out, lines + ['', '# commands (in a temporary folder):', *[f'# {c}' for c in log]])
        if args.json:
            write_lines(args.json, [json.dumps(report, indent=1)])

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        folders = {}
        for name in args.models:
            plain, kwargs, options, size = PAIRS[name]
            if size not in folders:
                count = args.train_images or TRAIN_IMAGES.get(size, 4096)
                folders[size] = make_image_folder(work / f'data{size}', size, count, args.batch_size)
            entry = report['models'][name] = {'plain': plain, 'plain_args': [*kwargs, *options]}
            if 'train' not in args.skip:
                rates = {'ours': [], 'timm': []}
                for r in range(args.rounds):
                    rates['ours'] += ours_train(args, name, size, folders[size], work, f'{name}-ours-{r}', log)
                    rates['timm'] += timm_train(args, plain, kwargs, options, size, folders[size], work,
                                                f'{name}-timm-{r}', log)
                med = {k: statistics.median(v) for k, v in rates.items()}
                entry['train'] = {'ours': rates['ours'], 'timm': rates['timm'], 'ours_median': med['ours'],
                                  'timm_median': med['timm'], 'ratio': med['ours'] / med['timm']}
                lines.append(f'train {name:30s} ours {med["ours"]:9.1f} img/s  timm train.py ({plain}) '
                             f'{med["timm"]:9.1f} img/s  ratio {med["ours"] / med["timm"]:.3f}')
                print(lines[-1], flush=True)
            if 'infer' not in args.skip:
                rates = {'ours': [], 'timm': []}
                for r in range(args.rounds):
                    rates['ours'].append(benchmark(args, name, [], [], size, True, work, f'{name}-bo-{r}', log))
                    rates['timm'].append(benchmark(args, plain, kwargs, options, size, False, work,
                                                   f'{name}-bt-{r}', log))
                med = {k: statistics.median(v) for k, v in rates.items()}
                entry['infer'] = {'ours': rates['ours'], 'timm': rates['timm'], 'ratio': med['ours'] / med['timm']}
                lines.append(f'infer {name:30s} ours {med["ours"]:9.1f} img/s  benchmark.py ({plain}) '
                             f'{med["timm"]:9.1f} img/s  ratio {med["ours"] / med["timm"]:.3f}')
                print(lines[-1], flush=True)
            save()
    return report


if __name__ == '__main__':
    main()
