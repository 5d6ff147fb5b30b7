""" Do the same seeds build the same weights on other CPU kernels? Every registered model at its own size, and every
init on every family it supports (`apply_init` on a small model of the family), built from seed 0 in a process per
kernel path, compared with this machine's default build: per model, the largest difference of any tensor divided by
that tensor's largest magnitude (the suite's tolerance is 1e-4: `tests/kernel_path_builds.py`).

    python benchmarks/kernel_paths.py --out benchmarks/results/kernel_paths.txt

The paths any x86 machine can run: its default kernels; AVX2 for torch and MKL (MKL_ENABLE_INSTRUCTIONS=AVX2
ATEN_CPU_CAPABILITY=avx2, what an AVX2 machine runs); torch's scalar kernels (ATEN_CPU_CAPABILITY=default); MKL's
conditional-numerical-reproducibility code path (MKL_CBWR=COMPATIBLE). The same comparison at the small sizes is
`tests/test_kernel_paths.py`.
"""
import argparse
import datetime
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import timm
import torch

import timm_structinit
from results_file import Report

TESTS = Path(__file__).resolve().parents[1] / 'tests'
sys.path.insert(0, str(TESTS))
from kernel_path_builds import TOLERANCE, largest_difference  # noqa: E402

PATHS = {
    'default': {},
    'avx2': dict(MKL_ENABLE_INSTRUCTIONS='AVX2', ATEN_CPU_CAPABILITY='avx2'),
    'scalar': dict(ATEN_CPU_CAPABILITY='default'),
    'mkl-compatible': dict(MKL_CBWR='COMPATIBLE'),
}


def build(path: str, out: Path) -> str:
    """ Every model in a process on kernel path `path` (models at their own size: --full with every registered
    one); returns the CPU capability torch chose there. """
    env = {k: v for k, v in os.environ.items() if k not in ('MKL_ENABLE_INSTRUCTIONS', 'ATEN_CPU_CAPABILITY', 'MKL_CBWR')}
    env.update(PATHS[path], OMP_NUM_THREADS='1')
    done = subprocess.run([sys.executable, str(TESTS / 'kernel_path_builds.py'), str(out), '--full',
                           *timm_structinit.list_models()], env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip().splitlines()[-1]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--out', default='')
    args = parser.parse_args(argv)
    report = Report([f'# command: python {" ".join(sys.argv)}',
                     f'# date: {datetime.date.today()}; machine: {platform.machine()}, {platform.processor() or "cpu"}, '
                     f'torch {torch.__version__}, timm {timm.__version__}, timm-structinit {timm_structinit.__version__}',
                     f'# each cell: max over tensors of max|default - path| / max|default|; tolerance {TOLERANCE:g}'])
    with tempfile.TemporaryDirectory() as tmp:
        builds, capability = {}, {}
        for path in PATHS:
            capability[path] = build(path, Path(tmp) / f'{path}.pt')
            builds[path] = torch.load(Path(tmp) / f'{path}.pt')
    others = [p for p in PATHS if p != 'default']
    report.add(f'# torch kernels chosen: ' + ', '.join(f'{p} {capability[p]}' for p in PATHS), '')
    report.add(f'{"model":58}' + ''.join(f'{p:>16}' for p in others))
    worst = 0.0
    for label in sorted(builds['default']):
        cells = [largest_difference(builds['default'][label], builds[p][label]) for p in others]
        worst = max(worst, *cells)
        report.add(f'{label:58}' + ''.join(f'{c:16.2e}' for c in cells))
    report.add('', f'# largest: {worst:.2e} ({"within" if worst <= TOLERANCE else "ABOVE"} the tolerance {TOLERANCE:g}) '
                   f'over {len(builds["default"])} builds and {len(others)} other paths')
    report.write(args.out)


if __name__ == '__main__':
    main()
