""" Every file `compare` and the training command read back is held to one schema before anything is decided from it:
each field of each file, given every kind of hostile value a hand edit or another program leaves (JSON's NaN and
Infinity, 1e308, a negative number, a 400-digit integer, true, a number in quotes, null), is refused exactly when the
value lies outside what the field means (a top-1 in [0, 100], seconds and losses not negative, counts from 1, a seed
from 0, finite numbers; the ranges restated here, not read from the schema), and then in one line naming the file, the
field and what to do, with exit status 2, no answer written and nothing changed; a value inside is taken. A file nested
100,000 deep, larger than any the package writes, or of another shape is one line too. """
import copy
import json
import math
import numbers
import shutil
from pathlib import Path

import pytest
import torch

from timm_structinit import cli
from timm_structinit.compare.runner import read_summary
from timm_structinit.errors import ConfigError
from train_command import RUN, TINY, one_line, run_main

# hostile values as a file holds them (JSON text), and what Python's own json reads them as
HOSTILE = ['NaN', 'Infinity', '-Infinity', '1e308', '-5', '9' * 400, 'true', '"50"', 'null', '0', '50', '100.5']


def _real(v) -> bool:
    """ A finite number a float holds (a 400-digit integer is none). """
    if not isinstance(v, numbers.Real) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


