""" One call of `compare` once its plan is checked: the runs trained side by side (`runner`), each on its share of
the cores (`cores`), each finished run's result written from its summary, the answer written from every result in the
folder (`report`), and a stop turned into one line that says how to continue.

The exit status: 0 when every run of the plan has finished, 1 when a run failed, `UNFINISHED` (3) when the call ended
with runs not finished (not started or stopped at `--time-limit`: the same command trains what is missing), 128 + N
when signal N stopped it, 2 for bad input (before any work). """
import argparse
import datetime
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..utils.atomic import atomic_file
from ..utils.words import counted
from .cores import CoreShare
from .estimate import RunEstimate
from .plan import Plan, folder_name, run_name
from .records import (ELAPSED_FILE, RESULT_FILE, SETTINGS_FILE, check_result, read_elapsed, read_result, read_results,
                      read_settings)
from .report import result_record, test_split_line, write_report
from .runner import RunSpec, read_summary, run_all

__all__ = ['train_and_report', 'report_only', 'device_record', 'continue_command', 'UNFINISHED']

PROG = 'timm-structinit compare'
UNFINISHED = 3  # runs left unfinished (the time limit): neither a failure nor a complete comparison
# the variables of the environment that set how the runs train (their threads, OpenMP's waiting, the GPUs they
# see), given again in the command that continues a stopped comparison
RUN_ENVIRONMENT = ('OMP_NUM_THREADS', 'MKL_NUM_THREADS', 'OMP_WAIT_POLICY', 'GOMP_SPINCOUNT', 'KMP_BLOCKTIME',
                   'CUDA_VISIBLE_DEVICES')


def device_record(device: str) -> Dict[str, Any]:
    """ Where runs ran: the device's name and the versions that ran them. """
    import timm
    import torch
    if device.startswith('cuda') and torch.cuda.is_available():
        name = torch.cuda.get_device_name(torch.device(device))
    else:
        name = f'CPU ({platform.machine()}, {os.cpu_count()} cores)'
    return dict(device=name, torch=torch.__version__, timm=timm.__version__, python=platform.python_version())


def _finish(arm_of: Dict[str, Any], device: Dict[str, Any]):
    def finish(spec: RunSpec, seconds: float, resumed: bool) -> dict:
        arm, seed = arm_of[spec.name]
        rows = [r for r in read_summary(spec.folder / 'summary.csv') if 'eval_top1' in r]
        if not rows:
            raise ValueError(f'{spec.folder / "summary.csv"} holds no evaluation')
        parts = (read_elapsed(spec.folder / ELAPSED_FILE) or (seconds, 1))[1]
        result = result_record(arm.label, seed, rows, seconds, resumed, spec.command, device,
                               datetime.datetime.now().isoformat(timespec='seconds'), parts)
        result = check_result(spec.folder / RESULT_FILE, result)  # what a later call reads back, held to it now
        with atomic_file(spec.folder / RESULT_FILE) as tmp:
            tmp.write_text(json.dumps(result, indent=1) + '\n')
        return result
    return finish


def _header(settings: Dict[str, Any], results: List[dict]) -> List[str]:
    dates = sorted(r['date'][:10] for r in results)
    devices = sorted({f'{r.get("device", "?")}, torch {r.get("torch", "?")}, timm {r.get("timm", "?")}'
                      for r in results})
    kwargs = ' '.join(f'{k}={v}' for k, v in settings['model_kwargs'].items())
    built = settings.get('model_built')  # recorded since the header names the model the runs build
    model = f'- model every run builds: `{built}`' if built else f'- base model: `{settings["model"]}` {kwargs}'
    return [model.rstrip(),
            f'- training options of every run: `{shlex.join(settings["train_options"])}`',
            f'- runs: {len(results)}' + (f', {dates[0]} to {dates[-1]}' if dates else ''),
            *[f'- device: {d}' for d in devices]]


