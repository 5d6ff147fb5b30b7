""" What the inits are worth: train every init on the shared real CIFAR-10 at CPU scale, through the project's own
training entry point, and tabulate final and best top-1 against the baseline of the same architecture.

Ten runs: two seeds for the timm-default baseline, mimetic and impulse-3, one for the rest. Scale (stated in every
output): a ViT of width 128, depth 6, 4 heads, patch 4 on 32x32 (an 8 x 8 token grid), a
class-balanced 8,000-image training subset, 15 epochs, evaluated each epoch on a class-balanced 5,000-image subset of
the test split. Why this scale: it is the largest at which ten runs fit in about two hours on 2 CPU cores
(~250 img/s); patch 2 (16 x 16 tokens, as in the papers) costs about 3x more per image, and at width 128 on a 16 x 16
grid the capped impulse solve leaves only ~15% of the attention mass on the target against ~43% on 8 x 8, so the
coarser grid is also where the impulse structure is clearest at this width.

Each finished run writes `runs/<run>/result.json`; a rerun skips runs already done, so the benchmark can be spread
over several sittings. `report` (run automatically at the end) writes `results.md` and `curves.png`.

    python benchmarks/compare_inits.py                      # run what is missing, then report
    python benchmarks/compare_inits.py --only mimetic_s0    # one run
    python benchmarks/compare_inits.py --report-only
"""
import argparse
import csv
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_DATA = REPO.parent / 'shared' / 'data' / 'cifar10'

ARCH = dict(img_size=32, patch_size=4, embed_dim=128, depth=6, num_heads=4)

# init name -> (registered model, extra model kwargs, seeds, baseline of the same architecture)
INITS: Dict[str, tuple] = {
    'timm_default': ('vit_tiny_patch2_32', {}, (0, 1), None),
    'sincos': ('vit_tiny_patch2_32_sincos', {}, (0,), None),
    'gap_sincos': ('vit_tiny_patch2_32_gap_sincos', {}, (0,), None),
    'mimetic': ('vit_tiny_patch2_32_mimetic', {}, (0, 1), 'sincos'),
    'impulse3': ('vit_tiny_patch2_32_impulse3', {}, (0, 1), 'gap_sincos'),
    'impulse5': ('vit_tiny_patch2_32_impulse5', {}, (0,), 'gap_sincos'),
    'impulse2025': ('vit_tiny_patch2_32', {'struct_init': 'impulse2025'}, (0,), 'timm_default'),
}

RECIPE = [
    '--train-split', 'train', '--val-split', 'test', '--train-subset', '8000', '--val-subset', '5000',
    '--epochs', '15', '--batch-size', '128', '--opt', 'adamw', '--lr', '1e-3', '--weight-decay', '0.05',
    '--sched', 'cosine', '--warmup-epochs', '2', '--warmup-lr', '1e-5', '--min-lr', '1e-5',
    '--scale', '0.8', '1.0', '--hflip', '0.5', '--color-jitter', '0', '--smoothing', '0.1',
    '--workers', '1', '--log-interval', '1000',
]


def run_name(init: str, seed: int) -> str:
    return f'{init}_s{seed}'


def all_runs() -> List[tuple]:
    """ Every init's first seed before any second seed, so a partial benchmark already compares them all. """
    runs = [(init, seed) for init, (_, _, seeds, _) in INITS.items() for seed in seeds]
    return sorted(runs, key=lambda run: run[1])


def train_command(init: str, seed: int, data_dir: Path, out: Path) -> List[str]:
    model, extra, _, _ = INITS[init]
    kwargs = {**ARCH, **extra}
    return [
        sys.executable, '-m', 'timm_structinit.train', '--data-dir', str(data_dir), '--model', model,
        '--model-kwargs', *[f'{k}={v}' for k, v in kwargs.items()], '--seed', str(seed),
        '--output', str(out.parent), '--experiment', out.name, *RECIPE,
    ]


def read_summary(path: Path) -> List[dict]:
    with open(path) as f:
        return [{k: float(v) for k, v in row.items() if v not in ('', None)} for row in csv.DictReader(f)]


def do_run(init: str, seed: int, data_dir: Path, runs_dir: Path) -> None:
    name = run_name(init, seed)
    result_file = runs_dir / name / 'result.json'
    if result_file.exists():
        print(f'[skip] {name}: done', flush=True)
        return
    work = runs_dir / f'{name}.partial'
    if work.exists():  # an interrupted run: start it again from scratch
        shutil.rmtree(work)
    command = train_command(init, seed, data_dir, work)
    print(f'[run] {name}: {" ".join(command)}', flush=True)
    start = time.time()
    with open(runs_dir / f'{name}.log', 'w') as log:
        subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                       env={**os.environ, 'PYTHONUNBUFFERED': '1'})
    rows = read_summary(work / 'summary.csv')
    result = dict(
        init=init, seed=seed, model=INITS[init][0], model_kwargs={**ARCH, **INITS[init][1]},
        final_top1=rows[-1]['eval_top1'], best_top1=max(r['eval_top1'] for r in rows), epochs=len(rows),
        curve=[r['eval_top1'] for r in rows], train_loss=[r['train_loss'] for r in rows],
        seconds=round(time.time() - start, 1), command=' '.join(command[1:]),
        date=datetime.datetime.now().isoformat(timespec='seconds'))
    (work / 'result.json').write_text(json.dumps(result, indent=1))
    for ckpt in work.glob('*.pth.tar'):  # keep the record small: curves and results, not weights
        ckpt.unlink()
    work.rename(runs_dir / name)
    print(f'[done] {name}: final {result["final_top1"]:.2f} best {result["best_top1"]:.2f} '
          f'in {result["seconds"] / 60:.1f} min', flush=True)


