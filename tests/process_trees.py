""" The processes below a process, read from /proc (Linux; elsewhere none are found): a process's children, the
trees below some processes ended so that none of their processes is left (`kill_trees`), the processes that carry a
variable in their environment (`carrying`: every process a command started, whatever its session or group, as each
inherits the environment) and those of a process group (`in_group`).

A process is held through a pidfd from the moment it is found, so that a signal never reaches another process that
was given a freed id; a process that ends before it is found has nothing left to end. """
import os
import signal
import time
from pathlib import Path

__all__ = ['children', 'hold', 'send', 'kill_trees', 'carrying', 'in_group']


def children(pid: int) -> list:
    """ The ids of the children of process `pid` (of each of its threads). """
    found = []
    for task in Path(f'/proc/{pid}/task').glob('*'):
        try:
            found += [int(child) for child in (task / 'children').read_text().split()]
        except (OSError, ValueError):
            pass
    return found


def hold(pids) -> dict:
    """ A pidfd for each process of `pids` that still exists, by id. """
    held = {}
    for pid in pids:
        try:
            held[pid] = os.pidfd_open(pid)
        except (OSError, AttributeError):  # gone, or no pidfds (not Linux)
            pass
    return held


def send(pidfd: int, number: int) -> None:
    try:
        signal.pidfd_send_signal(pidfd, number)
    except OSError:  # ended meanwhile
        pass


def _state(pid: int) -> str:
    """ A process's state letter (R, S, D, T, Z, ...), '' once it is gone. """
    try:
        return Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[0]
    except (OSError, IndexError):
        return ''


def _stopped(pids, timeout: float = 1.0) -> None:
    """ Wait until each process has stopped or ended (a SIGSTOP takes effect when the process next runs; one in
    uninterruptible sleep stops after it), for `timeout` seconds at most. """
    deadline = time.monotonic() + timeout
    while any(_state(pid) not in ('', 'T', 't', 'Z', 'X') for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.005)


def kill_trees(held: dict) -> int:
    """ End the processes of `held` (pidfds by id) and every process below them; returns how many were running.

    Each is stopped first (SIGSTOP), and the children of the stopped ones are found and stopped in turn until no new
    one appears: a stopped process starts none, so none escapes, as a child of a process killed while it started it
    would (orphaned, it would run on under init). Then all of them get SIGKILL. """
    stopped, pending = {}, dict(held)
    while pending:
        for pidfd in pending.values():
            send(pidfd, signal.SIGSTOP)
        stopped.update(pending)
        _stopped(pending)
        found = [child for pid in pending for child in children(pid) if child not in stopped]
        pending = hold(found)
    running = 0
    for pid, pidfd in stopped.items():
        running += _state(pid) not in ('', 'Z', 'X')  # not those that had ended (zombies not yet reaped)
        send(pidfd, signal.SIGKILL)
        os.close(pidfd)
    return running


def _running():
    """ Each process running (not ended): its /proc folder and the fields of its stat after its name (state, parent,
    group, ...). """
    for folder in Path('/proc').glob('[0-9]*'):
        try:
            fields = (folder / 'stat').read_text().rsplit(')', 1)[1].split()
        except (OSError, IndexError):  # gone
            continue
        if fields[0] not in ('Z', 'X'):
            yield folder, fields


def _described(folder: Path) -> tuple:
    try:
        return int(folder.name), (folder / 'cmdline').read_bytes().replace(b'\0', b' ').decode(errors='replace')
    except OSError:
        return int(folder.name), '?'


def carrying(variable: str, value: str) -> list:
    """ The processes running with `variable=value` in their environment, as (id, command line). """
    entry, found = f'{variable}={value}'.encode(), []
    for folder, _ in _running():
        try:
            if entry in (folder / 'environ').read_bytes().split(b'\0'):
                found.append(_described(folder))
        except OSError:  # gone, or not ours to read
            pass
    return found


def in_group(group: int) -> list:
    """ The processes running in process group `group`, as (id, command line). """
    return [_described(folder) for folder, fields in _running() if fields[2] == str(group)]
