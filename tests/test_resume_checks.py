""" `--resume` checks what it restores before any work: a training checkpoint (not weights alone), an epoch in the run's
range, the optimizer's kind, groups and hyperparameters (every option that shapes the optimizer, changed), the
logged columns; the run folder is the checkpoint's by real path; a new --lr is said and recorded. """
import csv
import os
from pathlib import Path

import pytest
import torch
import yaml

from timm_structinit import train as train_mod
from timm_structinit.train import training_run
from train_command import RUN, one_line, run_main


@pytest.fixture(scope='module')
def first_epoch(tmp_path_factory):
    """ A run stopped after its first epoch (epochs 1 of 2), copied fresh for each test. """
    out = tmp_path_factory.mktemp('runs')
    assert train_mod.main([*RUN, '--epochs', '1', '--output', str(out), '--experiment', 'a']) == 0
    return out / 'a'


@pytest.fixture
def run_dir(first_epoch, tmp_path):
    import shutil
    target = tmp_path / 'runs' / 'a'
    shutil.copytree(first_epoch, target)
    return target


def snapshot(folder: Path):
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and not p.is_symlink()}


# every option that shapes the optimizer, changed: (options, a word the refusal names)
OPTIMIZER_CHANGES = [
    (['--opt', 'adamw'], 'adamw'),
    (['--opt', 'lookahead_sgd'], 'lookahead'),
    (['--momentum', '0.5'], 'momentum'),
    (['--weight-decay', '0.05'], 'weight_decay'),
    (['--weight-decay', '0'], 'group'),  # one group instead of decay / no-decay
    (['--layer-decay', '0.7'], 'group'),
    (['--opt-kwargs', 'nesterov=False'], 'nesterov'),  # timm's sgd is Nesterov's
    (['--opt', 'momentum'], 'momentum'),
    (['--opt-kwargs', 'maximize=True'], 'maximize'),
    (['--opt-eps', '1e-6', '--opt', 'adamw'], 'adamw'),
]


@pytest.mark.parametrize('change,named', OPTIMIZER_CHANGES)
def test_every_optimizer_shaping_option_changed_is_refused_before_any_work(run_dir, change, named, capsys):
    before = snapshot(run_dir)
    code, out, err = run_main([*RUN, *change, '--resume', run_dir], capsys)
    line = one_line(err)
    assert code == 2 and named in line and '--no-resume-opt' in line, line
    assert snapshot(run_dir) == before  # nothing written, summary.csv included
    assert 'Model ' not in out  # refused before the data and the model


@pytest.mark.parametrize('change,named', [(['embed_dim=32'], 'embed_dim'), (['depth=2'], 'missing'),
                                          (['num_classes=5'], 'head')])
def test_weights_of_another_shape_are_refused_before_the_data(run_dir, change, named, capsys, monkeypatch):
    def no_data(args):
        raise AssertionError('the data was read')
    monkeypatch.setattr(training_run, 'build_datasets', no_data)
    before = snapshot(run_dir)
    i = RUN.index('--model-kwargs')
    argv = [*RUN[:i + 1], *[a for a in RUN[i + 1:i + 5] if a.split('=')[0] not in {c.split('=')[0] for c in change}],
            *change, *RUN[i + 5:], '--resume', run_dir]
    code, out, err = run_main(argv, capsys)
    line = one_line(err)
    assert code == 2 and named in line and 'does not fit' in line, line
    assert snapshot(run_dir) == before


def test_no_resume_opt_is_the_way_out(run_dir, capsys):
    code, out, err = run_main([*RUN, '--opt', 'adamw', '--no-resume-opt', '--resume', run_dir], capsys)
    assert code == 0, err
    assert [r['epoch'] for r in csv.DictReader(open(run_dir / 'summary.csv'))] == ['0', '1']


def test_a_new_lr_is_taken_said_and_recorded(run_dir, capsys, caplog):
    code, out, err = run_main([*RUN[:RUN.index('--lr')], *RUN[RUN.index('--lr') + 2:], '--lr', '0.05', '--resume',
                               run_dir], capsys)
    assert code == 0, err
    assert 'Learning rate 0.05 replaces the checkpoint\'s 0.01' in caplog.text
    assert yaml.safe_load((run_dir / 'args.yaml').read_text())['lr'] == 0.05
    rows = list(csv.DictReader(open(run_dir / 'summary.csv')))
    # timm's cosine schedule over 2 epochs is at half its base rate in the second: 0.05 / 2, not 0.01 / 2
    assert float(rows[1]['lr']) == pytest.approx(0.025)


@pytest.mark.parametrize('epoch', [-5, 7])
def test_an_epoch_outside_the_run_is_refused_and_the_summary_kept(run_dir, epoch, capsys):
    ckpt = torch.load(run_dir / 'last.pth.tar', weights_only=False)
    ckpt['epoch'] = epoch
    torch.save(ckpt, run_dir / 'last.pth.tar')
    before = snapshot(run_dir)
    code, out, err = run_main([*RUN, '--resume', run_dir], capsys)
    line = one_line(err)
    assert code == 2 and f'epoch {epoch}' in line, line
    assert snapshot(run_dir) == before


