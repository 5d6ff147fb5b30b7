""" timm's own model tests pass on the package's models, as they do on timm's.

timm 1.0.31's `tests/test_models.py`, unmodified, from `../shared/timm-tests/` beside the repository (timm's source
distribution; its wheel does not ship the tests): run by pytest in a child process that loads `timm_structinit` as a
plugin (`-p timm_structinit`), so the file parametrizes over the package's registered models exactly as over timm's,
selected with `-k`. Skipped when that folder is absent.

The project's suite runs one model of each class and position table, as all 26 take about as long as the rest of the
suite on 2 CPU cores: the ViT with its fixed sin-cos table and a class token (mimetic) or average pooling (impulse),
the Swin Transformer and the MLP-Mixer. The other registered models differ from these only in width, depth, heads,
input size or init hyperparameters, or keep timm's own learned table (the 2025 models). `TIMM_MODEL_TESTS=all` runs
all 26.
"""
import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

import timm_structinit

pytestmark = pytest.mark.slow  # timm's own model tests in a subprocess: minutes
REPO = Path(__file__).resolve().parents[1]
TIMM_TESTS = REPO.parent / 'shared' / 'timm-tests' / 'test_models.py'
REPRESENTATIVE = ['vit_tiny_patch2_32_mimetic', 'vit_tiny_patch2_32_impulse3', 'swin_tiny_patch2_window4_32_impulse3',
                  'mixer_s4_32_impulse3']
# the tests that failed on the package's models before its fixed tables became buffers and its Swin cfgs got pool_size
ONCE_FAILING = {('test_model_backward', 'vit_tiny_patch2_32_mimetic'),
                ('test_model_backward', 'vit_tiny_patch2_32_impulse3'),
                ('test_model_backward_fx', 'vit_tiny_patch2_32_mimetic'),
                ('test_model_default_cfgs', 'swin_tiny_patch2_window4_32_impulse3')}


def _selected() -> list:
    models = timm_structinit.list_models() if os.environ.get('TIMM_MODEL_TESTS') == 'all' else REPRESENTATIVE
    # -k matches substrings: no selected name may be part of a name that is not selected
    others = set(timm_structinit.list_models()) - set(models)
    assert not [m for m in models for o in others if m in o], 'a selected name is part of another model\'s name'
    return models


@pytest.mark.skipif(not TIMM_TESTS.is_file(), reason=f"timm's model tests (timm 1.0.31 tests/test_models.py) are not "
                                                      f'at {TIMM_TESTS}')
def test_timms_model_tests_pass_on_the_package_models(tmp_path):
    models = _selected()
    report = tmp_path / 'report.xml'
    # one thread: the child shares the machine with the suite's other worker process
    env = dict(os.environ, OMP_NUM_THREADS='1',
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get('PYTHONPATH')])))
    argv = [sys.executable, '-m', 'pytest', str(TIMM_TESTS), '-p', 'timm_structinit', '-p', 'no:cacheprovider',
            '--rootdir', str(tmp_path), '-q', '-rfE', '-k', ' or '.join(models), '--junitxml', str(report),
            '-W', 'ignore::pytest.PytestUnknownMarkWarning']
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]

    ran = {}  # (test, model) -> outcome
    for case in ElementTree.parse(report).iter('testcase'):
        test, _, params = case.get('name').partition('[')  # e.g. test_model_backward[2-vit_tiny_patch2_32_mimetic]
        model, = set(params.rstrip(']').split('-')) & set(models)
        outcome = 'skipped' if case.find('skipped') is not None else 'passed'
        ran[test, model] = outcome
    # every selected model went through timm's forward, backward and config tests, and nothing else was collected
    for model in models:
        for test in ('test_model_forward', 'test_model_backward', 'test_model_forward_torchscript'):
            assert ran.get((test, model)) == 'passed', (test, model)
    assert {m for _, m in ran} == set(models)
    assert all(ran[case] == 'passed' for case in ONCE_FAILING if case[1] in models)
