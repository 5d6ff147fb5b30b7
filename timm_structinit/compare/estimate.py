""" What a run of a comparison takes here, before any run has finished: each part of a run timed as the run does it,
with one run's share of the cores and the torch threads a run takes (`cores.on_share`, `train.thread_count`), on
the device, and beside the runs that `--concurrent` trains at the same time: those are started for real (the
comparison's first run, each into a temporary folder), so that the probe shares the cores, the device and whatever
else runs on the machine as a run will share them.

* start-up: a fresh interpreter importing the training command, timed; the checks of the run's arguments as `compare`
  timed them;
* the data, the model and the loaders, built by the training command's own functions (`train.build`,
  `train.loaders`); each arm's model built with its init (an init can take seconds to solve), and whether it
  tracks the target mass after every evaluation (impulse);
* the epochs: real batches of the training loader the runs use (its decoding, augmentation, collation and worker
  processes) through the training command's own step (`train.loop.train_one_epoch`: AMP, accumulation, clipping,
  EMA), one batch and then a few, so that what starts a loader's epoch is counted once per epoch and what starts
  its workers once per run; the evaluations likewise (`train.loop.validate`), and a checkpoint written.

Nothing is written outside temporary folders. """
import argparse
import contextlib
import copy
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from ..utils.words import counted
from .cores import CoreShare, on_share

__all__ = ['RunEstimate', 'estimate_runs', 'startup_seconds']

# the batches of a loader timed after its first: a pass of this many seconds at least (where other work shares the
# machine its load varies over tens of seconds, and a run's speed with it; 10 s passes were off by 1.6x), a whole
# epoch at most, and this many batches at least
_TRAIN_SECONDS, _EVAL_SECONDS, _MIN_BATCHES = 30.0, 5.0, 3
_MASS_IMAGES = 64  # the target-mass tracker's batch (diagnostics.mass_tracking.MASS_IMAGES)
_BESIDE_START_SECONDS = 300.0  # how long the timed passes wait for the runs beside them to begin their epochs


@dataclass
class RunEstimate:
    """ A run's seconds, by part, for each arm (`seconds`: the slowest arm's, what `--time-limit` is checked
    against). """
    startup: float
    setup: float  # data, loaders, the slowest arm's model
    epoch: float
    evaluation: float
    epochs: int
    evaluations: int
    beside: int  # the runs trained beside the probe
    per_arm: Dict[str, float] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return max(self.per_arm.values())

    def describe(self) -> str:
        beside = f', {self.beside} run{"s" if self.beside > 1 else ""} beside it' if self.beside else ''
        return (f'{self.startup:.0f} s to start, {self.setup:.0f} s to build, then {counted(self.epochs, "epoch")} '
                f'of about {self.epoch:.1f} s and {counted(self.evaluations, "evaluation")} of about '
                f'{self.evaluation:.1f} s{beside}')


def startup_seconds() -> float:
    """ What a run's process takes before its first step begins to count: a fresh interpreter importing the training
    command (torch and timm with it), timed once. """
    start = time.perf_counter()
    subprocess.run([sys.executable, '-c', 'import timm_structinit.train'], capture_output=True, timeout=600)
    return time.perf_counter() - start


class _FirstBatches:
    """ The first batches of a loader (a new pass over it each time it is iterated), as a loader of `count` batches:
    all of them, or with `seconds`, those until that many seconds have passed since the pass began (`minimum` at
    least); `taken` says how many the last pass gave. """

    def __init__(self, loader, count: int, seconds: float = math.inf, minimum: int = 1) -> None:
        self.loader, self.count, self.seconds, self.minimum = loader, count, seconds, minimum
        self.taken = 0

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[Any]:
        start, self.taken = time.perf_counter(), 0
        for batch in self.loader:
            if self.taken >= self.count or (self.taken >= self.minimum
                                            and time.perf_counter() - start >= self.seconds):
                break
            self.taken += 1
            yield batch


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _per_batch(run_pass, loader, available: int, seconds: float) -> Tuple[float, float, float]:
    """ (seconds per batch, seconds to start a pass, seconds to start the loader the first time): `run_pass(batches)`
    over one batch to start the loader, over one batch of a new pass, then over the batches of a pass of `seconds`
    (a whole epoch at most). """
    first = _timed(lambda: run_pass(_FirstBatches(loader, 1)))
    one = _timed(lambda: run_pass(_FirstBatches(loader, 1)))
    batches = _FirstBatches(loader, available, seconds, min(_MIN_BATCHES, available))
    elapsed = _timed(lambda: run_pass(batches))
    per_batch = max(elapsed - one, 0.0) / (batches.taken - 1) if batches.taken > 1 else elapsed
    return per_batch, max(one - per_batch, 0.0), max(first - one, 0.0)


