""" The files `compare` writes and reads back, each held to its schema (`utils.file_schema`: types, finite numbers,
ranges, required keys, size and nesting): `compare.json` (the settings of a folder's runs, its arms and reference, the
test split's chance and majority-class top-1, the model the runs build), each run's `result.json`, and the
`elapsed.json` of a run stopped and resumed (the seconds and number of its parts so far). A file that is not what
compare wrote (truncated, edited, another program's) is a `ConfigError` whose one line names the file, the field, what
is wrong and what to do, before anything is decided from it: nothing is removed, so no finished run is lost. """
import json
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from pydantic import ValidationError

from ..errors import ConfigError
from ..utils.atomic import atomic_file
from ..utils.file_schema import ComparisonSettings, Elapsed, RunResult, read_json, violation

__all__ = ['SETTINGS_FILE', 'RESULT_FILE', 'ELAPSED_FILE', 'read_settings', 'read_result', 'read_results',
           'check_result', 'read_elapsed', 'write_elapsed']

SETTINGS_FILE = 'compare.json'
RESULT_FILE = 'result.json'
ELAPSED_FILE = 'elapsed.json'


def _settings_fix(path: Path) -> str:
    return (f'it records the settings of the runs in {path.parent}: put back the file compare wrote, or start '
            f'another --out (the runs there are kept)')


def read_settings(path: Path) -> Optional[Dict[str, Any]]:
    """ The settings `compare.json` records, held to their schema (`ComparisonSettings`); None when there is no such
    file. """
    if not path.exists() and not path.is_symlink():
        return None
    return read_json(path, ComparisonSettings, _settings_fix(path)).model_dump(exclude_unset=True)


_RESULT_FIX = 'delete it to train that run again (the other runs are kept), or start another --out'


def check_result(path: Path, result: Any, folder_name: Optional[Callable[[str, int], str]] = None
                 ) -> Dict[str, Any]:
    """ `result` (a run's result, as compare writes it) held to its schema (`RunResult`), and (with `folder_name`, the
    folder an arm's seed trains in) to be the result of its folder's run; ConfigError naming `path` when it is not. """
    try:
        record = RunResult.model_validate(result).model_dump(exclude_unset=True)
    except ValidationError as e:
        raise ConfigError(f'{path}: {violation(e)}; {_RESULT_FIX}') from None
    _check_folder(path, record, folder_name)
    return record


def _check_folder(path: Path, result: Dict[str, Any], folder_name: Optional[Callable[[str, int], str]]) -> None:
    if folder_name is not None and folder_name(result['arm'], result['seed']) != path.parent.name:
        raise ConfigError(f'{path}: it is the result of {result["arm"]!r} seed {result["seed"]}, whose folder is '
                          f'{folder_name(result["arm"], result["seed"])}, not {path.parent.name}; {_RESULT_FIX}')


def read_result(path: Path, folder_name: Optional[Callable[[str, int], str]] = None) -> Dict[str, Any]:
    """ A run's `result.json`, held to its schema (`RunResult`) and to its folder. """
    result = read_json(path, RunResult, _RESULT_FIX).model_dump(exclude_unset=True)
    _check_folder(path, result, folder_name)
    return result


def read_results(runs_dir: Path, folder_name: Optional[Callable[[str, int], str]] = None) -> List[Dict[str, Any]]:
    """ Every run's result under `runs_dir`, each checked, in the order of their folders. """
    return [read_result(p, folder_name) for p in sorted(runs_dir.glob(f'*/{RESULT_FILE}'))]


def read_elapsed(path: Path) -> Optional[Tuple[float, int]]:
    """ (seconds, parts) a stopped run has trained so far, as `write_elapsed` kept them; None when not kept. """
    if not path.is_file():
        return None
    fix = "delete it (the run's time then counts from its next part on), or start another --out"
    record = read_json(path, Elapsed, fix)
    return record.seconds, record.parts


def write_elapsed(path: Path, seconds: float, parts: int) -> None:
    with atomic_file(path) as tmp:
        tmp.write_text(json.dumps(dict(seconds=round(seconds, 1), parts=parts)) + '\n')
