""" How soon the test command gives the prompt back after Ctrl-C, and how soon it says that it is collecting.

The README's test command (`python -m pytest -q -m "not slow"`, `-n 2 --dist loadgroup` with `--xdist`) is started
on a pseudo-terminal, as a shell starts it, and after each delay of `--delays` (seconds from the start: while it
collects, then while tests run) a SIGINT is sent to its process group, as the terminal's Ctrl-C sends it; what is
timed is the wall clock from the signal to the end of its last process, and from the start to the first output that
says it is collecting. The load average before and after each trial is printed beside it: on a busy machine every
figure grows with the load.

    python benchmarks/pytest_interrupt.py --out benchmarks/results/pytest_interrupt.txt
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
from datetime import datetime
from pathlib import Path

from results_file import Report

REPO = Path(__file__).resolve().parents[1]


def load_average() -> str:
    return ' '.join(Path('/proc/loadavg').read_text().split()[:3])


def trial(command, delay: float) -> dict:
    """ One run of `command` on a pseudo-terminal, SIGINT to its group `delay` seconds after it starts. """
    main, terminal = pty.openpty()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get('PYTHONPATH')])))
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
            if collecting is None and (b'collecting' in shown or b'bringing up nodes' in shown):
                collecting = time.monotonic() - start
        elif proc.poll() is not None:
            break
    proc.wait()
    os.close(main)
    ended = time.monotonic()
    return dict(collecting=collecting, after_sigint=ended - signalled if signalled else None,
                status=proc.returncode)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--delays', type=float, nargs='+', default=[3.0, 8.0, 15.0, 25.0])
    parser.add_argument('--xdist', action='store_true', help='the command CI runs: -n 2 --dist loadgroup')
    parser.add_argument('--out', default='')
    args = parser.parse_args()
    command = [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-m', 'not slow',
               *(['-n', '2', '--dist', 'loadgroup'] if args.xdist else [])]
    commit = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=REPO, capture_output=True,
                            text=True).stdout.strip() or 'unknown'
    report = Report([
        f'# command: python {shlex.join(sys.argv)}',
        f'# date: {datetime.now().isoformat(timespec="seconds")}; {platform.machine()}, {os.cpu_count()} CPUs; '
        f'package {commit}',
        f'# the test command: {shlex.join(["python", *command[1:]])}, on a pseudo-terminal; SIGINT to its process '
        f'group after each delay; seconds to the first line that says it collects, and from the signal to the end'])
    for delay in args.delays:
        before = load_average()
        run = trial(command, delay)
        collecting = f'{run["collecting"]:.1f} s' if run['collecting'] is not None else 'never'
        report.add(f'SIGINT at {delay:5.1f} s: prompt back {run["after_sigint"]:.2f} s after it (exit status '
                   f'{run["status"]}); said it was collecting at {collecting}; load average {before} before, '
                   f'{load_average()} after')
    report.write(args.out)


if __name__ == '__main__':
    main()
