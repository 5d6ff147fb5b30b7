""" `timm-structinit compare`: the statistics against SciPy's, the decision on hand-made results, a tiny comparison on
the CPU (its table, decision, curves and JSON), a second call that trains nothing, a stopped call that resumes, and
every refusal in one line before any training. """
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from scipy import stats as scipy_stats

from timm_structinit import cli
from timm_structinit.compare import stats
from timm_structinit.compare.plan import Arm, parse_arm, run_name
from timm_structinit.compare.report import summarize

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


# the runs a reader saw (2 seeds an arm, 18 epochs): every mimetic run above every plain run by 22 points or more
SEPARATE = {'plain': [70.07, 56.20], 'mimetic': [94.89, 92.46], 'impulse3': [86.86, 84.67]}


def test_an_arm_whose_every_run_beats_every_plain_run_is_said_so_with_the_seeds_it_needs():
    """ Worked by hand: plain's mean 63.135 and variance 13.87^2 / 2 = 96.188, mimetic's 93.675 and 2.43^2 / 2 =
    2.952; the gain 30.54, every mimetic run above every plain one by 92.46 - 70.07 = 22.39 at least. Welch, 2 seeds
    each: variance of the gain (96.188 + 2.952) / 2 = 49.570, df 49.570^2 / (48.094^2 + 1.476^2) = 1.061, half-width
    t(0.975, 1.061) = 11.096 times 7.041 = 78.1: the interval holds zero. The seeds the spread needs, at 95% and 80%
    power, are the fewest n with (t(0.975, df_n) + t(0.8, df_n)) sqrt(99.141 / n) <= 30.54: n = 2 gives (11.096 +
    1.334) 7.041 = 87.5, n = 3 (df 2.123) gives (4.073 + 1.046) 5.749 = 29.4: 3 seeds per arm (impulse3, +22.63,
    needs 4: n = 3 gives 29.6). One more seed for each of the 3 arms: 3 runs of 300 s, 15 min. """
    gains = _gains(SEPARATE)
    mimetic, impulse3 = gains
    assert mimetic.verdict == 'unclear' and mimetic.gain == pytest.approx(30.54)
    assert mimetic.margin == pytest.approx(22.39) and impulse3.margin == pytest.approx(84.67 - 70.07)
    assert mimetic.df == pytest.approx(1.0613, abs=1e-4) and mimetic.half_width == pytest.approx(78.12, abs=0.01)
    assert (mimetic.seeds_needed, impulse3.seeds_needed) == (3, 4)
    decision = stats.decide(gains, {a: len(v) for a, v in SEPARATE.items()}, 'plain', run_seconds=300.0)
    assert decision == (
        'mimetic: each of its 2 runs beat every plain run, by 22.39 points at least (gain +30.54), but with 2 seeds '
        'each the 95% interval (± 78.12) still holds zero: the seed spread may yet explain it; impulse3 likewise; '
        'the spread seen needs 3 seeds per arm to decide a gain of +30.54 (80% of the time): --seeds 3 with the '
        'same --out trains 3 more runs (about 15 min one at a time)')


def test_the_default_seeds_decide_a_gain_of_that_size():
    """ compare's default plan, 3 seeds an arm, decides the gain above: with the spread seen, 3 seeds each give a
    half-width of t(0.975, 2.123) sqrt(99.141 / 3) = 4.073 x 5.749 = 23.4 < 30.54, and meet the 80% power of
    `seeds_needed`; 2 seeds would give 78.1. """
    import argparse
    from timm_structinit_cli.compare_options import add_arguments
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    n = parser.parse_args(['--out', 'x']).seeds
    assert n == 3 == stats.seeds_needed(SEPARATE['mimetic'], SEPARATE['plain'])
    va, vb = 13.87 ** 2 / 2 / n, 2.43 ** 2 / 2 / n  # each arm's variance of its mean, with n seeds
    df = (va + vb) ** 2 / (va ** 2 / (n - 1) + vb ** 2 / (n - 1))
    half_width = scipy_stats.t.ppf(0.975, df) * (va + vb) ** 0.5
    assert half_width == pytest.approx(23.4, abs=0.05) and half_width < 30.54


@pytest.mark.parametrize('finals, plain', [([58.7, 59.5], [54.9, 55.1]), ([60.1, 57.0, 59.9], [55.2, 54.0, 56.0]),
                                           ([41.5, 42.0, 43.1, 40.2], [42.1, 42.3, 41.0, 43.9]),
                                           ([80.0, 90.0], [50.0, 75.0])])
def test_the_seeds_needed_are_the_fewest_that_meet_the_power_formula(finals, plain):
    """ The formula of `seeds_needed`, restated with SciPy's quantiles: n is the first count that meets it. """
    import statistics
    gain = abs(statistics.mean(finals) - statistics.mean(plain))
    va, vb = statistics.variance(finals), statistics.variance(plain)

    def meets(n):
        df = ((va + vb) / n) ** 2 / ((va / n) ** 2 / (n - 1) + (vb / n) ** 2 / (n - 1))
        return (scipy_stats.t.ppf(0.975, df) + scipy_stats.t.ppf(0.8, df)) * ((va + vb) / n) ** 0.5 <= gain
    n = stats.seeds_needed(finals, plain)
    expected = next((k for k in range(2, stats.MOST_SEEDS + 1) if meets(k)), stats.MOST_SEEDS + 1)
    assert n == expected


