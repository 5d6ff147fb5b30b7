""" The training loop held to timm's definitions, with expected values worked out here: the learning rate of each
epoch under a per-epoch schedule (with evaluations skipped by --val-interval) and under a per-update one with warm-up
and gradient accumulation, an accumulated epoch's shorter last group of batches, the EMA's decay, the metrics logged
for the EMA being the EMA weights' own, and the best checkpoint being the epoch of the best metric, in the metric's
direction, and the EMA's metric when the EMA is evaluated. Each run is a tiny model on a few of scikit-learn's
digits, trained in this process. """
import math
from collections import OrderedDict
from pathlib import Path

import pytest
import timm
import torch
import torch.nn.functional as F
from timm.data import create_transform, resolve_data_config
from timm.utils import ModelEmaV3

from timm_structinit import train as train_mod
from timm_structinit.data import ClassBalancedSubset, DigitsDataset
from timm_structinit.train import epochs as epochs_mod
from timm_structinit.train.config import parse_args
from timm_structinit.train.inputs import RunInputs
from timm_structinit.train.training_run import _restore

from train_command import checkpoint, read_summary

pytestmark = pytest.mark.usefixtures('one_torch_thread')

MODEL = 'vit_tiny_patch2_32_mimetic'
MODEL_KWARGS = dict(embed_dim=16, depth=1, num_heads=2, patch_size=8)
TINY = ['--model', MODEL, '--model-kwargs', *(f'{k}={v}' for k, v in MODEL_KWARGS.items())]
DIGITS = ['--dataset', 'sklearn/digits', '--val-split', 'test', '--workers', '0', '--log-interval', '1000',
          '--seed', '3', '--hflip', '0', '--val-subset', '10', '--train-subset', '32', '--batch-size', '16']
# plain SGD: an update is -lr * gradient
PLAIN_SGD = ['--opt', 'momentum', '--momentum', '0', '--weight-decay', '0']


def train(tmp_path: Path, name: str, *argv) -> Path:
    code = train_mod.main([str(a) for a in (*TINY, *DIGITS, *argv, '--output', tmp_path, '--experiment', name)])
    assert code == 0
    return tmp_path / name


# ------------------------------------------------------------------------------------------------------------------
# the learning rate schedule


def test_a_per_epoch_schedule_steps_once_an_epoch_evaluated_or_not(tmp_path):
    """ --sched step, halving every epoch from 0.1: epoch e trains at 0.1 / 2^e, the epochs --val-interval 2 does not
    evaluate (0, 2) included; the summary logs epochs 1, 3 and the last, 4. """
    run = train(tmp_path, 'step', *PLAIN_SGD, '--sched', 'step', '--decay-epochs', 1, '--decay-rate', 0.5, '--lr', 0.1,
                '--warmup-epochs', 0, '--epochs', 5, '--val-interval', 2)
    rows = read_summary(run / 'summary.csv')
    assert [int(r['epoch']) for r in rows] == [1, 3, 4]
    for row in rows:
        assert float(row['lr']) == pytest.approx(0.1 / 2 ** int(row['epoch']), rel=1e-9), row['epoch']


def test_a_per_update_schedule_counts_updates_with_warmup_and_accumulation(tmp_path):
    """ 48 images in batches of 16 with --grad-accum-steps 2: 3 batches, 2 updates an epoch (the last, single batch
    is one too). With --sched-on-updates the 2 warm-up epochs are 4 updates from 1e-4 to 0.01 (linear), the cosine
    spans the 3 epochs' 6 updates: after epoch e (2(e + 1) updates) the rate is timm's at that update. """
    run = train(tmp_path, 'updates', '--opt', 'adamw', '--sched', 'cosine', '--sched-on-updates', '--lr', 0.01,
                '--min-lr', 0, '--warmup-epochs', 2, '--warmup-lr', 1e-4, '--epochs', 3, '--train-subset', 48,
                '--grad-accum-steps', 2)
    warmup_t, total = 4, 6

    def rate(t):
        if t < warmup_t:
            return 1e-4 + t * (0.01 - 1e-4) / warmup_t
        return 0.0 if t >= total else 0.5 * 0.01 * (1 + math.cos(math.pi * t / total))

    lrs = [float(r['lr']) for r in read_summary(run / 'summary.csv')]
    assert lrs == pytest.approx([rate(2), rate(4), rate(6)], rel=1e-9, abs=1e-12)
    assert checkpoint(run / 'last.pth.tar')['optimizer']['state'][0]['step'].item() == 6


