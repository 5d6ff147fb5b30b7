""" Reference (authors' 2024 Adam) against the fast impulse solver, on identical targets and seeds; and how the
impulse init's time and memory grow with the token grid.

For one layer of ViT-T (16 x 16 grid, D 192, 3 heads) and of ViT-S (D 384, 6 heads), both solvers get the same
`distinct` 3x3 offsets and the same generator seed, and are timed on the same pseudo input, on the same number of
threads (1 by default: the reference is thousands of small operations, which a loaded machine slows down far more
at 2 threads than at 1). Printed per solver: wall time, objective mean((H - A)^2), argmax hit rate over non-empty
rows, mean attention mass on the target, and the norms the cap governs (mean column norm of W_q, mean row norm of
W_k, both against nq). The 2025 closed form is listed for reference; it solves a different, unconstrained problem.

    python benchmarks/impulse_solver.py --out benchmarks/results/impulse_solver.txt

`--scaling 8 16 32 64` instead times `apply_init(model, 'impulse')` on `vit_tiny_patch2_32_impulse3` built for grids
of 8 x 8 to 64 x 64 tokens (img_size 16 to 128), and one forward pass of the same model's first attention layer over
its own grid (batch 1), each in --processes fresh processes that report their time (median of --repeats) and their
peak memory above what the process held before (Linux: the peak resident set, reset before the first run); the table
holds the medians over the processes, and the init's memory again with glibc's mmap threshold fixed (`init MB*`:
what the init asks the allocator for, without the freed pieces of the maps glibc may keep). The exponents say how each
grows with the token count N (p = 2: as N^2, the N x N maps; p = 1: as N):

    python benchmarks/impulse_solver.py --scaling 8 16 32 64 --out benchmarks/results/impulse_scaling.txt
"""
import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

import torch

from timm_structinit.inits.impulse import draw_offsets, impulse_target
from timm_structinit.inits.impulse_solvers import SOLVERS
from timm_structinit.inits.impulse import pseudo_input
from results_file import write_lines

# glibc's mmap threshold held at its default starting value (128 KiB) instead of rising with every freed block
FIXED_MMAP = {'MALLOC_MMAP_THRESHOLD_': '131072'}

CASES = {'ViT-T': (192, 3), 'ViT-S': (384, 6)}


def run_case(name: str, dim: int, heads: int, args) -> list:
    grid = (args.grid, args.grid)
    x = pseudo_input(grid, dim)
    offsets = draw_offsets(heads, 3, 'distinct', torch.Generator().manual_seed(args.seed))
    targets = torch.stack([impulse_target(grid, o) for o in offsets])
    rows = []
    solvers = [('adam', dict(iters=args.adam_iters)), ('fast', {}), ('svd', {})]
    for solver, options in solvers:
        times = []
        for _ in range(1 if solver == 'adam' else 5):  # the fast ones: the median of 5 (the same weights each time)
            start = time.perf_counter()
            wq, wk, info = SOLVERS[solver](
                x, targets, dim // heads, heads, torch.Generator().manual_seed(args.seed), **options)
            times.append(time.perf_counter() - start)
        seconds = statistics.median(times)
        nq = info.get('nq')
        nq = sum(nq) / len(nq) if isinstance(nq, list) else float('nan')
        rows.append(dict(
            case=name, solver=solver, seconds=seconds, objective=info['objective'].mean().item(),
            hit_rate=info['hit_rate'].mean().item(), hit_min=info['hit_rate'].min().item(),
            target_mass=info['target_mass'].mean().item(), q_col=wq.norm(dim=-2).mean().item(),
            k_row=wk.norm(dim=-1).mean().item(), q_col_max=wq.norm(dim=-2).max().item(),
            k_row_max=wk.norm(dim=-1).max().item(), nq=nq, offsets=offsets))
        print(format_row(rows[-1]), flush=True)
    return rows


HEADER = (f'{"case":6} {"solver":6} {"time s":>8} {"objective":>10} {"hit":>6} {"hit min":>7} {"mass":>6} '
          f'{"|q col|":>8} {"max":>6} {"|k row|":>8} {"max":>6} {"nq":>6}')


def format_row(r: dict) -> str:
    return (f'{r["case"]:6} {r["solver"]:6} {r["seconds"]:8.4f} {r["objective"]:10.6f} {r["hit_rate"]:6.3f} '
            f'{r["hit_min"]:7.3f} {r["target_mass"]:6.3f} {r["q_col"]:8.4f} {r["q_col_max"]:6.3f} '
            f'{r["k_row"]:8.4f} {r["k_row_max"]:6.3f} {r["nq"]:6.4f}')


def _memory_status(key: str) -> int:
    with open('/proc/self/status') as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith(key))


