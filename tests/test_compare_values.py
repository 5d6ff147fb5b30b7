""" compare's figures as exact values worked by hand: the estimate of a run from the seconds of its parts (epochs and
cool-down, evaluations at --val-interval and at the end, the EMA's second evaluation, the target-mass measurement of
an impulse arm), the decomposition of a timed pass into start-up and per-batch seconds, each run's share of the
cores over every count of cores and runs, the time-left line, the test split's chance and majority class, and the
order, folders and reference of a plan. """
import argparse
import json
import math
from pathlib import Path

import pytest

from timm_structinit.compare import estimate
from timm_structinit.compare.cores import CoreShare
from timm_structinit.compare.plan import Arm, Plan, default_model, folder_name
from timm_structinit.compare.session import _time_line

# the seconds of each part of a run (what `_time_parts` measures), chosen so that every sum is exact in binary
PARTS = dict(data=2.0, loaders=3.0, loader_start=1.0, eval_loader_start=0.5, pass_start=0.25, step=0.125, batches=10,
             eval_pass_start=0.0625, eval_step=0.03125, eval_batches=4, save=0.5, eval_images=100,
             builds={'plain': 1.0, 'impulse3': 4.0}, tracked={'plain': False, 'impulse3': True})


def _args(**changes):
    args = dict(epochs=4, cooldown_epochs=1, val_interval=2, model_ema=True, model_ema_force_cpu=False,
                batch_size=50, validation_batch_size=None, workers=2, device='cpu')
    args.update(changes)
    return argparse.Namespace(**args)


@pytest.mark.parametrize('changes, epochs, evaluations, models, mass_batch', [
    # 4 + 1 epochs; evaluated after epochs 2, 4 and the last, 5; the EMA evaluated too; mass on 64 images of 50
    ({}, 5, 3, 2, 50),
    # 3 epochs, each evaluated; no EMA; the evaluation batch 16
    (dict(epochs=3, cooldown_epochs=0, val_interval=1, model_ema=False, validation_batch_size=16), 3, 3, 1, 16),
    # 5 epochs, evaluated after 3 and the last, 5; an EMA kept on the CPU is not evaluated
    (dict(epochs=5, cooldown_epochs=0, val_interval=3, model_ema_force_cpu=True), 5, 2, 1, 50),
    # 2 + 2 epochs, interval 4: the last epoch only
    (dict(epochs=2, cooldown_epochs=2, val_interval=4), 4, 1, 2, 50),
    # interval 7 beyond the 6 epochs: the last epoch only
    (dict(epochs=6, cooldown_epochs=0, val_interval=7), 6, 1, 2, 50),
])
def test_a_runs_estimate_is_the_sum_of_its_parts(monkeypatch, changes, epochs, evaluations, models, mass_batch):
    """ Per arm: start-up (5 s) + checks (0.5 s) + data, loaders and their first starts (2 + 3 + 1 + 0.5 s) + each
    epoch (a pass start of 0.25 s and 10 batches of 0.125 s: 1.5 s) + each evaluation (per evaluated model a pass
    start of 0.0625 s and 4 batches of 0.03125 s: 0.1875 s, and two checkpoints of 0.5 s) + the arm's build; an
    impulse arm measures its target mass once before training and after each evaluation, on min(64, 100) images
    at 0.03125 s per batch of the evaluation's size. """
    monkeypatch.setattr(estimate, 'startup_seconds', lambda: 5.0)
    monkeypatch.setattr(estimate, '_time_parts', lambda args, arm_args, begun, share: PARTS)
    args = _args(**changes)
    arms = {'plain': (args, None), 'impulse3': (args, None)}
    got = estimate.estimate_runs(arms, CoreShare(2, 1), checks=0.5)
    epoch = 0.25 + 10 * 0.125
    evaluation = models * (0.0625 + 4 * 0.03125) + 2 * 0.5
    common = 5 + 0.5 + 2 + 3 + 1 + 0.5 + epochs * epoch + evaluations * evaluation
    mass = 0.03125 * 64 / mass_batch
    assert got.per_arm == pytest.approx({'plain': common + 1.0, 'impulse3': common + 4.0 + (evaluations + 1) * mass},
                                        rel=1e-12)
    assert (got.epochs, got.evaluations, got.epoch, got.evaluation) == (epochs, evaluations, epoch, evaluation)
    assert got.seconds == got.per_arm['impulse3'] and got.setup == 2 + 3 + 4
    assert got.describe() == (f'6 s to start, 9 s to build, then {epochs} epochs of about 1.5 s and {evaluations} '
                              f'evaluation{"s" if evaluations != 1 else ""} of about {evaluation:.1f} s')


