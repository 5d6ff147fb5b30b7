""" The package's error types, and the exit status a command gives each failure.

Every expected failure of a command is one line; its exit status says where the fault lies: 2 the input (an
argument, a file or folder it names, the data), 1 the work itself (a full disk, a refused write, a network or the
Hub, a diverged loss), 128 + N a stop by signal N. Errors raised below the commands are ValueError (bad input) or
OSError (the file system) where Python has one; the types here carry what those cannot.
"""
import signal

__all__ = ['INPUT_ERROR', 'WORK_FAILED', 'ConfigError', 'DataError', 'ImageReadError', 'OutputWriteError', 'HubError',
           'StreamWriteError', 'RunStopped', 'exit_status']

INPUT_ERROR = 2
WORK_FAILED = 1


class ConfigError(ValueError):
    """ An argument or config value is invalid; the message names it and what would be valid. """


class DataError(ValueError):
    """ The data asked for cannot be found or used; the message says which flag or path would fix it. """


class ImageReadError(RuntimeError):
    """ An image file could not be decoded; the message is one line naming the file. """

    def __init__(self, message: str) -> None:
        # a DataLoader worker's error is raised again in the main process with the worker's traceback as its
        # message; keep only this error's own line, the traceback's last
        if 'Original Traceback' in message:
            message = message.rstrip().splitlines()[-1].split(f'{type(self).__name__}: ', 1)[-1]
        super().__init__(message)


class OutputWriteError(RuntimeError):
    """ The output folder refused a file of the run (a full or read-only file system): the run stops with one line,
    keeping the last checkpoint that was written whole. """


class StreamWriteError(OSError):
    """ A command's standard output or error refused a write (a full device, an I/O error): the message names the
    stream, where it goes and the operating system's reason. (A reader that closed the stream is BrokenPipeError.) """

    def __init__(self, stream: str, cause: OSError) -> None:
        super().__init__(f'cannot write to {stream}: {cause.strerror or cause}')
        self.errno = cause.errno


class HubError(RuntimeError):
    """ A Hub request failed (network, authentication, permissions): the message is one line and holds no token. """


class RunStopped(KeyboardInterrupt):
    """ A stop signal, handled as Ctrl-C is (KeyboardInterrupt), carrying the signal's number. """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


# the input's fault: an invalid value, or a file or folder it names that is missing, of the wrong kind or not ours
_INPUT_ERRORS = (ValueError, FileExistsError, FileNotFoundError, NotADirectoryError, IsADirectoryError,
                 PermissionError)


def exit_status(error: BaseException) -> int:
    """ 128 + the signal for a stop, 2 when the input is wrong, 1 when the work itself failed. """
    if isinstance(error, KeyboardInterrupt):
        return 128 + getattr(error, 'signum', signal.SIGINT)
    return INPUT_ERROR if isinstance(error, _INPUT_ERRORS) else WORK_FAILED