# ------------------------------------------------------------------------------------------------------------------
# gradient accumulation


def test_a_shorter_last_group_of_batches_makes_the_mean_gradient_of_its_own_batches(tmp_path):
    """ 48 images in 3 batches of 16 with --grad-accum-steps 4: one group, shorter than 4, whose update is that of
    the mean loss over its 48 images, the update of one batch of 48 (plain SGD, no augmentation or dropout). """
    common = [*PLAIN_SGD, '--lr', 0.5, '--warmup-epochs', 0, '--no-aug', '--smoothing', 0, '--epochs', 1,
              '--train-subset', 48]
    accumulated = train(tmp_path, 'accumulated', *common, '--batch-size', 16, '--grad-accum-steps', 4)
    whole = train(tmp_path, 'whole', *common, '--batch-size', 48)
    start = train(tmp_path, 'start', *common, '--batch-size', 48, '--lr', 1e-12)  # (nearly) the initial weights
    a, b = checkpoint(accumulated / 'last.pth.tar')['state_dict'], checkpoint(whole / 'last.pth.tar')['state_dict']
    initial = checkpoint(start / 'last.pth.tar')['state_dict']
    for key, value in b.items():
        torch.testing.assert_close(a[key], value, rtol=1e-4, atol=1e-6)
    assert not torch.allclose(b['head.weight'], initial['head.weight'], atol=1e-3)  # the update moved the weights


# ------------------------------------------------------------------------------------------------------------------
# the EMA


