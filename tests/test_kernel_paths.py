""" One seed, one set of weights, on every kernel path: every registered model, and every init on every family it
supports, built from seed 0 in processes that run other CPU kernels, agree with this process's build to the suite's
tolerance (`kernel_path_builds.TOLERANCE`: 1e-4 of each tensor's largest magnitude).

The paths any x86 machine can run, whatever its own: AVX2 kernels for torch and MKL (what an AVX2 machine runs), the
scalar kernels, and MKL's conditional-numerical-reproducibility code path (MKL_CBWR=COMPATIBLE: other blockings and
instruction sequences than its default, as an AVX-512 machine's MKL has). Two registered models are also built at
their own size: ViT-B/16 impulse-3, whose solve takes the most L-BFGS evaluations of them (53), which carry a
kernel's last bits furthest, and ViT-T/2 impulse-5, the most solves (15). """
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import SUBPROCESS_TIMEOUT
from kernel_path_builds import TOLERANCE, build_every_model, largest_difference

TESTS = Path(__file__).resolve().parent
FULL = ['vit_base_patch16_224_impulse3', 'vit_tiny_patch2_32_impulse5']
PATHS = {
    'avx2': dict(MKL_ENABLE_INSTRUCTIONS='AVX2', ATEN_CPU_CAPABILITY='avx2'),
    'scalar': dict(ATEN_CPU_CAPABILITY='default'),
    'mkl-compatible': dict(MKL_CBWR='COMPATIBLE'),
}

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(platform.machine() not in ('x86_64', 'AMD64'), reason='the paths are x86 kernels')]


@pytest.fixture(scope='module')
def here():
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return build_every_model(full=FULL)
    finally:
        torch.set_num_threads(saved)


@pytest.mark.parametrize('path', sorted(PATHS))
def test_builds_on_another_kernel_path_agree(path, here, tmp_path):
    out = tmp_path / 'builds.pt'
    env = {k: v for k, v in os.environ.items() if k not in ('MKL_ENABLE_INSTRUCTIONS', 'ATEN_CPU_CAPABILITY', 'MKL_CBWR')}
    env.update(PATHS[path], OMP_NUM_THREADS='1')
    done = subprocess.run([sys.executable, str(TESTS / 'kernel_path_builds.py'), str(out), '--full', *FULL],
                          env=env, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT)
    assert done.returncode == 0, done.stderr[-2000:]
    there = torch.load(out)
    assert sorted(there) == sorted(here)
    worst = {label: largest_difference(here[label], there[label]) for label in here}
    assert max(worst.values()) <= TOLERANCE, sorted(worst.items(), key=lambda kv: -kv[1])[:3]