@pytest.mark.parametrize('version', [1, 2])
def test_a_checkpoint_is_taken_through_the_cool_down_and_refused_past_the_run(version, tmp_path):
    """ --epochs 2 --cooldown-epochs 1: a run of 3 epochs. A checkpoint of timm's version 2 records the epoch it
    finished (0, 1 or 2: it starts at 1, 2 or 3, the last a finished run, which reports), one of version 1 the epoch
    to start at (up to 3); one past the run is refused, naming the valid epochs. """
    from argparse import Namespace
    from timm_structinit.errors import ConfigError
    from timm_structinit.train.resume import check_resume
    args = Namespace(resume=str(tmp_path / 'last.pth.tar'), epochs=2, cooldown_epochs=1, no_resume_opt=True)
    last = 2 if version == 2 else 3
    for epoch in range(last + 1):
        check_resume(args, dict(state_dict={}, epoch=epoch, version=version), str(tmp_path), False, None)
    with pytest.raises(ConfigError, match=r'valid: a checkpoint of epoch 0\.\.2 '):
        check_resume(args, dict(state_dict={}, epoch=last + 1, version=version), str(tmp_path), False, None)


@pytest.mark.parametrize('flags,named', [(['--model-ema'], 'without EMA columns')])
def test_logged_columns_must_match(run_dir, flags, named, capsys):
    before = snapshot(run_dir)
    code, out, err = run_main([*RUN, *flags, '--resume', run_dir], capsys)
    line = one_line(err)
    assert code == 2 and named in line and '--experiment' in line, line
    assert snapshot(run_dir) == before


def test_the_ema_into_a_new_folder_is_fine(run_dir, tmp_path, capsys):
    code, out, err = run_main([*RUN, '--model-ema', '--resume', run_dir, '--output', tmp_path / 'new',
                               '--experiment', 'b'], capsys)
    assert code == 0, err
    header = (tmp_path / 'new' / 'b' / 'summary.csv').read_text().splitlines()[0]
    assert 'eval_ema_top1' in header


def test_a_plain_state_dict_is_not_a_run_to_continue(run_dir, tmp_path, capsys):
    weights = tmp_path / 'weights.pth'
    torch.save(torch.load(run_dir / 'last.pth.tar', weights_only=False)['state_dict'], weights)
    code, out, err = run_main([*RUN, '--resume', weights, '--output', tmp_path / 'o'], capsys)
    line = one_line(err)
    assert code == 2 and 'state dict' in line and '--initial-checkpoint' in line, line
    assert not (tmp_path / 'o').exists()


def test_a_link_to_a_checkpoint_continues_in_the_run_of_its_target(run_dir, tmp_path, capsys, monkeypatch):
    """ `--resume latest.pth.tar`, a link in a working folder that holds another run's files: the run goes on in
    the checkpoint's own folder, and the working folder is left as it was. """
    work = tmp_path / 'work'
    work.mkdir()
    (work / 'summary.csv').write_text('epoch,train_loss\n0,1.0\n1,0.9\n2,0.8\n')
    (work / 'model_best.pth.tar').write_bytes(b'another run')
    (work / 'last.pth.tar').symlink_to(run_dir / 'last.pth.tar')
    before = snapshot(work)
    monkeypatch.chdir(work)
    code, out, err = run_main([*RUN, '--resume', 'last.pth.tar'], capsys)
    assert code == 0, err
    assert snapshot(work) == before
    assert [r['epoch'] for r in csv.DictReader(open(run_dir / 'summary.csv'))] == ['0', '1']
    assert str(run_dir) in out


def test_a_renamed_checkpoint_starts_a_new_folder(run_dir, tmp_path, capsys):
    """ A checkpoint under a name no run writes is a start point: its folder, holding other files, is left alone. """
    keep = tmp_path / 'keep'
    keep.mkdir()
    (keep / 'summary.csv').write_text('epoch,train_loss\n0,1.0\n')
    os.link(run_dir / 'last.pth.tar', keep / 'mine.pth.tar')
    before = snapshot(keep)
    code, out, err = run_main([*RUN, '--resume', keep / 'mine.pth.tar', '--output', tmp_path / 'o'], capsys)
    assert code == 0, err
    assert snapshot(keep) == before
    assert len(list((tmp_path / 'o').iterdir())) == 1


def test_whatever_the_tensors_raise_while_restoring_is_one_line(run_dir, capsys, monkeypatch):
    """ A checkpoint whose index reads but whose tensors do not: torch's own error, of a type nobody listed. """
    import pickle

    def damaged(*args, **kwargs):
        raise pickle.UnpicklingError('invalid load key, \'\\x00\'.')
    monkeypatch.setattr(training_run, 'restore_checkpoint', damaged)
    before = snapshot(run_dir)
    code, out, err = run_main([*RUN, '--resume', run_dir], capsys)
    line = one_line(err)
    assert code == 2 and 'UnpicklingError' in line and '--resume' in line, line
    assert snapshot(run_dir) == before


def test_the_same_options_spelled_otherwise_resume_the_run(run_dir, capsys):
    """ The run's options written otherwise (the optimizer's name in capitals, 1e-2 for 0.01, 0.90 for the default
    momentum 0.9, 2.0e-5 for the default weight decay): the same run, resumed at its second epoch, its learning
    rate not said to be replaced. """
    code, out, err = run_main([*RUN, '--opt', 'SGD', '--lr', '1e-2', '--momentum', '0.90', '--weight-decay', '2.0e-5',
                               '--resume', run_dir], capsys)
    assert code == 0, err
    assert [line.split()[1] for line in out.splitlines() if line.startswith('epoch ')] == ['2/2'], out
    with open(run_dir / 'summary.csv', newline='') as f:
        assert [int(r['epoch']) for r in csv.DictReader(f)] == [0, 1]
    assert 'replaces' not in out + err
