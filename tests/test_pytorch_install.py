""" A torch that cannot be imported is said as such, with the command that installs its build again (CUDA or CPU, from
its index); a torchvision that does not work with the installed torch (the two from different releases or builds, as
when one comes from another index) is said in one line naming both versions and the command that installs the
matching torchvision; each by both commands and every `python -m` entry point, before timm's import fails on it, and
once per launch under torchrun. The failures are made as a broken install makes them: a `torch` or `torchvision`
first on the path (with its metadata) whose import raises what the broken one raises. """
import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from timm_structinit.utils import pytorch_install
from timm_structinit.utils.pytorch_install import matching_torchvision_command, reinstall_torch_command

REPO = Path(__file__).resolve().parents[1]
NMS = 'operator torchvision::nms does not exist'  # torchvision's import beside a torch it was not built for
# the README's install command for PyTorch's CPU build
README_CPU_INDEX = re.search(r'pip install torch torchvision --index-url (\S+)',
                             (REPO / 'README.md').read_text()).group(1)


def _broken_torchvision(root: Path, error: str = f'RuntimeError({NMS!r})') -> Path:
    """ A folder holding a `torchvision` 0.28.0 (its metadata too) whose import raises `error`. """
    (root / 'torchvision').mkdir(parents=True)
    (root / 'torchvision' / '__init__.py').write_text(f'raise {error}\n')
    (root / 'torchvision-0.28.0.dist-info').mkdir()
    (root / 'torchvision-0.28.0.dist-info' / 'METADATA').write_text(
        'Metadata-Version: 2.1\nName: torchvision\nVersion: 0.28.0\n')
    return root


LIBTORCH = 'libtorch_cuda.so: cannot open shared object file: No such file or directory'


def _broken_torch(root: Path, version: str = '2.14.1+cu130', requires=()) -> Path:
    """ A folder holding a `torch` of `version` (its metadata too, requiring `requires`) whose import fails as one
    whose shared library is gone. """
    (root / 'torch').mkdir(parents=True)
    (root / 'torch' / '__init__.py').write_text(f'raise OSError({LIBTORCH!r})\n')
    info = root / f'torch-{version}.dist-info'
    info.mkdir()
    (info / 'METADATA').write_text(f'Metadata-Version: 2.1\nName: torch\nVersion: {version}\n'
                                   + ''.join(f'Requires-Dist: {r}\n' for r in requires))
    return root


def test_the_fix_of_a_broken_torch_installs_its_build_again_from_its_index():
    assert reinstall_torch_command('2.14.1+cu130', cuda=True) == (
        'pip install --force-reinstall torch==2.14.1 --index-url https://download.pytorch.org/whl/cu130')
    assert reinstall_torch_command('2.14.1+cpu', cuda=False) == (
        f'pip install --force-reinstall torch==2.14.1 --index-url {README_CPU_INDEX}')
    # PyPI's Linux CUDA build carries no label: PyPI, not the CPU index, which would replace it by a CPU build
    assert reinstall_torch_command('2.14.1', cuda=True) == 'pip install --force-reinstall torch==2.14.1'
    assert reinstall_torch_command('2.14.1', cuda=False) == (
        f'pip install --force-reinstall torch==2.14.1 --index-url {README_CPU_INDEX}')


@pytest.mark.parametrize('version, requires, fix', [
    ('2.14.1+cu130', (), 'pip install --force-reinstall torch==2.14.1 --index-url https://download.pytorch.org/whl/cu130'),
    ('2.14.1', ('nvidia-cudnn-cu13==9.24.0.43; platform_system == "Linux"', 'filelock'),
     'pip install --force-reinstall torch==2.14.1'),
    ('2.14.1', ('filelock',), f'pip install --force-reinstall torch==2.14.1 --index-url {README_CPU_INDEX}'),
])
def test_a_torch_that_cannot_be_imported_is_named_as_such(tmp_path, monkeypatch, version, requires, fix):
    """ torch itself fails (its shared library is gone): the line names torch, not torchvision, and installs the
    build the machine has again: a labelled build from its index, PyPI's CUDA build (whose wheels require NVIDIA's
    packages) from PyPI, any other from the CPU index. """
    monkeypatch.delitem(sys.modules, 'torch')  # restored after the test: this process keeps its own torch
    monkeypatch.syspath_prepend(str(_broken_torch(tmp_path, version, requires)))
    assert pytorch_install.torch_problem() == (
        f'torch {version} is installed but cannot be imported (OSError: {LIBTORCH}); install this build again: {fix}')