def test_a_gain_too_small_for_its_spread_is_said_so():
    gains = _gains({'plain': [50.0, 54.0], 'mimetic': [50.5, 54.5]})
    decision = stats.decide(gains, {'plain': 2, 'mimetic': 2}, 'plain')
    assert decision.startswith('no init beats the plain one beyond the seed spread (2 seeds each)')
    assert f'even {stats.MOST_SEEDS} seeds per arm would not tell a gain of +0.50 from none' in decision


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


# the tiny comparison the slow tests below share: the digits recipe (16 px images, patch 2) with a model shrunk by
# --model-kwargs, a subset of the data and one epoch; two runs at a time, each with 4 loader processes asked for
SHARED = ['-c', 'digits', '--epochs', '1', '--train-subset', '96', '--val-subset', '48', '--warmup-epochs', '0',
          '-b', '32', '--lr', '2e-3', '--device', 'cpu', '-j', '4', '--model-kwargs', 'embed_dim=16', 'depth=1',
          'num_heads=2']
SHARED_RUNS = ['--inits', 'plain', 'mimetic', '--seeds', '2', '--concurrent', '2']
CORES = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()
PER_RUN = max(1, CORES // 2)  # each of two runs side by side


@pytest.fixture(scope='module')
def tiny_comparison(tmp_path_factory):
    """ Two inits x two seeds x one epoch on the digits, two runs at a time, each choosing its own threads. """
    out = tmp_path_factory.mktemp('compare') / 'cmp'
    cmd = [sys.executable, '-m', 'timm_structinit.cli', 'compare', '--out', str(out), *SHARED_RUNS, *SHARED]
    env = {k: v for k, v in os.environ.items() if k != 'OMP_NUM_THREADS'}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
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
        assert r['threads'] == [PER_RUN]  # two runs at a time, each on its share of the cores


@pytest.mark.slow
def test_the_header_names_the_model_the_runs_build_and_each_runs_share(tiny_comparison):
    """ The digits recipe sizes the model (16 px, patch 2), --model-kwargs shrinks it further: the header names both,
    and the share each of two runs gets; each run's loader processes are its share (`args.yaml`). """
    out, done = tiny_comparison
    assert done.returncode == 0, done.stdout + done.stderr
    header = done.stdout.splitlines()[:3]
    assert 'vit_tiny_patch2_32_gap_sincos' in header[0] and 'img_size=16' in header[0], header
    assert 'patch_size=2' in header[0] and 'embed_dim=16' in header[0] and 'depth=1' in header[0], header
    assert f'each on {PER_RUN} of the {CORES} cores ({PER_RUN} torch thread' in header[1], header
    import yaml
    for arm in ('plain', 'mimetic'):
        for seed in (0, 1):
            args = yaml.safe_load((out / 'runs' / f'{arm}_s{seed}' / 'args.yaml').read_text())
            assert args['workers'] == (min(4, PER_RUN) if min(4, PER_RUN) < min(4, CORES) else 4)
    assert 'model every run builds: `vit_tiny_patch2_32_gap_sincos img_size=16' in (out / 'results.md').read_text()


@pytest.mark.slow
def test_a_second_call_trains_nothing(tiny_comparison, capsys):
    out, _ = tiny_comparison
    before = {p: p.stat().st_mtime for p in (out / 'runs').glob('*/result.json')}
    code, stdout, err = _compare(['--out', out, *SHARED_RUNS, *SHARED], capsys)
    assert code == 0, err
    assert '[start]' not in stdout and '[resume]' not in stdout
    assert {p: p.stat().st_mtime for p in (out / 'runs').glob('*/result.json')} == before


@pytest.mark.slow
def test_report_alone_writes_the_answer_from_the_runs(tiny_comparison, capsys):
    out, _ = tiny_comparison
    (out / 'results.md').unlink()
    code, stdout, err = _compare(['--out', out, '--report'], capsys)
    assert code == 0, err
    assert (out / 'results.md').is_file() and re.search(r'^plain +2 seeds +final top-1', stdout, re.M), stdout


@pytest.mark.slow
def test_other_settings_in_the_same_folder_are_refused(tiny_comparison, capsys):
    out, _ = tiny_comparison
    argv = ['--out', out, *SHARED_RUNS, *SHARED]
    argv[argv.index('--epochs') + 1] = '2'
    code, stdout, err = _compare(argv, capsys)
    assert code == 2 and err.count('\n') == 1, err
    assert 'holds the runs of another comparison (--epochs 1 there, 2 now)' in err, err
    assert '--lr' not in err and '--dataset' not in err  # only the option that differs is named


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
    from timm_structinit.compare import estimate
    monkeypatch.setattr(estimate, 'startup_seconds', lambda: 900.0)
    code, stdout, err = _compare(['--out', tmp_path / 'cmp', *TINY, '--time-limit', '600'], capsys)
    assert code == 2 and err.count('\n') == 1 and 'no run would fit' in err and '(900 s to start, ' in err, err


def test_the_time_limit_is_checked_on_the_model_the_runs_train(tmp_path, capsys, monkeypatch):
    """ A recipe that sizes the model (the digits recipe: width 64, depth 4 on 16 px): the estimate, the last model
    compare builds before its refusal, times that size, not the base model's default. """
    from timm_structinit.compare import estimate
    from timm_structinit.train import build
    built = []
    create_model = build.create_model

    def recording(name, *args, **kwargs):
        built.append((name, kwargs.get('embed_dim'), kwargs.get('img_size')))
        return create_model(name, *args, **kwargs)
    monkeypatch.setattr(build, 'create_model', recording)
    monkeypatch.setattr(estimate, 'startup_seconds', lambda: 900.0)
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
def test_a_stopped_comparison_resumes(tmp_path, capsys):
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
    # the line keeps the thread count the runs were started with: pasted, it trains them as before
    assert f'continue with: OMP_NUM_THREADS=1 timm-structinit compare --out {out}' in err and 'Traceback' not in err
    assert not (out / 'runs' / 'plain_s0' / 'result.json').exists()
    assert os.environ['OMP_NUM_THREADS'] == ENV['OMP_NUM_THREADS']  # the same command, continued here
    code, stdout, err = _compare(['--out', out, *argv], capsys)
    assert code == 0, stdout + err
    assert '[resume] plain_s0' in stdout
    assert stdout.startswith('1 run (1 arm x 1 seed) of '), stdout  # no "1 runs", "1 seeds"
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


# --- runs that learned nothing ------------------------------------------------------------------------------------

# the clothing photos of the field report: 2 seeds per arm, at chance, on a test split whose largest class is 19.6%
AT_CHANCE = {'plain': [8.875, 11.025], 'mimetic': [12.365, 20.155], 'impulse3': [8.877, 11.563]}


def _write_results(out, finals, test_split, settings=None, seconds=60.0):
    """ A folder of finished runs written by hand: `finals` gives each arm's final top-1 per seed. """
    for arm, values in finals.items():
        for seed, final in enumerate(values):
            folder = out / 'runs' / run_name(Arm(arm, None), seed)
            folder.mkdir(parents=True)
            (folder / 'result.json').write_text(json.dumps(dict(
                arm=arm, seed=seed, final_top1=final, best_top1=final, epochs=8, curve=[final], curve_epochs=[8],
                train_loss=[2.3], seconds=seconds, resumed=False, command=['python', '-m', 'x', '--model', 'm'],
                date='2026-11-27T10:00:00', device='CPU', torch='2', timm='1', python='3')))
    record = dict(settings or dict(model='vit_tiny_patch2_32_gap_sincos', model_kwargs={}, train_options=[]),
                  arms=list(finals), reference='plain')
    if test_split:
        record['test_split'] = test_split
    (out / 'compare.json').write_text(json.dumps(record))


def test_runs_at_chance_are_said_not_to_have_learned(tmp_path, capsys):
    """ Every arm within its seed spread of the majority class (19.6%): the decision says the runs did not learn and
    what to change, gives the chance and majority-class top-1, and does not ask for more seeds. The runs trained on
    the whole training split: more data is not a flag away (`--train-subset` only shrinks the split), so it is not
    proposed. """
    _write_results(tmp_path, AT_CHANCE, dict(images=1000, classes=10, chance=10.0, majority=19.6))
    code, stdout, err = _compare(['--out', tmp_path, '--report'], capsys)
    assert code == 0, err
    answer = json.loads((tmp_path / 'results.json').read_text())
    assert answer['decision'].startswith('the runs did not learn') and answer['learned'] is False
    for words in ('19.60%', 'chance 10.00%', '--epochs', '--model-kwargs'):
        assert words in answer['decision'], answer['decision']
    assert 'more seeds' not in answer['decision'] and '--train-subset' not in answer['decision']
    text = (tmp_path / 'results.md').read_text()
    assert 'chance 10.00% top-1, majority class 19.60%' in text and answer['decision'] in stdout
    assert '- base model: `vit_tiny_patch2_32_gap_sincos`\n' in text  # a folder that did not record the model built


def test_runs_on_a_subset_are_told_to_take_more_of_the_split(tmp_path, capsys):
    """ The same runs on a subset of 1,000 training images: taking more of the split is advice that applies. """
    settings = dict(model='vit_tiny_patch2_32_gap_sincos', model_kwargs={}, train_options=['--train-subset', '1000'],
                    train_subset=1000)
    _write_results(tmp_path, AT_CHANCE, dict(images=1000, classes=10, chance=10.0, majority=19.6), settings)
    code, stdout, err = _compare(['--out', tmp_path, '--report'], capsys)
    decision = json.loads((tmp_path / 'results.json').read_text())['decision']
    assert code == 0 and 'on more of the training split (--train-subset above its 1,000 images, or none)' in \
        decision, decision


def test_an_arm_above_the_majority_class_beyond_its_spread_has_learned(tmp_path, capsys):
    """ The same runs, mimetic at 31.0 and 33.0 (mean - sd = 30.6 > 19.6): an ordinary decision. """
    _write_results(tmp_path, {**AT_CHANCE, 'mimetic': [31.0, 33.0]},
                   dict(images=1000, classes=10, chance=10.0, majority=19.6))
    code, stdout, err = _compare(['--out', tmp_path, '--report'], capsys)
    answer = json.loads((tmp_path / 'results.json').read_text())
    assert code == 0 and answer['learned'] is True and 'did not learn' not in answer['decision'], answer['decision']


def test_an_arm_above_the_majority_class_within_its_spread_has_not_learned():
    """ mimetic's mean (21.0) is above the majority class (19.6) but its mean less its seed spread (21.0 - 8.49) is
    not: the runs are said not to have learned. """
    results = [dict(arm=arm, seed=seed, final_top1=final, best_top1=final)
               for arm, finals in {'plain': [8.9, 11.0], 'mimetic': [15.0, 27.0]}.items()
               for seed, final in enumerate(finals)]
    answer = summarize(['plain', 'mimetic'], results, 'plain', dict(images=1000, classes=10, chance=10.0,
                                                                    majority=19.6))
    assert answer['learned'] is False and answer['decision'].startswith('the runs did not learn')


def test_the_answer_is_of_the_final_top1_with_sample_spread():
    """ Best and final top-1 differ: the gain is the difference of the mean final top-1 (52.0 - 49.0 = 3.0), each
    arm's spread the sample standard deviation (n - 1: sqrt(2) for 51 and 53, sqrt(8) for 47 and 51). """
    runs = {'plain': [(47.0, 60.0), (51.0, 61.0)], 'mimetic': [(51.0, 52.0), (53.0, 54.0)]}
    results = [dict(arm=arm, seed=seed, final_top1=final, best_top1=best)
               for arm, pairs in runs.items() for seed, (final, best) in enumerate(pairs)]
    answer = summarize(['plain', 'mimetic'], results, 'plain')
    assert answer['gains']['mimetic']['gain'] == pytest.approx(3.0)
    assert answer['stats']['mimetic']['final_sd'] == pytest.approx(2 ** 0.5)
    assert answer['stats']['plain']['final_sd'] == pytest.approx(8 ** 0.5)
    assert answer['stats']['plain']['best_mean'] == pytest.approx(60.5)


def _random_label_folder(root):
    """ Noise images with labels drawn independently of them: nothing to learn. The test split holds 12 of class
    'a', 4 of 'b' and 4 of 'c': chance 33.33%, majority class 60.00%. """
    import random
    from PIL import Image
    rng = random.Random(0)
    counts = {'train': {'a': 24, 'b': 20, 'c': 20}, 'test': {'a': 12, 'b': 4, 'c': 4}}
    for split, classes in counts.items():
        for name, count in classes.items():
            (root / split / name).mkdir(parents=True)
            for i in range(count):
                pixels = bytes(rng.randrange(256) for _ in range(16 * 16 * 3))
                Image.frombytes('RGB', (16, 16), pixels).save(root / split / name / f'{i}.png')


@pytest.mark.slow
def test_a_comparison_on_random_labels_says_the_runs_did_not_learn(tmp_path):
    """ Noise images under labels that say nothing of them: the runs cannot beat always answering the test split's
    largest class beyond their spread, whatever their init (one arm of two seeds is judged as any arm is). """
    _random_label_folder(tmp_path / 'data')
    out = tmp_path / 'cmp'
    cmd = [sys.executable, '-m', 'timm_structinit.cli', 'compare', '--out', str(out), '--data-dir',
           str(tmp_path / 'data'), '--val-split', 'test', '--inits', 'plain', '--epochs', '1', '-b', '16',
           '--opt', 'adamw', '--lr', '1e-3', '--warmup-epochs', '0', '--workers', '0', '--device', 'cpu',
           '--model-kwargs', 'embed_dim=16', 'depth=1', 'num_heads=2', 'patch_size=8', '--seeds', '2']
    done = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    answer = json.loads((out / 'results.json').read_text())
    assert answer['test_split'] == dict(images=20, classes=3, chance=pytest.approx(100 / 3), majority=60.0)
    assert answer['decision'].startswith('the runs did not learn'), answer['decision']
    assert 'majority class 60.00%' in done.stdout and 'chance 33.33%' in done.stdout


def _finished_run(out):
    """ A comparison folder holding one finished run of plain (60 s) and no settings yet: a call takes its settings
    as new, and holds --time-limit against that run's time instead of making an estimate. """
    _write_results(out, {'plain': [50.0]}, None)
    (out / 'compare.json').unlink()


def test_a_warning_of_the_checks_names_the_command_the_user_ran(tmp_path, capsys):
    """ compare checks each run's options with the training command's own checks: their warning is compare's. (A
    finished run of 60 s ends the call at --time-limit, after the checks and without an estimate.) """
    _finished_run(tmp_path / 'cmp')
    code, stdout, err = _compare(['--out', tmp_path / 'cmp', *TINY, '--warmup-epochs', '3', '--inits', 'plain',
                                  '--time-limit', '0.001'], capsys)
    assert code == 2 and 'finished runs took 60 s, so no run would fit' in err, err
    assert 'timm-structinit compare: warning: --warmup-epochs 3 is not shorter than --epochs 1' in err, err
    assert 'timm-structinit-train:' not in err


@pytest.mark.slow
def test_a_logged_warning_names_the_command_the_user_ran(tmp_path):
    """ A warning the data reader logs (a file of a kind timm does not read), under compare and under the training
    command: each labelled with the command that ran. """
    from train_command import two_class_folder
    data = two_class_folder(tmp_path / 'data', 4, 16)
    (data / 'train' / 'cat' / 'extra.gif').write_bytes(b'GIF89a')
    _finished_run(tmp_path / 'cmp')  # ends compare at --time-limit once its checks have read the data
    options = ['--data-dir', str(data), '--val-split', 'test', '--epochs', '1', '--warmup-epochs', '0', '-b', '4',
               '--workers', '0', '--device', 'cpu', '--model-kwargs', 'embed_dim=16', 'depth=1', 'num_heads=2',
               'patch_size=8']
    done = subprocess.run([sys.executable, '-m', 'timm_structinit.cli', 'compare', '--out', str(tmp_path / 'cmp'),
                           *options, '--inits', 'plain', '--time-limit', '0.001'], capture_output=True, text=True,
                          env=ENV, timeout=300)
    assert done.returncode == 2 and 'so no run would fit' in done.stderr, done.stderr
    assert "timm-structinit compare: warning: --train-split 'train': 1 .gif file under" in done.stderr, done.stderr
    done = subprocess.run([sys.executable, '-m', 'timm_structinit.train', '--model', 'vit_tiny_patch2_32_gap_sincos',
                           *options, '--output', str(tmp_path / 'run')], capture_output=True, text=True, env=ENV,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "timm-structinit-train: warning: --train-split 'train': 1 .gif file under" in done.stdout, done.stdout


# --- estimates ------------------------------------------------------------------------------------------------------

def test_the_estimate_times_the_runs_data_path(tmp_path, capsys, monkeypatch):
    """ A data path that takes 0.25 s a batch (3 batches an epoch, 8 epochs: 6 s) and a process that starts at once:
    the estimate of a run counts those 6 s, so a 4 s budget holds no run, and its epochs are said to take 0.75 s at
    least. """
    from timm_structinit.compare import estimate
    from timm_structinit.train import loaders
    build_loaders = loaders.build_loaders

    class Slow:
        def __init__(self, loader):
            self.loader = loader

        def __len__(self):
            return len(self.loader)

        def __iter__(self):
            for batch in self.loader:
                time.sleep(0.25)
                yield batch

    def slow_training_batches(*args, **kwargs):
        train, *rest = build_loaders(*args, **kwargs)
        return (Slow(train), *rest)
    monkeypatch.setattr(loaders, 'build_loaders', slow_training_batches)
    monkeypatch.setattr(estimate, 'startup_seconds', lambda: 0.0)
    code, stdout, err = _compare(['--out', tmp_path / 'cmp', *TINY, '--epochs', '8', '--inits', 'plain',
                                  '--time-limit', '4'], capsys)
    assert code == 2 and err.count('\n') == 1 and 'no run would fit' in err, err
    assert float(re.search(r'8 epochs of about ([0-9.]+) s', err).group(1)) >= 0.7, err  # and the model's steps


def test_the_estimate_is_made_beside_the_runs_trained_at_the_same_time(tmp_path, capsys):
    """ Two runs at a time: the estimate times a run while one more of the comparison's runs trains beside it. """
    code, stdout, err = _compare(['--out', tmp_path / 'cmp', *TINY, '--inits', 'plain', 'mimetic', '--concurrent', '2',
                                  '--time-limit', '0.5'], capsys)
    assert code == 2 and err.count('\n') == 1 and ', 1 run beside it), so no run would fit' in err, err


def test_the_runs_beside_the_estimate_train_until_it_is_made_and_leave_nothing(tmp_path, monkeypatch):
    """ Each run beside the estimate is started at once, waited for until it says it trains, then stopped (as
    Ctrl-C stops a run) with its temporary folder removed. """
    from timm_structinit.compare import estimate
    monkeypatch.setattr(estimate.tempfile, 'tempdir', str(tmp_path))
    code = ('import sys, time; print("Output: " + sys.argv[sys.argv.index("--output") + 1], flush=True); '
            'time.sleep(60)')
    with estimate._runs_beside([sys.executable, '-c', code], 2, {}) as begun:
        start = time.monotonic()
        begun()
        assert time.monotonic() - start < 30
        assert len(list(tmp_path.iterdir())) == 1  # their folder, while they train
    assert list(tmp_path.iterdir()) == []

def test_finished_runs_take_the_place_of_the_estimate(tmp_path, capsys, monkeypatch):
    """ A folder where one run has finished in 600 s: --time-limit goes by it (not by a fresh estimate, which would
    say seconds for this tiny model), before anything is trained or estimated. """
    from timm_structinit.compare import estimate
    monkeypatch.setattr(estimate, 'estimate_runs', lambda *a, **k: pytest.fail('estimated again'))
    _write_results(tmp_path, {'plain': [50.0]}, None, seconds=600.0)
    (tmp_path / 'compare.json').unlink()  # a run of these settings: the call records them
    code, stdout, err = _compare(['--out', tmp_path, *TINY, '--inits', 'plain', 'mimetic', '--seeds', '1',
                                  '--time-limit', '300'], capsys)
    assert code == 2 and err.count('\n') == 1, err
    assert 'the longest of the 1 finished runs took 600 s, so no run would fit' in err, err


def test_time_left_goes_by_the_finished_runs(tmp_path):
    """ One run finished in 300 s over 3 epochs (100 s an epoch), one under way at epoch 1 of 3 whose epoch took
    5 s, one waiting: 2 + 3 epochs left, two at a time: about 250 s, 4 min; the epoch under way does not count. """
    from timm_structinit.compare.runner import Outcome, RunSpec, _Active, _progress
    specs = [RunSpec(n, ['x'], tmp_path / n, 3) for n in ('a_s0', 'b_s0', 'c_s0')]
    going = _Active(specs[1], None, False, 0.0, tmp_path / 'log', epoch=1, epoch_seconds=[5.0])
    outcome = Outcome(finished={'a_s0': dict(seconds=300.0, epochs=3)})
    line = _progress([going], [specs[2]], outcome, 3, 2, estimate=9.0)
    assert line.endswith('about 4 min left'), line


# --- how a comparison ends, and what a run's time counts ------------------------------------------------------------

@pytest.mark.slow
def test_a_comparison_left_unfinished_has_its_own_exit_status(tmp_path):
    """ A finished run took 115 s: under --time-limit 120, one more run fits at the start and none after it (a run
    takes more than 5 s), so the comparison ends with a run not started: exit status 3, said in its last line. The
    run that starts has 120 s to finish in, however busy the machine. """
    out = tmp_path / 'cmp'
    _write_results(out, {'plain': [50.0]}, None, seconds=115.0)
    (out / 'compare.json').unlink()
    cmd = [sys.executable, '-m', 'timm_structinit.cli', 'compare', '--out', str(out), *TINY, '--inits', 'plain',
           'mimetic', 'impulse3', '--seeds', '1', '--time-limit', '120']
    done = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=600)
    assert done.returncode == 3, done.stdout + done.stderr
    assert 'runs not finished' in done.stderr and '(exit status 3)' in done.stderr
    assert (out / 'runs' / 'mimetic_s0' / 'result.json').is_file()  # what finished is kept


@pytest.mark.parametrize('outcome, status', [
    (dict(failed={'mimetic_s0': 'its line'}), 1),
    (dict(failed={'mimetic_s0': 'its line'}, not_started=['impulse3_s0']), 1),
    (dict(not_started=['mimetic_s0', 'impulse3_s0']), 3),
    (dict(stopped=['mimetic_s0'], not_started=['impulse3_s0']), 3),
])
def test_the_exit_status_tells_a_failed_run_from_runs_left_unfinished(tmp_path, capsys, monkeypatch, outcome,
                                                                       status):
    """ docs/which_init.md: 1 when a run failed, 3 when the call ended with runs not finished and none failed. The
    runs' outcome is given (no training); plain's finished run stands for the estimate. """
    from timm_structinit.compare import session
    from timm_structinit.compare.runner import Outcome
    out = tmp_path / 'cmp'
    _write_results(out, {'plain': [50.0]}, None, seconds=25.0)
    (out / 'compare.json').unlink()
    monkeypatch.setattr(session, 'run_all', lambda *args, **kwargs: Outcome(**outcome))
    code, stdout, err = _compare(['--out', out, *TINY, '--inits', 'plain', 'mimetic', 'impulse3', '--seeds', '1'],
                                 capsys)
    assert code == status and err.rstrip().endswith(f'(exit status {status})'), err


def test_a_resumed_runs_time_counts_every_part(tmp_path):
    """ A run stopped at a 1.5 s deadline with a checkpoint to resume from (1 s of it at least is the run's: its
    process may take a while to start on a busy machine), then resumed for a 0.3 s part: its result counts both parts
    (1.3 s at least) and says it had two. """
    from timm_structinit.compare.runner import ELAPSED_FILE, RunSpec, run_all
    folder = tmp_path / 'a_s0'
    code = (f'import pathlib, time; folder = pathlib.Path({str(folder)!r}); folder.mkdir(parents=True); '
            f'(folder / "last.pth.tar").write_bytes(b"checkpoint"); time.sleep(60)')  # an epoch kept, then stopped
    first = [RunSpec('a_s0', [sys.executable, '-c', code], folder, 1)]
    outcome = run_all(first, _finish_writing, 1, time.monotonic() + 1.5, show=lambda line: None, poll=0.05)
    assert outcome.stopped == ['a_s0']
    kept = json.loads((first[0].folder / ELAPSED_FILE).read_text())
    assert kept['seconds'] >= 1.0 and kept['parts'] == 1
    seen = []

    def finish(spec, seconds, resumed):
        seen.append((seconds, resumed, json.loads((spec.folder / ELAPSED_FILE).read_text())['parts']))
        return _finish_writing(spec, seconds, resumed)
    run_all(_sleeping_specs(tmp_path, 0.3, ['a_s0']), finish, 1, show=lambda line: None, poll=0.05)
    (seconds, resumed, parts), = seen
    assert seconds >= 1.3 and resumed and parts == 2, seen


def test_each_run_gets_its_share_of_the_cores():
    """ Runs side by side on the cores: each its share of torch threads (given with --threads) and loader
    processes, and no more than a run asks for; one run at a time takes the count the user sets, or chooses its own,
    and the header says which. """
    from timm_structinit.compare.cores import CoreShare, core_share
    two_on_two = CoreShare(2, 2)
    assert (two_on_two.per_run, two_on_two.threads(), two_on_two.workers(4)) == (1, 1, 1)
    assert two_on_two.run_options(4) == ['--threads', '1', '--workers', '1']
    assert two_on_two.run_options(0) == ['--threads', '1']
    assert CoreShare(2, 2, 1, 'OMP_NUM_THREADS').run_options(0) == []  # the environment gives the runs their one
    assert CoreShare(2, 2, 4, '--threads').threads() == 1  # at most the share, beside another run
    assert (CoreShare(16, 3).per_run, CoreShare(16, 3).workers(8), CoreShare(16, 3).workers(2)) == (5, 5, 2)
    alone = CoreShare(2, 1)
    assert alone.per_run == 2 and alone.threads() is None and alone.run_options(4) == [] and alone.crowding == 1
    assert CoreShare(2, 3).per_run == 1 and CoreShare(2, 3).crowding == 1.5
    assert 'each on 1 of the 2 cores (1 torch thread, 1 loader process)' in two_on_two.description(4)
    assert 'a probe of its training step' in alone.description(4) and '(2 or 1, of the 2 cores)' in \
        alone.description(4)
    # one run at a time under OMP_NUM_THREADS=1: one thread, said as such (not "each on 2 of the 2 cores")
    under_omp = core_share(1, None, {'OMP_NUM_THREADS': '1'})
    assert under_omp.threads() == 1 and under_omp.run_options(0) == []
    assert under_omp.description(0) == 'each with 1 torch thread (as OMP_NUM_THREADS sets) and 0 loader processes'
    assert core_share(1, 2, {'OMP_NUM_THREADS': '1'}).description(0).startswith('each with 2 torch threads (as '
                                                                                 '--threads sets)')


def test_a_result_records_the_threads_its_epochs_trained_with():
    """ A run stopped on two threads and resumed on one: its result keeps both counts in their order, and the
    answer's table shows them beside its device. """
    from timm_structinit.compare.report import _markdown, result_record
    rows = [dict(epoch=0.0, eval_top1=50.0, train_loss=2.0, train_threads=2.0),
            dict(epoch=1.0, eval_top1=60.0, train_loss=1.5, train_threads=1.0)]
    result = result_record('plain', 0, rows, 30.0, True, ['python', '-m', 'x'], dict(device='CPU', torch='2'),
                           '2026-11-28T10:00:00', parts=2)
    assert result['threads'] == [2, 1]
    summary = summarize(['plain'], [result], 'plain')
    assert '| CPU, torch 2, 2/1 threads |' in '\n'.join(_markdown({}, summary, [result], []))
    older = result_record('plain', 0, [{k: v for k, v in r.items() if k != 'train_threads'} for r in rows], 30.0,
                          False, ['python'], {}, '2026-11-28T10:00:00')
    assert 'threads' not in older  # a summary that does not record them: none claimed


def test_counts_are_said_in_their_number():
    """ No '1 epochs' or 'seed(s)': one run of one epoch is said so, everywhere a count is. """
    from timm_structinit.compare.estimate import RunEstimate
    from timm_structinit.utils.words import counted
    assert [counted(n, 'epoch') for n in (0, 1, 2)] == ['0 epochs', '1 epoch', '2 epochs']
    assert counted(1, 'loader process') == '1 loader process' and counted(3, 'loader process') == '3 loader processes'
    one = RunEstimate(2.0, 1.0, 3.0, 0.5, epochs=1, evaluations=1, beside=0, per_arm={'plain': 6.5})
    assert 'then 1 epoch of about 3.0 s and 1 evaluation of about 0.5 s' in one.describe()
    assert 'then 2 epochs of about' in RunEstimate(2.0, 1.0, 3.0, 0.5, 2, 2, 0, {'plain': 10.0}).describe()


def test_the_line_that_continues_a_stopped_comparison_keeps_its_environment():
    """ Pasted, the line trains the runs as before: the thread count and the devices the comparison was started
    with come first, quoted as a shell reads them; what does not set how runs train is left out. """
    from timm_structinit.compare.session import continue_command
    argv = ['--out', 'my runs', '--seeds', '3']
    assert continue_command(argv, {'OMP_NUM_THREADS': '1', 'HOME': '/root', 'CUDA_VISIBLE_DEVICES': '0,1'}) == (
        "OMP_NUM_THREADS=1 CUDA_VISIBLE_DEVICES=0,1 timm-structinit compare --out 'my runs' --seeds 3")
    assert continue_command(argv, {}) == "timm-structinit compare --out 'my runs' --seeds 3"


def test_the_runner_starts_each_run_with_its_environment(tmp_path):
    from timm_structinit.compare.runner import RunSpec, run_all
    code = 'import os; print("threads", os.environ.get("OMP_NUM_THREADS"), flush=True)'
    spec = RunSpec('a_s0', [sys.executable, '-c', code], tmp_path / 'a_s0', 1, env={'OMP_NUM_THREADS': '1'})
    run_all([spec], _finish_writing, 1, show=lambda line: None, poll=0.05, log_dir=tmp_path)
    assert 'threads 1' in (tmp_path / 'a_s0.log').read_text()


def test_off_a_terminal_progress_is_one_line_per_run_per_epoch_at_most(tmp_path):
    """ Two runs of 3 epochs each, an epoch every 0.3 s: at most 6 progress lines, one at least. """
    from timm_structinit.compare.runner import RunSpec, run_all
    code = ('import time\nfor e in range(1, 4):\n    time.sleep(0.3)\n'
            '    print(f"epoch {e:>3d}/3  train loss 1.0", flush=True)')
    specs = [RunSpec(n, [sys.executable, '-c', code], tmp_path / n, 3) for n in ('a_s0', 'b_s0')]
    shown = []
    run_all(specs, _finish_writing, 2, show=shown.append, poll=0.01, progress_every=None, log_dir=tmp_path)
    progress = [line for line in shown if ' done] ' in line]
    assert 1 <= len(progress) <= 6, shown


# --- the files compare reads back ----------------------------------------------------------------------------------

def _result(arm='plain', seed=0, **changes):
    record = dict(arm=arm, seed=seed, final_top1=50.0, best_top1=50.0, epochs=1, curve=[50.0], curve_epochs=[1],
                  train_loss=[2.0], seconds=10.0, resumed=False, command=['python'], date='2026-11-27T10:00:00')
    record.update(changes)
    return {k: v for k, v in record.items() if v is not None}


DAMAGED = [
    ('runs/plain_s0/result.json', json.dumps(_result(arm=None)), "has no 'arm'"),
    ('runs/plain_s0/result.json', json.dumps(_result(final_top1='51.2')),
     'its final_top1 is "51.2": should be a valid number'),
    ('runs/plain_s0/result.json', '{"arm": "plain", "se', 'is not valid JSON'),
    ('runs/plain_s0/result.json', '', 'is empty'),
    ('runs/plain_s0/result.json', json.dumps(_result(arm='mimetic')), "the result of 'mimetic' seed 0"),
    ('compare.json', '[1, 2]', 'holds a JSON list, not an object'),
    ('compare.json', 'garbage', 'is not valid JSON'),
    ('compare.json', json.dumps(dict(model='m', model_kwargs={}, train_options=[], arms=['plain'])), "no 'reference'"),
    ('runs/plain_s0/elapsed.json', '{"seconds": -1, "parts": 1}', 'its seconds is -1: should be at least 0'),
]
# a call that trains reads every file; --report reads the settings and the results
CALLS = [(*case, call) for case in DAMAGED for call in ('report', 'train')
         if not (call == 'report' and case[0].endswith('elapsed.json'))]


@pytest.mark.parametrize('name, content, words, call', CALLS,
                         ids=[f'{call}-{name}-{words[:24]}' for name, _, words, call in CALLS])
def test_a_damaged_file_is_one_line_naming_it_and_nothing_is_lost(tmp_path, capsys, name, content, words, call):
    _write_results(tmp_path, {'plain': [50.0], 'mimetic': [52.0]}, None)
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text(content)
    before = {p: p.read_bytes() for p in tmp_path.rglob('*') if p.is_file()}
    argv = ['--report'] if call == 'report' else [*TINY, '--inits', 'plain', 'mimetic', '--seeds', '1',
                                                  '--time-limit', '0.001']
    code, stdout, err = _compare(['--out', tmp_path, *argv], capsys)
    assert code == 2 and err.count('\n') == 1 and 'Traceback' not in err, err
    assert str(tmp_path / name) in err and words in err, err
    assert ('delete it' in err or 'put back' in err) and 'another --out' in err, err
    assert {p: p.read_bytes() for p in tmp_path.rglob('*') if p.is_file()} == before


# --- arms and settings --------------------------------------------------------------------------------------------

@pytest.mark.parametrize('inits, words', [
    (['impulse3', 'impulse:kernel_size=3'], "--inits 'impulse3' and 'impulse:kernel_size=3' are the same arm"),
    (['plain', 'mimetic', 'mimetic:'], "--inits 'mimetic' and 'mimetic:' are the same arm"),
    (['plain', 'mimetic:qk_noise=0.5', 'mimetic:qk_noise=5e-1'], "'mimetic:qk_noise=0.5' and 'mimetic:qk_noise=5e-1'"),
    (['mimetic:qk_noise=0.7', 'plain', 'mimetic'], "'mimetic:qk_noise=0.7' and 'mimetic' are the same arm"),
    (['plain', 'impulse:kernel_size=3,kernel_size=5'], 'kernel_size is given twice'),
    (['plain', 'impulse3:kernel_size=5'], 'impulse3 is impulse with kernel_size=3 already'),
    (['plain', 'mimetic:kernel_size=3'], "--inits 'mimetic:kernel_size=3': unknown hyperparameter ['kernel_size']"),
    (['plain', 'impulse:kernel_size=abc'], "--inits 'impulse:kernel_size=abc': ImpulseCfg.kernel_size='abc' must be"),
    (['plain', 'impulse:kernel_size=5'], "--inits 'impulse:kernel_size=5': kernel_size=5 is larger than the patch"),
])
def test_an_arm_is_its_init_and_settings(tmp_path, capsys, inits, words):
    code, stdout, err = _compare(['--out', tmp_path / 'cmp', *TINY, '--inits', *inits, '--time-limit', '0.001'],
                                 capsys)
    assert code == 2 and err.count('\n') == 1 and words in err, err
    assert '--model-kwargs' not in err and not (tmp_path / 'cmp').exists()


@pytest.mark.slow
def test_the_same_settings_spelled_otherwise_are_the_same_comparison(tiny_comparison, capsys):
    """ The options in another order, `--lr=0.002` for `--lr 2e-3`, `--batch-size` for `-b`: the same comparison,
    which trains nothing more. """
    out, _ = tiny_comparison
    respelled = ['--model-kwargs', 'num_heads=2', 'depth=1', 'embed_dim=16', '--device', 'cpu', '--workers', '4',
                 '--warmup-epochs', '0', '--lr=0.002', '--batch-size', '32', '--epochs', '1', '--val-subset', '48',
                 '--train-subset', '96', '--config', 'digits']
    assert sorted(respelled) != sorted(SHARED)
    argv = ['--out', out, '--seeds', '2', '--inits', 'plain', 'mimetic', '--concurrent', '2', *respelled]
    code, stdout, err = _compare(argv, capsys)
    assert code == 0, err
    assert '[start]' not in stdout and '[resume]' not in stdout


@pytest.mark.slow
def test_an_arm_of_the_folder_under_another_name_is_refused(tiny_comparison, capsys):
    out, _ = tiny_comparison
    code, stdout, err = _compare(['--out', out, '--inits', 'plain', 'mimetic:', '--seeds', '2', '--concurrent', '2',
                                  *SHARED], capsys)
    assert code == 2 and err.count('\n') == 1, err
    assert "--inits 'mimetic:' is the arm 'mimetic' of the runs in --out" in err, err
