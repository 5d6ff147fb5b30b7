""" The training paths the shipped recipes take, each on a tiny model and scikit-learn's digits, with the expected
value taken from the definition of the option (timm's train.py) rather than from the code under test:
--clip-grad (every 2024 impulse recipe sets 3.0), --amp, the learning rate from lr_base (the ImageNet 2025 recipes),
--initial-checkpoint, resume with --no-resume-opt and with --sched-on-updates, the train/eval class check, and the
export that replaces a previous one restoring it when the swap fails. """
import math
import os
from pathlib import Path

import pytest
import timm
import torch
from PIL import Image

from timm_structinit import hub
from timm_structinit import train as train_mod

from train_command import checkpoint, read_summary

MODEL = 'vit_tiny_patch2_32_mimetic'
MODEL_KWARGS = dict(embed_dim=16, depth=1, num_heads=2, patch_size=8)
TINY = ['--model', MODEL, '--model-kwargs', *(f'{k}={v}' for k, v in MODEL_KWARGS.items())]
DIGITS = ['--dataset', 'sklearn/digits', '--val-split', 'test', '--hflip', '0', '--workers', '0', '--warmup-epochs',
          '0', '--log-interval', '1000', '--seed', '5', '--val-subset', '20', '--smoothing', '0']
# plain SGD: the update is -lr * gradient, so what the weights moved is what the gradient was
PLAIN_SGD = ['--opt', 'momentum', '--momentum', '0', '--weight-decay', '0']


def train(tmp_path: Path, name: str, *argv) -> Path:
    code = train_mod.main([str(a) for a in (*TINY, *DIGITS, *argv, '--output', tmp_path, '--experiment', name)])
    assert code == 0
    return tmp_path / name


def trainable_delta_norm(before: dict, after: dict, model) -> float:
    """ Norm over every trainable parameter of what one update moved. """
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    return math.sqrt(sum(float((after[n].double() - before[n].double()).square().sum()) for n in names))


@pytest.fixture
def initial_weights(tmp_path):
    """ A model state of its own (another seed than any run's) saved as a plain state dict. """
    torch.manual_seed(1234)
    model = timm.create_model(MODEL, num_classes=10, **MODEL_KWARGS)
    path = tmp_path / 'initial.pth'
    torch.save(model.state_dict(), path)
    return path, model


@pytest.mark.parametrize('clip', [None, 1e-3])
def test_initial_checkpoint_and_clip_grad_norm(clip, tmp_path, initial_weights):
    """ One update of plain SGD at lr 1 from --initial-checkpoint: the weights move by the gradient, whose total
    norm --clip-grad caps (timm's 'norm' mode clips the norm over all parameters together). The move is measured
    from the checkpoint's weights, so the run must have started from them. """
    path, model = initial_weights
    extra = ['--clip-grad', clip] if clip else []
    run = train(tmp_path, f'clip{clip}', *PLAIN_SGD, '--lr', 1.0, '--epochs', 1, '--train-subset', 16,
                '--batch-size', 16, '--initial-checkpoint', path, *extra)
    after = checkpoint(run / 'last.pth.tar')['state_dict']
    moved = trainable_delta_norm(model.state_dict(), after, model)
    if clip:
        assert moved == pytest.approx(clip, rel=1e-3)
    else:
        assert 0.01 < moved < 100  # the gradient's own norm, far above the clip above
    assert torch.equal(after['pos_embed'], model.state_dict()['pos_embed'])  # the frozen table does not train


@pytest.mark.parametrize('opt,scale_arg,expected', [
    # timm's train.py: lr = lr_base * (global batch / lr_base_size), square-rooted for ada* and lamb optimizers
    ('momentum', [], 0.1 * 16 / 256),
    ('adamw', [], 0.1 * math.sqrt(16 / 256)),
    ('adamw', ['--lr-base-scale', 'linear'], 0.1 * 16 / 256),  # the 2025 ImageNet recipes' setting
])
def test_learning_rate_from_lr_base(opt, scale_arg, expected, tmp_path):
    run = train(tmp_path, opt, '--opt', opt, '--lr-base', 0.1, '--lr-base-size', 256, *scale_arg, '--epochs', 1,
                '--train-subset', 32, '--batch-size', 16)
    assert checkpoint(run / 'last.pth.tar')['optimizer']['param_groups'][0]['initial_lr'] == pytest.approx(expected)
    assert float(read_summary(run / 'summary.csv')[0]['lr']) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize('dtype', ['bfloat16', 'float16'])
def test_amp_trains_in_the_lower_precision(dtype, tmp_path):
    """ --amp runs the forward under autocast: the same run moves the weights differently from full precision,
    and by nearly the same amount. """
    common = ['--opt', 'adamw', '--lr', 1e-3, '--epochs', 1, '--train-subset', 32, '--batch-size', 16]
    full = checkpoint(train(tmp_path, 'fp32', *common) / 'last.pth.tar')['state_dict']
    amp = checkpoint(train(tmp_path, dtype, *common, '--amp', '--amp-dtype', dtype) / 'last.pth.tar')['state_dict']
    weight = 'blocks.0.attn.qkv.weight'
    assert torch.isfinite(amp[weight]).all() and not torch.equal(amp[weight], full[weight])
    torch.testing.assert_close(amp[weight], full[weight], atol=5e-3, rtol=0)


