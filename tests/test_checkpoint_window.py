""" Nothing finished is ever deleted, whatever the moment a stop lands: a stop signal sent inside timm's checkpoint
replace window (its CheckpointSaver deletes last.pth.tar, then renames the new checkpoint into place) is raised once
the checkpoint is whole, and the run resumes at the epoch it had just finished; were a run to stop there all the
same (a kill), its folder with its finished epochs is kept and resumes from its latest numbered checkpoint; compare
neither removes such a folder nor trains over it. The signal is landed by timm's own code: its `os.unlink` of
last.pth.tar is followed, before its rename, by a SIGTERM to this process. """
import contextlib
import csv
import os
import signal
import sys

import pytest
import torch

from timm_structinit.train import epochs as epochs_mod
from train_command import FAST, TINY, run_main, two_class_folder

pytestmark = pytest.mark.usefixtures('one_torch_thread')


@pytest.fixture(scope='module')
def data(tmp_path_factory):
    return two_class_folder(tmp_path_factory.mktemp('data'), per_class=8, size=32)


class _StopInTheWindow:
    """ timm's `os` in its checkpoint saver: every call as os's own, but the deletion of last.pth.tar (its replace's
    first step) followed at once by a SIGTERM to this process, the first time only. """

    def __init__(self):
        self.landed = None

    def __getattr__(self, name):
        return getattr(os, name)

    def unlink(self, path):
        os.unlink(path)
        if self.landed is None and os.path.basename(path) == 'last.pth.tar':
            self.landed = dict(last_exists=os.path.exists(path),
                               tmp_exists=os.path.exists(os.path.join(os.path.dirname(path), 'tmp.pth.tar')))
            os.kill(os.getpid(), signal.SIGTERM)


def _epochs(summary):
    with open(summary, newline='') as f:
        return [int(r['epoch']) for r in csv.DictReader(f)]


def _trained(stdout):
    """ The epochs (from 1) a run trained, by the line it prints for each. """
    return [int(line.split()[1].split('/')[0]) for line in stdout.splitlines() if line.startswith('epoch ')]


def _argv(data, out, epochs=3):
    return [*TINY, *FAST, '--data-dir', data, '--val-split', 'test', '--epochs', epochs, '--output', out,
            '--experiment', 'run', '--seed', 3]


def _stop_in_the_window(monkeypatch, data, out, capsys):
    from timm.utils import checkpoint_saver
    timm_os = _StopInTheWindow()
    monkeypatch.setattr(checkpoint_saver, 'os', timm_os)
    code, stdout, err = run_main(_argv(data, out), capsys)
    monkeypatch.setattr(checkpoint_saver, 'os', os)
    # the signal was sent inside the window: the second epoch's save had deleted last.pth.tar, not yet renamed
    assert timm_os.landed == dict(last_exists=False, tmp_exists=True), timm_os.landed
    return code, stdout, err


def test_a_stop_in_the_checkpoint_replace_window_resumes_at_the_epoch_just_finished(data, tmp_path, capsys,
                                                                                   monkeypatch):
    code, stdout, err = _stop_in_the_window(monkeypatch, data, tmp_path, capsys)
    run = tmp_path / 'run'
    last = run / 'last.pth.tar'
    assert code == 128 + signal.SIGTERM, err
    assert f'the last finished epoch is in {last} (continue with --resume {last})' in err, err
    assert 'nothing' not in err
    assert torch.load(last, map_location='cpu', weights_only=False)['epoch'] == 1  # the epoch whose save it stopped
    assert _epochs(run / 'summary.csv') == [0, 1] and not (run / 'tmp.pth.tar').exists()
    code, stdout, err = run_main([*_argv(data, tmp_path), '--resume', run], capsys)
    assert code == 0, err
    assert _trained(stdout) == [3] and _epochs(run / 'summary.csv') == [0, 1, 2], stdout


def test_a_run_stopped_in_the_window_all_the_same_keeps_its_finished_epochs(data, tmp_path, capsys, monkeypatch):
    """ Without the held stop (as a kill would leave it: no last.pth.tar), the run's folder keeps its finished epoch
    (checkpoint-0, the summary), says where it is, and resumes from it. """
    monkeypatch.setattr(epochs_mod, 'stops_held', contextlib.nullcontext)
    code, stdout, err = _stop_in_the_window(monkeypatch, data, tmp_path, capsys)
    run = tmp_path / 'run'
    assert code == 128 + signal.SIGTERM and not (run / 'last.pth.tar').exists(), err
    kept = run / 'checkpoint-0.pth.tar'
    assert f'the last finished epoch is in {kept} (continue with --resume {kept})' in err, err
    assert 'nothing' not in err and _epochs(run / 'summary.csv') == [0, 1]
    code, stdout, err = run_main([*_argv(data, tmp_path), '--resume', run], capsys)
    assert code == 0 and _trained(stdout) == [2, 3], stdout + err
    assert _epochs(run / 'summary.csv') == [0, 1, 2]