class _Clock:
    """ A clock that moves only when told: time.perf_counter for `_per_batch`. """

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.mark.parametrize('available, per_batch, pass_start, first_start', [
    (10, 0.25, 0.5, 2.0), (3, 0.125, 0.0, 0.75), (40, 0.0625, 1.25, 0.0), (2, 1.0, 0.5, 4.0)])
def test_a_timed_pass_splits_into_the_loaders_start_each_pass_and_each_batch(monkeypatch, available, per_batch,
                                                                             pass_start, first_start):
    """ A loader whose first pass ever costs `first_start` more, every pass `pass_start`, every batch `per_batch`:
    the three are recovered exactly from the three timed passes (one batch, one batch, then as many as fit). """
    clock = _Clock()
    monkeypatch.setattr(estimate.time, 'perf_counter', clock)

    class Loader:
        passes = 0

        def __iter__(self):
            clock.now += pass_start + (first_start if Loader.passes == 0 else 0.0)
            Loader.passes += 1
            for i in range(available):
                yield i

    def run_pass(batches):
        for _ in batches:
            clock.now += per_batch

    got = estimate._per_batch(run_pass, Loader(), available, seconds=30.0)
    assert got == pytest.approx((per_batch, pass_start, first_start), abs=1e-12)


@pytest.mark.parametrize('cores', range(1, 17))
def test_each_run_gets_the_largest_whole_share_of_the_cores_and_one_at_least(cores):
    """ Over every count of runs up to twice the cores: a run's cores are the largest whole number that the runs
    together do not exceed (one when they outnumber the cores), its loader processes what it asks for within them,
    its torch threads within them and OMP_NUM_THREADS, and the cores are said shared when runs outnumber them. """
    for concurrent in range(1, 2 * cores + 1):
        share = CoreShare(cores, concurrent)
        per_run = share.per_run
        if concurrent <= cores:
            assert per_run * concurrent <= cores < (per_run + 1) * concurrent, (cores, concurrent)
            assert share.crowding == 1
        else:
            assert per_run == 1 and share.crowding == concurrent / cores
        for requested in (0, 1, 3, 8):
            assert share.workers(requested) == min(requested, per_run)
        # the count the user set (none, one, more than the machine's): one run alone takes it as it is, or chooses
        # its own; beside others a run takes it within its share, else the share
        for asked in (None, 1, cores + 5):
            shared = CoreShare(cores, concurrent, asked, '--threads' if asked else '')
            threads = asked if concurrent == 1 else (min(per_run, asked) if asked else per_run)
            assert shared.threads() == threads, (cores, concurrent, asked)
            for requested in (0, 1, 3, 8):
                workers = min(requested, per_run)
                assert shared.run_options(requested) == (
                    (['--threads', str(threads)] if threads is not None and threads != asked else [])
                    + (['--workers', str(workers)] if workers < min(requested, cores) else []))


def test_the_share_is_said_in_words():
    assert CoreShare(8, 2).description(8) == 'each on 4 of the 8 cores (4 torch threads, 4 loader processes)'
    assert CoreShare(2, 3).description(1) == 'each on 0.67 of the 2 cores (1 torch thread, 1 loader process)'
    assert CoreShare(4, 4).description(0) == 'each on 1 of the 4 cores (1 torch thread, 0 loader processes)'
    # fewer asked than the share holds: the threads asked, and who asked
    assert CoreShare(8, 2, 2, 'OMP_NUM_THREADS').description(8) == (
        'each on 4 of the 8 cores (2 torch threads, as OMP_NUM_THREADS sets; 4 loader processes)')


def test_the_time_left_is_worked_from_the_finished_runs_or_the_estimate():
    """ Finished runs of 300 and 600 s: 7.5 min a run, and 3 runs left two at a time are two waves, 15 min; before
    any finished, the estimate's arms (60 and 61 s: within 10%, one figure; 60 and 120 s: a span). """
    finished = [dict(seconds=300.0), dict(seconds=600.0)]
    assert _time_line(3, 2, None, finished) == ('time: about 7.5 min per run, as the 2 finished runs took (5.0 min to '
                                                '10.0 min); about 15.0 min for the 3 runs left')
    assert _time_line(0, 2, None, finished[:1]).startswith('time: nothing left to train; about 5.0 min per run, as '
                                                           'the 1 finished run took')
    close = estimate.RunEstimate(5, 9, 1.5, 0.5, 5, 3, 0, {'plain': 60.0, 'mimetic': 61.0})
    assert _time_line(4, 4, close, []) == (f'time: about 1.0 min per run, estimated here ({close.describe()}); about '
                                           f'1.0 min for the 4 runs left')
    apart = estimate.RunEstimate(5, 9, 1.5, 0.5, 5, 3, 1, {'plain': 60.0, 'impulse3': 120.0})
    assert _time_line(5, 2, apart, []) == (f'time: about 1.0 to 2.0 min per run, estimated here ({apart.describe()}); '
                                           f'about 4.5 min for the 5 runs left')


