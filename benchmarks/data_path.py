""" Where a training run's time goes, on the device it runs on: the model's step rate on synthetic batches already
on the device (the ceiling), each data path alone (no model), one end-to-end run of the training command, three
concurrent runs, and timm's own train.py on the same model, data and options. Each rate is training images per
second; each is also given as a share of the ceiling.

Data paths: timm's loader as this package runs it (workers kept through the run, per-image seeds), timm's loader with
its workers started anew each epoch (as timm's train.py and earlier releases of this package run it), and the device
loader (`--loader device`: decoded once onto the device, augmented there). The data are a class-balanced subset of
CIFAR-10, linked into an ImageFolder, so that every run (timm's train.py, which has no subset option, included)
reads the same files.

    python benchmarks/data_path.py --out benchmarks/results/data_path_cpu.txt                  # CPU: about a minute
    python benchmarks/data_path.py --setup 2024 --out $OUT/data_path_gpu.txt                   # GPU: about 4 minutes
"""
import argparse
import contextlib
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import List, Tuple

import timm
import torch

import timm_structinit  # noqa: F401  (registers the models)
from results_file import write_lines

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / 'shared'


@dataclass(frozen=True)
class Setup:
    model: str
    model_kwargs: Tuple[str, ...]
    train_images: int
    batch_size: int
    epochs: int  # of each end-to-end run; the first is discarded
    workers: int
    options: Tuple[str, ...]  # the recipe's augmentation and optimizer
    description: str


# the 2024 paper's CIFAR recipe (timm_structinit/recipes/impulse_vit_tiny_patch2_cifar10.yaml) on its base arm
RECIPE_2024 = ('--opt', 'adamw', '--lr', '1e-3', '--weight-decay', '0.01', '--sched', 'cosine', '--warmup-epochs', '1',
               '--aa', 'rand-m9-mstd0.5-inc1', '--clip-grad', '3.0', '--smoothing', '0.1')
SETUPS = {
    'cpu': Setup('vit_tiny_patch2_32_gap_sincos', ('embed_dim=32', 'depth=1', 'num_heads=2', 'patch_size=4'), 512,
                 64, 3, 2, RECIPE_2024, 'a small ViT (width 32, depth 1, patch 4) at 32 px, 512 images: a CPU minute'),
    '2024': Setup('vit_tiny_patch2_32_gap_sincos', (), 10000, 512, 4, 4, RECIPE_2024 + ('--amp',),
                  "the 2024 setup: ViT-T/2 at 32 px (16 x 16 tokens), 10,000 images, batch 512, AMP"),
}