def test_a_missing_torch_is_said_with_the_readmes_command(monkeypatch):
    monkeypatch.setitem(sys.modules, 'torch', None)  # what `import torch` finds nowhere
    monkeypatch.setattr(pytorch_install, '_has_nvidia_gpu', lambda: False)
    assert pytorch_install.torch_problem() == (
        f'PyTorch is not installed; install it first: pip install torch torchvision --index-url {README_CPU_INDEX} '
        '(the README says which build)')
    monkeypatch.setattr(pytorch_install, '_has_nvidia_gpu', lambda: True)
    assert 'install it first: pip install torch torchvision (the README' in pytorch_install.torch_problem()


def test_the_fix_installs_torchvision_from_the_index_of_the_torch_build():
    assert README_CPU_INDEX == 'https://download.pytorch.org/whl/cpu'
    assert matching_torchvision_command('2.13.0+cpu', cuda=False) == (
        f'pip uninstall -y torchvision && pip install torch==2.13.0 torchvision --index-url {README_CPU_INDEX}')
    assert matching_torchvision_command('2.11.0+cu128', cuda=True) == (
        'pip uninstall -y torchvision && pip install torch==2.11.0 torchvision '
        '--index-url https://download.pytorch.org/whl/cu128')
    # PyPI's Linux build carries no label in its metadata and is a CUDA build: PyPI's torchvision is built for it
    assert matching_torchvision_command('2.14.1', cuda=True) == (
        'pip uninstall -y torchvision && pip install torch==2.14.1 torchvision')
    assert matching_torchvision_command('2.14.1', cuda=False) == (
        f'pip uninstall -y torchvision && pip install torch==2.14.1 torchvision --index-url {README_CPU_INDEX}')
    assert matching_torchvision_command('2.14.1+cpu', cuda=False, replace=False) == (
        f'pip install torch==2.14.1 torchvision --index-url {README_CPU_INDEX}')


def _expected_fix(replace: bool = True) -> str:
    return matching_torchvision_command(importlib.metadata.version('torch'), torch.version.cuda is not None, replace)


def test_a_torchvision_that_fails_to_import_is_named_with_both_versions(tmp_path, monkeypatch):
    monkeypatch.delitem(sys.modules, 'torchvision')
    monkeypatch.syspath_prepend(str(_broken_torchvision(tmp_path)))
    torch_version = importlib.metadata.version('torch')
    assert pytorch_install.torchvision_problem() == (
        f'torchvision 0.28.0 does not work with torch {torch_version} (importing it failed: {NMS}); install the '
        f'torchvision built for this torch: {_expected_fix()}')
    with pytest.raises(ImportError, match=re.escape(f'torchvision 0.28.0 does not work with torch {torch_version}')):
        pytorch_install.refuse_broken_pytorch()  # a program that imports the package: an ImportError


def test_a_missing_torchvision_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, 'torchvision', None)  # what `import torchvision` finds nowhere
    assert pytorch_install.torchvision_problem() == (
        f'torchvision is not installed (torch {importlib.metadata.version("torch")} is); install the build for this '
        f'torch: {_expected_fix(replace=False)}')


def test_a_working_torchvision_is_no_problem():
    assert pytorch_install.torchvision_problem() is None


# each entry point as a user runs it: the console scripts' functions with their names as sys.argv[0], as the scripts
# pip writes call them, and `python -m` on the modules
_CONSOLE = ('import sys; from timm_structinit_cli.entry import {function}; sys.argv[0] = {name!r}; '
            'sys.exit({function}())')
