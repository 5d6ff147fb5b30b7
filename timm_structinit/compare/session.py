""" One call of `compare` once its plan is checked: the runs trained side by side (`runner`), each finished run's
result written from its summary, the answer written from every result in the folder (`report`), and a stop turned
into one line that says how to continue. """
import argparse
import datetime
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ..utils.atomic import atomic_file
from .plan import Plan, run_name
from .report import result_record, write_report
from .runner import RESULT_FILE, RunSpec, read_summary, run_all

__all__ = ['train_and_report', 'report_only', 'estimate_run_seconds', 'device_record']

PROG = 'timm-structinit compare'


def device_record(device: str) -> Dict[str, Any]:
    """ Where runs ran: the device's name and the versions that ran them. """
    import timm
    import torch
    if device.startswith('cuda') and torch.cuda.is_available():
        name = torch.cuda.get_device_name(torch.device(device))
    else:
        name = f'CPU ({platform.machine()}, {os.cpu_count()} cores)'
    return dict(device=name, torch=torch.__version__, timm=timm.__version__, python=platform.python_version())


def startup_seconds() -> float:
    """ What a run's process takes before its first step begins to count: a fresh interpreter importing the training
    command (torch and timm with it), timed once. """
    import subprocess
    start = time.perf_counter()
    subprocess.run([sys.executable, '-c', 'import timm_structinit.train'], capture_output=True, timeout=600)
    return time.perf_counter() - start


