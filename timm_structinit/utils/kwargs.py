""" `key=value ...` items on the command line, both ways: `ParseKwargs` reads them (timm's reading, stricter; it lives
with the parsers in `timm_structinit_cli.kwargs`), `format_kwargs` writes a dict so that `ParseKwargs` reads it
back; `non_string_key` finds what no keyword argument can be, in them or in a YAML mapping. """
import ast
import shlex
from typing import Any, Mapping

from timm_structinit_cli.kwargs import ParseKwargs, non_string_key

__all__ = ['ParseKwargs', 'non_string_key', 'format_kwargs']


def format_kwargs(kwargs: Mapping[str, Any]) -> str:
    """ `k=v ...` items that `ParseKwargs` reads back as `kwargs` (values go through ast.literal_eval, as in timm's
    train.py): literals in double quotes where that reads the same, a string that is no literal as it is. """
    def text(value: Any) -> str:
        try:
            ast.literal_eval(value) if isinstance(value, str) else None
        except (ValueError, SyntaxError):
            return value
        double = repr(value).replace("'", '"')
        return double if ast.literal_eval(double) == value else repr(value)
    return ' '.join(shlex.quote(f'{key}={text(value)}') for key, value in kwargs.items())
