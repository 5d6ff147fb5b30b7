""" What users install: a wheel built from a clean clone of the repository, installed into a fresh virtual environment,
used from an empty folder that is not the repository. A named paper recipe trains one tiny epoch there. """
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from test_torchvision_data import make_food101

REPO = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow,  # a clone, a wheel build and a fresh venv: a minute
              pytest.mark.skipif(not (REPO / '.git').exists() or shutil.which('git') is None,
                                 reason='needs a git checkout of the repository')]


def _build_isolation() -> list:
    """ pip's flag to build with the installed setuptools when it is recent enough for pyproject.toml (so no
    internet is needed), else none: pip then fetches the build requirement, as `pip install` does for users (a fresh
    venv has an older setuptools, or none). """
    floor = re.search(r'"setuptools>=(\d+)', (REPO / 'pyproject.toml').read_text())
    try:
        installed = int(importlib.metadata.version('setuptools').split('.')[0])
    except importlib.metadata.PackageNotFoundError:
        return []
    return ['--no-build-isolation'] if floor and installed >= int(floor.group(1)) else []


def see_packages_of_this_interpreter(python: Path) -> None:
    """ Make the venv of `python` see the packages of the interpreter running the tests. `venv
    --system-site-packages` shows only the base interpreter's, which inside a virtual environment (where users
    install) have neither torch nor Pillow: a .pth file in the new venv lists this interpreter's package folders, after
    the venv's own, so the wheel installed there comes first. """
    site_packages = Path(_run([python, '-c', 'import sysconfig; print(sysconfig.get_path("purelib"))']).stdout.strip())
    ours = [p for p in sys.path if Path(p).name in ('site-packages', 'dist-packages') and Path(p).is_dir()]
    (site_packages / 'interpreter-running-the-tests.pth').write_text(''.join(f'{p}\n' for p in ours))


def _run(cmd, **kwargs):
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=900, **kwargs)
    assert done.returncode == 0, f'{cmd}\n{done.stdout}\n{done.stderr}'
    return done


@pytest.fixture(scope='module')
def installed(tmp_path_factory):
    """ (the venv's bin folder, the wheel): built from a clean clone of HEAD, installed without the repository. """
    work = tmp_path_factory.mktemp('wheel')
    _run(['git', 'clone', '--quiet', REPO, work / 'clone'])
    _run([sys.executable, '-m', 'pip', 'wheel', '--quiet', '--no-deps', *_build_isolation(), '-w', work / 'dist',
          work / 'clone'])
    wheel = next((work / 'dist').glob('timm_structinit-*.whl'))
    # the environment's other packages (torch, timm, ...) are those of the interpreter running the tests; this
    # package only from the wheel
    _run([sys.executable, '-m', 'venv', '--system-site-packages', work / 'venv'])
    bin_dir = work / 'venv' / 'bin'
    see_packages_of_this_interpreter(bin_dir / 'python')
    # without the caller's PYTHONPATH: a source tree on it (its egg-info) would count as this package installed
    _run([bin_dir / 'python', '-m', 'pip', 'install', '--quiet', '--no-deps', '--no-index', wheel],
         env=dict(os.environ, PYTHONPATH=''))
    return bin_dir, wheel


def test_the_wheel_holds_the_license_and_the_typing_marker(installed):
    _, wheel = installed
    names = zipfile.ZipFile(wheel).namelist()
    licenses = [n for n in names if n.endswith('/licenses/LICENSE')]
    assert licenses and 'timm_structinit/py.typed' in names
    text = zipfile.ZipFile(wheel).read(licenses[0]).decode()
    assert 'Apache License' in text and 'Version 2.0, January 2004' in text and 'END OF TERMS AND CONDITIONS' in text
    # the commands' light package, where the console scripts parse their arguments before torch is imported
    assert 'timm_structinit_cli/entry.py' in names and 'timm_structinit_cli/train_parser.py' in names
    scripts = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith('.dist-info/entry_points.txt'))).decode()
    assert 'timm-structinit = timm_structinit_cli.entry:structinit' in scripts
    assert 'timm-structinit-train = timm_structinit_cli.entry:train' in scripts
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith('.dist-info/METADATA'))).decode()
    assert 'License-Expression: Apache-2.0' in metadata and 'Project-URL: ' in metadata


def test_both_commands_print_the_version(installed, tmp_path):
    bin_dir, wheel = installed
    version = wheel.name.split('-')[1]  # the wheel's file name: name-version-tags.whl
    env = dict(os.environ, PYTHONPATH='')
    for command in ('timm-structinit', 'timm-structinit-train'):
        done = _run([bin_dir / command, '--version'], cwd=tmp_path, env=env)
        assert done.stdout == f'{command} {version}\n'


def test_the_wheel_holds_the_recipes(installed):
    bin_dir, wheel = installed
    names = zipfile.ZipFile(wheel).namelist()
    packaged = {Path(n).stem for n in names if n.startswith('timm_structinit/recipes/') and n.endswith('.yaml')}
    assert {'digits', 'impulse_vit_tiny_patch2_cifar10', 'impulse2025_vit_tiny_patch16_224_food101'} <= packaged
    clone = wheel.parent.parent / 'clone'  # the source the wheel was built from
    assert packaged == {p.stem for p in (clone / 'timm_structinit' / 'recipes').glob('*.yaml')}
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
