""" The training arguments: timm train.py's option names (the parser is `timm_structinit_cli.train_parser`, which
answers `--help` without torch), and a YAML file (`-c`) of the same keys under the flags; what the parser leaves to
the run (the device) is resolved here. `checks.check_args` then validates the result once. """
import argparse
import difflib
import os
import sys
from typing import Any, Dict, Optional, Sequence

import yaml
from timm_structinit_cli.train_parser import (  # noqa: F401  part of this module's API
    PROG, SCHEDULERS, TIMM_TRAIN_ONLY, build_parser, command_line_problem, config_paths, timm_only_error)

from ..errors import ConfigError
from ..recipes import resolve_config, unknown_config
from ..utils.atomic import atomic_file
from ..utils.command_line import error_line
from ..utils.kwargs import ParseKwargs, non_string_key

GRAYSCALE_TORCH_DATASETS = ('mnist', 'kmnist', 'fashion_mnist', 'qmnist')  # single-channel PIL images
# options that only make sense on the command line are not config keys
_CLI_ONLY = ('help', 'version', 'config')
# run-specific keys left out of the args.yaml written next to the checkpoints, so it can be reused with -c
_NOT_SAVED = ('resume', 'experiment', 'overwrite', 'local_rank')


def _config_actions(parser: argparse.ArgumentParser) -> Dict[str, argparse.Action]:
    return {a.dest: a for a in parser._actions if a.dest not in _CLI_ONLY}


class _UniqueKeyLoader(yaml.SafeLoader):
    """ yaml's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last one silently). """


def _unique_key_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> Dict[Any, Any]:
    lines: Dict[Any, int] = {}
    # a merge key (`<<: *defaults`) brings keys its own mapping may override; only the mapping's own keys count
    own = [(k, v) for k, v in node.value if k.tag != 'tag:yaml.org,2002:merge']
    for key_node, _ in own:
        key = loader.construct_object(key_node, deep=True)
        try:
            first = lines.setdefault(key, key_node.start_mark.line + 1)
        except TypeError:  # an unhashable key: construct_mapping names it
            break
        if first != key_node.start_mark.line + 1:
            raise yaml.constructor.ConstructorError(
                None, None, f'key {key!r} is given twice (lines {first} and {key_node.start_mark.line + 1})',
                key_node.start_mark)
    return loader.construct_mapping(node, deep=True)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_key_mapping)


def _read_yaml(path: str) -> Dict[Any, Any]:
    if not os.path.isfile(path):
        raise ConfigError(f'--config {path!r}: {unknown_config(path)}')
    try:
        with open(path, 'rb') as f:
            cfg = yaml.load(f.read().decode('utf-8-sig'), Loader=_UniqueKeyLoader)
    except UnicodeDecodeError as e:
        raise ConfigError(f'--config {path!r} is not UTF-8 text (byte {e.object[e.start]:#04x} at offset '
                          f'{e.start}); save it as UTF-8') from None
    except OSError as e:
        raise ConfigError(f'--config {path!r} cannot be read: {e.strerror or e}') from None
    except yaml.YAMLError as e:
        mark = getattr(e, 'problem_mark', None)
        where = f' at line {mark.line + 1}, column {mark.column + 1}' if mark is not None else ''
        raise ConfigError(f'--config {path!r} is not valid YAML: {getattr(e, "problem", None) or error_line(e)}'
                          f'{where}') from None
    except Exception as e:  # whatever else PyYAML meets (a RecursionError for nesting too deep)
        raise ConfigError(f'--config {path!r} cannot be read as YAML ({type(e).__name__}: {error_line(e)[:200]})') \
            from None
    if not isinstance(cfg or {}, dict):
        raise ConfigError(f'--config {path!r} must be a mapping of option names to values')
    return cfg or {}