def _finished(out: Path, settings: Dict[str, Any]) -> List[dict]:
    """ The results of the runs finished in `out` of the arms its settings name. """
    return [r for r in read_results(out / 'runs', folder_name) if r['arm'] in settings['arms']]


def _write(out: Path, settings: Dict[str, Any], results: Optional[List[dict]] = None) -> Dict[str, Any]:
    """ The answer from every finished run in `out` (`results`, when the caller has read them); a stop while it is
    written says how to finish it (its files may then be missing, or from before). """
    results = _finished(out, settings) if results is None else results
    try:
        return write_report(out, settings, settings['arms'], settings['reference'], results,
                            _header(settings, results))
    except KeyboardInterrupt as e:
        e.hint = (f' while writing the answer in {out} (results.json, results.md and curves.png may be missing or '
                  f'from before); finish it with: {PROG} --out {shlex.quote(str(out))} --report')
        raise


def partial(out: Path, settings: Dict[str, Any], results: List[dict]) -> List[str]:
    """ What a folder's comparison lacks, in words, given its finished runs' `results`: each arm without a finished
    run, each arm with fewer finished seeds than another, each run begun and not finished; [] when it is whole. """
    seeds = {arm: sorted(r['seed'] for r in results if r['arm'] == arm) for arm in settings['arms']}
    most = max(len(s) for s in seeds.values())
    lacking = [f'no finished run of {", ".join(a for a, s in seeds.items() if not s)}'] \
        if any(not s for s in seeds.values()) else []
    fewer = [f'{a} {len(s)}' for a, s in seeds.items() if 0 < len(s) < most]
    if fewer:
        lacking.append(f'fewer seeds than {most} in {", ".join(fewer)}')
    begun = sorted(p.name for p in (out / 'runs').glob('*') if p.is_dir() and not (p / RESULT_FILE).exists())
    if begun:
        lacking.append(f'runs begun and not finished: {", ".join(begun)}')
    return lacking



def _print_answer(out: Path, summary: Dict[str, Any]) -> None:
    for arm, s in summary['stats'].items():
        gain = summary['gains'].get(arm)
        tail = '' if gain is None else f'  gain {gain["gain"]:+.2f}' + (
            f' ± {gain["half_width"]:.2f}' if gain['half_width'] is not None else '')
        print(f'{arm:24s} {counted(s["seeds"], "seed"):8s}  final top-1 {s["final_mean"]:.2f}  best '
              f'{s["best_mean"]:.2f}{tail}')
    split = test_split_line(summary.get('test_split'))
    if split:
        print(split)
    print(summary['decision'])
    print(f'the answer: {out / "results.md"} (and results.json, curves.png)')


def report_only(out: Path) -> int:
    from ..errors import ConfigError
    settings = read_settings(out / SETTINGS_FILE)
    if settings is None:
        raise ConfigError(f'--report: {out} holds no comparison ({out / SETTINGS_FILE} is missing); train one there '
                          f'first')
    results = _finished(out, settings)
    _print_answer(out, _write(out, settings, results))
    lacking = partial(out, settings, results)
    if lacking:
        print(f'{PROG}: the comparison in {out} is partial ({"; ".join(lacking)}): the answer compares the runs '
              f'finished so far; the compare command that made it trains the rest (exit status {UNFINISHED})',
              file=sys.stderr)
        return UNFINISHED
    return 0


def continue_command(argv: List[str], environ: Dict[str, str] = os.environ) -> str:
    """ The command that continues this comparison: its arguments, after the variables of `RUN_ENVIRONMENT` it
    was started with (without them, pasted, the runs would train otherwise, e.g. on another thread count). """
    assignments = [f'{name}={shlex.quote(environ[name])}' for name in RUN_ENVIRONMENT if name in environ]
    return ' '.join([*assignments, PROG, shlex.join(argv)])


def _minutes(seconds: float) -> str:
    return f'{seconds / 60:.1f} min'


