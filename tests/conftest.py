""" What every test shares: the thread count, the shared data's location, and the hygiene of a run of the suite:
every subprocess a test starts ends with it, the caches that torch.compile, torchelastic, wandb and matplotlib
write go to the session's temporary folder, a test that changes the thread count gets it back, and a Ctrl-C stops
pytest even when a command run in the test process took it (`interrupts`), the prompt back once pytest has said so.
On a terminal, a line says that pytest is collecting while the test modules import (this module imports none of
torch, timm or the package itself, so the line comes first). """
import gc
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import interrupts

# the training command and compare take OMP_NUM_THREADS as the user's thread count: with it set, the runs the tests
# start (in this process and in the subprocesses, which inherit it) skip the probe that measures which count trains
# fastest (up to seconds a run); the probe's own tests unset it
os.environ.setdefault('OMP_NUM_THREADS', '1')

TESTS = Path(__file__).resolve().parent
SHARED = TESTS.parent.parent / 'shared'
SHARED_CIFAR10 = SHARED / 'data' / 'cifar10'

# a subprocess a test starts without a timeout of its own gets this one: a hung child fails the test instead of the
# suite (a training process was once left running 10 minutes after the suite ended)
SUBPROCESS_TIMEOUT = 900

# where each tool writes its caches and run folders unless told otherwise (home or /tmp): sent into the session's
# temporary folder. WANDB_DIR is the run folder (./wandb by default, in the test's own folder), so it is left alone.
CACHE_VARIABLES = ('TMPDIR', 'TORCHINDUCTOR_CACHE_DIR', 'TRITON_CACHE_DIR', 'TORCHELASTIC_ERROR_FILE',
                   'WANDB_CACHE_DIR', 'WANDB_CONFIG_DIR', 'WANDB_DATA_DIR', 'WANDB_ARTIFACT_DIR', 'MPLCONFIGDIR')


def needs_shared(path: Path) -> str:
    """ The reason a test that needs `path` under ../shared skips when it is absent. """
    return f'needs {path} (../shared beside the repository); not found'


@pytest.fixture(scope='session')
def cifar10_dir() -> Path:
    """ The CIFAR-10 ImageFolder copy (train/ and test/, a folder per class); a test that asks for it skips, naming
    it, where it is absent or holds no class folders. """
    if not all(any(p.is_dir() for p in (SHARED_CIFAR10 / split).glob('*')) for split in ('train', 'test')):
        pytest.skip(needs_shared(SHARED_CIFAR10))
    return SHARED_CIFAR10


@pytest.fixture(scope='session', autouse=True)
def caches_in_the_session_folder(tmp_path_factory):
    """ torch.compile (inductor, triton), torchelastic (its log folder is a tempfile.mkdtemp), wandb and matplotlib
    write into the session's temporary folder, in this process and in every subprocess (they inherit os.environ). """
    root = tmp_path_factory.mktemp('caches')
    saved = {name: os.environ.get(name) for name in CACHE_VARIABLES}
    for name in CACHE_VARIABLES:
        folder = root / name.lower()
        if name == 'TORCHELASTIC_ERROR_FILE':
            os.environ[name] = str(root / 'torchelastic_error.json')
            continue
        folder.mkdir()
        os.environ[name] = str(folder)
    saved_tempdir, tempfile.tempdir = tempfile.tempdir, os.environ['TMPDIR']
    # matplotlib builds its font cache on first import; built here, a subprocess finds it instead of writing it (a
    # test that caps the size of the files a command may write would otherwise see matplotlib's warning)
    import matplotlib.font_manager  # noqa: F401
    yield root
    tempfile.tempdir = saved_tempdir
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture
def one_torch_thread(monkeypatch):
    """ Tiny models gain nothing from intra-op threads, and on a busy 2-core machine the threads' barriers make runs
    erratic (10-20x slower epochs); one thread keeps timings stable. A module that trains in process takes it with
    `pytestmark = pytest.mark.usefixtures('one_torch_thread')`: OMP_NUM_THREADS=1 as a user sets it, so that the
    training command takes one thread without probing for the fastest count; subprocesses get OMP_NUM_THREADS=1. """
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setenv('OMP_NUM_THREADS', '1')
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def generators_seeded():
    """ Each test starts from one state of torch's, numpy's and Python's generators, whatever ran before it in its
    process: a test that draws an input without a seed of its own passes or fails by itself, not by the tests that
    pytest-xdist (or a mutant's run, which takes the tests naming its module first) put before it. """
    import random
    import numpy as np
    import torch
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def thread_count_restored():
    """ A test may set torch's thread count (the determinism tests do); the next one starts with the suite's. """
    import torch
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _started_by_a_test() -> bool:
    """ Whether the code that asked for the subprocess is a test (not a library a test called, whose worker pools
    outlive one call by design). """
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename in (subprocess.__file__, __file__):
        frame = frame.f_back
    return frame is not None and Path(frame.f_code.co_filename).resolve().parent == TESTS


