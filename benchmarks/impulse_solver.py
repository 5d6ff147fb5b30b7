""" Reference (authors' 2024 Adam) against the fast impulse solver, on identical targets and seeds.

For one layer of ViT-T (16 x 16 grid, D 192, 3 heads) and of ViT-S (D 384, 6 heads), both solvers get the same
`distinct` 3x3 offsets and the same generator seed, and are timed on the same pseudo input. Printed per solver:
wall time, objective mean((H - A)^2), argmax hit rate over non-empty rows, mean attention mass on the target, and
the norms the cap governs (mean column norm of W_q, mean row norm of W_k, both against nq). The 2025 closed form
is listed for reference; it solves a different, unconstrained problem.

    python benchmarks/impulse_solver.py --out benchmarks/results/impulse_solver.txt
"""
import argparse
import datetime
import platform
import sys
import time

import torch

from timm_structinit.inits.impulse import draw_offsets, impulse_target
from timm_structinit.inits.impulse_solvers import SOLVERS
from timm_structinit.inits.impulse import pseudo_input
from results_file import write_lines

CASES = {'ViT-T': (192, 3), 'ViT-S': (384, 6)}


def run_case(name: str, dim: int, heads: int, args) -> list:
    grid = (args.grid, args.grid)
    x = pseudo_input(grid, dim)
    offsets = draw_offsets(heads, 3, 'distinct', torch.Generator().manual_seed(args.seed))
    targets = torch.stack([impulse_target(grid, o) for o in offsets])
    rows = []
    solvers = [('adam', dict(iters=args.adam_iters)), ('fast', {}), ('svd', {})]
    for solver, options in solvers:
        start = time.perf_counter()
        wq, wk, info = SOLVERS[solver](
            x, targets, dim // heads, heads, torch.Generator().manual_seed(args.seed), **options)
        seconds = time.perf_counter() - start
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
    return (f'{r["case"]:6} {r["solver"]:6} {r["seconds"]:8.3f} {r["objective"]:10.6f} {r["hit_rate"]:6.3f} '
            f'{r["hit_min"]:7.3f} {r["target_mass"]:6.3f} {r["q_col"]:8.4f} {r["q_col_max"]:6.3f} '
            f'{r["k_row"]:8.4f} {r["k_row_max"]:6.3f} {r["nq"]:6.4f}')


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--grid', type=int, default=16)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--adam-iters', type=int, default=10000)
    parser.add_argument('--threads', type=int, default=torch.get_num_threads())
    parser.add_argument('--out', default='', help='also write the report to this file')
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    lines = [
        f'# command: python {" ".join(sys.argv)}',
        f'# date: {datetime.datetime.now().isoformat(timespec="seconds")}',
        f'# machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads, '
        f'torch {torch.__version__}',
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