def _spread(values: List[float]) -> str:
    return f'{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}' if len(values) > 1 else f'{values[0]:.2f}'


def report(out_dir: Path, command: str) -> None:
    runs_dir = out_dir / 'runs'
    results = [json.loads(p.read_text()) for p in sorted(runs_dir.glob('*/result.json'))]
    by_init: Dict[str, List[dict]] = {}
    for r in results:
        by_init.setdefault(r['init'], []).append(r)
    lines = [
        '# Init comparison on real CIFAR-10 (shared JPEG copy), CPU scale',
        '',
        f'- command: `{command}`',
        f'- date of this report: {datetime.datetime.now().isoformat(timespec="seconds")}; '
        f'machine: {platform.machine()}, {os.cpu_count()} CPU cores, no GPU',
        f'- scale: ViT width {ARCH["embed_dim"]}, depth {ARCH["depth"]}, {ARCH["num_heads"]} heads, patch '
        f'{ARCH["patch_size"]} on 32x32 (8 x 8 tokens); class-balanced 8,000 training images; 15 epochs; top-1 on a '
        'class-balanced 5,000-image subset of the test split',
        f'- recipe (same for every init): `{" ".join(RECIPE)}`',
        '- spread: mean ± standard deviation over seeds (one value where one seed ran)',
        '',
        '| init | model | seeds | final top-1 | best top-1 | gap to same-architecture baseline (final) |',
        '|---|---|---|---|---|---|',
    ]
    means = {init: statistics.mean(r['final_top1'] for r in rs) for init, rs in by_init.items()}
    for init, (model, extra, seeds, baseline) in INITS.items():
        rs = by_init.get(init, [])
        if not rs:
            lines.append(f'| {init} | `{model}` | 0/{len(seeds)} | not run yet | | |')
            continue
        finals, bests = [r['final_top1'] for r in rs], [r['best_top1'] for r in rs]
        gap = ''
        if baseline is not None and baseline in means:
            gap = f'{means[init] - means[baseline]:+.2f} vs {baseline}'
        label = f'`{model}`' + (f' + {extra}' if extra else '')
        lines.append(f'| {init} | {label} | {len(rs)}/{len(seeds)} | {_spread(finals)} | {_spread(bests)} | {gap} |')
    (out_dir / 'results.md').write_text('\n'.join(lines) + '\n')
    print('\n'.join(lines))
    if results:
        plot_curves(results, out_dir / 'curves.png')


def plot_curves(results: List[dict], out: Path) -> None:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    colors = dict(zip(INITS, plt.get_cmap('tab10').colors))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    seen = set()
    for r in results:
        label = r['init'] if r['init'] not in seen else None
        seen.add(r['init'])
        ax.plot(range(1, len(r['curve']) + 1), r['curve'], color=colors[r['init']], label=label,
                linestyle='-' if r['seed'] == 0 else '--')
    ax.set_xlabel('epoch'), ax.set_ylabel('test top-1 (%)')
    ax.set_title('CIFAR-10, 8k train images, ViT 128/6/4 patch 4 (dashed: seed 1)')
    ax.grid(alpha=0.3), ax.legend(fontsize=8)
    fig.tight_layout()
    tmp = out.with_name(f'.{out.name}.tmp.png')
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(out)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--data-dir', type=Path, default=DEFAULT_DATA)
    parser.add_argument('--out-dir', type=Path, default=HERE / 'results' / 'compare_inits')
    parser.add_argument('--only', nargs='*', default=None, help='run names (e.g. mimetic_s0) or init names')
    parser.add_argument('--report-only', action='store_true')
    args = parser.parse_args(argv)
    command = 'python benchmarks/compare_inits.py' + (f' --only {" ".join(args.only)}' if args.only else '')
    runs_dir = args.out_dir / 'runs'
    runs_dir.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        if not (args.data_dir / 'train').is_dir():
            sys.exit(f'no CIFAR-10 ImageFolder at {args.data_dir}; pass --data-dir')
        for init, seed in all_runs():
            if args.only and run_name(init, seed) not in args.only and init not in args.only:
                continue
            do_run(init, seed, args.data_dir, runs_dir)
    report(args.out_dir, command)


if __name__ == '__main__':
    main()
