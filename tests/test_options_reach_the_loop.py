""" Training options off their defaults, each checked where it acts, against its definition restated here: gradient
clipping by norm, by value and adaptively (AGC, Brock et al. 2021, as timm defines it), gradient accumulation with
a shorter last group, the epoch's loss weighted by images, top-5 on fewer than five classes, --mixup-off-epoch at
its boundary on every loader, a built-in split named in capitals, and the same options spelled otherwise on resume. """
import argparse
import math

import pytest
import torch
import torch.nn as nn

from timm_structinit.train import loop
from timm_structinit.train.epochs import updates_in
from train_command import FAST, TINY, run_main, two_class_folder

pytestmark = pytest.mark.usefixtures('one_torch_thread')


def _args(**changes):
    args = dict(grad_accum_steps=1, no_prefetcher=True, clip_grad=None, clip_mode='norm', log_interval=1000,
                distributed=False, world_size=1)
    args.update(changes)
    return argparse.Namespace(**args)


def _model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()


def _batches(count, size, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(size, 3, generator=g, dtype=torch.float64) * 3, torch.randint(0, 2, (size,), generator=g))
            for _ in range(count)]


def _gradients(model, batches, weights):
    """ The gradient of sum_i weights[i] * mean loss of batch i, by autograd on a copy of `model`. """
    import copy
    twin = copy.deepcopy(model)
    loss = sum(w * nn.functional.cross_entropy(twin(x), y) for w, (x, y) in zip(weights, batches))
    loss.backward()
    return [p.grad.clone() for p in twin.parameters()]


def _unitwise_norm(x):
    return x.norm() if x.ndim <= 1 else x.norm(dim=tuple(range(1, x.ndim)), keepdim=True)


def _clipped(grads, params, mode, c):
    """ The clipping each mode is defined as: the gradients scaled so their joint 2-norm is at most c (norm); each
    entry within [-c, c] (value); each unit's (row's) gradient at most c times the unit's weight norm, floored at
    1e-3 (AGC). """
    if mode == 'norm':
        total = torch.sqrt(sum((g * g).sum() for g in grads))
        return [g * min(1.0, c / (float(total) + 1e-6)) for g in grads]
    if mode == 'value':
        return [g.clamp(-c, c) for g in grads]
    out = []
    for g, p in zip(grads, params):
        limit = _unitwise_norm(p).clamp(min=1e-3) * c
        norm = _unitwise_norm(g)
        out.append(torch.where(norm < limit, g, g * (limit / norm.clamp(min=1e-6))))
    return out


