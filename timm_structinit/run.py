""" Run any of timm's scripts with this package's models registered.

    python -m timm_structinit.run path/to/validate.py --model vit_tiny_patch2_32_mimetic ...

imports `timm_structinit` (registering its models with timm), then runs the script as `__main__` with the remaining
arguments, as `python path/to/validate.py ...` would, inside `patched_timm()`: RandAugment stays usable on Pillow >= 13
and `--model local-dir:DIR` / `hf-hub:ORG/NAME` builds the registered model of a package export. A `-c NAME` (or
`--config NAME`) that is not a file but a packaged recipe (`timm-structinit recipes`) is handed over as that recipe's
file. timm's train.py, validate.py, benchmark.py and inference.py live in timm's source repository, not in its wheel.
"""
import os
import runpy
import sys
from typing import Optional, Sequence

import timm

import timm_structinit  # noqa: F401  (registers the models)
from timm_structinit.recipes import resolve_config
from timm_structinit.timm_patches import patched_timm

__all__ = ['run_script', 'main', 'with_recipe_files']

USAGE = 'usage: python -m timm_structinit.run SCRIPT [ARGS ...]'


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


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ('-h', '--help'):
        print(USAGE + '\n\n' + __doc__.strip().split('\n\n')[0], file=sys.stderr if not argv else sys.stdout)
        return 2 if not argv else 0
    try:
        return run_script(argv[0], with_recipe_files(argv[1:]))
    except FileNotFoundError as e:
        print(f'timm_structinit.run: error: {e}', file=sys.stderr)
        return 2


if __name__ == '__main__':
    sys.exit(main())
