""" What a run of a comparison takes here, before any run has finished: each part of a run timed as the run does it,
on one run's share of the cores (`cores.on_share`), on the device.

* start-up: a fresh interpreter importing the training command, timed; the checks of the run's arguments as `compare`
  timed them;
* the data, the model and the loaders, built by the training command's own functions (`train.build`,
  `train.loaders`); each arm's model built with its init (an init can take seconds to solve), and whether it
  tracks the target mass after every evaluation (impulse);
* the epochs: real batches of the training loader the runs use (its decoding, augmentation, collation and worker
  processes) through the training command's own step (`train.loop.train_one_epoch`: AMP, accumulation, clipping,
  EMA), one batch and then a few, so that what starts a loader's epoch is counted once per epoch and what starts
  its workers once per run; the evaluations likewise (`train.loop.validate`), and a checkpoint written.

When the runs outnumber the cores, each core is shared and the time scaled by the crowding. Nothing is written
outside a temporary folder. """
import argparse
import copy
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, Tuple

from .cores import CoreShare, on_share

__all__ = ['RunEstimate', 'estimate_runs', 'startup_seconds']

# the batches of a loader timed after its first: a pass of this many seconds at least (the machine's load varies from
# second to second where other work shares it), a whole epoch at most, and this many batches at least
_TRAIN_SECONDS, _EVAL_SECONDS, _MIN_BATCHES = 10.0, 3.0, 3
_MASS_IMAGES = 64  # the target-mass tracker's batch (diagnostics.mass_tracking.MASS_IMAGES)


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
    crowding: float
    per_arm: Dict[str, float] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return max(self.per_arm.values())

    def describe(self) -> str:
        return (f'{self.startup:.0f} s to start, {self.setup:.0f} s to build, then {self.epochs} epochs of about '
                f'{self.epoch:.1f} s and {self.evaluations} evaluations of about {self.evaluation:.1f} s')


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


def estimate_runs(arm_args: Dict[str, Tuple[argparse.Namespace, Any]], share: CoreShare,
                  checks: float) -> RunEstimate:
    """ The seconds of a run of each arm (`arm_args`: label -> the run's checked arguments and the inputs its checks
    read; every arm trains the same network on the same data, so the epochs are timed on the first arm's model),
    on one share of the cores; `checks`: the seconds its arguments' checks took. """
    import torch
    from timm.utils import ModelEmaV3
    from ..train.build import build_datasets, build_model, build_optimizer, data_config
    from ..train.loaders import build_loaders
    from ..train.loop import train_one_epoch, validate
    first_args, first_inputs = next(iter(arm_args.values()))
    args = copy.deepcopy(first_args)
    args.workers = share.workers(args.workers)
    args.distributed, args.world_size, args.rank, args.local_rank = False, 1, 0, 0
    device = torch.device(args.device)
    with on_share(share):
        startup = startup_seconds()
        start = time.perf_counter()
        datasets = build_datasets(args)
        data = time.perf_counter() - start
        builds, tracked = _arm_builds({label: (copy.deepcopy(a), i) for label, (a, i) in arm_args.items()})
        model = build_model(args, first_inputs)
        start = time.perf_counter()
        config = data_config(args, model, datasets)
        model.to(device)
        optimizer, amp_autocast, loss_scaler = build_optimizer(args, model, device)
        model_ema = ModelEmaV3(model, decay=args.model_ema_decay, use_warmup=args.model_ema_warmup,
                               device='cpu' if args.model_ema_force_cpu else None) if args.model_ema else None
        loader_train, loader_eval, _, mixup, loss_fn = build_loaders(args, config, *datasets, device)
        loaders = time.perf_counter() - start  # the device loader decodes every image here
        batches, eval_batches = len(loader_train), len(loader_eval)
        mixup_fn = mixup if args.no_prefetcher and args.loader == 'timm' else None

        def train(loader: _FirstBatches) -> None:
            train_one_epoch(0, model, loader, optimizer, loss_fn, args, device, amp_autocast=amp_autocast,
                            loss_scaler=loss_scaler, model_ema=model_ema, mixup_fn=mixup_fn)
            _sync(device)

        def evaluate(loader: _FirstBatches) -> None:
            validate(model, loader, args, device, amp_autocast, args.num_classes)
            _sync(device)
        step, pass_start, loader_start = _per_batch(train, loader_train, batches, _TRAIN_SECONDS)
        eval_step, eval_pass_start, eval_loader_start = _per_batch(evaluate, loader_eval, eval_batches,
                                                                   _EVAL_SECONDS)
        with tempfile.TemporaryDirectory() as folder:  # a checkpoint: the last, and sometimes the best, each time
            save = _timed(lambda: torch.save(dict(state_dict=model.state_dict(), optimizer=optimizer.state_dict()),
                                             os.path.join(folder, 'checkpoint.pth.tar')))
    epochs = args.epochs + args.cooldown_epochs
    evaluations = len([e for e in range(epochs) if (e + 1) % args.val_interval == 0 or e + 1 == epochs])
    evaluated_models = 2 if args.model_ema and not args.model_ema_force_cpu else 1
    epoch = pass_start + step * batches
    evaluation = evaluated_models * (eval_pass_start + eval_step * eval_batches) + 2 * save
    batch_size = args.validation_batch_size or args.batch_size
    mass = eval_step * min(_MASS_IMAGES, len(datasets[1])) / batch_size  # before training, then per evaluation
    common = (startup + checks + data + loaders + loader_start + eval_loader_start + epochs * epoch
              + evaluations * evaluation)
    per_arm = {label: share.crowding * (common + builds[label] + (evaluations + 1) * mass * tracked[label])
               for label in arm_args}
    return RunEstimate(startup + checks, data + loaders + max(builds.values()), epoch, evaluation, epochs,
                       evaluations, share.crowding, per_arm)
