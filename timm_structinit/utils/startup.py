""" A stop while one of the package's commands starts up.

Importing torch and timm takes seconds, before a command's own handling of Ctrl-C, SIGTERM and SIGHUP is in place;
Python's default would print a KeyboardInterrupt traceback through the import machinery (or end the process without
a word). When this process is one of the package's commands, a stop in that window prints one line and exits with
128 + the signal's number; nothing has been written yet. A program that imports the package is left alone.
"""
import os
import signal
import sys

__all__ = ['command_name', 'quiet_startup_stops', 'command_started']

# the console scripts, and the modules `python -m` runs as them
COMMANDS = {'timm-structinit': 'timm_structinit.cli', 'timm-structinit-train': 'timm_structinit.train'}


def command_name() -> str:
    """ The package's command this process runs ('' if none): a console script, or `python -m` on its module. """
    name = os.path.basename(sys.argv[0]) if sys.argv else ''
    if name in COMMANDS:
        return name
    argv = getattr(sys, 'orig_argv', [])
    for i, arg in enumerate(argv[:-1]):
        if arg == '-m':
            module = argv[i + 1]
            return next((cmd for cmd, mod in COMMANDS.items() if module in (mod, mod + '.__main__')), '')
    return ''


class _Phase:
    started = False  # the command's own handlers were installed: a stop that reaches ours now came after them


def command_started() -> None:
    """ Called when a command installs its own stop handlers: when they are put back at its end, a stop that
    reaches this module's handler came after the command's work, not before it. """
    _Phase.started = True


def quiet_startup_stops() -> None:
    """ Until the command installs its own handlers, end on SIGINT, SIGTERM or SIGHUP with one line. """
    name = command_name()
    if not name:
        return

    def handler(signum, frame):
        when = ('while exiting, after the command had finished' if _Phase.started
                else 'while starting: nothing was done')
        try:
            print(f'{name}: interrupted ({signal.Signals(signum).name}) {when}', file=sys.stderr, flush=True)
        except (OSError, ValueError):  # stderr closed
            pass
        # exit here rather than raise: the handler can run inside native code that calls back into Python (torch's
        # C++ modules as they initialize), and an exception cannot pass back through it (the process aborts with a
        # C++ report); nothing needs cleaning up yet
        os._exit(128 + signum)

    for signum in (signal.SIGINT, getattr(signal, 'SIGTERM', None), getattr(signal, 'SIGHUP', None)):
        if signum is not None and signal.getsignal(signum) in (signal.default_int_handler, signal.SIG_DFL):
            signal.signal(signum, handler)