def estimate_run_seconds(train_args: argparse.Namespace, images: Tuple[int, int]) -> Tuple[float, float]:
    """ A run's seconds and, of them, its process's start-up: the start-up timed (`startup_seconds`), the training
    from three steps of the model `train_args` builds (the first arm's run) on a synthetic batch on the device (the
    data path and the evaluations counted at the step's rate). What `--time-limit` is checked against. """
    import timm
    import torch
    from ..train.inputs import model_factory_kwargs
    device = torch.device(train_args.device)
    # the model as the run builds it: the recipe's model arguments are merged into the arm's by then
    kwargs = {'num_classes': 10, **model_factory_kwargs(train_args)}
    model = timm.create_model(train_args.model, **kwargs).to(device)
    optimizer = torch.optim.AdamW(model.parameters())
    size = getattr(model.patch_embed, 'img_size', (32, 32)) if hasattr(model, 'patch_embed') else (32, 32)
    x = torch.randn(train_args.batch_size, kwargs.get('in_chans', 3), *size, device=device)
    y = torch.randint(0, 2, (train_args.batch_size,), device=device)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if device.type == 'cuda':
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    rate = train_args.batch_size / min(times[1:])
    epochs = train_args.epochs + train_args.cooldown_epochs
    evaluations = -(-epochs // train_args.val_interval)
    startup = startup_seconds()
    return startup + 1.2 * (epochs * images[0] + evaluations * images[1] / 3) / rate, startup  # forward: a third


def _finish(plan: Plan, arm_of: Dict[str, Any], device: Dict[str, Any]):
    def finish(spec: RunSpec, seconds: float, resumed: bool) -> dict:
        arm, seed = arm_of[spec.name]
        rows = [r for r in read_summary(spec.folder / 'summary.csv') if 'eval_top1' in r]
        if not rows:
            raise ValueError(f'{spec.folder / "summary.csv"} holds no evaluation')
        result = result_record(arm.label, seed, rows, seconds, resumed, spec.command, device,
                               datetime.datetime.now().isoformat(timespec='seconds'))
        with atomic_file(spec.folder / RESULT_FILE) as tmp:
            tmp.write_text(json.dumps(result, indent=1) + '\n')
        return result
    return finish


def _header(settings: Dict[str, Any], results: List[dict]) -> List[str]:
    dates = sorted(r['date'][:10] for r in results)
    devices = sorted({f'{r.get("device", "?")}, torch {r.get("torch", "?")}, timm {r.get("timm", "?")}'
                      for r in results})
    kwargs = ' '.join(f'{k}={v}' for k, v in settings['model_kwargs'].items())
    return [f'- base model: `{settings["model"]}` {kwargs}'.rstrip(),
            f'- training options of every run: `{shlex.join(settings["train_options"])}`',
            f'- runs: {len(results)}' + (f', {dates[0]} to {dates[-1]}' if dates else ''),
            *[f'- device: {d}' for d in devices]]


def _write(out: Path, settings: Dict[str, Any], arms: List[str], reference: str) -> Dict[str, Any]:
    results = [json.loads(p.read_text()) for p in sorted((out / 'runs').glob(f'*/{RESULT_FILE}'))]
    results = [r for r in results if r['arm'] in arms]
    return write_report(out, settings, arms, reference, results, _header(settings, results))


def _print_answer(out: Path, summary: Dict[str, Any]) -> None:
    for arm, s in summary['stats'].items():
        gain = summary['gains'].get(arm)
        tail = '' if gain is None else f'  gain {gain["gain"]:+.2f}' + (
            f' ± {gain["half_width"]:.2f}' if gain['half_width'] is not None else '')
        print(f'{arm:24s} {s["seeds"]} seed(s)  final top-1 {s["final_mean"]:.2f}  best {s["best_mean"]:.2f}{tail}')
    print(summary['decision'])
    print(f'the answer: {out / "results.md"} (and results.json, curves.png)')


def report_only(out: Path) -> int:
    from ..errors import ConfigError
    path = out / 'compare.json'
    if not path.is_file():
        raise ConfigError(f'--report: {out} holds no comparison ({path} is missing); train one there first')
    settings = json.loads(path.read_text())
    _print_answer(out, _write(out, settings, settings['arms'], settings['reference']))
    return 0


def train_and_report(args: argparse.Namespace, out: Path, plan: Plan, train_args: argparse.Namespace,
                     images: Tuple[int, int], estimate: Optional[float]) -> int:
    from ..errors import exit_status
    settings = json.loads((out / 'compare.json').read_text())
    epochs = train_args.epochs + train_args.cooldown_epochs
    arm_of = {run_name(arm, seed): (arm, seed) for arm, seed in plan.runs()}
    runs_dir = out / 'runs'
    specs = [RunSpec(run_name(arm, seed), plan.command(arm, seed, str(runs_dir)), runs_dir / run_name(arm, seed),
                     epochs) for arm, seed in plan.runs()]
    print(f'{len(specs)} runs ({len(plan.arms)} arms x {plan.seeds} seeds) of {plan.model} on {images[0]} training '
          f'and {images[1]} evaluation images, {epochs} epochs each, {args.concurrent} at a time'
          + (f'; about {estimate / 60:.1f} min per run' if estimate else ''), flush=True)
    deadline = time.monotonic() + args.time_limit if args.time_limit else None
    finish = _finish(plan, arm_of, device_record(train_args.device))

    def show(line: str) -> None:
        print(line, flush=True)
    try:
        outcome = run_all(specs, finish, args.concurrent, deadline, estimate, runs_dir, show)
    except KeyboardInterrupt as e:
        _write(out, settings, settings['arms'], settings['reference'])  # the answer from the runs finished so far
        kept = len(getattr(e, 'outcome').finished) if hasattr(e, 'outcome') else 0
        print(f'{PROG}: stopped ({e.args[0] if e.args else "SIGINT"}): {kept} of {len(specs)} runs finished and kept, '
              f'the stopped ones keep their checkpoints; continue with: {PROG} {shlex.join(sys.argv[2:])}',
              file=sys.stderr)
        return exit_status(e)
    summary = _write(out, settings, settings['arms'], settings['reference'])
    _print_answer(out, summary)
    unfinished = list(outcome.failed) + outcome.stopped + outcome.not_started
    if unfinished:
        print(f'{PROG}: {len(unfinished)} of {len(specs)} runs not finished ({", ".join(unfinished)}); the same '
              f'command trains what is missing', file=sys.stderr)
    return 1 if outcome.failed else 0
