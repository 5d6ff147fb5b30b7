""" `timm-structinit compare`: the statistics against SciPy's, the decision on hand-made results, a tiny comparison on
the CPU (its table, decision, curves and JSON), a second call that trains nothing, a stopped call that resumes, and
every refusal in one line before any training. """
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scipy import stats as scipy_stats

from timm_structinit import cli
from timm_structinit.compare import stats
from timm_structinit.compare.plan import Arm, parse_arm, run_name

DATA = ['--dataset', 'sklearn/digits', '--val-split', 'test', '--train-subset', '96', '--val-subset', '48',
        '--epochs', '1', '-b', '32', '--opt', 'adamw', '--lr', '2e-3', '--warmup-epochs', '0', '--workers', '0',
        '--device', 'cpu']
TINY = [*DATA, '--model-kwargs', 'embed_dim=16', 'depth=1', 'num_heads=2', 'patch_size=8']
ENV = dict(os.environ, OMP_NUM_THREADS='1')
# one pytest-xdist process for the module (--dist loadgroup): the tiny comparison its tests share is trained once
pytestmark = pytest.mark.xdist_group('compare')


@pytest.mark.parametrize('p, df', [(0.975, 1), (0.975, 1.7), (0.975, 4.2), (0.95, 30), (0.025, 2), (0.9, 120)])
def test_t_quantile_is_scipys(p, df):
    assert stats.t_quantile(p, df) == pytest.approx(scipy_stats.t.ppf(p, df), rel=1e-7)


@pytest.mark.parametrize('a, b', [([58.7, 59.5], [54.9, 55.1]), ([60.1, 57.0, 59.9], [55.2, 54.0]),
                                  ([41.5, 42.0, 43.1, 40.2], [42.1, 42.3, 41.0, 43.9])])
def test_welch_interval_is_scipys(a, b):
    expected = scipy_stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    gain = stats.welch_gain('x', a, b)
    assert gain.gain - gain.half_width == pytest.approx(expected.low, rel=1e-6)
    assert gain.gain + gain.half_width == pytest.approx(expected.high, rel=1e-6)


def _gains(results):
    return [stats.welch_gain(arm, finals, results['plain']) for arm, finals in results.items() if arm != 'plain']


@pytest.mark.parametrize('results, verdicts, words', [
    # mimetic far above the spread of both: better, and the decision says to use it
    ({'plain': [54.8, 55.0, 55.2], 'mimetic': [58.6, 58.8, 59.0], 'impulse3': [54.7, 55.4, 54.9]},
     {'mimetic': 'better', 'impulse3': 'unclear'}, 'mimetic: +3.80 ± '),
    # no difference: the same values shifted by far less than their spread
    ({'plain': [50.0, 54.0], 'mimetic': [50.5, 54.5]}, {'mimetic': 'unclear'}, 'no init beats the plain one'),
    # clearly worse
    ({'plain': [60.0, 60.2, 60.1], 'impulse3': [50.0, 50.1, 50.3]}, {'impulse3': 'worse'}, 'impulse3 did worse'),
])
def test_decisions_on_hand_made_results(results, verdicts, words):
    gains = _gains(results)
    assert {g.arm: g.verdict for g in gains} == verdicts
    assert words in stats.decide(gains, {a: len(v) for a, v in results.items()}, 'plain')


def test_one_seed_has_no_spread_to_judge_by():
    gains = _gains({'plain': [50.0], 'mimetic': [60.0]})
    assert gains[0].half_width is None and gains[0].verdict == 'unclear'
    assert 'one seed per arm' in stats.decide(gains, {'plain': 1, 'mimetic': 1}, 'plain')


