""" The values both command lines read that argparse cannot check alone: a seed (the one valid range of the
package) and a stop signal. Plain Python, so that a bad value is a usage error before torch is imported. """
import argparse
import signal

__all__ = ['SEED_MAX', 'seed', 'STOP_SIGNALS', 'STOPPABLE', 'stop_signal', 'stop_signal_argument']

# what a signed 64-bit integer holds: torch takes any seed below 2**64, numpy's legacy generator gets it modulo 2**32
SEED_MAX = 2 ** 63 - 1

# the signals a run takes as a stop besides Ctrl-C (SIGINT, always one), by default and at most: those a scheduler,
# a container runtime or a terminal sends to end a process. SIGCHLD (a worker ending), SIGPIPE (a closed output, said
# as such), SIGKILL and SIGSTOP (which no process can catch) and the faults (SIGSEGV, SIGABRT, ...) are not stops.
STOP_SIGNALS = tuple(name for name in ('SIGTERM', 'SIGHUP', 'SIGUSR1') if hasattr(signal, name))
STOPPABLE = tuple(name for name in ('SIGTERM', 'SIGHUP', 'SIGUSR1', 'SIGUSR2', 'SIGQUIT', 'SIGALRM', 'SIGXCPU')
                  if hasattr(signal, name))


def seed(text: str) -> int:
    """ argparse type of --seed: an integer from 0 to SEED_MAX. """
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f'{text!r} is not a valid seed; valid: an integer from 0 to 2**63 - 1')
    return value


def stop_signal(text: str) -> str:
    """ A signal's name (SIGUSR1, USR1, usr1) or number, as its name; ValueError naming the valid ones. """
    name = str(text).strip().upper()
    if name.isdigit():
        try:
            name = signal.Signals(int(name)).name
        except ValueError:
            pass
    name = name if name.startswith('SIG') else f'SIG{name}'
    if name not in STOPPABLE:
        raise ValueError(f'{text!r} is not a stop signal here; valid: {", ".join(STOPPABLE)} (names or numbers; '
                         f'SIGINT, Ctrl-C, always stops a run)')
    return name


def stop_signal_argument(text: str) -> str:
    """ argparse type of --stop-signals: `stop_signal`, its error as argparse's one usage line. """
    try:
        return stop_signal(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