def _time_line(pending: int, concurrent: int, estimate: Optional[RunEstimate], finished: List[dict]) -> str:
    """ What the runs left will take: by the runs that finished once any has, else by the estimate. """
    if finished:
        seconds = [r['seconds'] for r in finished]
        per_run = sum(seconds) / len(seconds)
        runs = f'{len(seconds)} finished run{"s" if len(seconds) > 1 else ""}'
        how = (f'about {_minutes(per_run)} per run, as the {runs} took ({_minutes(min(seconds))} to '
               f'{_minutes(max(seconds))})')
    else:
        per_arm = sorted(estimate.per_arm.values())
        per_run = sum(per_arm) / len(per_arm)
        span = _minutes(per_arm[0]) if per_arm[-1] < 1.1 * per_arm[0] else \
            f'{per_arm[0] / 60:.1f} to {_minutes(per_arm[-1])}'
        how = f'about {span} per run, estimated here ({estimate.describe()})'
    if not pending:
        return f'time: nothing left to train; {how}'
    waves = -(-pending // concurrent)
    return f'time: {how}; about {_minutes(waves * per_run)} for the {pending} run{"s" if pending > 1 else ""} left'


def train_and_report(args: argparse.Namespace, out: Path, checked, share: CoreShare,
                     estimate: Optional[RunEstimate], finished: List[dict]) -> int:
    from ..errors import exit_status
    plan: Plan = checked.plan
    settings = read_settings(out / SETTINGS_FILE)
    first_args = next(iter(checked.arm_args.values()))[0]
    epochs = first_args.epochs + first_args.cooldown_epochs
    arm_of = {run_name(arm, seed): (arm, seed) for arm, seed in plan.runs()}
    runs_dir = out / 'runs'
    share_options = share.run_options(first_args.workers)
    specs = [RunSpec(run_name(arm, seed), plan.command(arm, seed, str(runs_dir)) + share_options,
                     runs_dir / run_name(arm, seed), epochs) for arm, seed in plan.runs()]
    pending = sum(not (s.folder / RESULT_FILE).is_file() for s in specs)
    images = checked.images
    print(f'{counted(len(specs), "run")} ({counted(len(plan.arms), "arm")} x {counted(plan.seeds, "seed")}) of '
          f'{checked.model_built} on {images[0]} training and {images[1]} evaluation images, '
          f'{counted(epochs, "epoch")} each', flush=True)
    print(f'{args.concurrent} at a time, {share.description(first_args.workers)}', flush=True)
    print(_time_line(pending, args.concurrent, estimate, finished), flush=True)
    deadline = time.monotonic() + args.time_limit if args.time_limit else None
    finish = _finish(arm_of, device_record(first_args.device))

    def show(line: str) -> None:
        print(line, flush=True)
    try:
        outcome = run_all(specs, finish, args.concurrent, deadline, estimate.seconds if estimate else None,
                          runs_dir, show, progress_every=30.0 if sys.stdout.isatty() else None,
                          read_result=lambda path: read_result(path, folder_name))
    except KeyboardInterrupt as e:
        _write(out, settings)  # the answer from the runs finished so far
        kept = len(getattr(e, 'outcome').finished) if hasattr(e, 'outcome') else 0
        print(f'{PROG}: stopped ({e.args[0] if e.args else "SIGINT"}): {kept} of {len(specs)} runs finished and kept, '
              f'the stopped ones keep their checkpoints; continue with: {continue_command(sys.argv[2:])}',
              file=sys.stderr)
        return exit_status(e)
    summary = _write(out, settings)
    _print_answer(out, summary)
    unfinished = list(outcome.failed) + outcome.stopped + outcome.not_started
    if unfinished:
        status = 1 if outcome.failed else UNFINISHED
        print(f'{PROG}: {len(unfinished)} of {len(specs)} runs not finished ({", ".join(unfinished)}); the same '
              f'command trains what is missing (exit status {status})', file=sys.stderr)
        return status
    return 0
