""" A Ctrl-C aimed at the test process stops pytest, whatever the test is running.

The commands the tests run in this process (the training command's `main`, the CLI's) take Ctrl-C as a user needs
them to: they stop, clean up, and return exit status 130. Under pytest that turns the interrupt into one failed test,
and the suite goes on. Whichever handler is in place when a signal comes, Python writes the signal's number to its
wakeup file descriptor (`signal.set_wakeup_fd`); here that is a pipe, read after each command run in this process
(`run_main`) and after each phase of each test (conftest): a SIGINT found there is raised again as the
KeyboardInterrupt that stops pytest. Nothing the commands do changes, and a test that raises KeyboardInterrupt itself
(to stand for a Ctrl-C) sends no signal, so it stays a test; a test that sent SIGINT to its own process would stop
the suite (the tests signal the processes they start, never their own). pytest-xdist's controller, interrupted, ends
its workers and every process below them (`end_children`): a worker still importing torch, timm and the test modules,
or writing its own summary of the interrupt, which nobody reads, took seconds more to end on its own. """
import os
import select
import signal
import time

import process_trees

__all__ = ['watch', 'unwatch', 'sigint_came', 'stop_if_interrupted', 'end_children',
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


def end_children(grace: float) -> tuple:
    """ End this process's children and every process below them: SIGINT to each child, so that it may stop on its
    own, then, after `grace` seconds or once every child has ended, SIGKILL to every process still running that was
    below them when this was called (a child that stopped in time may have left some) or is below them then (a child
    that did not may have started more). Returns how many children there were, how many of them were still running
    after `grace` seconds, and how many processes were killed in all. """
    workers = process_trees.hold(process_trees.children(os.getpid()))
    below, pending = {}, list(workers)
    while pending:  # the trees as they are now: a child that ends leaves its own children to init, out of reach
        found = process_trees.hold(child for pid in pending for child in process_trees.children(pid))
        below.update(found)
        pending = list(found)
    for pidfd in workers.values():
        process_trees.send(pidfd, signal.SIGINT)
    deadline, running = time.monotonic() + grace, set(workers.values())
    while running and time.monotonic() < deadline:  # a pidfd reads as ready once its process has ended
        running -= set(select.select(list(running), [], [], max(0.0, deadline - time.monotonic()))[0])
    return len(workers), len(running), process_trees.kill_trees({**workers, **below})


def signals_as_in_a_terminal() -> None:
    """ A subprocess's preexec_fn: SIGINT at its default action, as a shell with a terminal starts a command. A process
    started in the background of a shell without job control (`cmd &` in a script) inherits SIGINT ignored, and so
    does a pytest-xdist worker; a child inherits that, and Python then installs no KeyboardInterrupt handler. """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
