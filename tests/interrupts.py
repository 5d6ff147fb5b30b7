""" A Ctrl-C aimed at the test process stops pytest, whatever the test is running.

The commands the tests run in this process (the training command's `main`, the CLI's) take Ctrl-C as a user needs
them to: they stop, clean up, and return exit status 130. Under pytest that turns the interrupt into one failed test,
and the suite goes on. Whichever handler is in place when a signal comes, Python writes the signal's number to its
wakeup file descriptor (`signal.set_wakeup_fd`); here that is a pipe, read after each command run in this process
(`run_main`) and after each phase of each test (conftest): a SIGINT found there is raised again as the
KeyboardInterrupt that stops pytest. Nothing the commands do changes, and a test that raises KeyboardInterrupt itself
(to stand for a Ctrl-C) sends no signal, so it stays a test; a test that sent SIGINT to its own process would stop
the suite (the tests signal the processes they start, never their own). pytest-xdist's controller passes a SIGINT on
to its workers (`interrupt_children`), each of which then stops as above. """
import os
import signal
from pathlib import Path

__all__ = ['watch', 'unwatch', 'sigint_came', 'stop_if_interrupted', 'interrupt_children',
           'signals_as_in_a_terminal']


class _Pipe:
    read = -1  # the pipe's read end while watching, else -1
    write = -1
    interrupted = False  # a SIGINT has come


def watch() -> None:
    """ Start noting the signals that reach this process; not where another wakeup descriptor is set already (an
    event loop's), nor outside the main thread (where Python allows none). """
    read, write = os.pipe()
    os.set_blocking(read, False)
    os.set_blocking(write, False)  # a full pipe loses a signal's byte, never blocks the handler
    try:
        previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    except ValueError:
        previous = None
    if previous != -1:
        if previous is not None:
            signal.set_wakeup_fd(previous)
        os.close(read)
        os.close(write)
        return
    _Pipe.read, _Pipe.write, _Pipe.interrupted = read, write, False


def unwatch() -> None:
    if _Pipe.read == -1:
        return
    current = signal.set_wakeup_fd(-1)
    if current != _Pipe.write:  # someone else's since: theirs stays
        signal.set_wakeup_fd(current)
    os.close(_Pipe.read)
    os.close(_Pipe.write)
    _Pipe.read = _Pipe.write = -1


def sigint_came() -> bool:
    """ Whether a SIGINT has reached this process since `watch`; reads what the pipe holds (every caught signal's
    number, SIGCHLD's included), so that it never fills up. """
    _rearm()
    while _Pipe.read != -1:
        try:
            numbers = os.read(_Pipe.read, 4096)
        except BlockingIOError:
            break
        if not numbers:
            break
        _Pipe.interrupted = _Pipe.interrupted or signal.SIGINT in numbers
    return _Pipe.interrupted


def _rearm() -> None:
    """ Set the pipe as the wakeup descriptor again if code under test cleared it (an asyncio loop that stops
    handling signals sets none); one that code under test set stays. """
    if _Pipe.read == -1:
        return
    try:
        current = signal.set_wakeup_fd(_Pipe.write, warn_on_full_buffer=False)
        if current not in (-1, _Pipe.write):
            signal.set_wakeup_fd(current)
    except ValueError:  # not the main thread
        pass


def stop_if_interrupted() -> None:
    """ Raise KeyboardInterrupt when a SIGINT has reached this process, whatever handled it. """
    if sigint_came():
        raise KeyboardInterrupt('SIGINT reached the test process (a command it ran took it as its own Ctrl-C)')


def interrupt_children() -> None:
    """ Send SIGINT to this process's children (Linux; elsewhere none are found). """
    children = []
    for task in Path('/proc/self/task').glob('*'):
        try:
            children += [int(pid) for pid in (task / 'children').read_text().split()]
        except (OSError, ValueError):
            pass
    for pid in children:
        try:
            os.kill(pid, signal.SIGINT)
        except (ProcessLookupError, PermissionError):
            pass


def signals_as_in_a_terminal() -> None:
    """ A subprocess's preexec_fn: SIGINT at its default action, as a shell with a terminal starts a command. A process
    started in the background of a shell without job control (`cmd &` in a script) inherits SIGINT ignored, and so
    does a pytest-xdist worker; a child inherits that, and Python then installs no KeyboardInterrupt handler. """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
