""" What the package's two commands (`timm-structinit` and `timm-structinit-train`) share on the command line: a parser
whose usage errors are one line, an error's message on one line, and the line for a closed standard output (the exit
status an error gets is in `errors`). """
import argparse
import os
import sys
from difflib import get_close_matches
from typing import Sequence

__all__ = ['OneLineArgumentParser', 'error_line', 'output_closed']


class OneLineArgumentParser(argparse.ArgumentParser):
    """ An ArgumentParser whose usage errors are one line naming the offending option, not the whole usage. """

    def error(self, message: str):
        if message.startswith('unrecognized arguments:'):
            message += self._unknown_option_hint(message.split()[2:])
        self.exit(2, f'{self.prog}: error: {message} (see {self.prog} --help)\n')

    def _unknown_option_hint(self, words: Sequence[str]) -> str:
        """ What the unrecognized `words` were probably meant as ('' when nothing is close). """
        if '--model' in words and any(a.dest == 'model' and not a.option_strings for a in self._actions):
            # timm-structinit-train takes --model; these commands take the model as their first argument
            return f'; name the model without --model: {self.prog} MODEL ...'
        options = [option for action in self._actions for option in action.option_strings]
        close = set()
        for word in (w.split('=')[0] for w in words if w.startswith('--')):
            close.update([o for o in options if o.startswith(word)][:1] or get_close_matches(word, options, 1, 0.75))
        return f'; did you mean {", ".join(sorted(close))}?' if close else ''


def error_line(error: BaseException) -> str:
    """ An error's message on one line (whitespace, newlines included, collapsed), or its type's name. """
    return ' '.join(str(error).split()) or type(error).__name__


def output_closed() -> str:
    """ Standard output was closed by the program reading it (`... | head -1`): point stdout at the null device, so
    that later writes (and the flush at exit) go nowhere instead of failing again, and return the one line that
    says so. """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return ('standard output was closed by the program reading it (a broken pipe); redirect it to a file to keep '
            'all of it')
