""" A torchvision that does not work with the installed torch, said in one line before timm's import fails on it.

torchvision's compiled operators are built for one torch release and one build of it (CPU, a CUDA version). Beside
another torch (one of the two upgraded alone, or installed from another index) importing torchvision fails inside its
own import, `RuntimeError: operator torchvision::nms does not exist` or an undefined symbol, and timm, which every
part of the package imports, imports torchvision. A command then ends with one line naming both installed versions
and the commands that install the torchvision built for that torch; a program that imports the package gets the same
line as an ImportError.
"""
import importlib.metadata
import re
import sys
from typing import Optional

from ..errors import WORK_FAILED
from .startup import command_name

__all__ = ['torchvision_problem', 'matching_torchvision_command', 'refuse_mismatched_torchvision']

PYTORCH_INDEX = 'https://download.pytorch.org/whl'  # the README's CPU build is PYTORCH_INDEX/cpu
# the builds PyTorch's own index serves, as torch's local version label names them (2.14.1+cpu, 2.11.0+cu128)
_INDEX_BUILD = re.compile(r'cpu|cu\d+|rocm[\d.]+|xpu')


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


def matching_torchvision_command(torch_version: str, cuda: bool, replace: bool = True) -> str:
    """ The command that installs the torchvision built for `torch_version` (after removing the installed one, with
    `replace`), from the index that torch build comes from: PyTorch's index of the build its label names, PyPI for an
    unlabelled CUDA build (PyPI's Linux default), PyTorch's CPU index otherwise (the README's). torch stays as it is:
    `torch==` its release, which the installed build satisfies. A torchvision that is installed is not replaced by
    `pip install` alone: its own requirement (torch of the same release) is met whichever build torch is. """
    release, _, label = torch_version.partition('+')
    if _INDEX_BUILD.fullmatch(label):
        index = f' --index-url {PYTORCH_INDEX}/{label}'
    else:
        index = '' if cuda and not label else f' --index-url {PYTORCH_INDEX}/cpu'
    return f'{"pip uninstall -y torchvision && " if replace else ""}pip install torch=={release} torchvision{index}'


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


def refuse_mismatched_torchvision() -> None:
    """ Before timm is imported: a command ends with the one line and status 1; a program that imports the package
    gets it as an ImportError. """
    line = torchvision_problem()
    if line is None:
        return
    name = command_name() or _run_module()
    if not name:
        raise ImportError(line)
    try:
        print(f'{name}: error: {line}', file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
    sys.exit(WORK_FAILED)


def _run_module() -> str:
    """ 'timm_structinit.run' when this process is `python -m timm_structinit.run` (its errors' name), else ''. """
    argv = getattr(sys, 'orig_argv', [])
    return 'timm_structinit.run' if any(a == '-m' and b == 'timm_structinit.run' for a, b in zip(argv, argv[1:])) \
        else ''
