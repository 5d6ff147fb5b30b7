""" compare's answer (results.json, results.md, curves.png) is written whole or says how to finish it: a stop that lands
while any part of it is written is one line giving the command that writes it (`--report`), which then writes it
whole; `--report` on a partial comparison (an arm without runs, an arm with fewer seeds, a run begun and not finished)
names what is missing and exits 3; an answer file that cannot be written is named as the user knows it, never by its
staging name. """
import errno
import json
import os
import signal
from pathlib import Path

import pytest

from timm_structinit import cli
from timm_structinit.compare import report

RESULT = dict(arm='plain', seed=0, final_top1=50.0, best_top1=50.0, epochs=2, curve=[50.0], curve_epochs=[2],
              train_loss=[2.0], seconds=60.0, resumed=False, parts=1, command=['python', '-m', 'x', '--model', 'm'],
              date='2026-11-27T10:00:00', device='CPU', torch='2', timm='1', python='3')


def _folder(out: Path, seeds: dict, arms=None) -> Path:
    """ A comparison's folder by hand: `seeds` gives each arm's finished seeds. """
    arms = arms or list(seeds)
    (out / 'runs').mkdir(parents=True)
    (out / 'compare.json').write_text(json.dumps(dict(
        model='vit_tiny_patch2_32_gap_sincos', model_kwargs={}, train_options=[], arms=arms, reference=arms[0])))
    for arm, finished in seeds.items():
        for seed in finished:
            top1 = 50.0 + seed + 10 * arms.index(arm)
            (out / 'runs' / f'{arm}_s{seed}').mkdir()
            (out / 'runs' / f'{arm}_s{seed}' / 'result.json').write_text(json.dumps(
                dict(RESULT, arm=arm, seed=seed, final_top1=top1, best_top1=top1, curve=[top1])))
    return out


def _report(out, capsys):
    code = cli.main(['compare', '--out', str(out), '--report'])
    stdout, err = capsys.readouterr()
    return code, stdout, err


def _stop_here(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)  # the command's stop handler raises it here, inside the write


@pytest.mark.parametrize('part', ['_curves', '_markdown', 'json.dumps'])
def test_a_stop_while_the_answer_is_written_says_how_to_finish_it(tmp_path, capsys, monkeypatch, part):
    out = _folder(tmp_path / 'cmp', {'plain': [0, 1], 'mimetic': [0, 1]})
    if part == 'json.dumps':
        monkeypatch.setattr(report.json, 'dumps', _stop_here)
    else:
        monkeypatch.setattr(report, part, _stop_here)
    code, stdout, err = _report(out, capsys)
    lines = err.strip().splitlines()
    assert code == 128 + signal.SIGTERM and len(lines) == 1, err
    assert lines[0].endswith(f'finish it with: timm-structinit compare --out {out} --report'), lines[0]
    assert not (out / 'results.md').exists()  # the first answer: not half of it
    monkeypatch.undo()
    code, stdout, err = _report(out, capsys)
    assert code == 0 and err == '', err
    answer = json.loads((out / 'results.json').read_text())
    assert answer['stats']['mimetic']['seeds'] == 2 and (out / 'curves.png').is_file()
    assert answer['decision'] in (out / 'results.md').read_text()


@pytest.mark.parametrize('seeds, begun, words', [
    ({'plain': [0, 1], 'mimetic': [0, 1], 'impulse3': []}, [], ['no finished run of impulse3']),
    ({'plain': [0, 1], 'mimetic': [], 'impulse3': []}, [], ['no finished run of mimetic, impulse3']),
    ({'plain': [0, 1, 2], 'mimetic': [0], 'impulse3': [0, 1]}, [],
     ['fewer seeds than 3 in mimetic 1, impulse3 2']),
    ({'plain': [0, 1], 'mimetic': [0, 1]}, ['mimetic_s2'], ['runs begun and not finished: mimetic_s2']),
    ({'plain': [0], 'mimetic': [], 'impulse3': [0]}, ['mimetic_s0'],
     ['no finished run of mimetic', 'runs begun and not finished: mimetic_s0']),
])
def test_report_on_a_partial_comparison_names_what_it_lacks(tmp_path, capsys, monkeypatch, seeds, begun, words):
    """ The answer is written from the runs there, and one line names each arm lacking runs, each arm with fewer
    seeds than the most, each run begun and not finished; exit status 3, as a call that left runs unfinished. """
    monkeypatch.setattr(report, '_curves', lambda *args, **kwargs: None)  # the figure: slow, and beside the point
    out = _folder(tmp_path / 'cmp', seeds)
    for name in begun:
        (out / 'runs' / name).mkdir()
        (out / 'runs' / name / 'last.pth.tar').write_bytes(b'checkpoint')
    code, stdout, err = _report(out, capsys)
    lines = err.strip().splitlines()
    assert code == 3 and len(lines) == 1 and '(exit status 3)' in lines[0], err
    assert all(w in lines[0] for w in words), lines[0]
    assert (out / 'results.md').is_file()


def test_report_on_a_whole_comparison_exits_0(tmp_path, capsys):
    out = _folder(tmp_path / 'cmp', {'plain': [0, 1], 'mimetic': [0, 1], 'impulse3': [0, 1]})
    code, stdout, err = _report(out, capsys)
    assert code == 0 and err == '' and 'the answer:' in stdout


def test_an_answer_file_that_cannot_be_written_is_named_as_the_user_knows_it(tmp_path, capsys, monkeypatch):
    """ results.md a folder (the rename onto it refused), then results.json on an immutable file (the rename refused
    with EPERM): each one line naming the answer's file, never its staging name. """
    out = _folder(tmp_path / 'cmp', {'plain': [0, 1], 'mimetic': [0, 1]})
    (out / 'results.md').mkdir()
    code, stdout, err = _report(out, capsys)
    assert code != 0 and len(err.strip().splitlines()) == 1, err
    assert str(out / 'results.md') in err and '.results.md.' not in err and '.tmp' not in err, err
    (out / 'results.md').rmdir()
    replace = os.replace

    def immutable(src, dst, **kwargs):
        if os.path.basename(dst) == 'results.json':
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), os.fspath(src), os.fspath(dst))
        return replace(src, dst, **kwargs)
    monkeypatch.setattr(os, 'replace', immutable)
    code, stdout, err = _report(out, capsys)
    assert code != 0 and 'Operation not permitted' in err and str(out / 'results.json') in err, err
    assert '.results.json.' not in err and '.tmp' not in err, err
    assert not list(out.glob('.results*'))  # no staging file left
