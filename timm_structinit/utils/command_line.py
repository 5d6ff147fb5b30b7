""" What the package's two commands (`timm-structinit` and `timm-structinit-train`) share on the command line: a parser
whose usage errors are one line, an error's message on one line, the line for a closed standard output, and standard
output and error whose failed writes (a full device, an I/O error) are one `StreamWriteError` naming the stream (the
exit status an error gets is in `errors`). The parser lives with the commands' parsers in `timm_structinit_cli`,
which answer `--help` without torch or timm. """
import contextlib
import logging
import sys
from typing import Callable, Iterator, List

from timm_structinit_cli.parsing import OneLineArgumentParser
from timm_structinit_cli.streams import CLOSED, ROOM, target, to_null

from ..errors import StreamWriteError

__all__ = ['OneLineArgumentParser', 'error_line', 'output_closed', 'guard_streams', 'stream_failed', 'say',
           'CommandLogHandler', 'CommandLogFormatter', 'running_command', 'command_label', 'warn']


def error_line(error: BaseException) -> str:
    """ An error's message on one line (whitespace, newlines included, collapsed), or its type's name. """
    return ' '.join(str(error).split()) or type(error).__name__


def output_closed() -> str:
    """ Standard output was closed by the program reading it (`... | head -1`): point stdout at the null device, so
    that later writes (and the flush at exit) go nowhere instead of failing again, and return the one line that
    says so. """
    to_null(sys.stdout)
    return CLOSED


class _GuardedStream:
    """ A text stream whose failed writes raise StreamWriteError naming it; everything else is the stream's. """

    def __init__(self, stream, name: str) -> None:
        self._stream, self._name = stream, name

    def _refused(self, error: OSError) -> StreamWriteError:
        return StreamWriteError(f'{self._name}{target(self._stream)}', error)

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:  # a reader that closed it: `output_closed`
            raise
        except OSError as e:
            raise self._refused(e) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as e:
            raise self._refused(e) from None

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def guard_streams() -> Callable[[], None]:
    """ Make sys.stdout and sys.stderr raise StreamWriteError for a write the device refuses, and return the function
    that puts them back. (A command flushes its output before it ends, so that block-buffered output fails inside
    it, not at exit as Python's 'Exception ignored' with status 120.) """
    saved = sys.stdout, sys.stderr
    sys.stdout = _GuardedStream(saved[0], 'standard output')
    sys.stderr = _GuardedStream(saved[1], 'standard error')

    def restore() -> None:
        sys.stdout, sys.stderr = saved
    return restore


def stream_failed(error: StreamWriteError) -> str:
    """ Point the stream that failed at the null device (later writes and the flush at exit go nowhere instead of
    failing again) and return the one line that says what failed. """
    to_null(sys.stderr if 'standard error' in str(error) else sys.stdout)
    return f'{error}; {ROOM}'


def say(line: str) -> None:
    """ Print a command's last line on standard error; a standard error that cannot take it leaves only the status. """
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        pass


class CommandLogHandler(logging.StreamHandler):
    """ A command's log on a stream; a stream that fails (closed by its reader, a full device) ends the command as its
    `main` says, where logging's own handler would print a traceback for each later line and go on. """

    def handleError(self, record: logging.LogRecord) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            raise
        super().handleError(record)


_RUNNING: List[str] = []  # the commands running in this process, innermost last: `timm-structinit compare`, ...


@contextlib.contextmanager
def running_command(label: str) -> Iterator[None]:
    """ While the context lasts, the package's warnings are labelled `label`: the command the user ran, whichever
    part of the package (the training command's checks under `timm-structinit compare`, say) warns. """
    _RUNNING.append(label)
    try:
        yield
    finally:
        _RUNNING.pop()


def command_label(default: str) -> str:
    """ The command the user ran, as `running_command` set it; `default` outside any (a program using the package). """
    return _RUNNING[-1] if _RUNNING else default


def warn(text: str, default: str) -> None:
    """ A warning on standard error, labelled with the command the user ran (`default` outside one). """
    print(f'{command_label(default)}: warning: {text}', file=sys.stderr)


class CommandLogFormatter(logging.Formatter):
    """ Log records as the command's own lines: `LABEL: warning: message` (the level in lower case), LABEL the
    command the user ran (`default` outside one); records below `labelled` (a level) as their message alone, as a
    run's progress lines are. """

    def __init__(self, default: str, labelled: int = logging.NOTSET) -> None:
        super().__init__()
        self.default, self.labelled = default, labelled

    def format(self, record: logging.LogRecord) -> str:
        if record.levelno < self.labelled:
            return record.getMessage()
        return f'{command_label(self.default)}: {record.levelname.lower()}: {record.getMessage()}'

