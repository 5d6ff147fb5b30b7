""" Run any of timm's scripts with this package's models registered.

    python -m timm_structinit.run path/to/validate.py --model vit_tiny_patch2_32_mimetic ...

imports `timm_structinit` (registering its models with timm), then runs the script as `__main__` with the remaining
arguments, as `python path/to/validate.py ...` would, inside `patched_timm()`: RandAugment stays usable on Pillow >= 13
and `--model local-dir:DIR` / `hf-hub:ORG/NAME` builds the registered model of a package export. A `-c NAME` (or
`--config NAME`) that is not a file but a packaged recipe (`timm-structinit recipes`) is handed over as that recipe's
file. timm's train.py, validate.py, benchmark.py and inference.py live in timm's source repository, not in its wheel.

timm's scripts default to `--device cuda` and stop on a machine without it; when neither the command line nor its
`-c` file names a device, and CUDA is not available, the script is given the device that is (`--device cpu`, or
`mps` on Apple silicon), and a line says so.
"""
import os
import re
import runpy
import sys
from typing import List, Optional, Sequence

import timm
import torch
import yaml

import timm_structinit  # noqa: F401  (registers the models)
from timm_structinit.recipes import resolve_config
from timm_structinit.utils.timm_patches import patched_timm

__all__ = ['run_script', 'main', 'with_recipe_files', 'with_available_device', 'available_device']

USAGE = 'usage: python -m timm_structinit.run SCRIPT [ARGS ...]'
HELP = f"""{USAGE}

Run one of timm's scripts (train.py, validate.py, benchmark.py, inference.py: they ship in timm's source repository,
not in its wheel) with this package's models registered, as `python SCRIPT ARGS` would; ARGS are the script's own
(`SCRIPT --help` lists them). What it adds:

  -c NAME, --config NAME  a packaged recipe's name (`timm-structinit recipes`) is handed over as that recipe's file;
                          a file of that name wins
  --device cpu            given to a script that defaults to CUDA when CUDA is not available and neither ARGS nor
                          the -c file names a device (mps on Apple silicon); a line on stderr says so
  two changes to timm     for the script's run only: `--model local-dir:DIR` or `hf-hub:ORG/NAME` of this
                          package's export builds the registered model (plain timm builds timm's base), and
                          RandAugment stays usable on Pillow >= 13 (its 0-bit posterize)
"""
# the options of timm's scripts whose value is a file the script reads; a script that stops on a missing one without
# naming it (timm's load_checkpoint raises a FileNotFoundError with no message) is said with the option that named it
_INPUT_FILE_OPTIONS = ('--checkpoint', '--resume', '--initial-checkpoint', '--pretrained-path', '--class-map', '-c',
                       '--config')
# a script option `--device` whose default is CUDA, as timm's train, validate, benchmark and inference scripts have
_CUDA_DEVICE_OPTION = re.compile(r"""add_argument\(\s*['"]--device['"][^)]*default\s*=\s*['"]cuda['"]""")


def run_script(path: str, argv: Sequence[str] = ()) -> int:
    """ Run the Python file `path` as `__main__` with `sys.argv = [path, *argv]`; returns its exit status. """
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"script {path!r}: no such file. timm's train.py, validate.py, benchmark.py and inference.py ship in the "
            f"timm source repository (https://github.com/huggingface/pytorch-image-models), not in the installed "
            f"package; use the ones matching timm {timm.__version__}")
    path = os.path.abspath(path)
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [path, *argv]
    sys.path.insert(0, os.path.dirname(path))  # as `python SCRIPT` would, for the script's sibling imports
    try:
        with patched_timm():
            runpy.run_path(path, run_name='__main__')
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return 0


def with_recipe_files(argv: Sequence[str]) -> list:
    """ `argv` with the value of `-c` / `--config` replaced by its packaged recipe's file when it is a recipe name. """
    out = list(argv)
    for i, token in enumerate(out):
        if token in ('-c', '--config') and i + 1 < len(out):
            out[i + 1] = resolve_config(out[i + 1]) or out[i + 1]
        elif token.startswith('--config='):
            value = token.split('=', 1)[1]
            out[i] = f'--config={resolve_config(value) or value}'
    return out


def available_device() -> str:
    """ The accelerator torch can use here, else 'cpu'. """
    if torch.cuda.is_available():
        return 'cuda'
    return 'mps' if torch.backends.mps.is_available() else 'cpu'


def _config_names_device(argv: Sequence[str]) -> bool:
    """ Whether the YAML file of `-c` / `--config` in `argv` sets `device` (the script reports an unreadable one). """
    for i, token in enumerate(argv):
        path = argv[i + 1] if token in ('-c', '--config') and i + 1 < len(argv) else (
            token.split('=', 1)[1] if token.startswith('--config=') else None)
        if path and os.path.isfile(path):
            try:
                with open(path, encoding='utf-8') as f:
                    cfg = yaml.safe_load(f)
            except (OSError, UnicodeDecodeError, yaml.YAMLError):
                return False
            return isinstance(cfg, dict) and 'device' in cfg
    return False


def with_available_device(path: str, argv: Sequence[str]) -> List[str]:
    """ `argv` with `--device` set to the available device when script `path` defaults to CUDA, CUDA is not
    available and neither `argv` nor its config file names a device; otherwise `argv` unchanged. """
    argv = list(argv)
    device = available_device()
    if device == 'cuda' or any(a == '--device' or a.startswith('--device=') for a in argv) \
            or _config_names_device(argv):
        return argv
    try:
        with open(path, encoding='utf-8') as f:
            defaults_to_cuda = bool(_CUDA_DEVICE_OPTION.search(f.read()))
    except (OSError, UnicodeDecodeError):
        return argv
    if defaults_to_cuda:
        print(f'timm_structinit.run: no CUDA device here: running {os.path.basename(path)} with --device {device} '
              f'(--device chooses)', file=sys.stderr)
        argv += ['--device', device]
    return argv


def _missing_file(error: FileNotFoundError, script: str, argv: Sequence[str]) -> str:
    """ One line naming the file a script stopped on: the error's own words, else the file option of `argv` whose
    value does not exist. """
    if str(error):
        return ' '.join(str(error).split())
    name = os.path.basename(script)
    for i, token in enumerate(argv):
        option, sep, value = token.partition('=')
        value = value if sep else (argv[i + 1] if i + 1 < len(argv) else '')
        if option in _INPUT_FILE_OPTIONS and value and not os.path.exists(value):
            return f'{name}: {option} {value!r}: no such file'
    return f'{name} stopped on a missing file without naming it (FileNotFoundError); the lines above may say which'


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ('-h', '--help'):
        print(HELP if argv else f'{USAGE} (python -m timm_structinit.run --help says more)',
              file=sys.stderr if not argv else sys.stdout, end='' if argv else '\n')
        return 2 if not argv else 0
    try:
        return run_script(argv[0], with_available_device(argv[0], with_recipe_files(argv[1:])))
    except FileNotFoundError as e:
        print(f'timm_structinit.run: error: {_missing_file(e, argv[0], argv[1:])}', file=sys.stderr)
        return 2

if __name__ == '__main__':
    sys.exit(main())
