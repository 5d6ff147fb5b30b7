""" Every figure the package draws against the epoch ticks whole epochs only: a run's summary.png, compare's
curves.png and the impulse target-mass figure, each drawn for runs of several lengths, the figure caught where it is
saved and its x-axis ticks read. """
import csv

import pytest

from timm_structinit.compare import report
from timm_structinit.diagnostics import attention
from timm_structinit.train import output
from timm_structinit.utils import figures

EPOCHS = [3, 12, 18, 45]  # matplotlib's own ticks fall between epochs on several of these (2.5, 7.5, ...)


def _caught(monkeypatch, module):
    """ The figures `module` saves, kept instead of written. """
    caught = []
    monkeypatch.setattr(module, 'save_figure', lambda fig, out, **kwargs: caught.append(fig) or out)
    return caught


def _epoch_ticks(fig):
    """ The x ticks within the data's range of each axis of `fig` that plots against the epoch. """
    fig.canvas.draw()
    ticks = []
    for ax in fig.axes:
        if 'epoch' in ax.get_xlabel():
            low, high = ax.get_xlim()
            ticks.append([t for t in ax.get_xticks() if low <= t <= high])
    assert ticks, 'no axis against the epoch'
    return ticks


def _whole(ticks):
    return all(float(t).is_integer() for axis in ticks for t in axis) and all(len(axis) >= 2 for axis in ticks)


@pytest.mark.parametrize('epochs', EPOCHS)
def test_a_runs_summary_ticks_whole_epochs(tmp_path, monkeypatch, epochs):
    caught = _caught(monkeypatch, output)
    with open(tmp_path / 'summary.csv', 'w', newline='') as f:
        writer = csv.writer(f)
        writer.writerow(['epoch', 'train_loss', 'eval_loss', 'eval_top1'])
        writer.writerows([e, 2.0 / (e + 1), 2.1 / (e + 1), 50 + e] for e in range(epochs))
    output.plot_summary(str(tmp_path / 'summary.csv'), str(tmp_path / 'summary.png'))
    assert _whole(_epoch_ticks(caught[0])), _epoch_ticks(caught[0])


@pytest.mark.parametrize('epochs', EPOCHS)
def test_compares_curves_tick_whole_epochs(tmp_path, monkeypatch, epochs):
    caught = _caught(monkeypatch, figures)  # the report imports it from there when it draws
    results = [dict(arm=arm, seed=seed, curve=[40.0 + e + seed for e in range(epochs)],
                    curve_epochs=list(range(1, epochs + 1))) for arm in ('plain', 'mimetic') for seed in (0, 1)]
    report._curves(results, ['plain', 'mimetic'], tmp_path / 'curves.png', 'title')
    assert _whole(_epoch_ticks(caught[0])), _epoch_ticks(caught[0])


@pytest.mark.parametrize('epochs', EPOCHS)
def test_the_target_mass_figure_ticks_whole_epochs(tmp_path, monkeypatch, epochs):
    caught = _caught(monkeypatch, attention)
    rows = [dict(epoch=e, layer1=0.1 + 0.01 * e, layer2=0.2) for e in range(epochs + 1)]
    attention.plot_target_mass(rows, str(tmp_path / 'mass.png'))
    assert _whole(_epoch_ticks(caught[0])), _epoch_ticks(caught[0])
