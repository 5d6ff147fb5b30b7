""" What both commands say when standard output or error refuses a write (a full device, a reader that closed the
pipe), without torch: where the stream goes, the one line that says so, and the stream pointed at the null device so
that later writes and the flush at exit go nowhere instead of failing again (Python's 'Exception ignored' and status
120). `timm_structinit.utils.command_line` says it this way for a running command, the parsers for `--help` and
`--version`. """
import os
import sys

__all__ = ['CLOSED', 'ROOM', 'target', 'to_null', 'refused_line']

CLOSED = ('standard output was closed by the program reading it (a broken pipe); redirect it to a file to keep all '
          'of it')
ROOM = 'write it to a device with room (or redirect it to /dev/null)'


def target(stream) -> str:
    """ ' (WHERE)': where the stream goes (/dev/full, a file), as the kernel names it; '' where it cannot say. """
    try:
        return f' ({os.readlink(f"/proc/self/fd/{stream.fileno()}")})'
    except (OSError, ValueError, AttributeError):
        return ''


def to_null(stream) -> None:
    """ Point the stream's file descriptor at the null device. """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def refused_line(stream, error: OSError) -> str:
    """ The line for a write `stream` refused with `error`, the stream pointed at the null device. """
    if isinstance(error, BrokenPipeError):
        to_null(stream)
        return CLOSED
    name = 'standard error' if stream is sys.stderr else 'standard output'
    line = f'cannot write to {name}{target(stream)}: {error.strerror or error}; {ROOM}'
    to_null(stream)
    return line