RESUMABLE = ['--epochs', 2, '--train-subset', 48, '--batch-size', 16, '--lr', 0.05]


def test_no_resume_opt_restores_the_model_and_not_the_optimizer(tmp_path):
    """ With plain SGD the optimizer holds nothing, so a resume that restores the model continues exactly as the run
    that was not stopped, with or without the optimizer; AdamW's step count then tells whether its state came back
    (3 updates per epoch). """
    full = train(tmp_path, 'sgd', *PLAIN_SGD, *RESUMABLE)
    resumed = train(tmp_path, 'sgd-resumed', *PLAIN_SGD, *RESUMABLE, '--resume', full / 'checkpoint-0.pth.tar',
                    '--no-resume-opt')
    reference, state = checkpoint(full / 'last.pth.tar'), checkpoint(resumed / 'last.pth.tar')
    assert state['epoch'] == reference['epoch'] == 1  # the last epoch's index
    for key, value in reference['state_dict'].items():
        assert torch.equal(state['state_dict'][key], value), key
    assert [r['epoch'] for r in read_summary(resumed / 'summary.csv')] == ['1']

    adam = ['--opt', 'adamw', *RESUMABLE]
    full = train(tmp_path, 'adam', *adam)
    steps = {}
    for name, extra in (('with-opt', []), ('without-opt', ['--no-resume-opt'])):
        run = train(tmp_path, name, *adam, '--resume', full / 'checkpoint-0.pth.tar', *extra)
        steps[name] = checkpoint(run / 'last.pth.tar')['optimizer']['state'][0]['step'].item()
    assert steps == {'with-opt': 6, 'without-opt': 3}
    assert checkpoint(full / 'last.pth.tar')['optimizer']['state'][0]['step'].item() == 6


def test_resume_with_sched_on_updates_continues_the_schedule(tmp_path):
    """ --sched-on-updates steps the warm-up and cosine per update: a run resumed after its first epoch has the
    same learning rate, weights and optimizer state as the run that was not stopped. """
    argv = ['--opt', 'adamw', '--sched-on-updates', '--warmup-epochs', 1, '--warmup-lr', 1e-5, *RESUMABLE,
            '--epochs', 3]
    full = train(tmp_path, 'full', *argv)
    resumed = train(tmp_path, 'resumed', *argv, '--resume', full / 'checkpoint-0.pth.tar')
    rows = {r['epoch']: r for r in read_summary(full / 'summary.csv')}
    lrs = [float(rows[e]['lr']) for e in ('0', '1', '2')]
    # per update, the first epoch ends inside the warm-up (per epoch it would log the warm-up lr 1e-5), then the
    # cosine falls update by update
    assert 1e-5 < lrs[0] < 0.05 and lrs[0] > lrs[1] > lrs[2]
    for row in read_summary(resumed / 'summary.csv'):
        assert float(row['lr']) == float(rows[row['epoch']]['lr'])
        assert float(row['train_loss']) == float(rows[row['epoch']]['train_loss'])
    reference, state = checkpoint(full / 'last.pth.tar'), checkpoint(resumed / 'last.pth.tar')
    for key, value in reference['state_dict'].items():
        assert torch.equal(state['state_dict'][key], value), key
    assert state['optimizer']['state'][0]['step'] == reference['optimizer']['state'][0]['step'] == 9


def test_train_and_eval_splits_with_other_classes_are_refused(tmp_path, capsys):
    for split, classes in (('train', ('cat', 'dog')), ('test', ('cat', 'bird'))):
        for cls in classes:
            (tmp_path / 'data' / split / cls).mkdir(parents=True)
            for i in range(2):
                Image.new('RGB', (32, 32), (60 * i, 90, 30)).save(tmp_path / 'data' / split / cls / f'{i}.png')
    argv = [*TINY, '--data-dir', tmp_path / 'data', '--val-split', 'test', '--workers', '0', '--batch-size', 2,
            '--warmup-epochs', 0,
            '--epochs', 1, '--output', tmp_path / 'out']
    code = train_mod.main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert code != 0 and err.count('\n') == 1 and 'Traceback' not in err, err
    assert 'different classes' in err and "['bird', 'dog']" in err
    assert not (tmp_path / 'out').exists()


def test_a_failed_swap_restores_the_previous_export(tmp_path, monkeypatch):
    """ --force replaces an export by renames: the old folder aside, the new one in. When the second rename fails,
    the old export is put back as it was and nothing else is left beside it. """
    import timm_structinit.utils.atomic as atomic
    target = tmp_path / 'export'
    hub.export_model(MODEL, target, seed=1, model_kwargs=MODEL_KWARGS)
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    real_rename = os.rename

    def rename(src, dst):
        if Path(src).name.endswith('.tmp') and Path(dst) == target.resolve():
            raise OSError(28, 'No space left on device')
        return real_rename(src, dst)
    monkeypatch.setattr(atomic.os, 'rename', rename)
    with pytest.raises(OSError):
        hub.export_model(MODEL, target, seed=2, model_kwargs=MODEL_KWARGS, force=True)
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ['export']
