""" The one schema of every file the package writes and reads back: each file's content declared once as a pydantic
model (`compare`'s `compare.json`, each run's `result.json` and `elapsed.json`; a run's `summary.csv` and
`target_mass.csv`; the bookkeeping of a `--resume` checkpoint), and the readers that hold a file to it before anything
is decided from it.

What the schema holds every file to: the types (an integer is not `1.0`, a number not `"51.2"`, `true` neither), finite
numbers (JSON's `NaN` and `Infinity`, a 400-digit integer where a number belongs), each number's range (a top-1 in
[0, 100], a share in [0, 1], seconds and counts not negative), the keys that must be there, and the size and nesting of
the file (pydantic's JSON parser refuses a document nested deeper than its limit; a file larger than any the package
writes is not read at all). A violation is a `ConfigError` whose one line names the file, the field and what is wrong
with it, and what to do (the caller's words). """
import json
import math
from pathlib import Path
from typing import Annotated, Any, Dict, List, Optional, Tuple, Type, TypeVar, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import ConfigError

__all__ = ['read_json', 'read_csv', 'check_value', 'violation', 'MAX_BYTES', 'ComparisonSettings', 'SplitBaselines',
           'RunResult', 'Elapsed', 'SlurmJobs', 'SummaryRow', 'TargetMassRow', 'CheckpointBookkeeping', 'SaverState']

# the largest file read back: those the package writes hold a few kilobytes (a summary of 10,000 epochs, 2 MB)
MAX_BYTES = 16 * 2 ** 20
# the deepest a free-form value (a model's keyword arguments) nests: a tuple of tuples is two
_MAX_DEPTH = 16
_INT64 = 2 ** 63

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
Top1 = Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)]  # a percentage of images
Share = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Seconds = Annotated[float, Field(ge=0, le=1e9, allow_inf_nan=False)]  # 1e9 s: 31 years
Loss = Annotated[float, Field(ge=0, allow_inf_nan=False)]  # cross-entropy, with or without soft targets
Epoch = Annotated[int, Field(ge=0, le=10 ** 6)]
Count = Annotated[int, Field(ge=1, le=2 ** 31)]


def _walk(value: Any, depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise ValueError(f'nested deeper than {_MAX_DEPTH} levels')
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, int) and not -_INT64 <= value < _INT64:
        raise ValueError('not an integer of 64 bits')
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError('not a finite number')
    if isinstance(value, (list, tuple)):
        for item in value:
            _walk(item, depth + 1)
    elif isinstance(value, dict):
        for item in value.values():
            _walk(item, depth + 1)
    elif not isinstance(value, (int, float)):
        raise ValueError('not a JSON value')


def _json_value(value: Any) -> Any:
    """ `value` when it is a JSON value of finite numbers and 64-bit integers, nested at most `_MAX_DEPTH` deep. """
    _walk(value, 0)
    return value


# a value of any JSON shape (a model's keyword arguments), held to finite numbers, 64-bit integers and a depth
JsonValue = Annotated[Any, AfterValidator(_json_value)]


class Record(BaseModel):
    """ A JSON file's content: strict types (as JSON gives them: an integer where a number is asked is taken),
    finite numbers; keys it does not declare are passed over (a later version's additions). Fields may begin with
    `model_` (pydantic before 2.10 reserves that prefix, and would warn). """
    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra='ignore', protected_namespaces=())


class CsvRow(BaseModel):
    """ A CSV file's row: the values are text, read as the numbers they write; finite numbers only. """
    model_config = ConfigDict(allow_inf_nan=False, extra='allow')


Model = TypeVar('Model', bound=BaseModel)

_JSON_KINDS = {list: 'list', str: 'string', int: 'number', float: 'number', bool: 'true or false', type(None): 'null'}


