""" The answer of a comparison, from the results of its runs alone (so that `--report` rewrites the same files): a
table per arm (final and best top-1 over its seeds, the gain over the plain init with its 95% Welch interval), the
test split's chance and majority-class top-1 (what runs that learned nothing score), the decision line, each run's
command, device, versions and time, as `results.json` and `results.md`, and the curves (top-1 per evaluation, a
colour per arm, the seeds' range as a band) as `curves.png`. """
import json
import shlex
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..utils.atomic import atomic_file
from ..utils.words import counted
from .stats import CONFIDENCE, arm_stats, decide, not_learned, welch_gain

__all__ = ['summarize', 'write_report', 'result_record', 'test_split_line']


def result_record(arm: str, seed: int, rows: List[dict], seconds: float, resumed: bool, command: List[str],
                  device: Dict[str, Any], date: str, parts: int = 1) -> Dict[str, Any]:
    """ A finished run's result from its summary rows (one per evaluation); `seconds` counts every part of a run
    that was stopped and resumed (`parts` of them); `threads`, the torch threads its epochs trained with, in the
    order they came (a resumed run may have taken another count). """
    threads = list(dict.fromkeys(int(r['train_threads']) for r in rows if 'train_threads' in r))
    return dict(
        arm=arm, seed=seed, final_top1=rows[-1]['eval_top1'], best_top1=max(r['eval_top1'] for r in rows),
        epochs=int(rows[-1]['epoch']) + 1, curve=[r['eval_top1'] for r in rows],
        curve_epochs=[int(r['epoch']) + 1 for r in rows], train_loss=[r['train_loss'] for r in rows],
        seconds=round(seconds, 1), resumed=resumed, parts=parts, command=command, date=date,
        **({'threads': threads} if threads else {}), **device)


def test_split_line(test_split: Optional[Dict[str, Any]]) -> str:
    """ What the test split gives runs that learn nothing, on one line ('' when not recorded). """
    if not test_split:
        return ''
    return (f'test split: {test_split["images"]:,} images of {test_split["classes"]} classes; chance '
            f'{test_split["chance"]:.2f}% top-1, majority class {test_split["majority"]:.2f}% (always answering '
            f'the largest class)')


def summarize(arms: List[str], results: List[Dict[str, Any]], reference: str,
              test_split: Optional[Dict[str, Any]] = None, train_subset: Optional[int] = None) -> Dict[str, Any]:
    """ Per arm, its statistics and gain over `reference`; the decision, which says that the runs did not learn
    when no arm beats the majority class of `test_split` (its images, classes, chance and majority top-1) beyond
    its seed spread (`train_subset`: the images of the training split's subset the runs took, None for the whole
    split). Arms without results are left out. """
    by_arm = {arm: [r for r in results if r['arm'] == arm] for arm in arms}
    by_arm = {arm: sorted(rs, key=lambda r: r['seed']) for arm, rs in by_arm.items() if rs}
    stats = {arm: arm_stats(arm, [r['final_top1'] for r in rs], [r['best_top1'] for r in rs])
             for arm, rs in by_arm.items()}
    gains = [welch_gain(arm, [r['final_top1'] for r in rs], [r['final_top1'] for r in by_arm[reference]])
             for arm, rs in by_arm.items() if arm != reference and reference in by_arm]
    seeds = {arm: len(rs) for arm, rs in by_arm.items()}
    seconds = [r['seconds'] for r in results if r.get('seconds')]
    run_seconds = sum(seconds) / len(seconds) if seconds else None  # a run's, for the time more seeds would take
    unlearned = not_learned(list(stats.values()), test_split['chance'], test_split['majority'],
                            train_subset) if test_split else None
    return dict(reference=reference, stats={a: vars(s) for a, s in stats.items()},
                gains={g.arm: dict(gain=g.gain, half_width=g.half_width, df=g.df, verdict=g.verdict,
                                   margin=g.margin, seeds_needed=g.seeds_needed) for g in gains},
                test_split=test_split, learned=unlearned is None,
                decision=unlearned or (decide(gains, seeds, reference, run_seconds) if reference in by_arm else
                                       f'the {reference} arm has no result yet: nothing to compare against'),
                method=f'gain: difference of the mean final top-1 over seeds; ±: half-width of its {CONFIDENCE:.0%} '
                       f'interval by Welch\'s t (unequal variances, Welch-Satterthwaite degrees of freedom); an arm '
                       f'is better or worse when the interval excludes zero')


def _fmt(mean: float, sd: Optional[float]) -> str:
    return f'{mean:.2f} ± {sd:.2f}' if sd is not None else f'{mean:.2f}'


