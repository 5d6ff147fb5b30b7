""" The files `compare` writes and reads back, read back with their type and keys checked: `compare.json` (the
settings of a folder's runs, its arms and reference, the test split's chance and majority-class top-1, the model the
runs build), each run's `result.json`, and the `elapsed.json` of a run stopped and resumed (the seconds and number
of its parts so far). A file that is not what compare wrote (truncated, edited, another
program's) is a `ConfigError` whose one line names the file, what is wrong and what to do, before any work: nothing
is removed, so no finished run is lost. """
import json
import numbers
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..errors import ConfigError
from ..utils.atomic import atomic_file

__all__ = ['SETTINGS_FILE', 'RESULT_FILE', 'ELAPSED_FILE', 'read_settings', 'read_result', 'read_results',
           'check_result', 'read_elapsed', 'write_elapsed']

SETTINGS_FILE = 'compare.json'
RESULT_FILE = 'result.json'
ELAPSED_FILE = 'elapsed.json'


def _number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _list_of(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, list) and all(check(v) for v in value)


def _string(value: Any) -> bool:
    return isinstance(value, str)


# key -> (what it must be, in words; its check)
_RESULT_KEYS = {
    'arm': ('a string', _string), 'seed': ('an integer', lambda v: _integer(v) and v >= 0),
    'final_top1': ('a number', _number), 'best_top1': ('a number', _number), 'epochs': ('an integer', _integer),
    'curve': ('a list of numbers', _list_of(_number)), 'curve_epochs': ('a list of integers', _list_of(_integer)),
    'seconds': ('a number', lambda v: _number(v) and v >= 0), 'command': ('a list of strings', _list_of(_string)),
    'date': ('a string', _string),
}
_RESULT_OPTIONAL = {
    'train_loss': ('a list of numbers', _list_of(_number)), 'resumed': ('true or false', lambda v: isinstance(v, bool)),
    'parts': ('an integer', _integer), 'device': ('a string', _string), 'torch': ('a string', _string),
    'timm': ('a string', _string), 'python': ('a string', _string),
    'threads': ('a list of thread counts', _list_of(lambda v: _integer(v) and v >= 1)),
}
_SETTINGS_KEYS = {
    'model': ('a string', _string), 'model_kwargs': ('a mapping', lambda v: isinstance(v, dict)),
    'train_options': ('a list of strings', _list_of(_string)),
    'arms': ('a list of strings', lambda v: _list_of(_string)(v) and bool(v)), 'reference': ('a string', _string),
}
_SETTINGS_OPTIONAL = {
    'test_split': ('a mapping', lambda v: isinstance(v, dict) and all(_number(v.get(k)) for k in
                                                                       ('images', 'classes', 'chance', 'majority'))),
    'model_built': ('a string', _string),
    'train_subset': ('a number of images', lambda v: _integer(v) and v >= 1),
    'estimated_seconds': ('a mapping of arms to seconds', lambda v: isinstance(v, dict) and all(
        _number(x) for x in v.values())),
}


def _problem(record: Any, required: Dict[str, Tuple[str, Callable]], optional: Dict[str, Tuple[str, Callable]]
             ) -> Optional[str]:
    """ What is wrong with `record` (a JSON value) against the keys it must and may have; None when nothing. """
    if not isinstance(record, dict):
        return f'holds a JSON {type(record).__name__}, not an object'
    missing = [key for key in required if key not in record]
    if missing:
        return f'has no {", ".join(repr(k) for k in missing)}'
    for key, (what, check) in {**required, **optional}.items():
        if key in record and not check(record[key]):
            return f'its {key!r} is {json.dumps(record[key])[:60]}, not {what}'
    return None


def _load(path: Path, fix: str) -> Any:
    """ The JSON value of `path`; ConfigError naming it and `fix` when it cannot be read or parsed. """
    try:
        return json.loads(path.read_text(encoding='utf-8'))
    except OSError as e:
        raise ConfigError(f'{path}: cannot be read ({e.strerror or e}); {fix}') from None
    except UnicodeDecodeError:
        raise ConfigError(f'{path}: not a text file; {fix}') from None
    except json.JSONDecodeError as e:
        what = 'is empty' if not e.doc.strip() else f'is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})'
        raise ConfigError(f'{path}: {what}; {fix}') from None


def _settings_fix(path: Path) -> str:
    return (f'it records the settings of the runs in {path.parent}: put back the file compare wrote, or start '
            f'another --out (the runs there are kept)')


def read_settings(path: Path) -> Optional[Dict[str, Any]]:
    """ The settings `compare.json` records, checked; None when there is no such file. """
    if not path.exists() and not path.is_symlink():
        return None
    if not path.is_file():
        raise ConfigError(f'{path}: not a file; {_settings_fix(path)}')
    settings = _load(path, _settings_fix(path))
    problem = _problem(settings, _SETTINGS_KEYS, _SETTINGS_OPTIONAL)
    if problem is None and settings['reference'] not in settings['arms']:
        problem = f'its reference {settings["reference"]!r} is not one of its arms {settings["arms"]}'
    if problem:
        raise ConfigError(f'{path}: {problem}; {_settings_fix(path)}')
    return settings


_RESULT_FIX = 'delete it to train that run again (the other runs are kept), or start another --out'


def check_result(path: Path, result: Any, folder_name: Optional[Callable[[str, int], str]] = None) -> None:
    """ ConfigError naming `path` when `result` is not a run's result as compare writes it, or (with `folder_name`,
    the folder an arm's seed trains in) when it is the result of another run than its folder's. """
    problem = _problem(result, _RESULT_KEYS, _RESULT_OPTIONAL)
    if problem is None and folder_name is not None and folder_name(result['arm'], result['seed']) != path.parent.name:
        problem = (f'it is the result of {result["arm"]!r} seed {result["seed"]}, whose folder is '
                   f'{folder_name(result["arm"], result["seed"])}, not {path.parent.name}')
    if problem:
        raise ConfigError(f'{path}: {problem}; {_RESULT_FIX}')


def read_result(path: Path, folder_name: Optional[Callable[[str, int], str]] = None) -> Dict[str, Any]:
    """ A run's `result.json`, checked (`check_result`). """
    result = _load(path, _RESULT_FIX)
    check_result(path, result, folder_name)
    return result


def read_results(runs_dir: Path, folder_name: Optional[Callable[[str, int], str]] = None) -> List[Dict[str, Any]]:
    """ Every run's result under `runs_dir`, each checked, in the order of their folders. """
    return [read_result(p, folder_name) for p in sorted(runs_dir.glob(f'*/{RESULT_FILE}'))]


_ELAPSED_KEYS = {'seconds': ('a number of seconds', lambda v: _number(v) and v >= 0),
                 'parts': ('a whole number of parts', lambda v: _integer(v) and v >= 1)}


def read_elapsed(path: Path) -> Optional[Tuple[float, int]]:
    """ (seconds, parts) a stopped run has trained so far, as `write_elapsed` kept them; None when not kept. """
    if not path.is_file():
        return None
    fix = "delete it (the run's time then counts from its next part on), or start another --out"
    record = _load(path, fix)
    problem = _problem(record, _ELAPSED_KEYS, {})
    if problem:
        raise ConfigError(f'{path}: {problem}; {fix}')
    return float(record['seconds']), record['parts']


def write_elapsed(path: Path, seconds: float, parts: int) -> None:
    with atomic_file(path) as tmp:
        tmp.write_text(json.dumps(dict(seconds=round(seconds, 1), parts=parts)) + '\n')
