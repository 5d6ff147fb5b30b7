""" One of the package's commands as it starts up: a stop before its own handlers are in place, and a working folder
that no longer exists.

Importing torch and timm takes seconds, before a command's own handling of Ctrl-C, SIGTERM, SIGHUP and SIGUSR1 is in
place; Python's default would print a KeyboardInterrupt traceback through the import machinery (or end the process
without a word). When this process is one of the package's commands, a stop in that window prints one line and exits
with 128 + the signal's number; nothing has been written yet. A program that imports the package is left alone.

A working folder deleted before or while a command runs makes every relative path fail, and oneMKL, which torch
loads as it is imported, aborts the process ('Intel oneMKL FATAL ERROR: Cannot load libtorch_cpu.so'): a command
started in one says so in one line before it imports torch, and one whose folder goes while it runs names it
(`working_folder_gone`).
"""
import os
import signal
import sys
from typing import Optional

__all__ = ['command_name', 'quiet_startup_stops', 'command_started', 'refuse_gone_working_folder',
           'working_folder_gone']

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
    folder = ''  # the working folder the command started in


def working_folder_gone() -> Optional[str]:
    """ The one line for a working folder that no longer exists, or None while it does. """
    try:
        _Phase.folder = os.getcwd()
        return None
    except FileNotFoundError:
        folder = _Phase.folder or os.environ.get('PWD', '')  # the shell's record of it, for one started there
        where = f' {folder}' if folder else ''
        return (f'the working folder{where} no longer exists (deleted?); run the command again from an existing '
                f'folder')


def refuse_gone_working_folder() -> None:
    """ A command started in a folder that no longer exists ends with one line and status 2, before torch is imported;
    a program that imports the package is left alone. """
    name = command_name()
    line = working_folder_gone() if name else None
    if line:
        try:
            print(f'{name}: error: {line}', file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass
        sys.exit(2)


def command_started() -> None:
    """ Called when a command installs its own stop handlers: when they are put back at its end, a stop that
    reaches this module's handler came after the command's work, not before it. """
    _Phase.started = True


def quiet_startup_stops() -> None:
    """ Until the command installs its own handlers, end on SIGINT, SIGTERM, SIGHUP or SIGUSR1 (a scheduler's
    pre-emption warning) with one line. """
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

    for signum in (signal.SIGINT, *(getattr(signal, name, None) for name in ('SIGTERM', 'SIGHUP', 'SIGUSR1'))):
        if signum is not None and signal.getsignal(signum) in (signal.default_int_handler, signal.SIG_DFL):
            signal.signal(signum, handler)