@pytest.mark.parametrize('finals, beats', [
    ([60.0, 50.0], False),   # mean 55, sd 7.07: 47.9 is below 50, though 55 + 7.07 is above it
    ([56.0, 54.0], True),    # mean 55, sd 1.41: 53.6
    ([51.0], True), ([50.0], False), ([49.0], False),   # one seed: its top-1 itself, above 50 or not
])
def test_an_arm_beats_the_majority_class_by_its_mean_less_its_spread(finals, beats):
    from timm_structinit.compare.stats import arm_stats, beats_majority
    assert beats_majority(arm_stats('mimetic', finals, finals), 50.0) is beats


class _Labelled(list):
    """ A dataset whose labels are `targets`. """

    def __init__(self, targets):
        super().__init__(range(len(targets)))
        self.targets = list(targets)


@pytest.mark.parametrize('train_classes, counts, classes, chance, majority', [
    (None, {0: 7, 1: 2, 2: 1}, 3, 100 / 3, 70.0),
    (5, {0: 7, 1: 2, 2: 1}, 5, 20.0, 70.0),        # classes the test split lacks count for chance
    (2, {3: 1, 1: 1, 0: 2}, 3, 100 / 3, 50.0),     # more labels than the option says
    (None, {4: 3}, 1, 100.0, 100.0),
])
def test_the_test_splits_chance_and_majority_class(train_classes, counts, classes, chance, majority):
    from timm_structinit.compare.command import _test_split
    targets = [label for label, n in counts.items() for _ in range(n)]
    record = _test_split((None, _Labelled(targets)), argparse.Namespace(num_classes=train_classes))
    assert record == dict(images=len(targets), classes=classes, chance=pytest.approx(chance, rel=1e-15),
                          majority=pytest.approx(majority, rel=1e-15))


def test_a_plan_trains_every_arms_seed_0_first_each_in_its_own_folder():
    arms = [Arm('plain', None), Arm('mimetic', 'mimetic'), Arm('impulse:kernel_size=5', 'impulse', {'kernel_size': 5})]
    plan = Plan('m', {}, arms, 3, ['--epochs', '2'])
    runs = [(arm.label, seed) for arm, seed in plan.runs()]
    assert runs == [(a.label, s) for s in range(3) for a in arms]
    folders = [folder_name(label, seed) for label, seed in runs]
    assert len(set(folders)) == len(folders) and folders[2] == 'impulse-kernel_size=5_s0'
    argv = plan.train_argv(arms[1], 2, '/runs')
    assert argv[argv.index('--seed') + 1] == '2' and argv[argv.index('--experiment') + 1] == 'mimetic_s2'


@pytest.mark.parametrize('side, small', [(8, True), (32, True), (63, True), (64, True), (65, False), (224, False)])
def test_the_default_model_suits_the_images_up_to_64_px_as_32_px(side, small):
    model, kwargs = default_model(side)
    assert model == 'vit_tiny_patch2_32_gap_sincos'
    assert kwargs == ({} if small else {'img_size': 224, 'patch_size': 16})


def test_the_reference_is_the_plain_arm_wherever_it_is_listed(tmp_path):
    """ compare.json's reference: plain when it is among the arms (listed first or not), else the first arm. """
    import json
    from timm_structinit.compare.command import Checked, _record_settings
    for arms, reference in ((['mimetic', 'plain'], 'plain'), (['plain', 'mimetic'], 'plain'),
                            (['mimetic', 'impulse3'], 'mimetic')):
        plan = Plan('m', {}, [Arm(a, None if a == 'plain' else a) for a in arms], 1, [])
        out = tmp_path / '-'.join(arms)
        _record_settings(out, Checked(plan, {}, (1, 1), None, 'm', 0.0), None, None)
        assert json.loads((out / 'compare.json').read_text())['reference'] == reference, arms


