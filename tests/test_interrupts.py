""" Ctrl-C stops the test suite at once, whatever test is running: a SIGINT that reaches pytest while a test runs a
command in the test process (which takes it as its own Ctrl-C and returns 130) ends pytest with its interrupted
summary, and so does a SIGINT to pytest-xdist's controller while a worker runs one. """
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from interrupts import signals_as_in_a_terminal

TESTS = Path(__file__).resolve().parent

# a suite of two tests: a training run of many epochs, in the test process, and a test after it
SUITE = '''
import os
from pathlib import Path

from timm_structinit import train as train_mod
from train_command import FAST, TINY, run_main, two_class_folder

OUT = Path(os.environ['SUITE_OUT'])


def test_a_long_command(tmp_path, capsys):
    data = two_class_folder(tmp_path / 'data', per_class=8, size=32)
    argv = [*TINY, *FAST, '--data-dir', data, '--val-split', 'test', '--epochs', 1000, '--output', OUT,
            '--experiment', 'run']
    if os.environ['SUITE_CALL'] == 'run_main':
        code = run_main(argv, capsys)[0]
    else:  # the command's own entry point, as many tests call it
        code = train_mod.main([str(a) for a in argv])
    assert code == 0


def test_after_it():
    (OUT / 'after').write_text('ran')
'''


def _epochs(summary: Path) -> int:
    return max(0, len(summary.read_text().splitlines()) - 1)  # a row per finished epoch, under a header


@pytest.mark.slow
@pytest.mark.parametrize('call,options', [('run_main', []), ('main', []), ('run_main', ['-n', '2'])],
                         ids=['run_main', 'main', 'xdist-controller'])
def test_sigint_stops_pytest_while_a_command_runs_in_the_test_process(call, options, tmp_path):
    (tmp_path / 'test_suite.py').write_text(SUITE)
    out = tmp_path / 'out'
    out.mkdir()
    env = dict(os.environ, OMP_NUM_THREADS='1', SUITE_OUT=str(out), SUITE_CALL=call,
               PYTHONPATH=os.pathsep.join(filter(None, [str(TESTS), os.environ.get('PYTHONPATH')])))
    # the suite's conftest as a plugin: the suite lives outside tests/
    proc = subprocess.Popen([sys.executable, '-m', 'pytest', '-q', '-p', 'conftest', '-p', 'no:cacheprovider',
                             '--basetemp', str(tmp_path / 'basetemp'), *options, 'test_suite.py'],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=signals_as_in_a_terminal)
    summary, checkpoint = out / 'run' / 'summary.csv', out / 'run' / 'last.pth.tar'
    deadline = time.monotonic() + 300
    while not (summary.is_file() and checkpoint.is_file()):  # an epoch finished and kept: the command, and its
        # handler of SIGINT, are under way (stopped before it keeps an epoch, a run removes its folder)
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f'the command did not train an epoch:\n{proc.communicate()[0][-3000:]}')
        time.sleep(0.05)
    epochs = _epochs(summary)
    proc.send_signal(signal.SIGINT)  # to pytest alone (with -n 2: the controller)
    try:
        output = proc.communicate(timeout=60)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f'pytest went on for 60 s after SIGINT:\n{proc.communicate()[0][-3000:]}')
    assert proc.returncode == pytest.ExitCode.INTERRUPTED and 'KeyboardInterrupt' in output, output[-3000:]
    assert _epochs(summary) <= epochs + 1, output[-3000:]  # the command stopped in the epoch it was in
    if not options:  # in one process, the test after it never ran (with -n 2, the other worker ran it meanwhile)
        assert not (out / 'after').exists(), output[-3000:]
