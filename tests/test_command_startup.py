""" `--help`, `--version` and a usage error of either command end before torch, timm or the package are imported (they
take seconds to import): each console entry point, as pyproject.toml declares it, runs in a process of its own that
reports at exit which of them it imported. A valid command line imports them, so the report is seen to work. """
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HEAVY = ('torch', 'timm', 'timm_structinit')

# runs `module:function` as the console script `name` would, and prints at exit (after argparse's own exit too)
# the heavy top-level packages in sys.modules
_WRAPPER = r'''
import atexit, importlib, json, sys
heavy = set(json.loads(sys.argv[1]))
atexit.register(lambda: sys.__stderr__.write(
    '\nIMPORTED ' + json.dumps(sorted({m.split('.')[0] for m in sys.modules} & heavy)) + '\n'))
module, function = sys.argv[2].split(':')
sys.argv = sys.argv[3:]
sys.exit(getattr(importlib.import_module(module), function)())
'''


def _scripts() -> dict:
    """ The console scripts pyproject.toml declares: name -> 'module:function'. """
    text = (REPO / 'pyproject.toml').read_text()
    section = text.split('[project.scripts]', 1)[1].split('\n[', 1)[0]
    return dict(re.findall(r'^([\w-]+) = "([\w.]+:\w+)"', section, re.M))


def _run(command: str, *args: str, cwd: Path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get('PYTHONPATH')])))
    done = subprocess.run([sys.executable, '-c', _WRAPPER, json.dumps(HEAVY), _scripts()[command], command, *args],
                          capture_output=True, text=True, cwd=cwd, env=env, timeout=300)
    err, _, report = done.stderr.rpartition('\nIMPORTED ')
    return done.returncode, done.stdout, err, json.loads(report)


def test_both_commands_are_declared():
    assert set(_scripts()) == {'timm-structinit', 'timm-structinit-train'}


@pytest.mark.parametrize('command, args, status, said', [
    ('timm-structinit', ['--help'], 0, 'usage: timm-structinit [-h] [--version] COMMAND'),
    ('timm-structinit', ['compare', '--help'], 0, 'usage: timm-structinit compare [-h] --out DIR'),
    ('timm-structinit', ['show', '--help'], 0, 'usage: timm-structinit show [-h]'),
    ('timm-structinit', ['--version'], 0, 'timm-structinit 0.'),
    ('timm-structinit-train', ['--help'], 0, 'usage: timm-structinit-train [-h] [-c RECIPE] [--version]'),
    ('timm-structinit-train', ['--version'], 0, 'timm-structinit-train 0.'),
    ('timm-structinit', ['export'], 2, 'timm-structinit export: error: the following arguments are required: MODEL'),
    ('timm-structinit', ['show', 'vit_tiny_patch2_32_mimetic', '--seed', 'x'], 2, "'x' is not a valid seed"),
    ('timm-structinit', ['compare'], 2, 'timm-structinit compare: error: the following arguments are required: --out'),
    ('timm-structinit-train', ['--epochs', 'ten'], 2, "argument --epochs: invalid int value: 'ten'"),
    ('timm-structinit-train', ['--bogus'], 2, 'unrecognized arguments: --bogus'),
    ('timm-structinit-train', ['--sync-bn'], 2, "--sync-bn is an option of timm's train.py"),
    ('timm-structinit-train', ['-c', 'digits', '-c', 'digits'], 2, '-c/--config is given 2 times'),
    ('timm-structinit-train', ['--stop-signals', 'SIGKILL'], 2, "'SIGKILL' is not a stop signal here"),
])
def test_help_version_and_usage_errors_import_neither_torch_timm_nor_the_package(command, args, status, said,
                                                                                  tmp_path):
    code, out, err, imported = _run(command, *args, cwd=tmp_path)
    assert code == status, err
    assert said in (out if status == 0 else err)
    if status:
        assert err.count('\n') == 1 and err.startswith(f'{command}') and ': error: ' in err, err
    assert imported == []


@pytest.mark.slow
def test_a_valid_command_line_imports_the_package_and_runs(tmp_path):
    code, out, err, imported = _run('timm-structinit', 'recipes', 'digits', '--path', cwd=tmp_path)
    assert code == 0, err
    assert out.strip().endswith(os.path.join('recipes', 'digits.yaml'))
    assert 'timm_structinit' in imported and 'timm' in imported
