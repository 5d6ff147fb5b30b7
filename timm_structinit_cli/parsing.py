""" What the parsers of both commands share: usage errors on one line, help and version text that a stream refusing
it does not lose silently, and help that gives each option's default once. """
import argparse
import sys
from difflib import get_close_matches
from typing import Sequence

from .streams import refused_line

__all__ = ['OneLineArgumentParser', 'OneDefaultHelpFormatter']


class OneLineArgumentParser(argparse.ArgumentParser):
    """ An ArgumentParser whose usage errors are one line naming the offending option, not the whole usage, and whose
    `--help` and `--version` that standard output cannot take (a full device) end in one line on standard error
    with status 1, as every command's output does, where argparse drops them silently and exits 0. """

    def _print_message(self, message: str, file=None) -> None:
        if not message:
            return
        file = file or sys.stderr
        try:
            file.write(message)
            file.flush()  # a block-buffered stream fails here, not at exit
        except OSError as e:
            line = refused_line(file, e)
            if file is not sys.stderr:  # an error's own line that standard error refused leaves only its status
                self.exit(1, f'{self.prog}: error: {line}\n')

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


class OneDefaultHelpFormatter(argparse.HelpFormatter):
    """ argparse's ArgumentDefaultsHelpFormatter, less what repeats itself or says nothing: a help that already names
    its default (its text says 'default') is left as written, and a default that is no value (None, '', an empty list
    or mapping, a flag's False) is not printed. A list is printed as it is typed (`0.08 1.0`). """

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ''
        default = action.default
        if 'default' in text.lower() or not _shown(default):
            return text
        if not action.option_strings and action.nargs not in (argparse.OPTIONAL, argparse.ZERO_OR_MORE):
            return text  # a required positional argument has no default to speak of
        shown = ' '.join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
        return f'{text} (default: {shown.replace("%", "%%")})'


def _shown(default) -> bool:
    """ Whether a default is a value worth printing. """
    if default is None or default is False or default is argparse.SUPPRESS:
        return False
    return not (isinstance(default, (str, list, tuple, dict)) and not default)