def test_an_arm_with_one_seed_beside_arms_with_several_keeps_their_intervals():
    """ plain 50, 52, 54 and mimetic 56, 57, 58 (three seeds each) beside impulse3's one seed, 60: mimetic's gain
    is 5 with Welch's interval worked by hand (variances of the means 4/3 and 1/3, 50/17 degrees of freedom, Student's
    0.975 quantile from SciPy), better; impulse3's gain, 8, has no spread to judge it by: no interval, unclear. """
    from scipy import stats as scipy_stats
    from timm_structinit.compare.report import summarize
    finals = {'plain': [50.0, 52.0, 54.0], 'mimetic': [56.0, 57.0, 58.0], 'impulse3': [60.0]}
    results = [dict(arm=arm, seed=seed, final_top1=v, best_top1=v) for arm, values in finals.items()
               for seed, v in enumerate(values)]
    answer = summarize(list(finals), results, 'plain')
    half = scipy_stats.t.ppf(0.975, 50 / 17) * math.sqrt(5 / 3)
    mimetic = answer['gains']['mimetic']
    assert mimetic['gain'] == pytest.approx(5.0) and mimetic['df'] == pytest.approx(50 / 17, rel=1e-12)
    assert mimetic['half_width'] == pytest.approx(half, rel=1e-6) and mimetic['verdict'] == 'better'
    single = answer['gains']['impulse3']
    assert (single['gain'], single['half_width'], single['verdict']) == (pytest.approx(8.0), None, 'unclear')
    assert {arm: s['seeds'] for arm, s in answer['stats'].items()} == {'plain': 3, 'mimetic': 3, 'impulse3': 1}
    assert answer['stats']['impulse3']['final_sd'] is None


def test_a_runs_result_counts_its_epochs_from_one():
    """ Summary rows of epochs 0, 1, 2 (timm counts from 0), evaluated after epochs 2 and 3: a result of 3 epochs,
    its curve after epochs 2 and 3, its final and best top-1 from the rows; one the schema takes. """
    from timm_structinit.compare.records import check_result
    from timm_structinit.compare.report import result_record
    rows = [dict(epoch=1.0, eval_top1=40.0, train_loss=2.0), dict(epoch=2.0, eval_top1=35.0, train_loss=1.5)]
    result = result_record('plain', 0, rows, 12.25, False, ['python'], {}, '2026-11-28T12:00:00')
    assert (result['epochs'], result['curve_epochs'], result['curve']) == (3, [2, 3], [40.0, 35.0])
    assert (result['final_top1'], result['best_top1'], result['parts']) == (35.0, 40.0, 1)
    check_result(Path('runs/plain_s0/result.json'), result)


def test_a_run_started_afresh_is_one_part_and_a_resumed_one_keeps_its_log(tmp_path):
    """ A run that finishes in one call counts one part; a run whose first part ended with its checkpoint kept (here
    by failing) and that a second call resumes counts two, and its log holds both parts' output. """
    import sys
    from timm_structinit.compare.records import ELAPSED_FILE
    from timm_structinit.compare.runner import RunSpec, run_all
    seen = {}

    def finish(spec, seconds, resumed):
        seen[spec.name] = (json.loads((spec.folder / ELAPSED_FILE).read_text())['parts'], resumed)
        return dict(seconds=seconds, final_top1=1.0, best_top1=1.0)
    write = ('import pathlib, sys; folder = pathlib.Path(sys.argv[1]); folder.mkdir(parents=True, exist_ok=True); '
             '(folder / "last.pth.tar").write_bytes(b"x"); print(sys.argv[2], flush=True); sys.exit(int(sys.argv[3]))')

    def spec(name, words, status):
        return RunSpec(name, [sys.executable, '-c', write, str(tmp_path / name), words, str(status)], tmp_path / name,
                       1)
    run_all([spec('fresh_s0', 'only part', 0)], finish, 1, show=lambda line: None, poll=0.05, log_dir=tmp_path)
    assert seen['fresh_s0'] == (1, False)
    first = run_all([spec('resumed_s0', 'first part', 1)], finish, 1, show=lambda line: None, poll=0.05,
                    log_dir=tmp_path)
    assert list(first.failed) == ['resumed_s0']
    run_all([spec('resumed_s0', 'second part', 0)], finish, 1, show=lambda line: None, poll=0.05, log_dir=tmp_path)
    assert seen['resumed_s0'] == (2, True)
    log = (tmp_path / 'resumed_s0.log').read_text()
    assert 'first part' in log and 'second part' in log and log.index('first part') < log.index('second part')


@pytest.mark.parametrize('option', ['--seed=3', '--output=/tmp/x', '--resume=last.pth.tar', '--experiment=e',
                                    '--model=vit_tiny_patch2_32', '--overwrite'])
def test_a_training_option_compare_sets_itself_is_refused_however_written(option):
    from timm_structinit.compare.command import _check_options
    from timm_structinit.errors import ConfigError
    args = argparse.Namespace(seeds=2, concurrent=1, time_limit=None, train_options=['--epochs', '2', option])
    with pytest.raises(ConfigError) as caught:
        _check_options(args)
    assert str(caught.value).startswith(option.split('=')[0] + ': not a training option of compare')
