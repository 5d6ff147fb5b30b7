""" How close `timm-structinit compare`'s first estimate of a run's time comes to what its runs take: each case runs
the command as a user would, into a fresh folder, and holds every run's time (`result.json`) against the estimate
the command made for its arm before any run had started (`compare.json`'s `estimated_seconds`). The machine's load
average is sampled while the runs train, as the runs share the machine with whatever else runs there.

Cases: `digits`, the package's digits recipe as compare runs it (`-c digits`: 30 epochs of the 1,347 bundled digits,
workers 0, width 64, depth 4 on 16 px), one seed per arm, one run at a time; `cifar`, a 1,000-image class-balanced
subset of CIFAR-10 as JPEGs (an ImageFolder: decoded and augmented in timm's loader workers), 4 epochs of a width-64,
depth-4, patch-4 ViT, two seeds per arm, two runs at a time (three full pairs: the estimate is of a run with the
others `--concurrent` trains beside it; a run left alone in a last, partial pair takes less).

    nice -n 10 python benchmarks/compare_estimate.py --data-dir ../shared/data/cifar10 \
        --out benchmarks/results/compare_estimate.txt
"""
import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Dict, List

from results_file import Report

REPO = Path(__file__).resolve().parents[1]
TOLERANCE = 1.5  # the estimate is within this factor of every run's time, either way


def case_commands(data_dir: str) -> Dict[str, List[str]]:
    return {
        'digits': ['-c', 'digits', '--seeds', '1', '--device', 'cpu'],
        'cifar': ['--dataset', '', '--data-dir', data_dir, '--val-split', 'test', '--train-subset', '1000',
                  '--val-subset', '500', '--epochs', '4', '-b', '64', '--opt', 'adamw', '--lr', '1e-3',
                  '--warmup-epochs', '1', '--model-kwargs', 'embed_dim=64', 'depth=4', 'num_heads=4', 'patch_size=4',
                  '--seeds', '2', '--concurrent', '2', '--device', 'cpu'],
    }


class LoadSampler:
    """ The 1-minute load average every `every` seconds while it runs. """

    def __init__(self, every: float = 15.0) -> None:
        self.samples: List[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every,), daemon=True)

    def _run(self, every: float) -> None:
        while not self._stop.wait(every if self.samples else 0):
            self.samples.append(os.getloadavg()[0])

    def __enter__(self) -> 'LoadSampler':
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join()


def run_case(name: str, options: List[str], work: Path, report: Report) -> bool:
    out = work / name
    if out.exists():
        shutil.rmtree(out)
    command = ['timm-structinit', 'compare', '--out', str(out), *options]
    report.add('', f'## {name}', f'command: {shlex.join(command)}')
    start = time.time()
    with LoadSampler() as load:
        done = subprocess.run([sys.executable, '-m', 'timm_structinit.cli', *command[1:]], capture_output=True,
                              text=True)
    header = [line for line in done.stdout.splitlines()[:3]]
    report.add(*[f'  {line}' for line in header],
               f'exit status {done.returncode}; {(time.time() - start) / 60:.1f} min in all; load average (1 min) '
               f'while it ran: median {sorted(load.samples)[len(load.samples) // 2]:.2f}, range '
               f'{min(load.samples):.2f}-{max(load.samples):.2f} over {len(load.samples)} samples')
    if done.returncode != 0:
        report.add(*[f'  {line}' for line in done.stderr.splitlines()[-5:]])
        return False
    estimated = json.loads((out / 'compare.json').read_text())['estimated_seconds']
    report.add(f'{"run":16s} {"estimate s":>10s} {"real s":>8s} {"real / estimate":>16s}')
    within = True
    for path in sorted((out / 'runs').glob('*/result.json')):
        result = json.loads(path.read_text())
        ratio = result['seconds'] / estimated[result['arm']]
        within &= 1 / TOLERANCE <= ratio <= TOLERANCE
        report.add(f'{path.parent.name:16s} {estimated[result["arm"]]:10.1f} {result["seconds"]:8.1f} {ratio:16.2f}')
    return within


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--data-dir', default=str(REPO.parent / 'shared' / 'data' / 'cifar10'),
                        help='CIFAR-10 as an ImageFolder of JPEGs (train/, test/)')
    parser.add_argument('--cases', nargs='+', default=['digits', 'cifar'], choices=['digits', 'cifar'])
    parser.add_argument('--work-dir', default='output/compare_estimate', help='folder of the comparisons it runs')
    parser.add_argument('--out', help='result file')
    args = parser.parse_args()
    import timm
    import torch
    report = Report([
        f'# command: python benchmarks/compare_estimate.py {shlex.join(sys.argv[1:])}',
        f'# date: {datetime.now().isoformat(timespec="seconds")}',
        f'# machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, timm {timm.__version__}, '
        f'niceness {os.nice(0)}',
        f'# real / estimate: each run\'s time (result.json) over its arm\'s first estimate (compare.json); within '
        f'{TOLERANCE}x either way is the target'])
    commands = case_commands(args.data_dir)
    within = [run_case(name, commands[name], Path(args.work_dir), report) for name in args.cases]
    report.add('', f'every run within {TOLERANCE}x of its estimate: {"yes" if all(within) else "no"}')
    report.write(args.out)
    return 0 if all(within) else 1


if __name__ == '__main__':
    sys.exit(main())
