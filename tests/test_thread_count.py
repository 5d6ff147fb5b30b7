""" The torch thread count a CPU run trains with: the user's (`--threads`, else OMP_NUM_THREADS) or the fastest a
probe of its training step measures. The probe's decision is held on steps whose durations the test sets per thread
count (a clock of its own), so that which count is faster, by how much and how steadily is known; on a real model,
that the probe leaves the run's weights, gradients and random streams as they were, and the caller's thread count
as it was unless it changes it to the chosen one; a run records its count. """
import argparse
import contextlib
import threading

import pytest
import timm
import torch
import yaml

import timm_structinit  # noqa: F401  registers the models
from timm_structinit.errors import ConfigError
from timm_structinit.train import thread_count
from timm_structinit.train.thread_count import (
    ThreadChoice, candidate_counts, choose_threads, fewest_within, probe_threads, user_threads)
from train_command import FAST, TINY, run_main

# the digits, 64 images, one epoch of the tiny model
TINY_DIGITS = [*TINY, '--dataset', 'sklearn/digits', '--val-split', 'test', '--train-subset', '64', '--val-subset',
               '32', '--epochs', '1', *FAST]


def test_the_users_count_wins_and_a_bad_one_is_refused():
    assert user_threads(3, {'OMP_NUM_THREADS': '1'}) == ThreadChoice(3, '--threads')
    assert user_threads(None, {'OMP_NUM_THREADS': '1'}) == ThreadChoice(1, 'OMP_NUM_THREADS')
    assert user_threads(None, {'OMP_NUM_THREADS': ' 4,2 '}).threads == 4  # OpenMP's nested levels: the first
    assert user_threads(None, {}) is None and user_threads(None, {'OMP_NUM_THREADS': ''}) is None
    for bad in ('0', 'abc', '-1', '2.5', ',2'):
        with pytest.raises(ConfigError, match=f"OMP_NUM_THREADS={bad!r} is not a number of threads"):
            user_threads(None, {'OMP_NUM_THREADS': bad})


@pytest.mark.parametrize('cores, counts', [(1, [1]), (2, [2, 1]), (3, [3, 1]), (6, [6, 3, 1]),
                                           (16, [16, 8, 4, 2, 1]), (12, [12, 6, 3, 1])])
def test_the_counts_probed_go_from_every_core_down_by_halves(cores, counts):
    assert candidate_counts(cores) == counts


@pytest.mark.parametrize('seconds, fewest', [
    ({2: 0.100, 1: 0.104}, 1),  # within 5%: the fewer threads, which leave a core to the rest of the machine
    ({2: 0.060, 1: 0.100}, 2),  # 40% faster: the more
    ({2: 0.400, 1: 0.100}, 1),  # a busy core holds the second thread up
    ({4: 1.00, 2: 1.04, 1: 1.20}, 2), ({4: 1.00, 2: 1.06, 1: 1.04}, 1), ({8: 0.5, 4: 0.6, 2: 0.9, 1: 1.6}, 8),
])
def test_the_fewest_threads_within_five_percent_of_the_fastest_win(seconds, fewest):
    assert fewest_within(seconds) == fewest


class _Steps:
    """ A step whose duration is `seconds[count][i]` for the i-th step at the calling thread's torch count (the
    last value repeated), on a clock of its own; it notes which thread ran each count. """

    def __init__(self, seconds):
        self.seconds, self.now, self.calls, self.threads = seconds, 0.0, {n: 0 for n in seconds}, {}

    def clock(self) -> float:
        return self.now

    def __call__(self) -> None:
        count = torch.get_num_threads()
        durations = self.seconds[count]
        self.now += durations[min(self.calls[count], len(durations) - 1)]
        self.calls[count] += 1
        self.threads.setdefault(count, set()).add(threading.get_ident())


def _probe(durations, **kwargs):
    steps = _Steps(durations)
    torch.set_num_threads(2)
    choice = probe_threads(steps, list(durations), clock=steps.clock, **kwargs)
    return choice, steps


def test_a_clearly_faster_count_decides_after_two_rounds_each_on_its_own_thread():
    choice, steps = _probe({2: [0.06], 1: [0.10]})
    assert (choice.threads, choice.how) == (2, 'probe')
    assert steps.calls == {2: 3, 1: 3}  # a warm-up step and two rounds
    assert steps.threads[2] == {threading.get_ident()}  # the caller's count on the caller's own thread
    assert threading.get_ident() not in steps.threads[1]  # another count on a thread started for it
    assert torch.get_num_threads() == 2  # probe_threads measures; choose_threads changes the count
    assert choice.step_seconds == {2: pytest.approx(0.06), 1: pytest.approx(0.10)}


def test_beside_a_busy_core_the_count_whose_steps_stall_loses_by_its_mean():
    """ The second thread waits for a busy core now and then: most of its steps are quick, a few stall. Its median
    step is shorter than one thread's; its mean, what the run pays, is longer. """
    stalls = [0.06, 0.06, 0.06, 0.5]  # after its warm-up step: median 0.06, mean 0.207, and so on
    choice, steps = _probe({2: stalls * 5, 1: [0.10]}, clear=10.0)
    assert choice.threads == 1 and choice.step_seconds[2] > choice.step_seconds[1]
    # one quick step decides nothing: after it, the second stalls
    choice, steps = _probe({2: [0.06, 0.06, 0.5], 1: [0.10]})
    assert choice.threads == 1 and steps.calls[2] == 3