def _shown(value: Any, text: bool = False) -> str:
    """ A value as the file writes it, short (`text`: a CSV file's, which holds text unquoted). """
    if text and isinstance(value, str):
        return value if len(value) <= 40 else value[:40] + '...'
    if isinstance(value, float) and not math.isfinite(value):
        return 'NaN' if math.isnan(value) else ('Infinity' if value > 0 else '-Infinity')
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** 18:
        return f'an integer of {len(str(abs(value)))} digits'
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ('nan', 'inf', '-inf', 'infinity', '-infinity'):
            return value
        return json.dumps(value if len(value) <= 40 else value[:40] + '...')
    try:
        text = json.dumps(value, allow_nan=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + '...'


def _field(loc) -> str:
    """ A field's place as a reader writes it: `curve[3]`, `test_split.majority`. """
    text = ''
    for part in loc:
        text += f'[{part}]' if isinstance(part, int) else (f'.{part}' if text else str(part))
    return text


def violation(error: ValidationError, text: bool = False) -> str:
    """ What is wrong, on one line, from pydantic's first error: the field, its value (as a CSV file holds it with
    `text`) and what it must be. """
    first = error.errors(include_url=False)[0]
    kind, loc, message = first['type'], first['loc'], first['msg']
    if kind == 'json_invalid':
        reason = str((first.get('ctx') or {}).get('error', message))
        if 'recursion limit' in reason:
            return f'is nested deeper than a JSON file the package writes ({reason})'
        return f'is not valid JSON ({reason})'
    if not loc and kind in ('model_type', 'model_attributes_type', 'dict_type'):
        return f'holds a JSON {_JSON_KINDS.get(type(first["input"]), type(first["input"]).__name__)}, not an object'
    field = _field(loc)
    if kind == 'missing':
        parent = _field(loc[:-1])
        return f'{"its " + parent + " " if parent else ""}has no {loc[-1]!r}'
    message = message.removeprefix('Value error, ').removeprefix('Input should be ').removeprefix('Input ')
    message = message.replace('less than or equal to', 'at most').replace('greater than or equal to', 'at least')
    if kind in ('value_error', 'assertion_error') and not loc:
        return message
    return f'its {field} is {_shown(first["input"], text)}: {"should be " if kind != "value_error" else ""}{message}'


def _refused(path: Union[str, Path], problem: str, fix: str) -> ConfigError:
    return ConfigError(f'{path}: {problem}; {fix}')


def _text(path: Path, fix: str, limit: int) -> str:
    """ The text of `path`, read when it is a file no larger than `limit` bytes. """
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise _refused(path, 'not a file', fix)
        if size > limit:
            raise _refused(path, f'holds {size:,} bytes, more than any file the package writes ({limit:,} at most)',
                           fix)
        return path.read_bytes().decode('utf-8')
    except OSError as e:
        raise _refused(path, f'cannot be read ({e.strerror or e})', fix) from None
    except UnicodeDecodeError:
        raise _refused(path, 'not a text file', fix) from None


def read_json(path: Union[str, Path], model: Type[Model], fix: str, limit: int = MAX_BYTES) -> Model:
    """ The content of the JSON file `path` as `model`; ConfigError naming the file, the field and `fix` (what to do)
    when it cannot be read or breaks the schema. """
    path = Path(path)
    text = _text(path, fix, limit)
    if not text.strip():
        raise _refused(path, 'is empty', fix)
    try:
        return model.model_validate_json(text)
    except ValidationError as e:
        raise _refused(path, violation(e), fix) from None


def read_csv(path: Union[str, Path], row: Type[Model], fix: str, limit: int = MAX_BYTES) -> List[Model]:
    """ The rows of the CSV file `path` (a header, then rows), each as `row`; a value left empty (a column a row did
    not write) is passed over. ConfigError naming the file, the row and the field when one breaks the schema. """
    import csv
    path = Path(path)
    text = _text(path, fix, limit)
    rows = []
    try:
        for number, values in enumerate(csv.DictReader(text.splitlines()), start=2):
            if None in values:
                raise _refused(path, f'line {number} holds more values than its header names', fix)
            try:
                rows.append(row.model_validate({k: v for k, v in values.items() if v not in ('', None)}))
            except ValidationError as e:
                raise _refused(path, f'line {number}: {violation(e, text=True)}', fix) from None
    except csv.Error as e:
        raise _refused(path, f'is not a CSV file ({e})', fix) from None
    return rows


def check_value(name: str, value: Any, model: Type[Model], fix: str) -> Model:
    """ `value` (a file's content already read, a checkpoint's say) as `model`; ConfigError naming `name`. """
    try:
        return model.model_validate(value)
    except ValidationError as e:
        raise _refused(name, violation(e), fix) from None
    except RecursionError:
        raise _refused(name, 'is nested deeper than any the package writes', fix) from None


def _check(condition: bool, problem: str) -> None:
    """ In a model's own check of its fields together: ValueError saying `problem` when `condition` fails. """
    if not condition:
        raise ValueError(problem)


# --- compare's files: compare.json, each run's result.json and elapsed.json ---------------------------------------

class SplitBaselines(Record):
    """ What runs that learn nothing score on the evaluation split: chance (a uniform guess among `classes`) and the
    majority class (always answering its largest class), top-1 in percent. """
    images: Count
    classes: Count
    chance: Top1
    majority: Top1

    @model_validator(mode='after')
    def _agree(self) -> 'SplitBaselines':
        _check(math.isclose(self.chance, 100 / self.classes, rel_tol=1e-6),
               f'its test_split.chance is {self.chance:g}, not 100 / its {self.classes} classes')
        # the largest of the classes holds a 1 / classes share of the images at least
        _check(self.majority >= self.chance * (1 - 1e-9),
               f'its test_split.majority {self.majority:g} is below its chance {self.chance:g}')
        return self


class ComparisonSettings(Record):
    """ `compare.json`: the settings every run of the folder shares, its arms and reference, and what the calls
    measured (the test split, the model built, each arm's first estimate of a run's seconds). """
    model: Annotated[str, Field(min_length=1)]
    model_kwargs: Dict[str, JsonValue]
    train_options: List[str]
    arms: Annotated[List[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
    reference: str
    # optional keys: absent, not null (a key compare writes holds a value)
    test_split: SplitBaselines = None
    model_built: str = None
    train_subset: Count = None  # --train-subset: the images of the training split each run trains on
    estimated_seconds: Dict[str, Seconds] = None

    @model_validator(mode='after')
    def _agree(self) -> 'ComparisonSettings':
        _check(len(set(self.arms)) == len(self.arms), f'its arms {self.arms} name an arm twice')
        _check(self.reference in self.arms, f'its reference {self.reference!r} is not one of its arms {self.arms}')
        return self


Seed = Annotated[int, Field(ge=0, le=2 ** 63 - 1)]  # the training command's seeds (timm_structinit_cli.arg_types)
Parts = Annotated[int, Field(ge=1, le=10 ** 6)]


class RunResult(Record):
    """ A finished run's `result.json`: its arm and seed, its top-1 per evaluation (`curve`, after `curve_epochs`
    epochs) with the final and the best of them, its time over all its parts, its command and where it ran. """
    arm: Annotated[str, Field(min_length=1)]
    seed: Seed
    final_top1: Top1
    best_top1: Top1
    epochs: Annotated[int, Field(ge=1, le=10 ** 6)]
    curve: Annotated[List[Top1], Field(min_length=1)]
    curve_epochs: Annotated[List[Annotated[int, Field(ge=1, le=10 ** 6)]], Field(min_length=1)]
    seconds: Seconds
    command: List[str]
    date: Annotated[str, Field(pattern=r'^\d{4}-\d{2}-\d{2}')]
    # optional keys (results of earlier versions lack them): absent, not null
    train_loss: List[Loss] = None
    resumed: bool = None
    parts: Parts = None
    device: str = None
    torch: str = None
    timm: str = None
    python: str = None
    threads: List[Count] = None  # the torch threads of each part

    @model_validator(mode='after')
    def _agree(self) -> 'RunResult':
        # what compare writes: the curve's last value is the final top-1, its largest the best, its last epoch the
        # run's epochs (an edit of one of them alone is not what a run scored)
        _check(len(self.curve_epochs) == len(self.curve),
               f'its curve has {len(self.curve)} values but curve_epochs {len(self.curve_epochs)}')
        _check(all(a < b for a, b in zip(self.curve_epochs, self.curve_epochs[1:])),
               f'its curve_epochs {self.curve_epochs[:8]} do not increase')
        _check(self.final_top1 == self.curve[-1],
               f'its final_top1 {self.final_top1:g} is not the last value of its curve ({self.curve[-1]:g})')
        _check(self.best_top1 == max(self.curve),
               f'its best_top1 {self.best_top1:g} is not the largest value of its curve ({max(self.curve):g})')
        _check(self.epochs == self.curve_epochs[-1],
               f'its epochs {self.epochs} is not the last of its curve_epochs ({self.curve_epochs[-1]})')
        _check(self.train_loss is None or len(self.train_loss) == len(self.curve),
               f'its train_loss has {len(self.train_loss or ())} values but its curve {len(self.curve)}')
        return self


class Elapsed(Record):
    """ A stopped run's `elapsed.json`: the seconds and the number of its parts so far. """
    seconds: Seconds
    parts: Parts


class SlurmJobs(Record):
    """ `--out/slurm/jobs.json` of a comparison on SLURM: the job ids submitted for each run, the last one current. """
    jobs: Dict[str, Annotated[List[Annotated[str, Field(min_length=1)]], Field(min_length=1)]]


# --- a run's own files, read back when it resumes (and by compare, once it has finished) --------------------------

class SummaryRow(CsvRow):
    """ A row of a run's `summary.csv` (timm's `update_summary`): its epoch (counted from 0), top-1 and top-5 in
    percent, and every other column (losses, the learning rate, target mass) a finite number. """
    __pydantic_extra__: Dict[str, FiniteFloat]
    epoch: Epoch
    eval_top1: Optional[Top1] = None
    eval_top5: Optional[Top1] = None
    eval_ema_top1: Optional[Top1] = None
    eval_ema_top5: Optional[Top1] = None


class TargetMassRow(CsvRow):
    """ A row of an impulse run's `target_mass.csv`: after `epoch` epochs, each layer's share of attention on its
    heads' targets and their mean, each in [0, 1]. """
    __pydantic_extra__: Dict[str, Share]
    epoch: Epoch
    mean: Share


class SaverState(BaseModel):
    """ timm's CheckpointSaver bookkeeping in a checkpoint: the ranked checkpoints (file name, metric), the best. """
    model_config = ConfigDict(allow_inf_nan=False)
    checkpoint_files: List[Tuple[str, Optional[FiniteFloat]]] = []
    best_epoch: Optional[Epoch] = None
    best_metric: Optional[FiniteFloat] = None
    pending: Optional[Tuple[Optional[Epoch], Optional[FiniteFloat]]] = None


class CheckpointBookkeeping(BaseModel):
    """ What a training checkpoint (timm's CheckpointSaver) records beside its tensors, which a resumed run takes up:
    its epoch, format version, metric and the saver's bookkeeping. """
    model_config = ConfigDict(allow_inf_nan=False, extra='ignore', arbitrary_types_allowed=True)
    epoch: Epoch
    version: Annotated[int, Field(ge=1, le=2)] = 1
    metric: Optional[FiniteFloat] = None
    saver: Optional[SaverState] = None