@pytest.mark.parametrize('mode, c', [('norm', 0.05), ('value', 0.01), ('agc', 0.02), ('norm', 1e3)])
def test_each_clipping_mode_clips_the_update_as_defined(mode, c):
    """ One SGD step of learning rate 1 with --clip-grad c --clip-mode MODE: the weights move by exactly minus the
    gradient clipped as the mode is defined (a large c leaves it whole). """
    model, batches = _model(), _batches(1, 8)
    before = [p.detach().clone() for p in model.parameters()]
    expected = _clipped(_gradients(model, batches, [1.0]), before, mode, c)
    if c < 1:
        assert any(not torch.allclose(e, g) for e, g in zip(expected, _gradients(model, batches, [1.0])))
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    loop.train_one_epoch(0, model, batches, optimizer, nn.CrossEntropyLoss(), _args(clip_grad=c, clip_mode=mode),
                         torch.device('cpu'))
    for p, b, e in zip(model.parameters(), before, expected):
        torch.testing.assert_close(b - p.detach(), e, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize('batches, accum', [(5, 2), (7, 3), (6, 3), (4, 1), (3, 5)])
def test_accumulated_updates_take_every_batch_the_last_shorter_group_too(batches, accum):
    """ N batches, --grad-accum-steps A: ceil(N / A) updates, each the mean of its group's batch gradients; the
    last group, shorter when A does not divide N, is an update of its own, averaged over its own batches. """
    model, data = _model(), _batches(batches, 4)
    steps = []

    class Recording(torch.optim.SGD):
        def step(self, closure=None):
            steps.append([p.grad.clone() for p in self.param_groups[0]['params']])
            return super().step(closure)
    optimizer = Recording(model.parameters(), lr=0.0)  # no move: every gradient is taken at the same weights
    _, updates = loop.train_one_epoch(0, model, data, optimizer, nn.CrossEntropyLoss(),
                                      _args(grad_accum_steps=accum), torch.device('cpu'))
    groups = [data[i:i + accum] for i in range(0, batches, accum)]
    assert updates == len(steps) == len(groups) == updates_in(batches, accum) == math.ceil(batches / accum)
    for got, group in zip(steps, groups):
        expected = _gradients(model, group, [1.0 / len(group)] * len(group))
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize('batches, accum, updates', [(5, 2, 9), (7, 3, 9), (4, 1, 12)])
def test_a_run_resumed_at_epoch_3_counts_the_updates_of_its_3_finished_epochs(monkeypatch, batches, accum, updates):
    """ What the schedule and the EMA's warm-up step from: resumed at epoch 3, a run whose epochs are N batches in
    groups of A has made 3 ceil(N / A) updates (5 batches by 2: 9; 7 by 3: 9; 4 by 1: 12), not 3 N. """
    from timm_structinit.train import epochs as epochs_mod

    class Recorded(Exception):
        pass

    def first_epoch(epoch, *args, num_updates, **kwargs):
        raise Recorded(epoch, num_updates)

    monkeypatch.setattr(epochs_mod, 'train_one_epoch', first_epoch)
    monkeypatch.setattr(epochs_mod, '_stopped', lambda *args: None)
    args = _args(grad_accum_steps=accum, seed=0, rank=0, mixup_off_epoch=0, loader='timm')
    run = epochs_mod.Run(args, torch.device('cpu'), _model(), None, None, None, None, (_batches(batches, 2), None),
                         None, nn.CrossEntropyLoss(), None, start_epoch=3, num_epochs=5)
    with pytest.raises(Recorded) as recorded:
        epochs_mod.run_epochs(run)
    assert recorded.value.args == (3, updates)


def test_the_epochs_loss_is_the_mean_over_images():
    """ Batches of 4, 4 and 2 images: the epoch's loss weighs each batch's mean loss by its images. """
    model = _model()
    data = _batches(2, 4) + _batches(1, 2, seed=5)
    with torch.no_grad():
        losses = [float(nn.functional.cross_entropy(model(x), y)) for x, y in data]
    metrics, _ = loop.train_one_epoch(0, model, data, torch.optim.SGD(model.parameters(), lr=0.0),
                                      nn.CrossEntropyLoss(), _args(), torch.device('cpu'))
    assert metrics['loss'] == pytest.approx((4 * losses[0] + 4 * losses[1] + 2 * losses[2]) / 10, rel=1e-12)


def test_top1_and_top5_are_counted_from_the_logits():
    """ Hand-made logits over 8 classes for 4 images: the target ranks 1st, 3rd, 6th and 2nd, so top-1 is 25% and
    top-5 75%; over 3 classes top-5 is top-3 (the target 1st, 3rd, 3rd, 2nd: 100%). """
    class Fixed(nn.Module):
        def __init__(self, logits):
            super().__init__()
            self.logits = logits

        def forward(self, x):
            return self.logits[x.long().view(-1)]
    order = [[0, 1, 2, 3, 4, 5, 6, 7], [1, 2, 0, 3, 4, 5, 6, 7], [1, 2, 3, 4, 5, 0, 6, 7], [1, 0, 2, 3, 4, 5, 6, 7]]
    logits = torch.zeros(4, 8)
    for image, ranking in enumerate(order):
        for rank, cls in enumerate(ranking):
            logits[image, cls] = 10.0 - rank
    loader = [(torch.arange(4).float()[:, None], torch.zeros(4, dtype=torch.long))]
    got = loop.validate(Fixed(logits), loader, _args(), torch.device('cpu'), num_classes=8)
    assert (got['top1'], got['top5'], got['count']) == (25.0, 75.0, 4)
    three = loop.validate(Fixed(logits[:, :3]), loader, _args(), torch.device('cpu'), num_classes=3)
    assert (three['top1'], three['top5']) == (25.0, 100.0)


# --- options through the training command ---------------------------------------------------------------------------

@pytest.fixture(scope='module')
def data(tmp_path_factory):
    return two_class_folder(tmp_path_factory.mktemp('data'), per_class=8, size=32)


@pytest.mark.parametrize('loader', [['--loader', 'timm'], ['--loader', 'timm', '--no-prefetcher'],
                                    ['--loader', 'device']])
def test_mixup_stops_at_the_epoch_mixup_off_epoch_names(data, tmp_path, capsys, monkeypatch, loader):
    """ --mixup-off-epoch 2 over 3 epochs: epochs 1 and 2 (0 and 1 counted from 0) train on mixed targets, epoch 3
    (2, the one named) on plain one-hot ones, on each loader. """
    from timm_structinit.train import epochs as epochs_mod
    mixed = {}
    real = epochs_mod.train_one_epoch

    def recording(epoch, model, loader_, optimizer, loss_fn, *args, **kwargs):
        def loss(output, target):
            if target.ndim == 2:  # soft targets: mixed where no entry is a whole 1
                mixed[epoch] = mixed.get(epoch, False) or bool((target.max(-1).values < 1 - 1e-6).any())
            else:
                mixed.setdefault(epoch, False)
            return loss_fn(output, target)
        return real(epoch, model, loader_, optimizer, loss, *args, **kwargs)
    monkeypatch.setattr(epochs_mod, 'train_one_epoch', recording)
    code, out, err = run_main([*TINY, *FAST, '--data-dir', data, '--val-split', 'test', '--epochs', 3, '--mixup', 1.0,
                               '--mixup-off-epoch', 2, '--smoothing', 0, '--output', tmp_path, *loader], capsys)
    assert code == 0, err
    assert mixed == {0: True, 1: True, 2: False}, mixed


def test_a_built_in_split_named_in_capitals_is_that_split(tmp_path, capsys):
    """ `--val-split TEST` on sklearn/digits is its test part, as `test` is: the same images evaluated. """
    from timm_structinit.train import parse_args
    from timm_structinit.train.build import build_datasets
    counts = []
    for split in ('test', 'TEST', 'Test'):
        args = parse_args(['--dataset', 'sklearn/digits', '--val-split', split, *TINY])
        train, evaluation = build_datasets(args)
        counts.append((len(train), len(evaluation), [int(evaluation[i][1]) for i in range(0, len(evaluation), 37)]))
    assert counts[0] == counts[1] == counts[2], counts
