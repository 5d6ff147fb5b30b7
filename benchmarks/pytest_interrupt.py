""" How soon the test command gives the prompt back after Ctrl-C, and how soon it says that it is collecting.

The README's test commands (`python -m pytest -q -m "not slow"`; `-n 2 --dist loadgroup` in place of `-m "not slow"`
with `--xdist 2`) are started on a pseudo-terminal, as a shell starts them, and after each delay of `--delays`
(seconds from the start: while it collects, then while tests run) a SIGINT is sent to the command's process group, as
the terminal's Ctrl-C sends it; what is timed is the wall clock from the signal to the end of its last process (the
prompt back), and from the start to the first output that says it is collecting. Then the processes of the command
still running are counted: every process it started carries a variable in its environment, whatever its session or
group. The load average before and after each trial is printed beside it: on a busy machine every figure grows with
the load.

    python benchmarks/pytest_interrupt.py --out benchmarks/results/pytest_interrupt.txt
    python benchmarks/pytest_interrupt.py --xdist 2 --delays 3 8 15 25 70 --out ...
"""
import argparse
import os
import platform
import pty
import select
import shlex
import signal
import subprocess
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

from results_file import Report

REPO = Path(__file__).resolve().parents[1]
MARK = 'PYTEST_INTERRUPT_TRIAL'  # the variable every process of a trial carries


def load_average() -> str:
    return ' '.join(Path('/proc/loadavg').read_text().split()[:3])


def running_with(mark: str) -> list:
    """ The processes running (not ended) whose environment holds MARK=mark: their ids and command lines. """
    entry, found = f'{MARK}={mark}'.encode(), []
    for folder in Path('/proc').glob('[0-9]*'):
        try:
            ended = (folder / 'stat').read_text().rsplit(')', 1)[1].split()[0] in 'ZX'
            if not ended and entry in (folder / 'environ').read_bytes().split(b'\0'):
                found.append((int(folder.name), (folder / 'cmdline').read_bytes().replace(b'\0', b' ').decode()))
        except (OSError, IndexError):  # gone, or not ours to read
            pass
    return found


def trial(command, delay: float) -> dict:
    """ One run of `command` on a pseudo-terminal, SIGINT to its group `delay` seconds after it starts. """
    main, terminal = pty.openpty()
    mark = uuid.uuid4().hex
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get('PYTHONPATH')])),
               **{MARK: mark})
    start = time.monotonic()
    proc = subprocess.Popen(command, cwd=REPO, env=env, stdin=terminal, stdout=terminal, stderr=terminal,
                            start_new_session=True)
    os.close(terminal)
    shown, collecting, signalled = b'', None, None
    while True:
        now = time.monotonic()
        if signalled is None and now - start >= delay:
            os.killpg(proc.pid, signal.SIGINT)
            signalled = now
        ready = select.select([main], [], [], 0.02)[0]
        if ready:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the terminal closed: every process of it ended
                chunk = b''
            if not chunk and proc.poll() is not None:
                break
            shown += chunk
            if collecting is None and b'collecting' in shown:
                collecting = time.monotonic() - start
        elif proc.poll() is not None:
            break
    proc.wait()
    os.close(main)
    ended = time.monotonic()
    left = running_with(mark)
    for pid, _ in left:  # counted, then ended: the next trial starts on the machine as it was
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return dict(collecting=collecting, after_sigint=ended - signalled if signalled else None,
                status=proc.returncode, left=left)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--delays', type=float, nargs='+', default=[3.0, 8.0, 15.0, 25.0])
    parser.add_argument('--xdist', type=int, default=0, metavar='N',
                        help='run every test in N pytest-xdist workers (-n N --dist loadgroup; CI: 2) in place of the '
                             'fast subset in one process')
    parser.add_argument('--out', default='')
    args = parser.parse_args()
    command = [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
               *(['-n', str(args.xdist), '--dist', 'loadgroup'] if args.xdist else ['-m', 'not slow'])]
    commit = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=REPO, capture_output=True,
                            text=True).stdout.strip() or 'unknown'
    report = Report([
        f'# command: python {shlex.join(sys.argv)}',
        f'# date: {datetime.now().isoformat(timespec="seconds")}; {platform.machine()}, {os.cpu_count()} CPUs; '
        f'package {commit}',
        f'# the test command: {shlex.join(["python", *command[1:]])}, on a pseudo-terminal; SIGINT to its process '
        f'group after each delay; seconds to the first line that says it collects, and from the signal to the end; '
        f'processes of the command left running after it'])
    for delay in args.delays:
        before = load_average()
        run = trial(command, delay)
        collecting = f'{run["collecting"]:.1f} s' if run['collecting'] is not None else 'never'
        report.add(f'SIGINT at {delay:5.1f} s: prompt back {run["after_sigint"]:.2f} s after it (exit status '
                   f'{run["status"]}); said it was collecting at {collecting}; {len(run["left"])} processes left; '
                   f'load average {before} before, {load_average()} after',
                   *(f'  left running: {line[:200]}' for _, line in run['left']))
    report.write(args.out)


if __name__ == '__main__':
    main()