def test_an_unclear_difference_is_timed_until_the_probe_has_taken_its_time():
    choice, steps = _probe({2: [0.097], 1: [0.100]}, seconds=1.0, max_rounds=50)
    assert choice.threads == 1  # within 5%
    assert 1.0 <= 0.197 * (steps.calls[1] - 1) < 1.0 + 0.2  # rounds until a second had passed
    choice, steps = _probe({2: [0.097], 1: [0.100]}, seconds=100.0, max_rounds=4)
    assert steps.calls == {2: 5, 1: 5}  # at most max_rounds


def test_a_long_step_is_not_probed():
    choice, steps = _probe({2: [3.0], 1: [4.0]})
    assert (choice.threads, choice.how) == (2, 'default') and 'long enough' in choice.why
    assert steps.calls[2] == 1  # its warm-up step only


def _tiny_run_args(**changes) -> argparse.Namespace:
    args = argparse.Namespace(threads=None, batch_size=8, num_classes=10, opt='adamw', lr=1e-3, weight_decay=0.05,
                              momentum=0.9, opt_eps=None, opt_betas=None, layer_decay=None, opt_kwargs={})
    vars(args).update(changes)
    return args


def test_the_probe_leaves_the_run_as_it_was(monkeypatch):
    """ A real model's probe: its weights and gradients, the global random stream and (until it chooses) the
    caller's count untouched; the chosen count is then the caller's. """
    monkeypatch.delenv('OMP_NUM_THREADS', raising=False)
    torch.manual_seed(0)
    model = timm.create_model('vit_tiny_patch2_32_mimetic', img_size=16, patch_size=4, embed_dim=16, depth=1,
                              num_heads=2, num_classes=10, drop_path_rate=0.1)
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    choice = choose_threads(_tiny_run_args(), model, (3, 16, 16), torch.device('cpu'), contextlib.nullcontext, 2)
    assert choice.how in ('probe', 'default') and choice.threads in (1, 2)
    assert torch.get_num_threads() == choice.threads
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(v, weights[k]) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())


def test_a_count_the_user_sets_is_taken_without_a_probe(monkeypatch):
    monkeypatch.setattr(thread_count, 'probe_threads', lambda *a, **k: pytest.fail('probed'))
    model = torch.nn.Linear(4, 2)
    monkeypatch.setenv('OMP_NUM_THREADS', '1')
    assert choose_threads(_tiny_run_args(), model, (4,), torch.device('cpu'), contextlib.nullcontext, 2) == \
        ThreadChoice(1, 'OMP_NUM_THREADS')
    assert choose_threads(_tiny_run_args(threads=2), model, (4,), torch.device('cpu'), contextlib.nullcontext,
                          2) == ThreadChoice(2, '--threads')
    assert torch.get_num_threads() == 2
    monkeypatch.delenv('OMP_NUM_THREADS')
    torch.set_num_threads(1)  # torch's count on one core
    one_core = choose_threads(_tiny_run_args(), model, (4,), torch.device('cpu'), contextlib.nullcontext, 1)
    assert one_core.how == 'default' and '1 usable core' in one_core.describe()
    elsewhere = choose_threads(_tiny_run_args(), model, (4,), torch.device('meta'), contextlib.nullcontext, 2)
    assert elsewhere.how == 'default' and 'trains on meta' in elsewhere.describe()


def test_a_bad_omp_num_threads_is_one_line_before_any_work(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv('OMP_NUM_THREADS', 'four')
    code, out, err = run_main([*TINY_DIGITS, '--output', tmp_path], capsys)
    assert code == 2 and err.strip() == (
        "timm-structinit-train: error: OMP_NUM_THREADS='four' is not a number of threads; set a whole number >= 1, "
        "or unset it (the run then measures which count trains fastest here)")
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_a_run_says_and_records_the_threads_it_trained_with(tmp_path, capsys, caplog, monkeypatch):
    """ Without a count set, the run probes and says what it measured; with one, it takes it; args.yaml records the
    count, summary.csv each epoch's. """
    monkeypatch.delenv('OMP_NUM_THREADS', raising=False)
    threads = torch.get_num_threads()
    caplog.set_level('INFO', 'train')
    try:
        code, out, err = run_main([*TINY_DIGITS, '--output', tmp_path, '--experiment', 'probed'], capsys)
        assert code == 0, err
        line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith('Threads: '))
        used = yaml.safe_load((tmp_path / 'probed' / 'args.yaml').read_text())['threads']
        assert line.startswith(f'Threads: {used} torch thread') and 'a training step on 2 threads' in line, line
        code, out, err = run_main([*TINY_DIGITS, '--output', tmp_path, '--experiment', 'fixed', '--threads', '1'],
                                  capsys)
        assert code == 0, err
        assert 'Threads: 1 torch thread, as --threads sets' in caplog.text
        assert yaml.safe_load((tmp_path / 'fixed' / 'args.yaml').read_text())['threads'] == 1
        summary = (tmp_path / 'fixed' / 'summary.csv').read_text().splitlines()
        column = summary[0].split(',').index('train_threads')
        assert [row.split(',')[column] for row in summary[1:]] == ['1']
    finally:
        torch.set_num_threads(threads)