def _whole(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# what each field means, restated from the files' documentation: the values a run of compare can write there
TOP1 = lambda v: _real(v) and 0 <= v <= 100  # noqa: E731
SECONDS = lambda v: _real(v) and 0 <= v <= 1e9  # noqa: E731 (31 years)
LOSS = lambda v: _real(v) and v >= 0  # noqa: E731
COUNT = lambda v: _whole(v) and 1 <= v <= 10 ** 6  # noqa: E731
SEED = lambda v: _whole(v) and 0 <= v < 2 ** 63  # noqa: E731
JSON_NUMBER = lambda v: not isinstance(v, float) or math.isfinite(v)  # noqa: E731
KWARG = lambda v: JSON_NUMBER(v) and not (_whole(v) and abs(v) >= 2 ** 63)  # noqa: E731

RESULT = dict(arm='plain', seed=0, final_top1=50.0, best_top1=50.0, epochs=2, curve=[50.0], curve_epochs=[2],
              train_loss=[2.0], seconds=60.0, resumed=False, parts=1, command=['python', '-m', 'x', '--model', 'm'],
              date='2026-11-27T10:00:00', device='CPU', torch='2', timm='1', python='3')
SETTINGS = dict(model='vit_tiny_patch2_32_gap_sincos', model_kwargs={'embed_dim': 16}, train_options=[],
                arms=['plain', 'mimetic'], reference='plain',
                test_split=dict(images=1000, classes=10, chance=10.0, majority=19.6),
                estimated_seconds={'plain': 60.0, 'mimetic': 61.0})


def _set_top1(record, v):
    record.update(final_top1=v, best_top1=v, curve=[v])  # the curve's last and largest: one value, everywhere


def _set_epochs(record, v):
    record.update(epochs=v, curve_epochs=[v])


# (file, field as the line names it, how the value is put in, the values the field takes)
FIELDS = [
    ('result', 'final_top1', _set_top1, TOP1),
    ('result', 'seed', lambda r, v: r.update(seed=v), SEED),
    ('result', 'seconds', lambda r, v: r.update(seconds=v), SECONDS),
    ('result', 'epochs', _set_epochs, COUNT),
    ('result', 'parts', lambda r, v: r.update(parts=v), COUNT),
    ('result', 'train_loss[0]', lambda r, v: r.update(train_loss=[v]), LOSS),
    ('settings', 'test_split.majority', lambda s, v: s['test_split'].update(majority=v),
     lambda v: TOP1(v) and v >= 10.0),  # chance 10%: the largest of 10 classes holds a tenth at least
    ('settings', 'test_split.images', lambda s, v: s['test_split'].update(images=v), COUNT),
    ('settings', 'estimated_seconds.plain', lambda s, v: s['estimated_seconds'].update(plain=v), SECONDS),
    ('settings', 'model_kwargs.embed_dim', lambda s, v: s['model_kwargs'].update(embed_dim=v), KWARG),
]
_MARK = -12345.5  # a stand-in value, replaced by the hostile text once the record is JSON


def _write_folder(out: Path, result: dict, settings: dict, hostile: str = None) -> None:
    """ A comparison's folder by hand: its settings, and a result per run of each arm (plain's seed 0 is `result`,
    with `hostile` in place of the stand-in value). """
    def text(record):
        return json.dumps(record).replace(str(_MARK), hostile) if hostile is not None else json.dumps(record)
    (out / 'runs').mkdir(parents=True)
    (out / 'compare.json').write_text(text(settings))
    for arm in ('plain', 'mimetic'):
        for seed in (0, 1):
            record = result if (arm, seed) == ('plain', 0) else dict(RESULT, arm=arm, seed=seed)
            if arm == 'mimetic':
                _set_top1(record, 75.0)
            (out / 'runs' / f'{arm}_s{seed}').mkdir()
            (out / 'runs' / f'{arm}_s{seed}' / 'result.json').write_text(text(record))


def _compare(argv, capsys):
    code = cli.main(['compare', *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def _files(folder: Path):
    return {p: p.read_bytes() for p in folder.rglob('*') if p.is_file()}


@pytest.mark.parametrize('file, field, put, valid', FIELDS, ids=[f'{f}-{name}' for f, name, _, _ in FIELDS])
def test_every_field_is_refused_exactly_outside_what_it_means(tmp_path, capsys, monkeypatch, file, field, put, valid):
    """ `--report` on a folder whose file holds each hostile value in the field: taken (the answer written) where the
    field's meaning allows the value, else refused in one line naming the file and the field, exit 2, no answer
    written and no file changed. (The answer's figure is left out: it takes longer than the rest.) """
    from timm_structinit.compare import report
    monkeypatch.setattr(report, '_curves', lambda *args, **kwargs: None)
    for i, hostile in enumerate(HOSTILE):
        out = tmp_path / str(i)
        result, settings = copy.deepcopy(RESULT), copy.deepcopy(SETTINGS)
        put(result if file == 'result' else settings, _MARK)
        _write_folder(out, result, settings, hostile)
        folder = 'plain_s0'
        value = json.loads(hostile)
        if field == 'seed' and _whole(value) and value not in (0, 1) and len(str(value)) < 100:
            folder = f'plain_s{value}'  # in the folder of its own name, which the seed alone can make wrong
            (out / 'runs' / 'plain_s0').rename(out / 'runs' / folder)
        before = _files(out)
        code, stdout, err = _compare(['--out', out, '--report'], capsys)
        if valid(json.loads(hostile)):
            assert code == 0 and (out / 'results.md').is_file(), (hostile, err)
            continue
        path = out / ('compare.json' if file == 'settings' else f'runs/{folder}/result.json')
        line = one_line(err)
        assert code == 2 and f'{path}: ' in line and field.split('[')[0] in line, (hostile, line)
        assert 'delete it' in line or 'put back' in line, line
        assert _files(out) == before and not (out / 'results.md').exists(), hostile
        assert stdout == '', stdout  # no decision said from it


def test_a_nan_majority_does_not_turn_the_decision_upside_down(tmp_path, capsys):
    """ The field report's case: mimetic at 75% over a 50% majority class, the majority edited to NaN; compared as a
    number it said "the runs did not learn". Refused instead, and no decision is written or said. """
    settings = copy.deepcopy(SETTINGS)
    settings['test_split'].update(classes=2, chance=50.0, majority=_MARK)
    _write_folder(tmp_path, copy.deepcopy(RESULT), settings, 'NaN')
    code, stdout, err = _compare(['--out', tmp_path, '--report'], capsys)
    assert code == 2 and 'test_split.majority is NaN' in one_line(err), err
    assert 'did not learn' not in stdout + err and not (tmp_path / 'results.json').exists()


def _deep(depth: int) -> str:
    return '{"a": ' * depth + '1' + '}' * depth


# (file, content, words of its line): shapes no version of compare writes
SHAPES = [
    ('compare.json', '[' * 100_000 + ']' * 100_000, 'nested deeper'),
    ('runs/plain_s0/result.json', _deep(100_000), 'nested deeper'),
    ('compare.json', json.dumps({**SETTINGS, 'model_kwargs': {'x': json.loads(_deep(40))}}),
     'model_kwargs.x is {"a": {"a": {"a": {"a"'),
    ('runs/plain_s0/result.json', json.dumps(RESULT).replace('"seed": 0', '"seed": ' + '9' * 400),
     'its seed is an integer of 400 digits'),
    ('runs/plain_s0/result.json', json.dumps({**RESULT, 'curve': [50.0, 40.0], 'curve_epochs': [1, 2]}),
     'final_top1 50 is not the last value of its curve (40)'),
    ('runs/plain_s0/result.json', json.dumps({**RESULT, 'curve_epochs': [2, 2], 'curve': [50.0, 50.0]}),
     'curve_epochs [2, 2] do not increase'),
    ('compare.json', json.dumps({**SETTINGS, 'arms': ['plain', 'plain']}), 'name an arm twice'),
    ('compare.json', json.dumps({**SETTINGS, 'reference': 'impulse3'}), "reference 'impulse3' is not one of its arms"),
    ('compare.json', json.dumps({**SETTINGS, 'test_split': dict(images=10, classes=4, chance=10.0, majority=50.0)}),
     'test_split.chance is 10, not 100 / its 4 classes'),
    ('compare.json', '"plain"', 'holds a JSON string, not an object'),
    ('runs/plain_s0/result.json', '\xff\xfe{}', 'is not valid JSON'),
    ('runs/plain_s0/result.json', json.dumps({**RESULT, 'date': 'yesterday'}), 'its date is "yesterday"'),
    ('runs/plain_s0/result.json', json.dumps({**RESULT, 'device': None}), 'its device is null'),
]


@pytest.mark.parametrize('name, content, words', SHAPES, ids=[f'{n}-{w[:30]}' for n, _, w in SHAPES])
def test_a_file_of_another_shape_is_one_line(tmp_path, capsys, name, content, words):
    _write_folder(tmp_path, copy.deepcopy(RESULT), copy.deepcopy(SETTINGS))
    (tmp_path / name).write_text(content)
    before = _files(tmp_path)
    code, stdout, err = _compare(['--out', tmp_path, '--report'], capsys)
    line = one_line(err)
    assert code == 2 and f'{tmp_path / name}: ' in line and words in line, line
    assert _files(tmp_path) == before


def test_a_file_larger_than_any_compare_writes_is_not_read(tmp_path, capsys, monkeypatch):
    from timm_structinit.utils import file_schema
    _write_folder(tmp_path, copy.deepcopy(RESULT), copy.deepcopy(SETTINGS))
    path = tmp_path / 'runs' / 'mimetic_s1' / 'result.json'
    with open(path, 'ab') as f:
        f.truncate(file_schema.MAX_BYTES + 1)  # sparse: its size, without writing it
    read_bytes = Path.read_bytes
    monkeypatch.setattr(Path, 'read_bytes', lambda self: pytest.fail(f'{self} was read') if self == path else
                        read_bytes(self))
    code, stdout, err = _compare(['--out', tmp_path, '--report'], capsys)
    assert code == 2 and f'holds {file_schema.MAX_BYTES + 1:,} bytes, more than any file' in one_line(err), err


def test_a_stopped_runs_elapsed_time_is_held_to_the_schema_before_any_work(tmp_path, capsys):
    """ A call that trains reads every run's elapsed.json before any work: a part count of 400 digits, NaN seconds
    and a nesting 100,000 deep are each one line. """
    for i, (content, words) in enumerate([('{"seconds": 5, "parts": ' + '9' * 400 + '}', 'parts is an integer of 400'),
                                          ('{"seconds": NaN, "parts": 1}', 'seconds is NaN'),
                                          ('[' * 100_000 + ']' * 100_000, 'nested deeper')]):
        out = tmp_path / str(i)
        _write_folder(out, copy.deepcopy(RESULT), copy.deepcopy(SETTINGS))
        (out / 'runs' / 'mimetic_s1' / 'elapsed.json').write_text(content)
        before = _files(out)
        code, stdout, err = _compare(['--out', out, *TINY[2:], '--inits', 'plain', 'mimetic', '--seeds', '2',
                                      '--time-limit', '0.001'], capsys)
        line = one_line(err)
        assert code == 2 and str(out / 'runs' / 'mimetic_s1' / 'elapsed.json') in line and words in line, line
        assert _files(out) == before


# --- the files of a run, read back by compare when it finishes and by a resume ---------------------------------------

@pytest.mark.parametrize('content, words', [
    ('epoch,train_loss,eval_top1\n0,2.0,50\n1,1.5,nan\n', 'line 3: its eval_top1 is nan: should be a finite number'),
    ('epoch,train_loss,eval_top1\n0,2.0,50\n1,1.5,100.5\n', 'line 3: its eval_top1 is 100.5: should be at most 100'),
    ('epoch,train_loss,eval_top1\nzero,2.0,50\n', 'line 2: its epoch is zero: should be a valid integer'),
    ('epoch,train_loss,eval_top1\n0,inf,50\n', 'line 2: its train_loss is inf: should be a finite number'),
    ('epoch,train_loss,eval_top1\n0,2.0,50,7\n', 'line 2 holds more values than its header names'),
])
def test_a_runs_summary_is_read_by_its_schema(tmp_path, content, words):
    """ compare takes a finished run's result from its summary: a row that breaks the schema is one line naming the
    file, the line and the field (the runner then counts the run as failed, in that line), never a result. """
    path = tmp_path / 'summary.csv'
    path.write_text(content)
    with pytest.raises(ConfigError) as caught:
        read_summary(path)
    assert str(caught.value).startswith(f'{path}: {words}'), caught.value


def test_a_summary_with_a_column_a_row_did_not_write_is_read():
    """ A row shorter than the header (the target mass stopped being tracked) is read with what it holds. """
    import tempfile
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / 'summary.csv'
        path.write_text('epoch,train_loss,eval_top1,eval_target_mass\n0,2.0,50,0.5\n1,1.5,60\n')
        assert read_summary(path) == [dict(epoch=0.0, train_loss=2.0, eval_top1=50.0, eval_target_mass=0.5),
                                      dict(epoch=1.0, train_loss=1.5, eval_top1=60.0)]


@pytest.fixture(scope='module')
def first_epoch(tmp_path_factory):
    """ A run of the impulse init (it tracks the target mass) stopped after its first epoch of 2. """
    from timm_structinit import train as train_mod
    out = tmp_path_factory.mktemp('runs')
    argv = [a if a != 'vit_tiny_patch2_32_mimetic' else 'vit_tiny_patch2_32_impulse3' for a in RUN]
    assert train_mod.main([*argv, '--epochs', '1', '--output', str(out), '--experiment', 'a']) == 0
    return out / 'a', argv


def _edit_checkpoint(path: Path, edit) -> None:
    content = torch.load(path, map_location='cpu', weights_only=False)
    edit(content)
    torch.save(content, path)


# (file of the run, how it is damaged, words of the line)
RUN_FILES = [
    ('summary.csv', lambda p: p.write_text(p.read_text().replace(p.read_text().splitlines()[1].split(',')[0] + ',',
                                                                 'first,', 1)), "summary.csv: line 2: its epoch is"),
    ('target_mass.csv', lambda p: p.write_text(p.read_text().splitlines()[0] + '\n0,1.5,1.5\n'),
     'target_mass.csv: line 2: its mean is 1.5: should be at most 1'),
    ('last.pth.tar', lambda p: _edit_checkpoint(p, lambda c: c['saver'].update(best_metric=float('nan'))),
     'its saver.best_metric is NaN: should be a finite number'),
    ('last.pth.tar', lambda p: _edit_checkpoint(p, lambda c: c.update(metric=float('inf'))),
     'its metric is Infinity: should be a finite number'),
    ('last.pth.tar', lambda p: _edit_checkpoint(p, lambda c: c.update(version=7)), 'its version is 7'),
]


@pytest.mark.parametrize('name, damage, words', RUN_FILES, ids=[w[:40] for _, _, w in RUN_FILES])
def test_a_resume_holds_the_files_it_reads_back_to_their_schema(first_epoch, tmp_path, capsys, name, damage, words):
    """ A resume continues the run's summary and target mass and takes up its checkpoint's bookkeeping: each
    damaged is one line naming it, exit 2, before any work and with nothing changed. """
    run, argv = first_epoch
    folder = tmp_path / 'a'
    shutil.copytree(run, folder)
    damage(folder / name)
    before = _files(folder)
    code, stdout, err = run_main([*argv, '--resume', folder], capsys)
    line = one_line(err)
    assert code == 2 and words in line, line
    assert _files(folder) == before and 'Model ' not in stdout
