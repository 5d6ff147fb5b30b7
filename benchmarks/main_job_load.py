""" The README's main job (`timm-structinit-train -c digits`) with the cores to itself and beside one CPU-bound busy
loop this script starts, at the command's default settings (it chooses its own thread count), and for reference
at each thread count fixed with `--threads`.

Each run is the command as a user starts it: a fresh process, `--epochs 3` (the recipe's 30 take ten times as
long, at the same rate per epoch), output into a temporary folder, timed by the wall clock from start to exit, its
start-up included. A round runs every variant alone ("idle") and beside the busy loop ("busy"; the loop starts a
second before the run and ends with it), in alternating order from round to round, so that a drift of the machine
falls on all alike; the medians over rounds are compared. What the runs measure holds only on a machine with
nothing else on its cores: before each run the script samples, for a second, how much of the cores other programs
use (from /proc/stat; the busy loop is not running then), prints it beside the run, and marks a run started above
`--max-other` cores; the load average at the start and at the end is in the header and the last line.

    python benchmarks/main_job_load.py --out benchmarks/results/main_job_load.txt
"""
import argparse
import csv
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from results_file import Report

REPO = Path(__file__).resolve().parents[1]
BUSY_LOOP = 'while True: pass'


def _cpu_times():
    """ (busy, total) jiffies of all the cores, from the first line of /proc/stat. """
    fields = [int(v) for v in Path('/proc/stat').read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
    return sum(fields) - idle, sum(fields)


def other_load(seconds: float = 1.0) -> float:
    """ The cores that other programs keep busy now: the machine's busy share over `seconds`, times its cores (this
    script sleeps meanwhile and nothing of it runs). """
    busy0, total0 = _cpu_times()
    time.sleep(seconds)
    busy1, total1 = _cpu_times()
    return (busy1 - busy0) / max(1, total1 - total0) * (os.cpu_count() or 1)


def load_average() -> str:
    return ' '.join(Path('/proc/loadavg').read_text().split()[:3])


def run_job(variant: str, busy: bool, epochs: int, env: dict) -> dict:
    """ One run of the main job; its wall seconds, the threads it trained with (summary.csv) and its threads line. """
    threads = [] if variant == 'default' else ['--threads', variant.split()[-1]]
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, '-m', 'timm_structinit.train', '-c', 'digits', '--epochs', str(epochs),
                   '--output', folder, '--experiment', 'run', *threads]
        others = other_load()
        loop = subprocess.Popen([sys.executable, '-c', BUSY_LOOP]) if busy else None
        try:
            if loop is not None:
                time.sleep(1.0)  # the loop is running before the run starts
            start = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, env=env)
            seconds = time.perf_counter() - start
        finally:
            if loop is not None:
                loop.kill()
                loop.wait()
        if done.returncode:
            raise SystemExit(f'{shlex.join(command)} failed:\n{done.stdout}{done.stderr}')
        with open(Path(folder) / 'run' / 'summary.csv', newline='') as f:
            used = sorted({int(float(r['train_threads'])) for r in csv.DictReader(f)})
    line = next((m.group(0) for m in re.finditer(r'^Threads: .*$', done.stdout, re.M)), '')
    return dict(seconds=seconds, threads=used, line=line, others=others)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--epochs', type=int, default=3)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--threads', type=int, nargs='*', default=None,
                        help='the fixed counts run for reference (default: the cores, then 1); none: default only')
    parser.add_argument('--max-other', type=float, default=0.3,
                        help='cores other programs may keep busy before a run without it being marked')
    parser.add_argument('--out', default='')
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()
    fixed = [cores, 1] if args.threads is None else args.threads
    variants = ['default', *[f'--threads {n}' for n in dict.fromkeys(fixed)]]
    env = {k: v for k, v in os.environ.items() if k not in ('OMP_NUM_THREADS', 'MKL_NUM_THREADS')}
    env['PYTHONPATH'] = os.pathsep.join(filter(None, [str(REPO), env.get('PYTHONPATH', '')]))
    import timm
    import torch
    import yaml
    commit = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=REPO, capture_output=True,
                            text=True).stdout.strip() or 'unknown'
    recipe = yaml.safe_load((REPO / 'timm_structinit' / 'recipes' / 'digits.yaml').read_text())
    shortened = f', shortened from {recipe["epochs"]} epochs' if args.epochs < recipe['epochs'] else ''
    report = Report([
        f'# command: python {shlex.join(sys.argv)}',
        f'# date: {datetime.now().isoformat(timespec="seconds")}; {platform.machine()}, {cores} usable cores; torch '
        f'{torch.__version__}, timm {timm.__version__}; package {commit}; load average at the start: '
        f'{load_average()}',
        f'# timm-structinit-train -c digits --epochs {args.epochs} (the README\'s main job{shortened}), a fresh '
        f'process per run, wall seconds from start to exit; busy: beside one `python -c "{BUSY_LOOP}"` started 1 s '
        f'before it; others: cores other programs used in the second before the run (* above {args.max_other})'])
    runs = {(v, b): [] for v in variants for b in (False, True)}
    for round_ in range(args.rounds):
        order = [(v, b) for v in variants for b in (False, True)]
        for variant, busy in (order if round_ % 2 == 0 else order[::-1]):
            run = run_job(variant, busy, args.epochs, env)
            runs[variant, busy].append(run)
            mark = '*' if run['others'] > args.max_other else ' '
            report.add(f'round {round_ + 1} {variant:<12s} {"busy" if busy else "idle"}  {run["seconds"]:6.1f} s  '
                       f'threads {"/".join(map(str, run["threads"]))}  others {run["others"]:.2f}{mark}  '
                       f'{run["line"]}')
    report.add('', '# medians over rounds (seconds)')
    medians = {key: statistics.median(r['seconds'] for r in rs) for key, rs in runs.items()}
    for variant in variants:
        idle, busy = medians[variant, False], medians[variant, True]
        report.add(f'{variant:<12s} idle {idle:6.1f} s  busy {busy:6.1f} s  busy/idle {busy / idle:.2f}')
    default_idle, default_busy = medians['default', False], medians['default', True]
    report.add(f'default: busy/idle {default_busy / default_idle:.2f} (target: at most 1.5)')
    if f'--threads {cores}' in variants:
        report.add(f'default idle / --threads {cores} idle (torch\'s own count, the command\'s default before it '
                   f'chose): {default_idle / medians[f"--threads {cores}", False]:.2f}')
    marked = sum(r['others'] > args.max_other for rs in runs.values() for r in rs)
    report.add(f'# {marked} of {sum(map(len, runs.values()))} runs started with other programs above '
               f'{args.max_other} cores; load average at the end: {load_average()}')
    report.write(args.out)


if __name__ == '__main__':
    main()