def _markdown(settings: Dict[str, Any], summary: Dict[str, Any], results: List[Dict[str, Any]],
              header: List[str]) -> List[str]:
    split = test_split_line(summary.get('test_split'))
    lines = ['# Which init: the comparison', '', *header, *([f'- {split}'] if split else []), '',
             f'**{summary["decision"]}**', '',
             '| arm | seeds | final top-1 | best top-1 | gain over ' + summary['reference'] + ' (final) | verdict |',
             '|---|---|---|---|---|---|']
    for arm, s in summary['stats'].items():
        gain = summary['gains'].get(arm)
        cell = '' if gain is None else (f'{gain["gain"]:+.2f}' + (f' ± {gain["half_width"]:.2f}'
                                                                   if gain['half_width'] is not None else ''))
        lines.append(f'| {arm} | {s["seeds"]} | {_fmt(s["final_mean"], s["final_sd"])} | '
                     f'{_fmt(s["best_mean"], s["best_sd"])} | {cell} | {"" if gain is None else gain["verdict"]} |')
    lines += ['', f'Spread: mean ± sample standard deviation over seeds. {summary["method"]}.', '',
              '## Runs', '', '| run | final | best | epochs | minutes | device | command |', '|---|---|---|---|---|---|---|']
    for r in sorted(results, key=lambda r: (r['arm'], r['seed'])):
        lines.append(f'| {r["arm"]} seed {r["seed"]} | {r["final_top1"]:.2f} | {r["best_top1"]:.2f} | {r["epochs"]} '
                     f'| {r["seconds"] / 60:.1f}{_parts(r)} | {r.get("device", "")}, torch {r.get("torch", "")}'
                     f'{_threads(r)} | `timm-structinit-train {shlex.join(r["command"][3:])}` |')
    return lines


def _threads(result: Dict[str, Any]) -> str:
    """ The torch threads a run trained with ('' where its result does not record them). """
    threads = result.get('threads') or []
    return f', {"/".join(map(str, threads))} thread{"s" if threads != [1] else ""}' if threads else ''


def _parts(result: Dict[str, Any]) -> str:
    """ How many calls trained a resumed run (its minutes count them all). """
    parts = result.get('parts', 1)
    return f' ({parts} parts)' if parts > 1 else ''


def _curves(results: List[Dict[str, Any]], arms: List[str], out: Path, title: str) -> Optional[Path]:
    """ Top-1 per evaluation, a colour per arm: the mean over seeds, and their range as a band; None without
    matplotlib (the figure is the one optional part of the answer). """
    if not results:
        return None
    try:
        from ..utils.figures import epoch_axis, new_figure, save_figure
        fig = new_figure(figsize=(7, 4.5), dpi=100)
    except ImportError:
        return None
    ax = fig.subplots()
    for i, arm in enumerate(arms):
        runs = [r for r in results if r['arm'] == arm]
        if not runs:
            continue
        length = min(len(r['curve']) for r in runs)
        epochs = runs[0]['curve_epochs'][:length]
        columns = list(zip(*(r['curve'][:length] for r in runs)))
        color = f'C{i % 10}'
        ax.plot(epochs, [sum(c) / len(c) for c in columns], color=color, label=f'{arm} ({counted(len(runs), "seed")})')
        if len(runs) > 1:
            ax.fill_between(epochs, [min(c) for c in columns], [max(c) for c in columns], color=color, alpha=0.2)
    epoch_axis(ax), ax.set_ylabel('top-1 (%)')
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3), ax.legend(fontsize=8)
    return save_figure(fig, out)


def write_report(out_dir: Path, settings: Dict[str, Any], arms: List[str], reference: str,
                 results: List[Dict[str, Any]], header: List[str]) -> Dict[str, Any]:
    """ results.json, results.md and curves.png in `out_dir`; returns the summary. """
    summary = summarize(arms, results, reference, settings.get('test_split'), settings.get('train_subset'))
    document = dict(settings=settings, arms=arms, **summary, runs=sorted(results, key=lambda r: (r['arm'], r['seed'])))
    with atomic_file(out_dir / 'results.json') as tmp:
        tmp.write_text(json.dumps(document, indent=1) + '\n')
    figure = _curves(results, arms, out_dir / 'curves.png', f'{settings["model"]}: top-1 per evaluation, the '
                                                            f'seeds\' range as a band')
    lines = _markdown(settings, summary, results, header)
    lines += ['', '![top-1 per evaluation](curves.png)' if figure else
              '(no curves: matplotlib is not installed; pip install "timm-structinit[plots]")']
    with atomic_file(out_dir / 'results.md') as tmp:
        tmp.write_text('\n'.join(lines) + '\n')
    return summary
