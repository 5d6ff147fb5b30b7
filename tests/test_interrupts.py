""" Ctrl-C stops the test suite at once, whatever test is running: a SIGINT that reaches pytest while a test runs a
command in the test process (which takes it as its own Ctrl-C and returns 130) ends pytest with its interrupted
summary, and so does a SIGINT to pytest-xdist's controller while a worker runs one; under pytest-xdist, Ctrl-C ends
the workers and every process below them, whatever they do. """
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import process_trees
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


# a suite whose module takes seconds to import (as torch's and timm's imports do), and whose one test waits
SLOW_SUITE = '''
import atexit
import os
import time
from pathlib import Path

OUT = Path(os.environ['SUITE_OUT'])
time.sleep(float(os.environ['SUITE_IMPORT_SECONDS']))
(OUT / 'imported').write_text('')
atexit.register(lambda: (OUT / 'interpreter-teardown').write_text(''))


def test_waits():
    (OUT / 'started').write_text('')
    time.sleep(120)
'''


def _slow_suite(tmp_path, import_seconds):
    (tmp_path / 'test_slow_suite.py').write_text(SLOW_SUITE)
    out = tmp_path / 'out'
    out.mkdir()
    env = dict(os.environ, SUITE_OUT=str(out), SUITE_IMPORT_SECONDS=str(import_seconds),
               PYTHONPATH=os.pathsep.join(filter(None, [str(TESTS), os.environ.get('PYTHONPATH')])))
    command = [sys.executable, '-m', 'pytest', '-q', '-p', 'conftest', '-p', 'no:cacheprovider', '--basetemp',
               str(tmp_path / 'basetemp'), 'test_slow_suite.py']
    return out, env, command


@pytest.mark.slow
def test_on_a_terminal_pytest_says_at_once_that_it_is_collecting(tmp_path):
    """ pytest -q on a terminal: the line that says it is collecting comes while the test modules still import,
    and gives way to what was collected. """
    import pty
    out, env, command = _slow_suite(tmp_path, 4)
    main, terminal = pty.openpty()
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdin=terminal, stdout=terminal, stderr=terminal,
                            preexec_fn=signals_as_in_a_terminal)
    os.close(terminal)
    shown, seen_while_importing = b'', False
    deadline = time.monotonic() + 120
    try:
        while not (out / 'started').exists() and time.monotonic() < deadline:
            ready = __import__('select').select([main], [], [], 0.1)[0]
            if ready:
                shown += os.read(main, 4096)
            seen_while_importing = seen_while_importing or (b'collecting tests' in shown
                                                            and not (out / 'imported').exists())
    finally:
        proc.kill()
        proc.wait()
        os.close(main)
    assert seen_while_importing, shown.decode(errors='replace')
    assert b'collected 1 test ' in shown, shown.decode(errors='replace')


@pytest.mark.slow
def test_after_ctrl_c_pytest_ends_without_the_interpreters_teardown(tmp_path):
    """ Ctrl-C while a test runs: pytest prints its interrupted summary, ends every fixture, and exits, skipping
    the interpreter's teardown (its garbage collection over torch, timm and every module took seconds). """
    out, env, command = _slow_suite(tmp_path, 0)
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, preexec_fn=signals_as_in_a_terminal)
    deadline = time.monotonic() + 120
    while not (out / 'started').exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == pytest.ExitCode.INTERRUPTED and 'KeyboardInterrupt' in output, output
    assert re.search(r'no tests ran in [0-9.]+s', output.splitlines()[-1]), output  # its summary said so
    assert not (out / 'interpreter-teardown').exists(), output  # ended before the handlers at exit ran


# a suite whose workers start a process that only SIGKILL ends (SIGINT ignored, in a session of its own, as torchrun
# starts its workers): as the module imports (a server its tests would share), while collection goes on, or in its
# one test, which ignores SIGINT itself (as a test stuck in code that does not return would)
HOLDING_SUITE = '''
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(os.environ['SUITE_OUT'])
HOLDER = [sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(600)']


def start_holder(name):
    holder = subprocess.Popen(HOLDER, start_new_session=True)
    (OUT / f'{name}-{holder.pid}').write_text('')


if os.environ['SUITE_MOMENT'] == 'collecting':
    start_holder('imported')
    time.sleep(600)  # the module still imports


def test_holds():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    start_holder('test')
    time.sleep(600)
'''


def _processes_ended(which, timeout: float = 60) -> list:
    """ `which()` (processes as (id, command line)) once it is empty, or as it is after `timeout` seconds: a process
    killed has to be scheduled to end. """
    deadline = time.monotonic() + timeout
    while (left := which()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.mark.slow
@pytest.mark.parametrize('moment', ['collecting', 'test'])
def test_ctrl_c_under_xdist_ends_every_process_of_the_suite(moment, tmp_path):
    """ The README's `-n 2 --dist loadgroup` on a terminal, Ctrl-C (SIGINT to its process group) while the workers
    collect or while a test runs: pytest reports the interrupt and ends with its status, its process group ends,
    and no process of the suite is left, not the workers, nor what their modules or tests started. """
    (tmp_path / 'test_holding_suite.py').write_text(HOLDING_SUITE)
    out = tmp_path / 'out'
    out.mkdir()
    mark = uuid.uuid4().hex
    env = dict(os.environ, SUITE_OUT=str(out), SUITE_MOMENT=moment, SUITE_MARK=mark,
               PYTHONPATH=os.pathsep.join(filter(None, [str(TESTS), os.environ.get('PYTHONPATH')])))
    proc = subprocess.Popen([sys.executable, '-m', 'pytest', '-q', '-p', 'conftest', '-p', 'no:cacheprovider',
                             '--basetemp', str(tmp_path / 'basetemp'), '-n', '2', '--dist', 'loadgroup',
                             'test_holding_suite.py'],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=signals_as_in_a_terminal)  # a terminal's job
    holders = 2 if moment == 'collecting' else 1  # both workers import the module; one runs the test
    try:
        deadline = time.monotonic() + 300
        while len(list(out.iterdir())) < holders:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f'the suite started no process:\n{proc.communicate(timeout=60)[0][-3000:]}')
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)  # as the terminal sends Ctrl-C
        output = proc.communicate(timeout=120)[0]
        group = _processes_ended(lambda: process_trees.in_group(proc.pid))
        left = _processes_ended(lambda: process_trees.carrying('SUITE_MARK', mark))
    finally:
        for pid, _ in process_trees.carrying('SUITE_MARK', mark):  # whatever the outcome, none outlives the test
            os.kill(pid, signal.SIGKILL)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED and 'KeyboardInterrupt' in output, output[-3000:]
    killed = '[12]' if moment == 'test' else '[0-2]'  # the worker whose test ignores SIGINT did not end on its own
    assert re.search(rf'Ctrl-C: {killed} of the 2 workers still running [0-9.]+ s after it and [0-9]+ process(es)? '
                     rf'below the workers were killed', output), output[-3000:]
    assert not group, (group, output[-3000:])
    assert not left, (left, output[-3000:])