def link_subset(data_dir: Path, count: int, out: Path) -> Path:
    """ A class-balanced `count` of the training images (and 1,000 test images) linked into an ImageFolder. """
    for split, n in (('train', count), ('test', 1000)):
        classes = sorted(p for p in (data_dir / split).iterdir() if p.is_dir())
        for folder in classes:
            target = out / split / folder.name
            target.mkdir(parents=True, exist_ok=True)
            for image in sorted(folder.glob('*.jpg'))[:n // len(classes)]:
                (target / image.name).symlink_to(image)
    return out


def train_argv(setup: Setup, data: Path, loader: str, output: Path, name: str, device: str) -> List[str]:
    return ['--model', setup.model, *(['--model-kwargs', *setup.model_kwargs] if setup.model_kwargs else []),
            '--dataset', '', '--data-dir', str(data), '--val-split', 'test', '-b', str(setup.batch_size),
            '--epochs', str(setup.epochs), '--workers', str(setup.workers), '--val-interval', str(setup.epochs),
            '--log-interval', '100000', '--loader', loader, '--device', device, '--output', str(output),
            '--experiment', name, *setup.options]


def ceiling(setup: Setup, device: torch.device, steps: int, compile_model: bool) -> float:
    """ Images/s of forward, backward and AdamW step on one synthetic batch already on the device. """
    kwargs = dict(item.split('=') for item in setup.model_kwargs)
    model = timm.create_model(setup.model, num_classes=10, **{k: int(v) for k, v in kwargs.items()}).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step_model = torch.compile(model) if compile_model else model
    x = torch.randn(setup.batch_size, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (setup.batch_size,), device=device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if device.type == 'cuda' else contextlib.nullcontext()

    def step():
        with autocast:
            loss = torch.nn.functional.cross_entropy(step_model(x), y, label_smoothing=0.1)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    for _ in range(3 if not compile_model else 6):  # warm-up (compilation included)
        step()
    _sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    return steps * setup.batch_size / (time.perf_counter() - start)


def _sync(device: torch.device) -> None:
    if device.type == 'cuda':
        torch.cuda.synchronize()


def data_path_alone(setup: Setup, data: Path, loader: str, device: torch.device, persistent: bool = True,
                    epochs: int = 3) -> Tuple[float, float]:
    """ (images/s of the epochs after the first, seconds before the first batch) of a data path alone: the
    training command's loaders, built as it builds them, iterated without a model. """
    from timm_structinit.train import check_args, parse_args
    from timm_structinit.train import loaders as loaders_mod
    from timm_structinit.train.build import build_datasets, build_model, data_config
    args = parse_args(train_argv(setup, data, loader, Path(tempfile.mkdtemp()), 'alone', device.type))
    inputs = check_args(args)
    args.distributed, args.rank, args.world_size = False, 0, 1
    datasets = build_datasets(args)
    config = data_config(args, build_model(args, inputs), datasets)
    start = time.perf_counter()
    if loader == 'device' or persistent:
        loader_train = loaders_mod.build_loaders(args, config, *datasets, device)[0]
    else:
        options = dict(input_size=config['input_size'], mean=config['mean'], std=config['std'],
                       num_workers=loaders_mod.loader_workers(args.workers), distributed=False, pin_memory=False,
                       device=device, use_prefetcher=True, interpolation=config['interpolation'],
                       crop_pct=config['crop_pct'])
        loader_train = loaders_mod._timm_loaders(args, config, *datasets, options, persistent=False)[0]
    rates, first_batch = [], None
    for epoch in range(epochs):
        for follower in (getattr(loader_train, 'dataset', None), getattr(getattr(loader_train, 'loader', None),
                                                                          'dataset', None), loader_train):
            if hasattr(follower, 'set_epoch'):
                follower.set_epoch(epoch)
        count, epoch_start = 0, time.perf_counter()
        for images, _ in loader_train:
            if first_batch is None:
                _sync(device)
                first_batch = time.perf_counter() - start
            count += images.shape[0]
        _sync(device)
        rates.append(count / (time.perf_counter() - epoch_start))
    return statistics.median(rates[1:]), first_batch


def _epoch_rates(log: str) -> List[float]:
    """ The train images/s of each epoch line the training command prints, the first epoch left out. """
    rates = [float(m.group(1)) for m in re.finditer(r'^epoch\s+\d+/\d+ .*?\s(\d+) img/s', log, re.M)]
    return rates[1:]


def training_runs(setup: Setup, data: Path, loader: str, device: str, work: Path, count: int) -> List[float]:
    """ Median train images/s (epochs after the first) of each of `count` concurrent training commands. """
    procs = []
    for i in range(count):
        name = f'{loader}-{count}-{i}'
        cmd = [sys.executable, '-m', 'timm_structinit.train', *train_argv(setup, data, loader, work, name, device)]
        procs.append((name, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    rates = []
    for name, proc in procs:
        out, err = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f'training run {name} failed ({proc.returncode}): {err.strip()[-500:]}')
        rates.append(statistics.median(_epoch_rates(out)))
    return rates


def timm_train_py(setup: Setup, data: Path, device: str, work: Path, script: Path) -> float:
    """ timm's own train.py (through `python -m timm_structinit.run`) with the same model, data and options: the
    median over epochs after the first of its last logged rate (batch / average update time). """
    argv = [a for a in train_argv(setup, data, 'timm', work, 'timm-train-py', device)]
    i = argv.index('--loader')
    del argv[i:i + 2]
    cmd = [sys.executable, '-m', 'timm_structinit.run', str(script), *argv, '--num-classes', '10']
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"timm's train.py failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    last = {}
    for line in (done.stdout + done.stderr).splitlines():
        match = re.search(r'Train: (\d+) \[.*\(\d+\.\d+s,\s*([\d.]+)/s\)', line)
        if match:
            last[int(match.group(1))] = float(match.group(2))
    rates = [rate for epoch, rate in sorted(last.items()) if epoch > 0]
    return statistics.median(rates) if rates else float('nan')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--setup', default='cpu', choices=sorted(SETUPS))
    parser.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    parser.add_argument('--data-dir', type=Path, default=SHARED / 'data' / 'cifar10')
    parser.add_argument('--timm-scripts', type=Path, default=Path(os.environ.get('TIMM_SCRIPTS_DIR',
                                                                                 SHARED / 'timm-scripts')))
    parser.add_argument('--steps', type=int, default=20, help='steps of the ceiling measurement')
    parser.add_argument('--compile', action='store_true', help='also measure the ceiling with torch.compile')
    parser.add_argument('--out', default='')
    args = parser.parse_args()
    setup, device = SETUPS[args.setup], torch.device(args.device)
    versions = f'torch {torch.__version__}, timm {timm.__version__}, python {platform.python_version()}'
    name = torch.cuda.get_device_name(device) if device.type == 'cuda' else \
        f'CPU ({os.cpu_count()} cores, {torch.get_num_threads()} torch threads)'
    lines = [f'# command: python {shlex.join(sys.argv)}', f'# date: {datetime.now().isoformat(timespec="seconds")}',
             f'# device: {name}; {versions}', f'# setup: {setup.description}; {setup.model} '
             f'{" ".join(setup.model_kwargs)}; {shlex.join(setup.options)}; {setup.workers} loader workers per run']

    def report(label: str, rate: float, top: float, extra: str = '') -> None:
        lines.append(f'{label:48s} {rate:9.0f} images/s  {rate / top:6.1%} of the ceiling{extra}')
        print(lines[-1], flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = link_subset(args.data_dir, setup.train_images, work / 'data')
        top = ceiling(setup, device, args.steps, False)
        report('ceiling: model step on synthetic batches', top, top)
        if args.compile:
            report('ceiling with torch.compile', ceiling(setup, device, args.steps, True), top)
        for label, loader, persistent in (("timm's loader, workers kept (this package)", 'timm', True),
                                          ("timm's loader, workers restarted each epoch", 'timm', False),
                                          ('device loader', 'device', True)):
            with timm_structinit.patched_timm():  # as the training command runs timm's RandAugment
                rate, first = data_path_alone(setup, data, loader, device, persistent)
            report(f'data path alone: {label}', rate, top, f'  (first batch after {first:.1f} s)')
        for loader in ('timm', 'device'):
            report(f'one training run, --loader {loader}', training_runs(setup, data, loader, args.device, work, 1)[0],
                   top)
        for loader in ('timm', 'device'):
            rates = training_runs(setup, data, loader, args.device, work, 3)
            report(f'three concurrent runs, --loader {loader} (sum)', sum(rates), top,
                   f'  (each {", ".join(f"{r:.0f}" for r in rates)})')
        if (args.timm_scripts / 'train.py').is_file():
            report("timm's train.py, same model, data and options", timm_train_py(
                setup, data, args.device, work, args.timm_scripts / 'train.py'), top)
    if args.out:
        write_lines(args.out, lines)


if __name__ == '__main__':
    main()