def test_arms_are_read_as_written():
    arm = parse_arm('mimetic:qk_noise=0.5,vproj=False', ['mimetic', 'impulse'])
    assert (arm.struct_init, arm.kwargs) == ('mimetic', {'qk_noise': 0.5, 'vproj': False})
    assert parse_arm('impulse3', ['impulse']).kwargs == {'kernel_size': 3}
    assert parse_arm('plain', ['mimetic']).model_kwargs() == {}
    assert run_name(Arm('impulse:kernel_size=5', 'impulse', {}), 1) == 'impulse-kernel_size=5_s1'


def _compare(argv, capsys):
    code = cli.main(['compare', *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope='module')
def tiny_comparison(tmp_path_factory):
    """ Two inits x two seeds x one epoch on the digits, two runs at a time. """
    out = tmp_path_factory.mktemp('compare') / 'cmp'
    cmd = [sys.executable, '-m', 'timm_structinit.cli', 'compare', '--out', str(out), '--inits', 'plain', 'mimetic',
           '--concurrent', '2', *TINY]
    done = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=600)
    return out, done


@pytest.mark.slow
def test_a_tiny_comparison_writes_the_answer(tiny_comparison):
    out, done = tiny_comparison
    assert done.returncode == 0, done.stdout + done.stderr
    answer = json.loads((out / 'results.json').read_text())
    assert answer['reference'] == 'plain' and set(answer['stats']) == {'plain', 'mimetic'}
    assert [r['seed'] for r in answer['runs']] == [0, 1, 0, 1]
    assert answer['stats']['mimetic']['seeds'] == 2 and 'mimetic' in answer['gains']
    finals = [r['final_top1'] for r in answer['runs'] if r['arm'] == 'mimetic']
    assert answer['stats']['mimetic']['final_mean'] == pytest.approx(sum(finals) / 2)
    text = (out / 'results.md').read_text()
    assert answer['decision'] in text and answer['decision'] in done.stdout
    assert '| mimetic | 2 |' in text and 'Welch' in text and 'timm-structinit-train --model' in text
    assert (out / 'curves.png').stat().st_size > 1000
    for r in answer['runs']:
        assert r['device'].startswith('CPU') and r['torch'] and r['seconds'] > 0 and r['epochs'] == 1


@pytest.mark.slow
def test_a_second_call_trains_nothing(tiny_comparison, capsys):
    out, _ = tiny_comparison
    before = {p: p.stat().st_mtime for p in (out / 'runs').glob('*/result.json')}
    code, stdout, err = _compare(['--out', out, '--inits', 'plain', 'mimetic', '--concurrent', '2', *TINY], capsys)
    assert code == 0, err
    assert '[start]' not in stdout and '[resume]' not in stdout
    assert {p: p.stat().st_mtime for p in (out / 'runs').glob('*/result.json')} == before


@pytest.mark.slow
def test_report_alone_writes_the_answer_from_the_runs(tiny_comparison, capsys):
    out, _ = tiny_comparison
    (out / 'results.md').unlink()
    code, stdout, err = _compare(['--out', out, '--report'], capsys)
    assert code == 0, err
    assert (out / 'results.md').is_file() and 'seed(s)' in stdout


@pytest.mark.slow
def test_other_settings_in_the_same_folder_are_refused(tiny_comparison, capsys):
    out, _ = tiny_comparison
    argv = ['--out', out, '--inits', 'plain', 'mimetic', *TINY]
    argv[argv.index('--epochs') + 1] = '2'
    code, stdout, err = _compare(argv, capsys)
    assert code == 2 and err.count('\n') == 1, err
    assert 'holds the runs of another comparison' in err and "'--epochs', '1'" in err and "'--epochs', '2'" in err