ENTRY_POINTS = {
    'timm-structinit-train': ['-c', _CONSOLE.format(function='train', name='timm-structinit-train'), '-c', 'digits'],
    'timm-structinit': ['-c', _CONSOLE.format(function='structinit', name='timm-structinit'), 'recipes'],
    'python -m timm_structinit.train': ['-m', 'timm_structinit.train', '-c', 'digits'],
    'python -m timm_structinit.cli': ['-m', 'timm_structinit.cli', 'recipes'],
    'python -m timm_structinit.run': ['-m', 'timm_structinit.run', 'validate.py', '--model', 'resnet18'],
}
# the name each one's errors start with
PROGS = {'python -m timm_structinit.train': 'timm-structinit-train', 'python -m timm_structinit.cli': 'timm-structinit',
         'python -m timm_structinit.run': 'timm_structinit.run'}


def _env_with(fake: Path) -> dict:
    """ The environment of a process that finds the `torchvision` in `fake` first. """
    return dict(os.environ, OMP_NUM_THREADS='1',
                PYTHONPATH=os.pathsep.join(filter(None, [str(fake), str(REPO), os.environ.get('PYTHONPATH')])))


@pytest.mark.slow
@pytest.mark.parametrize('entry', sorted(ENTRY_POINTS))
def test_every_entry_point_names_the_mismatch_in_one_line(entry, tmp_path):
    env = _env_with(_broken_torchvision(tmp_path / 'site'))
    done = subprocess.run([sys.executable, *ENTRY_POINTS[entry]], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=300)
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        f'{PROGS.get(entry, entry)}: error: torchvision 0.28.0 does not work with torch '
        f'{importlib.metadata.version("torch")} (importing it failed: {NMS}); install the torchvision built for this '
        f'torch: {_expected_fix()}\n')
    assert not (tmp_path / 'output').exists()  # nothing was started


@pytest.mark.slow
@pytest.mark.parametrize('entry', sorted(ENTRY_POINTS))
def test_every_entry_point_names_a_torch_that_cannot_be_imported(entry, tmp_path):
    env = _env_with(_broken_torch(tmp_path / 'site'))
    done = subprocess.run([sys.executable, *ENTRY_POINTS[entry]], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=300)
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        f'{PROGS.get(entry, entry)}: error: torch 2.14.1+cu130 is installed but cannot be imported (OSError: '
        f'{LIBTORCH}); install this build again: pip install --force-reinstall torch==2.14.1 --index-url '
        f'https://download.pytorch.org/whl/cu130\n')
    assert 'torchvision' not in done.stderr


@pytest.mark.slow
def test_under_torchrun_the_line_is_said_once_per_launch(tmp_path):
    """ Two processes of one launch, both failing on the same torchvision: one line, by the process of local rank
    0, and the launch fails. """
    env = _env_with(_broken_torchvision(tmp_path / 'site'))
    done = subprocess.run([sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node=2', '-m',
                           'timm_structinit.train', '-c', 'digits'], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=300)
    assert done.returncode != 0
    assert done.stderr.count('torchvision 0.28.0 does not work with torch') == 1, done.stderr
    assert f'timm-structinit-train: error: torchvision 0.28.0 does not work with torch' in done.stderr


@pytest.mark.slow
def test_a_program_importing_the_package_gets_the_line_as_an_import_error(tmp_path):
    env = _env_with(_broken_torchvision(tmp_path / 'site', 'ImportError("undefined symbol: _ZN3c104cuda9SetDeviceEa")'))
    done = subprocess.run([sys.executable, '-c', 'import timm_structinit'], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        f'ImportError: torchvision 0.28.0 does not work with torch {importlib.metadata.version("torch")} (importing '
        f'it failed: undefined symbol: _ZN3c104cuda9SetDeviceEa); install the torchvision built for this torch: '
        f'{_expected_fix()}')
