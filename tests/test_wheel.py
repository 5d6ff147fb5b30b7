""" What users install: a wheel built from a clean clone of the repository, installed into a fresh virtual environment,
used from an empty folder that is not the repository. A named paper recipe trains one tiny epoch there. """
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from test_torchvision_data import make_food101

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not (REPO / '.git').exists() or shutil.which('git') is None,
                                reason='needs a git checkout of the repository')


def _run(cmd, **kwargs):
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=900, **kwargs)
    assert done.returncode == 0, f'{cmd}\n{done.stdout}\n{done.stderr}'
    return done


@pytest.fixture(scope='module')
def installed(tmp_path_factory):
    """ (the venv's bin folder, the wheel): built from a clean clone of HEAD, installed without the repository. """
    work = tmp_path_factory.mktemp('wheel')
    _run(['git', 'clone', '--quiet', REPO, work / 'clone'])
    # no build isolation: the build backend (setuptools) is the installed one, as on a machine without internet
    _run([sys.executable, '-m', 'pip', 'wheel', '--quiet', '--no-deps', '--no-build-isolation', '-w', work / 'dist',
          work / 'clone'])
    wheel = next((work / 'dist').glob('timm_structinit-*.whl'))
    # the environment's other packages (torch, timm, ...) are the machine's; this package only from the wheel
    _run([sys.executable, '-m', 'venv', '--system-site-packages', work / 'venv'])
    bin_dir = work / 'venv' / 'bin'
    _run([bin_dir / 'python', '-m', 'pip', 'install', '--quiet', '--no-deps', '--no-index', wheel])
    return bin_dir, wheel


def test_the_wheel_holds_the_recipes(installed):
    bin_dir, wheel = installed
    names = zipfile.ZipFile(wheel).namelist()
    packaged = {Path(n).stem for n in names if n.startswith('timm_structinit/recipes/') and n.endswith('.yaml')}
    assert {'digits', 'impulse_vit_tiny_patch2_cifar10', 'impulse2025_vit_tiny_patch16_224_food101'} <= packaged
    assert packaged == {p.stem for p in (REPO / 'timm_structinit' / 'recipes').glob('*.yaml')}
    assert not any(n.startswith(('tests/', 'benchmarks/', 'configs/')) for n in names)


def test_a_named_paper_recipe_trains_from_an_empty_folder(installed, tmp_path):
    bin_dir, _ = installed
    folder = tmp_path / 'empty'
    folder.mkdir()
    env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONPATH='')
    where = _run([bin_dir / 'python', '-c', 'import timm_structinit; print(timm_structinit.__file__)'], cwd=folder,
                 env=env).stdout
    assert str(REPO) not in where and str(bin_dir.parent) in where  # the installed copy, not the repository
    listing = _run([bin_dir / 'timm-structinit', 'recipes'], cwd=folder, env=env).stdout
    assert 'impulse2025_vit_tiny_patch16_224_food101' in listing
    make_food101(tmp_path / 'data')
    done = _run([bin_dir / 'timm-structinit-train', '-c', 'impulse2025_vit_tiny_patch16_224_food101',
                 '--data-dir', tmp_path / 'data', '--model-kwargs', 'img_size=32', 'patch_size=8', 'embed_dim=32',
                 'depth=1', 'num_heads=2', '--input-size', 3, 32, 32, '--epochs', 1, '--warmup-epochs', 0,
                 '--batch-size', 2, '--workers', 0, '--amp-dtype', 'bfloat16', '--experiment', 'tiny'], cwd=folder,
                env=env)
    assert 'final top-1' in done.stdout and 'on 3 test images' in done.stdout
    run = folder / 'output' / 'train' / 'tiny'
    assert (run / 'last.pth.tar').is_file() and (run / 'summary.csv').is_file()
    args = (run / 'args.yaml').read_text()  # the recipe's values, under the flags that overrode them
    assert 'model: vit_tiny_patch16_224_impulse2025' in args and 'dataset: torch/food101' in args
    assert 'lr: 0.002' in args and 'warmup_epochs: 0' in args