def _config_value(parser: argparse.ArgumentParser, action: argparse.Action, key: str, value: Any, path: str) -> Any:
    """ A YAML value as its flag would store it: numbers, strings and lists go through the flag's own action. """
    def bad(reason: str) -> ConfigError:
        return ConfigError(f'{path}: {key}={value!r} is not valid; {reason}')

    def text(v: Any) -> str:  # 2.0 for an integer option, as YAML writers put it
        return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)

    if value is None:
        if action.default is not None:
            raise bad(f'leave the key out for the default {action.default!r}')
    elif isinstance(action, ParseKwargs):
        if not isinstance(value, dict):
            raise bad('expected a mapping of keyword arguments')
        if non_string_key(value):  # checked before anything reads the keys as names
            raise ConfigError(f'{path}: {key}: {non_string_key(value)}')
        value = dict(value)
    elif action.nargs == 0:  # store_true flags
        if not isinstance(value, bool):
            raise bad('expected true or false')
    else:
        many = action.nargs is not None
        if isinstance(value, dict) or many != isinstance(value, (list, tuple)):
            raise bad('expected a list' if many else 'expected a single value')
        if many and not value:  # what args.yaml writes for a list option left empty (--wandb-tags)
            if action.default == []:
                return []
            raise bad('expected at least one value; leave the key out for the default'
                      + (f' {action.default!r}' if action.default is not None else ''))
        option = max(action.option_strings, key=len)
        tokens = [option, *map(text, value)] if many else [f'{option}={text(value)}']
        try:
            value = getattr(parser.parse_args(tokens, argparse.Namespace()), action.dest)
        except argparse.ArgumentError as e:  # the wrong count, a choice not offered or a value of another type
            if isinstance(action.nargs, int) and len(value) != action.nargs:
                raise bad(f'expected a list of {action.nargs} values') from None
            if action.type not in (None, int, float):  # a type of the package's own says what is valid
                raise bad(str(e.message)) from None
            raise bad(f'expected one of {list(action.choices)}' if action.choices
                      else f'expected {"an integer" if action.type is int else "a number"}') from None
    return value


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """ Parse the command line over the values of its `-c FILE.yaml`, each value through its flag's argparse action
    (type, choices, count); `check_args` then checks the result. """
    argv = list(sys.argv[1:] if argv is None else argv)
    problem = command_line_problem(argv)
    if problem:
        raise ConfigError(problem)
    path = (config_paths(argv) or [''])[0]
    parser = build_parser()
    namespace = argparse.Namespace()
    if path:
        path = resolve_config(path) or path  # a file, else a packaged recipe of that name
        actions = _config_actions(parser)
        parser.exit_on_error = False  # a bad YAML value raises, to be reported as the config's error
        for key, value in _read_yaml(path).items():
            if not isinstance(key, str):
                raise ConfigError(f'{path}: key {key!r} ({type(key).__name__}) is not an option name (keys are the '
                                  f'option names with underscores, see {PROG} --help)')
            if key not in actions and f'--{str(key).replace("_", "-")}' in TIMM_TRAIN_ONLY:
                raise ConfigError(f'{path}: key {key!r}: ' + timm_only_error(f'--{str(key).replace("_", "-")}'))
            if key not in actions:
                close = difflib.get_close_matches(str(key).replace('-', '_'), list(actions), n=1, cutoff=0.6)
                hint = f"; did you mean '{close[0]}'?" if close else ''
                raise ConfigError(f"unknown key '{key}' in {path}{hint} (keys are the option names with "
                                  f"underscores, see {PROG} --help)")
            setattr(namespace, key, _config_value(parser, actions[key], key, value, path))
        parser.exit_on_error = True
    args = parser.parse_args(argv, namespace)
    if args.device is None:  # the parser's default would have imported torch to ask
        import torch
        args.device = 'cuda' if torch.cuda.is_available() else 'cpu'
    return args


def save_args(args: argparse.Namespace, path: str) -> None:
    """ Write the run's arguments as a YAML config that `-c` reads back. """
    keys = set(_config_actions(build_parser())) - set(_NOT_SAVED)
    cfg = {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(args).items() if k in keys}
    with atomic_file(path) as tmp, open(tmp, 'w') as f:
        yaml.safe_dump(cfg, f, default_flow_style=False, sort_keys=True)