class _TrackedPopen(subprocess.Popen):
    started: list = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if _started_by_a_test():
            _TrackedPopen.started.append(self)


def _run_with_timeout(*args, timeout=None, **kwargs):
    if timeout is None and _started_by_a_test():
        timeout = SUBPROCESS_TIMEOUT
    return _plain_run(*args, timeout=timeout, **kwargs)


_plain_run = subprocess.run


def _kill(proc: subprocess.Popen) -> None:
    """ End a child and, when it leads its own session, its whole process group (a torchrun's workers). """
    try:
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.communicate(timeout=30)
    except (subprocess.TimeoutExpired, ValueError, OSError):
        pass


class _XdistController:
    """ pytest-xdist's controller: its workers collect and run the tests.

    Under -q its own line says 'bringing up nodes...' until the tests start (its count of the workers collecting is
    for the default verbosity and above), so a line says first that they collect.

    Ctrl-C (a SIGINT; not -x, nor a worker's own interrupt, after which the workers end as usual) ends the workers
    and every process below them at once, before the controller reports it: left to themselves, the workers took
    seconds to end (one still importing torch, timm and the test modules first wrote its own summary of the
    interrupt, which nobody reads, its fixtures ending the tests' processes after it), and execnet waits 10 s for
    each before it kills the worker alone, leaving what its test had started. Each gets SIGINT, so that one that can
    stops its test and ends it, then SIGKILL, with what is below it, if it still runs `GRACE` seconds later. """

    GRACE = 0.5

    def __init__(self):
        self.ended = None  # after Ctrl-C: the workers, those killed, the processes killed (`end_children`)

    @pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own line, which stays below it
    def pytest_xdist_setupnodes(self, config, specs):
        reporter = _terminal(config)
        if reporter is not None and config.option.verbose < 0:
            reporter.write_line(f'collecting tests in {len(specs)} workers (each imports torch, timm and the test '
                                f'modules) ...')

    def pytest_keyboard_interrupt(self, excinfo):
        if interrupts.sigint_came():
            self.ended = interrupts.end_children(self.GRACE)

    def pytest_terminal_summary(self, terminalreporter):  # what Ctrl-C ended, before pytest's account of it
        if self.ended is None:
            return
        workers, late, killed = self.ended
        below = killed - late
        terminalreporter.write_line(f'Ctrl-C: {late} of the {workers} worker{"s" if workers != 1 else ""} still '
                                    f'running {self.GRACE} s after it and {below} process{"es" if below != 1 else ""} '
                                    f'below the workers were killed')


class _Collecting:
    """ The terminal line that says pytest is collecting, updated as modules are collected. """
    shown = 0.0  # when the line was last written
    items = 0


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session):
    """ Say on a terminal that pytest is collecting, at once: importing torch, timm and the test modules takes
    seconds (tens on a busy machine), and `-q` shows nothing until it ends; this module imports none of them, so
    the line comes before they start. Then the suite's thread count: tests are small, and two threads at most keep
    two pytest processes from crowding a 2-core machine. """
    if session.config.pluginmanager.has_plugin('dsession'):  # pytest-xdist's controller: its workers collect, and
        return  # `_XdistController` says so
    reporter = _terminal(session.config)
    if reporter is not None:
        reporter.rewrite('collecting tests (importing torch, timm and the test modules) ...', erase=True)
        _Collecting.shown = time.monotonic()
    import torch
    torch.set_num_threads(min(2, os.cpu_count() or 1))