def test_a_folder_with_a_finished_epoch_is_never_removed(tmp_path):
    """ However a new run ends, its folder goes only when no epoch of it finished: a summary row or any checkpoint
    (last, best or numbered) keeps it whole. """
    from timm_structinit.train.output import remove_unfinished_run
    kinds = {'summary': {'summary.csv': 'epoch,eval_top1\n0,50\n'}, 'numbered': {'checkpoint-4.pth.tar': 'x'},
             'best': {'model_best.pth.tar': 'x'}, 'last': {'last.pth.tar': 'x'},
             'nothing': {'summary.csv': 'epoch,eval_top1\n', 'tmp.pth.tar': 'half'}}
    for kind, files in kinds.items():
        folder = tmp_path / kind / 'run'
        folder.mkdir(parents=True)
        for name, text in files.items():
            (folder / name).write_text(text)
        remove_unfinished_run(str(folder), str(tmp_path / kind))
        assert (kind == 'nothing') != folder.exists(), kind
        if kind != 'nothing':
            assert sorted(p.name for p in folder.iterdir()) == sorted(files), kind


def _finish(spec, seconds, resumed):
    import json
    spec.folder.mkdir(parents=True, exist_ok=True)
    (spec.folder / 'result.json').write_text(json.dumps(dict(seconds=seconds, final_top1=1.0, best_top1=1.0)))
    return dict(seconds=seconds, final_top1=1.0, best_top1=1.0)


def test_compare_resumes_a_run_from_its_latest_checkpoint_and_never_trains_over_kept_results(tmp_path):
    """ A run folder without last.pth.tar but with checkpoint-1 and checkpoint-3 is resumed (from checkpoint-3, the
    training command's own choice for the folder); one with a finished epoch's summary row but no checkpoint is not
    started, in one line, and kept as it is; one with nothing finished starts afresh. """
    from timm_structinit.compare.runner import RunSpec, run_all
    from timm_structinit.train.inputs import resume_path
    code = 'import sys; print(" ".join(sys.argv[1:]), flush=True)'
    folders = {name: tmp_path / 'runs' / name for name in ('ckpt_s0', 'rows_s0', 'none_s0')}
    for folder in folders.values():
        folder.mkdir(parents=True)
    (folders['ckpt_s0'] / 'checkpoint-1.pth.tar').write_text('x')
    (folders['ckpt_s0'] / 'checkpoint-3.pth.tar').write_text('x')
    (folders['rows_s0'] / 'summary.csv').write_text('epoch,eval_top1\n0,50\n')
    (folders['none_s0'] / 'summary.csv').write_text('epoch,eval_top1\n')
    specs = [RunSpec(name, [sys.executable, '-c', code], folder, 1) for name, folder in folders.items()]
    shown = []
    outcome = run_all(specs, _finish, 1, show=shown.append, poll=0.05, log_dir=tmp_path)
    assert sorted(outcome.finished) == ['ckpt_s0', 'none_s0'], shown
    assert (tmp_path / 'ckpt_s0.log').read_text().splitlines()[1] == f'--resume {folders["ckpt_s0"]}'
    assert resume_path(str(folders['ckpt_s0'])) == str(folders['ckpt_s0'] / 'checkpoint-3.pth.tar')
    assert list(outcome.failed) == ['rows_s0'] and 'no checkpoint to resume' in outcome.failed['rows_s0']
    assert (folders['rows_s0'] / 'summary.csv').read_text() == 'epoch,eval_top1\n0,50\n'
    assert not (folders['none_s0'] / 'summary.csv').exists()  # started afresh


def test_a_killed_writers_staging_folder_goes_and_a_running_ones_stays(tmp_path):
    """ Next to a target, the staging folders of a writer that has ended (its pid gone, or none recorded by an older
    version) are removed; that of a writer still running (this test's parent process) is kept, with its files. """
    import subprocess
    from timm_structinit.utils.atomic import remove_stale_staging
    ended = subprocess.Popen([sys.executable, '-c', 'pass'])
    ended.wait()
    names = {'ended': f'.export.{ended.pid}-0123abcd.tmp', 'older': '.export.89abcdef.old',
             'running': f'.export.{os.getppid()}-4567cdef.tmp'}
    for name in names.values():
        (tmp_path / name).mkdir()
        (tmp_path / name / 'config.json').write_text('{}')
    remove_stale_staging(tmp_path / 'export')
    assert sorted(p.name for p in tmp_path.iterdir()) == [names['running']]
    assert (tmp_path / names['running'] / 'config.json').read_text() == '{}'