@pytest.mark.parametrize('argv, words', [
    (['--inits', 'plain', 'mimetc'], "unknown init 'mimetc'"),
    (['--model', 'mixer_s4_32', '--inits', 'plain', 'mimetic'], "'mimetic'"),
    (['--seed', '3'], 'compare seeds each run itself'),
    (['--initial-checkpoint', 'x.pth'], 'would replace the init'),
    (['--seeds', '0'], '--seeds 0: must be at least 1'),
    (['--time-limit', '0.001'], 'no run would fit'),
    (['--model', 'vit_tiny_patch2_32_impulse3'], 'the plain arm would not be plain'),
])
def test_bad_inputs_are_one_line_before_any_training(tmp_path, capsys, argv, words):
    model = ['--model-kwargs', 'embed_dim=64', 'num_blocks=1', 'mlp_ratio=(2.0,4.0)'] if 'mixer_s4_32' in argv \
        else TINY[len(DATA):]
    code, stdout, err = _compare(['--out', tmp_path / 'cmp', *DATA, *model, *argv], capsys)
    assert code == 2 and err.count('\n') == 1 and words in err, err
    assert not (tmp_path / 'cmp' / 'runs').exists()


def test_the_time_limit_counts_each_runs_start_up(tmp_path, capsys, monkeypatch):
    """ Each run is a process of its own: what it takes to start counts against --time-limit, beside its steps. """
    from timm_structinit.compare import session
    monkeypatch.setattr(session, 'startup_seconds', lambda: 900.0)
    code, stdout, err = _compare(['--out', tmp_path / 'cmp', *TINY, '--time-limit', '600'], capsys)
    assert code == 2 and err.count('\n') == 1 and 'no run would fit' in err and '(900 s to start, then' in err, err


def test_the_time_limit_is_checked_on_the_model_the_runs_train(tmp_path, capsys, monkeypatch):
    """ A recipe that sizes the model (the digits recipe: width 64, depth 4 on 16 px): the estimate, the last model
    compare builds before its refusal, times that size, not the base model's default. """
    import timm
    from timm_structinit.compare import session
    built = []
    create_model = timm.create_model

    def recording(name, *args, **kwargs):
        built.append((name, kwargs.get('embed_dim'), kwargs.get('img_size')))
        return create_model(name, *args, **kwargs)
    monkeypatch.setattr(timm, 'create_model', recording)
    monkeypatch.setattr(session, 'startup_seconds', lambda: 900.0)
    code, stdout, err = _compare(['--out', tmp_path / 'cmp', '-c', 'digits', '--device', 'cpu',
                                  '--time-limit', '600'], capsys)
    assert code == 2 and 'no run would fit' in err, err
    assert built[-1] == ('vit_tiny_patch2_32_gap_sincos', 64, 16), built


def test_a_dataset_of_one_class_is_refused(tmp_path, capsys):
    from PIL import Image
    for split in ('train', 'test'):
        (tmp_path / 'data' / split / 'only').mkdir(parents=True)
        for i in range(4):
            Image.new('RGB', (32, 32), (i * 40, 0, 0)).save(tmp_path / 'data' / split / 'only' / f'{i}.png')
    code, stdout, err = _compare(['--out', tmp_path / 'cmp', '--data-dir', tmp_path / 'data', '--val-split', 'test',
                                  '--device', 'cpu', '--epochs', '1'], capsys)
    assert code == 2 and err.count('\n') == 1 and 'holds one class' in err, err


@pytest.mark.slow
def test_a_stopped_comparison_resumes(tmp_path):
    out = tmp_path / 'cmp'
    argv = [*TINY, '--epochs', '3', '--inits', 'plain', '--seeds', '1']
    cmd = [sys.executable, '-m', 'timm_structinit.cli', 'compare', '--out', str(out), *argv]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    checkpoint = out / 'runs' / 'plain_s0' / 'last.pth.tar'
    deadline = time.time() + 300
    while not checkpoint.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGINT, err
    assert 'continue with: timm-structinit compare' in err and 'Traceback' not in err
    assert not (out / 'runs' / 'plain_s0' / 'result.json').exists()
    done = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert '[resume] plain_s0' in done.stdout
    assert json.loads((out / 'runs' / 'plain_s0' / 'result.json').read_text())['epochs'] == 3


