""" A PyTorch that cannot work, said in one line before timm's import fails on it: torch itself that cannot be
imported, or a torchvision that does not work with the installed torch.

torch that fails to import (a missing shared library, a half-installed or half-removed wheel) fails every part of
the package, and every import of torchvision with it; the line names torch, what its import said, and the command that
installs the same torch build again, from the index that build comes from (CUDA or CPU). torchvision's compiled
operators are built for one torch release and one build of it (CPU, a CUDA version). Beside another torch (one of the
two upgraded alone, or installed from another index) importing torchvision fails inside its own import,
`RuntimeError: operator torchvision::nms does not exist` or an undefined symbol, and timm, which every part of the
package imports, imports torchvision. A command then ends with one line naming both installed versions and the
commands that install the torchvision built for that torch; a program that imports the package gets the same line as
an ImportError. Under a launcher that starts several processes (torchrun), the processes of one node fail alike, and
the one of local rank 0 alone says so.
"""
import importlib.metadata
import os
import re
import sys
from typing import Optional

from ..errors import WORK_FAILED
from .startup import command_name

__all__ = ['torch_problem', 'torchvision_problem', 'matching_torchvision_command', 'reinstall_torch_command',
           'refuse_broken_pytorch']

PYTORCH_INDEX = 'https://download.pytorch.org/whl'  # the README's CPU build is PYTORCH_INDEX/cpu
# the builds PyTorch's own index serves, as torch's local version label names them (2.14.1+cpu, 2.11.0+cu128)
_INDEX_BUILD = re.compile(r'cpu|cu\d+|rocm[\d.]+|xpu')
# what the README installs where there is no PyTorch: its CPU build, or PyPI's default (a CUDA build) beside a GPU
_NEW_CPU = f'pip install torch torchvision --index-url {PYTORCH_INDEX}/cpu'
_NEW_CUDA = 'pip install torch torchvision'


def _installed(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return 'not installed'


def _torch_has_cuda() -> bool:
    """ Whether the installed torch is a CUDA build. """
    try:
        import torch
        return torch.version.cuda is not None
    except Exception:  # noqa: BLE001  torch itself fails: nothing to learn from it
        return False


def _index_option(torch_version: str, cuda: bool) -> str:
    """ Where the build of `torch_version` comes from, as a pip option: PyTorch's index of the build its label names,
    PyPI (no option) for an unlabelled CUDA build (PyPI's Linux default), PyTorch's CPU index otherwise (the
    README's). """
    label = torch_version.partition('+')[2]
    if _INDEX_BUILD.fullmatch(label):
        return f' --index-url {PYTORCH_INDEX}/{label}'
    return '' if cuda and not label else f' --index-url {PYTORCH_INDEX}/cpu'


def _cuda_wheel() -> bool:
    """ Whether the installed torch is a CUDA build, read off its metadata without importing it: PyPI's CUDA wheels
    require NVIDIA's runtime packages (nvidia-*); a label names the build of the others. """
    try:
        requires = importlib.metadata.requires('torch') or []
    except importlib.metadata.PackageNotFoundError:
        return False
    return any(r.lower().startswith('nvidia-') for r in requires) or '+cu' in _installed('torch')


def _has_nvidia_gpu() -> bool:
    """ Whether this machine has an NVIDIA driver loaded (a CUDA build of torch can use it). """
    return os.path.exists('/proc/driver/nvidia/version')


def reinstall_torch_command(torch_version: str, cuda: bool) -> str:
    """ The command that installs the build of `torch_version` again, from its index (`_index_option`), its
    dependencies with it (a CUDA build's libraries are among them). """
    release = torch_version.partition('+')[0]
    return f'pip install --force-reinstall torch=={release}{_index_option(torch_version, cuda)}'


def torch_problem() -> Optional[str]:
    """ The one line for a torch that cannot be imported (or is not installed), or None when it imports. """
    try:
        import torch  # noqa: F401
        return None
    except ModuleNotFoundError as e:
        cause = None if e.name == 'torch' else e
    except Exception as e:  # noqa: BLE001  whatever a broken install raises: OSError, ImportError, RuntimeError, ...
        cause = e
    if cause is None:
        install = _NEW_CUDA if _has_nvidia_gpu() else _NEW_CPU
        return f'PyTorch is not installed; install it first: {install} (the README says which build)'
    version = _installed('torch')
    why = ' '.join(str(cause).split()) or type(cause).__name__
    return (f'torch {version} is installed but cannot be imported ({type(cause).__name__}: {why[:300]}); install '
            f'this build again: {reinstall_torch_command(version, _cuda_wheel())}')


def matching_torchvision_command(torch_version: str, cuda: bool, replace: bool = True) -> str:
    """ The command that installs the torchvision built for `torch_version` (after removing the installed one, with
    `replace`), from the index that torch build comes from: PyTorch's index of the build its label names, PyPI for an
    unlabelled CUDA build (PyPI's Linux default), PyTorch's CPU index otherwise (the README's). torch stays as it is:
    `torch==` its release, which the installed build satisfies. A torchvision that is installed is not replaced by
    `pip install` alone: its own requirement (torch of the same release) is met whichever build torch is. """
    release = torch_version.partition('+')[0]
    return (f'{"pip uninstall -y torchvision && " if replace else ""}pip install torch=={release} torchvision'
            f'{_index_option(torch_version, cuda)}')


def torchvision_problem() -> Optional[str]:
    """ The one line for a torchvision that cannot be imported beside the installed torch, or None when it imports. """
    try:
        import torchvision  # noqa: F401
        return None
    except ModuleNotFoundError as e:
        cause = None if e.name == 'torchvision' else e
    except (ImportError, RuntimeError, OSError, AttributeError) as e:  # what torchvision raises beside another torch
        cause = e
    torch_version = _installed('torch')
    cuda = '+' not in torch_version and _torch_has_cuda()  # a label names the build; PyPI's Linux build has none
    fix = matching_torchvision_command(torch_version, cuda, replace=cause is not None)
    if cause is None:
        return f'torchvision is not installed (torch {torch_version} is); install the build for this torch: {fix}'
    why = ' '.join(str(cause).split()) or type(cause).__name__
    return (f'torchvision {_installed("torchvision")} does not work with torch {torch_version} (importing it failed: '
            f'{why}); install the torchvision built for this torch: {fix}')


def refuse_broken_pytorch() -> None:
    """ Before timm is imported: a torch that cannot be imported, else a torchvision that does not work with it,
    ends a command with one line (said by one process of a launch) and status 1; a program that imports the package
    gets the line as an ImportError. """
    line = torch_problem() or torchvision_problem()
    if line is None:
        return
    name = command_name() or _run_module()
    if not name:
        raise ImportError(line)
    if _speaks_for_its_launch():
        try:
            print(f'{name}: error: {line}', file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass
    sys.exit(WORK_FAILED)


def _speaks_for_its_launch() -> bool:
    """ Whether this process says what failed: it runs alone, or is the process of local rank 0 of those a launcher
    (torchrun) started on its node, which all fail alike. """
    local = os.environ.get('LOCAL_RANK', os.environ.get('RANK', '0')) or '0'
    return not local.isdigit() or int(local) == 0


def _run_module() -> str:
    """ 'timm_structinit.run' when this process is `python -m timm_structinit.run` (its errors' name), else ''. """
    argv = getattr(sys, 'orig_argv', [])
    return 'timm_structinit.run' if any(a == '-m' and b == 'timm_structinit.run' for a, b in zip(argv, argv[1:])) \
        else ''
