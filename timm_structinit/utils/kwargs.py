""" `key=value ...` items on the command line, both ways: `ParseKwargs` reads them (timm's parser, stricter),
`format_kwargs` writes a dict so that `ParseKwargs` reads it back. """
import ast
import shlex
from typing import Any, Mapping

import timm.utils


class ParseKwargs(timm.utils.ParseKwargs):
    """ timm's `k=v ...` parser (values through ast.literal_eval, a non-literal stays a string, so `pos_embed=sincos`
    needs no quotes), with two additions users would otherwise hit: an item that is not `key=value` is a one-line
    usage error instead of a ValueError traceback, and the items are merged over the value already there (a config
    file's `model_kwargs`) instead of replacing it. """

    def __call__(self, parser, namespace, values, option_string=None):
        for item in values:
            key, sep, _ = item.partition('=')
            if not sep or not key.isidentifier():
                parser.error(f'{option_string} expects key=value pairs, got {item!r} (e.g. embed_dim=32)')
        merged = dict(getattr(namespace, self.dest, None) or {})
        super().__call__(parser, namespace, values, option_string)
        setattr(namespace, self.dest, {**merged, **getattr(namespace, self.dest)})


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