def _watch(process: subprocess.Popen, begun: threading.Event) -> None:
    """ Read a run's output until it ends; `begun` once it has begun its epochs (the training command says where
    it writes, then trains), or ended. """
    for line in process.stdout:
        if line.startswith('Output: '):
            begun.set()
    begun.set()


@contextlib.contextmanager
def _runs_beside(command: Optional[List[str]], count: int, env: Dict[str, str]) -> Iterator[Callable[[], None]]:
    """ `count` runs of the training `command` started now, each into a temporary folder, as `--concurrent` will
    train them beside each run; gives the function that waits until each has begun its epochs. They are stopped (as
    Ctrl-C stops a run) and their folder removed on leaving, however it is left. """
    processes, begun = [], []
    folder = tempfile.mkdtemp(prefix='compare-estimate-') if command and count else None
    try:
        for i in range(count if folder else 0):
            process = subprocess.Popen([*command, '--output', folder, '--experiment', f'beside{i}'],
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                       env={**os.environ, **env, 'PYTHONUNBUFFERED': '1'})
            processes.append(process)
            begun.append(threading.Event())
            threading.Thread(target=_watch, args=(process, begun[-1]), daemon=True).start()
        yield lambda: [event.wait(_BESIDE_START_SECONDS) for event in begun]
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if folder:
            shutil.rmtree(folder, ignore_errors=True)


def _sync(device) -> None:
    import torch
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def _arm_builds(arm_args: Dict[str, Tuple[argparse.Namespace, Any]]) -> Tuple[Dict[str, float], Dict[str, bool]]:
    """ Per arm, the seconds its model takes to build (its init included) and whether its run tracks the target
    mass after each evaluation. """
    from ..diagnostics.mass_tracking import TargetMassTracker
    from ..train.build import build_model
    builds, tracked = {}, {}
    for label, (args, inputs) in arm_args.items():
        start = time.perf_counter()
        model = build_model(args, inputs)
        builds[label] = time.perf_counter() - start
        tracked[label] = TargetMassTracker.applies_to(model)
        del model
    return builds, tracked


def estimate_runs(arm_args: Dict[str, Tuple[argparse.Namespace, Any]], share: CoreShare, checks: float,
                  command: Optional[List[str]] = None) -> RunEstimate:
    """ The seconds of a run of each arm (`arm_args`: label -> the run's checked arguments and the inputs its checks
    read; every arm trains the same network on the same data, so the epochs are timed on the first arm's model),
    with one share of the cores, beside `share.concurrent - 1` runs of `command` (the training command of the
    comparison's first run); `checks`: the seconds its arguments' checks took. """
    first_args = next(iter(arm_args.values()))[0]
    args = copy.deepcopy(first_args)
    args.workers = share.workers(args.workers)
    args.distributed, args.world_size, args.rank, args.local_rank = False, 1, 0, 0
    beside = share.concurrent - 1 if command else 0
    with _runs_beside(command, beside, {}) as begun, on_share(share):
        startup = startup_seconds()  # as the runs start: side by side
        parts = _time_parts(args, arm_args, begun, share)
    epochs = args.epochs + args.cooldown_epochs
    evaluations = len([e for e in range(epochs) if (e + 1) % args.val_interval == 0 or e + 1 == epochs])
    evaluated_models = 2 if args.model_ema and not args.model_ema_force_cpu else 1
    epoch = parts['pass_start'] + parts['step'] * parts['batches']
    evaluation = (evaluated_models * (parts['eval_pass_start'] + parts['eval_step'] * parts['eval_batches'])
                  + 2 * parts['save'])
    batch_size = args.validation_batch_size or args.batch_size
    mass = parts['eval_step'] * min(_MASS_IMAGES, parts['eval_images']) / batch_size  # first, then per evaluation
    common = (startup + checks + parts['data'] + parts['loaders'] + parts['loader_start'] + parts['eval_loader_start']
              + epochs * epoch + evaluations * evaluation)
    per_arm = {label: common + parts['builds'][label] + (evaluations + 1) * mass * parts['tracked'][label]
               for label in arm_args}
    return RunEstimate(startup + checks, parts['data'] + parts['loaders'] + max(parts['builds'].values()), epoch,
                       evaluation, epochs, evaluations, beside, per_arm)