def measure(kind: str, side: int, repeats: int) -> dict:
    """ In this process: seconds (median) and peak bytes above the start of one impulse init (`kind='init'`) or one
    forward pass of the first attention layer (`kind='attention'`) of vit_tiny_patch2_32_impulse3 on a side x side
    grid, on one thread. """
    import timm
    import timm_structinit
    torch.set_num_threads(1)
    model = timm.create_model('vit_tiny_patch2_32_impulse3', img_size=2 * side, weight_init='skip')
    tokens = torch.randn(1, side * side, model.embed_dim, generator=torch.Generator().manual_seed(0))
    if kind == 'init':
        run = lambda: timm_structinit.apply_init(model, 'impulse', seed=0, kernel_size=3)  # noqa: E731
    else:
        attn = model.blocks[0].attn.eval()
        run = lambda: attn(tokens)  # noqa: E731
    with torch.no_grad():
        with open('/proc/self/clear_refs', 'w') as refs:
            refs.write('5')  # reset the peak resident set to the current one
        before = _memory_status('VmRSS')
        run()  # the first run, on memory nothing has used yet: its peak
        peak = _memory_status('VmHWM') - before
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
    return {'seconds': statistics.median(times), 'peak_bytes': max(peak, 0)}


def scaling(args) -> list:
    lines = [f'# vit_tiny_patch2_32_impulse3 (D 192, 3 heads, 12 layers, 3x3 offsets): the impulse init (apply_init) '
             f'and one forward pass of its first attention layer, batch 1, each in {args.processes} fresh processes on 1 '
             f'thread, each timing the median of {args.repeats} runs after a first run whose peak resident memory above '
             f'the start it reports; the medians over the processes. init MB*: the same with glibc\'s mmap threshold '
             f'fixed ({FIXED_MMAP}), which keeps the allocator from holding on to freed 1 MB pieces of the maps, so it '
             f'is the memory the init asks for; with the default dynamic threshold the peak varies from process to '
             f'process by up to ~300 MB at 64 x 64',
             f'{"grid":>7} {"N":>5} {"init s":>8} {"init MB":>8} {"init MB*":>8} {"attn ms":>8} {"attn MB":>8} '
             f'{"init/attn":>9} {"init ns/N^2":>11}']
    print('\n'.join(lines), flush=True)
    results = []
    for side in args.scaling:
        row = {'side': side, 'tokens': side * side}
        for kind, env in (('init', {}), ('attention', {}), ('init_fixed', FIXED_MMAP)):
            runs = []
            for _ in range(args.processes):
                out = subprocess.run(
                    [sys.executable, __file__, '--measure', kind.split('_')[0], str(side), '--repeats', str(args.repeats)],
                    check=True, capture_output=True, text=True, env={**os.environ, **env}).stdout
                runs.append(json.loads(out.strip().splitlines()[-1]))
            row[kind] = {key: statistics.median(run[key] for run in runs) for key in ('seconds', 'peak_bytes')}
        results.append(row)
        n2 = float(row['tokens']) ** 2
        lines.append(f'{side:>3} x {side:<3} {row["tokens"]:>5} {row["init"]["seconds"]:8.3f} '
                     f'{row["init"]["peak_bytes"] / 1e6:8.1f} {row["init_fixed"]["peak_bytes"] / 1e6:8.1f} '
                     f'{row["attention"]["seconds"] * 1e3:8.2f} '
                     f'{row["attention"]["peak_bytes"] / 1e6:8.1f} '
                     f'{row["init"]["seconds"] / row["attention"]["seconds"]:9.0f} {row["init"]["seconds"] / n2 * 1e9:11.1f}')
        print(lines[-1], flush=True)
    for a, b in zip(results, results[1:]):
        tokens = math.log(b['tokens'] / a['tokens'])
        exponent = {f'{kind} {what}': math.log(max(b[kind][key], floor) / max(a[kind][key], floor)) / tokens
                    for kind in ('init', 'init_fixed', 'attention')
                    for what, key, floor in (('time', 'seconds', 1e-9), ('memory', 'peak_bytes', 2 ** 20))
                    if not (kind == 'init_fixed' and what == 'time')}
        lines.append(f'# {a["side"]}x{a["side"]} -> {b["side"]}x{b["side"]} (N x{b["tokens"] / a["tokens"]:.0f}, N^2 '
                     f'x{(b["tokens"] / a["tokens"]) ** 2:.0f}): grows as N^p with p = '
                     + ', '.join(f'{k} {v:.2f}' for k, v in exponent.items()) + ' (memory under 1 MB counted as 1 MB)')
        print(lines[-1], flush=True)
    return lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--grid', type=int, default=16)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--adam-iters', type=int, default=10000)
    parser.add_argument('--threads', type=int, default=1)
    parser.add_argument('--scaling', type=int, nargs='*', default=None, help='grid sides: time and memory vs the grid')
    parser.add_argument('--repeats', type=int, default=3, help='--scaling: timed runs per measurement')
    parser.add_argument('--processes', type=int, default=3, help='--scaling: fresh processes per measurement')
    parser.add_argument('--measure', nargs=2, default=None, help=argparse.SUPPRESS)
    parser.add_argument('--out', default='', help='also write the report to this file')
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure[0], int(args.measure[1]), args.repeats)))
        return
    torch.set_num_threads(args.threads)
    lines = [
        f'# command: python {" ".join(sys.argv)}',
        f'# date: {datetime.datetime.now().isoformat(timespec="seconds")}',
        f'# machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads, '
        f'torch {torch.__version__}',
    ]
    if args.scaling:
        print('\n'.join(lines), flush=True)
        lines += scaling(args)
        if args.out:
            write_lines(args.out, lines)
        return
    lines += [
        f'# grid {args.grid}x{args.grid}, 3x3 distinct offsets, seed {args.seed}, adam iters {args.adam_iters}',
        HEADER,
    ]
    print('\n'.join(lines), flush=True)
    rows = []
    for name, (dim, heads) in CASES.items():
        rows += run_case(name, dim, heads, args)
        lines += [format_row(r) for r in rows[-3:]]
        lines.append(f'# {name} offsets {rows[-1]["offsets"]}')
    for name in CASES:
        ref = next(r for r in rows if r['case'] == name and r['solver'] == 'adam')
        fast = next(r for r in rows if r['case'] == name and r['solver'] == 'fast')
        verdict = (
            f'# {name}: fast/adam speed-up {ref["seconds"] / fast["seconds"]:.0f}x, objective '
            f'{fast["objective"]:.6f} vs {ref["objective"]:.6f} '
            f'({"no worse" if fast["objective"] <= ref["objective"] else "WORSE"}), hit rate '
            f'{fast["hit_rate"]:.3f} vs {ref["hit_rate"]:.3f} '
            f'({"no lower" if fast["hit_rate"] >= ref["hit_rate"] else "LOWER"})')
        print(verdict)
        lines.append(verdict)
    if args.out:
        write_lines(args.out, lines)


if __name__ == '__main__':
    main()