def _sleeping_specs(tmp_path, seconds, names):
    """ Runs that are processes sleeping `seconds` (the SIGTERM that stops a run ends them at once) and then print a finished epoch. """
    from timm_structinit.compare.runner import RunSpec
    code = f'import time; time.sleep({seconds}); print("epoch   1/1  train loss 1.0", flush=True)'
    return [RunSpec(name, [sys.executable, '-c', code], tmp_path / name, 1) for name in names]


def _finish_writing(spec, seconds, resumed):
    from timm_structinit.compare.runner import RESULT_FILE
    spec.folder.mkdir(parents=True, exist_ok=True)
    result = dict(final_top1=1.0, best_top1=1.0, seconds=seconds, epochs=1)
    (spec.folder / RESULT_FILE).write_text(json.dumps(result))
    return result


@pytest.mark.slow
def test_runner_starts_no_run_that_cannot_end_in_time(tmp_path):
    from timm_structinit.compare.runner import run_all
    specs = _sleeping_specs(tmp_path, 1.0, ['a_s0', 'b_s0', 'a_s1', 'b_s1'])
    # two at a time: the first pair takes ~1 s, which the ~0.6 s left after it cannot hold
    outcome = run_all(specs, _finish_writing, 2, time.monotonic() + 1.6, show=lambda line: None, poll=0.05)
    assert sorted(outcome.finished) == ['a_s0', 'b_s0'] and outcome.not_started == ['a_s1', 'b_s1']
    # a second call keeps what the first finished and trains the rest
    again = run_all(specs, _finish_writing, 2, show=lambda line: None, poll=0.05)
    assert sorted(again.finished) == ['a_s0', 'a_s1', 'b_s0', 'b_s1'] and not again.not_started


@pytest.mark.slow
def test_runner_stops_the_runs_under_way_at_the_deadline(tmp_path):
    from timm_structinit.compare.runner import run_all
    start = time.monotonic()
    outcome = run_all(_sleeping_specs(tmp_path, 60, ['a_s0', 'b_s0']), lambda *a: pytest.fail('no run finishes'),
                      2, start + 1, show=lambda line: None, poll=0.05)
    assert sorted(outcome.stopped) == ['a_s0', 'b_s0'] and time.monotonic() - start < 20


def test_runner_interrupted_while_finishing_a_run_counts_it_stopped(tmp_path):
    """ Ctrl-C during a run's finish (its final evaluation, a process of its own) stops the other runs and names the
    one being finished among the stopped: it is not finished, and a later call takes it up again. """
    from timm_structinit.compare.runner import run_all

    def interrupted(spec, seconds, resumed):
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt) as caught:
        run_all([*_sleeping_specs(tmp_path, 0.1, ['quick_s0']), *_sleeping_specs(tmp_path, 60, ['slow_s0'])],
                interrupted, 2, show=lambda line: None, poll=0.05)
    outcome = caught.value.outcome
    assert sorted(outcome.stopped) == ['quick_s0', 'slow_s0'] and not outcome.finished


def test_runner_reports_a_failed_run_in_one_line_and_goes_on(tmp_path):
    from timm_structinit.compare.runner import RunSpec, run_all
    failing = RunSpec('bad_s0', [sys.executable, '-c', 'print("timm-structinit-train: error: --lr -1 must be > 0");'
                                 'raise SystemExit(2)'], tmp_path / 'bad_s0', 1)
    shown = []
    outcome = run_all([failing, *_sleeping_specs(tmp_path, 0.1, ['good_s0'])], _finish_writing, 1,
                      show=shown.append, poll=0.05)
    assert list(outcome.finished) == ['good_s0']
    assert outcome.failed['bad_s0'].startswith('--lr -1 must be > 0 (log: ')
    assert any(line.startswith('[failed] bad_s0: --lr -1 must be > 0') for line in shown)