@pytest.mark.parametrize('warmup', [False, True])
def test_the_ema_averages_with_the_decay_the_options_give(warmup):
    """ After an update at step 3: ema = d * before + (1 - d) * model, with d = --model-ema-decay, or with
    --model-ema-warmup timm's warm-up decay 1 - (1 + 2)^(-2/3) (step 3 is its second averaging step). """
    args = parse_args([*TINY, *DIGITS, '--model-ema', '--model-ema-decay', '0.9',
                       *(['--model-ema-warmup'] if warmup else [])])
    model = torch.nn.Linear(3, 2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ema = _restore(args, RunInputs(), model, None, None)[1]
    assert isinstance(ema, ModelEmaV3)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    ema.update(model, step=3)
    decay = 1 - 3 ** (-2 / 3) if warmup else 0.9
    for key, value in ema.module.state_dict().items():
        torch.testing.assert_close(value, decay * before[key] + (1 - decay) * model.state_dict()[key])


def _evaluated(state_dict, images, labels):
    model = timm.create_model(MODEL, num_classes=10, **MODEL_KWARGS)
    model.load_state_dict(state_dict)
    model.eval()
    with torch.no_grad():
        output = model(images)
    return float(F.cross_entropy(output, labels)), 100 * float((output.argmax(1) == labels).float().mean())


def test_the_ema_columns_are_the_metrics_of_the_ema_weights(tmp_path):
    """ The last epoch's eval_* and eval_ema_* columns, against the last checkpoint's weights and EMA weights
    evaluated here on the same 40 test images through timm's evaluation transform. """
    run = train(tmp_path, 'ema', '--opt', 'adamw', '--lr', 1e-2, '--warmup-epochs', 0, '--epochs', 2,
                '--train-subset', 64, '--val-subset', 40, '--model-ema', '--model-ema-decay', 0.9)
    last = read_summary(run / 'summary.csv')[-1]
    state = checkpoint(run / 'last.pth.tar')
    test = DigitsDataset('test')
    test.set_img_size(32)
    subset = ClassBalancedSubset(test, 40, seed=0)  # --val-subset 40 with the default --subset-seed
    transform = create_transform(**resolve_data_config({}, model=timm.create_model(MODEL, **MODEL_KWARGS)))
    images = torch.stack([transform(subset[i][0]) for i in range(len(subset))])
    labels = torch.tensor(subset.targets)
    results = {}
    for key, prefix in (('state_dict', 'eval_'), ('state_dict_ema', 'eval_ema_')):
        loss, top1 = results[prefix] = _evaluated(state[key], images, labels)
        assert float(last[prefix + 'loss']) == pytest.approx(loss, abs=2e-5), prefix
        assert float(last[prefix + 'top1']) == pytest.approx(top1, abs=1e-3), prefix
    assert abs(results['eval_'][0] - results['eval_ema_'][0]) > 2e-4  # the two weights tell apart


# ------------------------------------------------------------------------------------------------------------------
# the best checkpoint


# what each evaluation of three epochs returns, for the model and for its EMA
SCRIPT = {'model': {'top1': [30., 50., 40.], 'loss': [2.0, 1.8, 1.5]},
          'ema': {'top1': [20., 10., 60.], 'loss': [1.9, 1.2, 2.1]}}


@pytest.mark.parametrize('extra, epoch, metric', [
    ([], 1, 50.),  # the highest top-1
    (['--eval-metric', 'loss'], 2, 1.5),  # the lowest loss
    (['--model-ema'], 2, 60.),  # the EMA's highest top-1, not the model's (epoch 1)
    (['--model-ema', '--eval-metric', 'loss'], 1, 1.2),
    (['--model-ema', '--model-ema-force-cpu'], 1, 50.),  # an EMA kept on the CPU is not evaluated (timm)
])
def test_the_best_checkpoint_is_the_epoch_of_the_best_metric(tmp_path, monkeypatch, capsys, extra, epoch, metric):
    calls = {'model': 0, 'ema': 0}

    def scripted(model, loader, args, *rest, **kwargs):
        kind = 'ema' if isinstance(model, ModelEmaV3) else 'model'
        index, calls[kind] = calls[kind], calls[kind] + 1
        top1, loss = SCRIPT[kind]['top1'][index], SCRIPT[kind]['loss'][index]
        return OrderedDict(loss=loss, top1=top1, top5=100., count=10)

    monkeypatch.setattr(epochs_mod, 'validate', scripted)
    run = train(tmp_path, 'best', '--warmup-epochs', 0, '--epochs', 3, *extra)
    best = checkpoint(run / 'model_best.pth.tar')
    assert (best['epoch'], best['metric']) == (epoch, metric)
    same = checkpoint(run / f'checkpoint-{epoch}.pth.tar')['state_dict']
    assert all(torch.equal(best['state_dict'][k], v) for k, v in same.items())
    assert f'(epoch {epoch + 1})' in capsys.readouterr().out


@pytest.mark.parametrize('force_cpu', [False, True], ids=['ema-evaluated', 'ema-on-cpu'])
def test_a_run_resumed_at_its_end_reports_the_weights_its_epochs_evaluated(tmp_path, capsys, force_cpu):
    """ A checkpoint that already reached the final epoch is evaluated once more for the closing line: the EMA's
    weights where the epochs evaluated the EMA, the model's where the EMA is kept on the CPU (timm evaluates it only
    on the training device), so the line repeats the last epoch's metric. """
    # an EMA that hardly moves from the start, and a model that learns: their top-1 on 100 images differ
    ema = ['--model-ema', '--model-ema-decay', '0.9999', '--val-subset', 100, '--train-subset', 200,
           *(['--model-ema-force-cpu'] if force_cpu else [])]
    run = train(tmp_path, 'ended', *ema, '--opt', 'adamw', '--lr', 0.01, '--warmup-epochs', 0, '--epochs', 2)
    row = read_summary(run / 'summary.csv')[-1]
    last = float(row['eval_top1' if force_cpu else 'eval_ema_top1'])
    if not force_cpu:
        assert row['eval_top1'] != row['eval_ema_top1']  # the two weights tell apart
    capsys.readouterr()
    code = train_mod.main([str(a) for a in (*TINY, *DIGITS, *ema, '--opt', 'adamw', '--lr', 0.01, '--warmup-epochs',
                                            0, '--epochs', 2, '--resume', run / 'last.pth.tar', '--output', tmp_path,
                                            '--experiment', 'ended')])
    assert code == 0
    done = [line for line in capsys.readouterr().out.splitlines() if line.startswith('Done:')][-1]
    assert f'final top-1 {last:.2f}%' in done, (last, done)
