""" `key=value ...` items on the command line (`--model-kwargs`, `--opt-kwargs`, `--init-kwargs`), read as timm's
train.py reads them, and the check of what no keyword argument can be (a key that is not a string). """
import argparse
import ast
from collections.abc import Mapping
from typing import Any, Optional

__all__ = ['ParseKwargs', 'non_string_key']


class ParseKwargs(argparse.Action):
    """ timm's `k=v ...` parser (timm.utils.ParseKwargs: values through ast.literal_eval, a value that is no literal
    stays a string, so `pos_embed=sincos` needs no quotes), with two additions users would otherwise hit: an item that
    is not `key=value` is a one-line usage error instead of a ValueError traceback, and the items are merged over the
    value already there (a config file's `model_kwargs`) instead of replacing it.

    Not a subclass of timm's: importing timm.utils imports torch and timm (seconds), and the parsers live where
    `--help` and a usage error answer without them; timm's reading is four lines, restated in `_read`. """

    def __call__(self, parser, namespace, values, option_string=None):
        for item in values:
            key, sep, _ = item.partition('=')
            if not sep or not key.isidentifier():
                parser.error(f'{option_string} expects key=value pairs, got {item!r} (e.g. embed_dim=32)')
        read = _read(values)
        bad = non_string_key(read)  # a value such as struct_init_kwargs={1: 2}
        if bad:
            parser.error(f'{option_string}: {bad}')
        setattr(namespace, self.dest, {**dict(getattr(namespace, self.dest, None) or {}), **read})


def _read(values) -> dict:
    """ timm.utils.ParseKwargs's reading of `key=value` items: the value a Python literal where it is one, else the
    text. """
    kw = {}
    for item in values:
        if not item:
            continue
        key, value = item.split('=', 1)
        try:
            kw[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            kw[key] = str(value)
    return kw


def non_string_key(value: Any, where: str = '') -> Optional[str]:
    """ What is wrong with the first mapping key in `value` (nested mappings and lists included) that is not a
    string, which no keyword argument can be; None when every key is one. """
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                inside = f' in {where}' if where else ''
                return (f'key {key!r}{inside} ({type(key).__name__}) is not a name: keyword arguments are named by '
                        f'strings (write it as {str(key)!r} if that is the name meant)')
            bad = non_string_key(item, f'{where}.{key}' if where else key)
            if bad:
                return bad
    elif isinstance(value, (list, tuple)):
        return next((b for b in (non_string_key(v, where) for v in value) if b), None)
    return None