def _time_parts(args: argparse.Namespace, arm_args: Dict[str, Tuple[argparse.Namespace, Any]],
                begun: Callable[[], None], share: CoreShare) -> Dict[str, Any]:
    """ The seconds of each part of a run of `args` (the first arm's, on one share, with the threads the run would
    take), by name; `begun` waits until the runs beside it train. """
    import torch
    from timm.utils import ModelEmaV3
    from ..train.build import build_datasets, build_model, build_optimizer, data_config
    from ..train.loaders import build_loaders
    from ..train.loop import train_one_epoch, validate
    from ..train.thread_count import choose_threads
    device = torch.device(args.device)
    start = time.perf_counter()
    datasets = build_datasets(args)
    parts: Dict[str, Any] = dict(data=time.perf_counter() - start, eval_images=len(datasets[1]))
    parts['builds'], parts['tracked'] = _arm_builds({k: (copy.deepcopy(a), i) for k, (a, i) in arm_args.items()})
    model = build_model(args, next(iter(arm_args.values()))[1])
    start = time.perf_counter()
    config = data_config(args, model, datasets)
    model.to(device)
    optimizer, amp_autocast, loss_scaler = build_optimizer(args, model, device)
    args.threads = share.threads() or args.threads
    choose_threads(args, model, config['input_size'], device, amp_autocast, share.per_run)  # restored by on_share
    model_ema = ModelEmaV3(model, decay=args.model_ema_decay, use_warmup=args.model_ema_warmup,
                           device='cpu' if args.model_ema_force_cpu else None) if args.model_ema else None
    loader_train, loader_eval, _, mixup, loss_fn = build_loaders(args, config, *datasets, device)
    parts['loaders'] = time.perf_counter() - start  # the device loader decodes every image here
    parts['batches'], parts['eval_batches'] = len(loader_train), len(loader_eval)
    mixup_fn = mixup if args.no_prefetcher and args.loader == 'timm' else None

    def train(loader: _FirstBatches) -> None:
        train_one_epoch(0, model, loader, optimizer, loss_fn, args, device, amp_autocast=amp_autocast,
                        loss_scaler=loss_scaler, model_ema=model_ema, mixup_fn=mixup_fn)
        _sync(device)

    def evaluate(loader: _FirstBatches) -> None:
        validate(model, loader, args, device, amp_autocast, args.num_classes)
        _sync(device)
    begun()
    parts['step'], parts['pass_start'], parts['loader_start'] = _per_batch(
        train, loader_train, parts['batches'], _TRAIN_SECONDS)
    parts['eval_step'], parts['eval_pass_start'], parts['eval_loader_start'] = _per_batch(
        evaluate, loader_eval, parts['eval_batches'], _EVAL_SECONDS)
    with tempfile.TemporaryDirectory() as folder:  # a checkpoint: the last, and sometimes the best, each time
        parts['save'] = _timed(lambda: torch.save(
            dict(state_dict=model.state_dict(), optimizer=optimizer.state_dict()), os.path.join(folder, 'c.pth')))
    return parts