def _terminal(config):
    reporter = config.pluginmanager.get_plugin('terminalreporter')
    # a worker of pytest-xdist has `workerinput`; its environment's PYTEST_XDIST_WORKER is also inherited by the
    # pytest processes its tests start, which are not workers
    return reporter if reporter is not None and reporter.isatty and not hasattr(config, 'workerinput') else None


def pytest_collectreport(report):
    _Collecting.items += sum(isinstance(node, pytest.Item) for node in getattr(report, 'result', None) or ())
    reporter = _terminal(_Session.config) if _Session.config is not None else None
    if reporter is not None and time.monotonic() - _Collecting.shown > 0.5:
        reporter.rewrite(f'collecting tests ... {_Collecting.items}', erase=True)
        _Collecting.shown = time.monotonic()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session):
    reporter = _terminal(session.config)
    if reporter is not None:  # the line says what was collected, and the tests' own output starts below it
        count = len(session.items)
        reporter.rewrite(f'collected {count} test{"s" if count != 1 else ""}', erase=True)
        reporter.write('\n')


class _Session:
    config = None
    status = None  # pytest's exit status, once the session has finished


def pytest_configure(config):
    _Session.config = config
    interrupts.watch()


def pytest_sessionstart(session):
    if session.config.pluginmanager.has_plugin('dsession'):  # pytest-xdist's controller
        session.config.pluginmanager.register(_XdistController())


def pytest_keyboard_interrupt(excinfo):
    """ Ctrl-C: what is left (the summary, the plugins' last words, the fixtures' teardown) runs without the cyclic
    garbage collector, whose passes over a heap that holds torch, timm and every test module took seconds (an
    import the summary makes set off several), and the process ends at once after it (`pytest_unconfigure`). """
    gc.disable()


def pytest_sessionfinish(session, exitstatus):
    _Session.status = int(exitstatus)


def _exit_at_once(status: int) -> None:
    """ End the process now, its output flushed: skip the interpreter's teardown. """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    interrupts.unwatch()
    if _Session.status == pytest.ExitCode.INTERRUPTED:
        # Ctrl-C: pytest has said so, every fixture has ended (the processes the tests started with them) and every
        # plugin has unconfigured (this hook runs last); what is left is cleanup that collects the garbage of torch,
        # timm and every test module (pytest's search for unraisable exceptions, then the interpreter's teardown),
        # seconds a pass on a busy machine before the prompt came back. The process ends here instead.
        _exit_at_once(int(_Session.status))


def _then_stop_if_interrupted():
    """ A phase of a test, then KeyboardInterrupt if a SIGINT has reached the process: a command run in it takes
    Ctrl-C as its own (exit status 130), and pytest would count one failed test and go on. """
    try:
        return (yield)
    finally:
        interrupts.stop_if_interrupted()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _then_stop_if_interrupted())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _then_stop_if_interrupted())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    return (yield from _then_stop_if_interrupted())


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == 'call':
        item.call_passed = report.passed
    return report


@pytest.fixture(autouse=True)
def subprocesses_end_with_the_test(monkeypatch, request):
    """ Every subprocess a test starts has a timeout (subprocess.run's default here) and is killed when the test
    ends with it still running; a test that passed with one still running fails, as it leaks it. """
    monkeypatch.setattr(subprocess, 'Popen', _TrackedPopen)
    monkeypatch.setattr(subprocess, 'run', _run_with_timeout)
    _TrackedPopen.started = []
    yield
    left = [p for p in _TrackedPopen.started if p.poll() is None]
    for proc in left:
        _kill(proc)
    _TrackedPopen.started = []
    if getattr(request.node, 'call_passed', False):
        assert not left, f'subprocesses still running at the end of the test, killed: {[p.args for p in left]}'
