""" The torch thread count a CPU run trains with: the one the user sets (`--threads`, else `OMP_NUM_THREADS`), or
the one its own training step runs fastest on here and now, measured by a short probe before the first epoch.

Every parallel operator of torch's CPU backend ends at a barrier where its threads wait for each other, spinning.
With the cores to itself, a small ViT gains from a second thread (the digits recipe, 3 epochs on 2 cores: 10.5 s on
two threads, 13.4 s on one); beside one other busy process, the thread that shares its core with it holds the other
up at every barrier, and the same run took 21.5 s on two threads against 13.1 s on one. Which count is faster
depends on the model (how long its operators run between barriers) and on what else runs on the machine, so neither
a fixed count nor a rule of the model's size chooses it: the probe times the run's own step (forward, loss, backward
and the optimizer's update, of a copy of the model and its optimizer, on a batch of the run's size and input, under
its autocast) at each candidate count, the counts interleaved so that a change of load falls on all of them, and
takes the fewest threads whose mean step is within `TOLERANCE` of the fastest's (fewer threads leave cores to the
rest of the machine, and the difference is within the probe's noise; the mean, as a count whose steps now and then
stall waiting for a busy core costs a run its mean). A step that already takes `LONG_STEP` seconds on the default count is spent in large operators,
which every thread shortens: the probe stops there and keeps the default (it would cost more than it could gain).

Each candidate runs on a thread of its own, started for it and ended with the probe: the caller's thread keeps the
OpenMP team it had (a team shrunk and grown again left later steps 10-20% slower, `inits/threads.py`), and changes
its count once, to the chosen one, only when that differs. The copy, the batch and the generator the probe draws from
are its own, so the run's weights and random streams are those of a run without it; the thread count changes the
last bits of a run's float sums, so a run repeats another bit for bit at the same count (`--threads N` fixes it; the
run records its count in args.yaml and each epoch's in summary.csv).
"""
import copy
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import torch

from ..errors import ConfigError

__all__ = ['ThreadChoice', 'user_threads', 'candidate_counts', 'fewest_within', 'probe_threads', 'choose_threads',
           'TOLERANCE', 'LONG_STEP']

TOLERANCE = 0.05  # fewer threads win unless more are faster by more than this fraction of the step
LONG_STEP = 2.0  # seconds: a step this long on the default count is not probed
CLEAR = 0.25  # after two rounds, a count faster than every other by this fraction decides at once
_PROBE_SECONDS, _MAX_ROUNDS = 1.0, 8  # otherwise rounds until this many seconds, or this many rounds


@dataclass(frozen=True)
class ThreadChoice:
    """ The count a run trains with; how it was chosen: '--threads', 'OMP_NUM_THREADS', 'probe', or 'default'
    (torch's own count, for the reason `why` gives); and the probe's mean seconds per step of each count it timed (of
    the default count's one step, for a step too long to probe). """
    threads: int
    how: str
    step_seconds: Mapping[int, float] = field(default_factory=dict)
    why: str = ''

    def describe(self) -> str:
        """ The run's line about its threads. """
        counts = f'{self.threads} torch thread{"s" if self.threads != 1 else ""}'
        if self.how == 'probe':
            timed = ', '.join(f'{n} thread{"s" if n != 1 else ""} {s:.3g} s' for n, s in
                              sorted(self.step_seconds.items(), reverse=True))
            return (f'Threads: {counts}, the fastest here for this model (a training step on {timed}; --threads N '
                    f'or OMP_NUM_THREADS=N sets the count)')
        if self.how == 'default':
            return f'Threads: {counts}, torch\'s default ({self.why}; --threads N sets the count)'
        return f'Threads: {counts}, as {self.how} sets'


def user_threads(requested: Optional[int], environ: Mapping[str, str] = os.environ) -> Optional[ThreadChoice]:
    """ The count the user set: `--threads` (`requested`), else OMP_NUM_THREADS (its first level, as OpenMP reads a
    list); None when neither is set. An OMP_NUM_THREADS that is not a positive whole number is refused. """
    if requested is not None:
        return ThreadChoice(int(requested), '--threads')
    text = environ.get('OMP_NUM_THREADS', '').strip()
    if not text:
        return None
    first = text.split(',')[0].strip()
    if not first.isdigit() or int(first) < 1:
        raise ConfigError(f'OMP_NUM_THREADS={text!r} is not a number of threads; set a whole number >= 1, or unset '
                          f'it (the run then measures which count trains fastest here)')
    return ThreadChoice(int(first), 'OMP_NUM_THREADS')


def candidate_counts(cores: int) -> List[int]:
    """ The counts a probe times on `cores` usable cores: all of them, then halved down to one (16: 16 8 4 2 1). """
    counts, n = [], max(1, cores)
    while n >= 1 and n not in counts:
        counts.append(n)
        n //= 2
    return counts


def fewest_within(step_seconds: Mapping[int, float], tolerance: float = TOLERANCE) -> int:
    """ The fewest threads whose step is within `tolerance` of the fastest count's. """
    fastest = min(step_seconds.values())
    return min(n for n, s in step_seconds.items() if s <= fastest * (1 + tolerance))


def _on_thread(pool: Optional[ThreadPoolExecutor], count: int, fn: Callable[[], float]) -> float:
    """ fn() at `count` threads: on `pool`'s thread (an OpenMP team of its own), or on the caller's with None. """
    if pool is None:
        return fn()

    def run() -> float:
        torch.set_num_threads(count)
        return fn()
    return pool.submit(run).result()


def _decided(times: Mapping[int, Sequence[float]], clear: float) -> bool:
    """ Whether the mean step of one count is shorter than every other count's by the fraction `clear`. """
    means = sorted(statistics.mean(t) for t in times.values())
    return len(means) < 2 or means[0] * (1 + clear) < means[1]


def probe_threads(step: Callable[[], None], counts: Sequence[int], seconds: float = _PROBE_SECONDS,
                  max_rounds: int = _MAX_ROUNDS, long_step: float = LONG_STEP, clear: float = CLEAR,
                  clock: Callable[[], float] = time.perf_counter) -> ThreadChoice:
    """ Time `step` at each of `counts`, the first the caller's own count, on the caller's thread, every other on a
    thread of its own: one step to warm each count up, then rounds of one step per count, in alternating order, at
    least two, until one count is `clear`ly fastest, or `seconds` have passed, or `max_rounds`. The mean step decides
    (`fewest_within`): a count whose steps now and then stall, as threads that wait for a busy core's do, costs a run
    its mean (one quick step is no proof that the next will not stall). """
    pools = {n: ThreadPoolExecutor(1, thread_name_prefix=f'timm_structinit-threads{n}') for n in counts[1:]}

    def timed() -> float:
        start = clock()
        step()
        return clock() - start
    try:
        warm = {n: _on_thread(pools.get(n), n, timed) for n in counts}
        if warm[counts[0]] >= long_step:
            return ThreadChoice(counts[0], 'default', {counts[0]: warm[counts[0]]},
                                f'a training step takes {warm[counts[0]]:.3g} s here, long enough for every thread '
                                f'to shorten it')
        times: Dict[int, List[float]] = {n: [] for n in counts}
        start, rounds = clock(), 0
        while rounds < max_rounds:
            for n in (counts if rounds % 2 == 0 else counts[::-1]):
                times[n].append(_on_thread(pools.get(n), n, timed))
            rounds += 1
            if rounds >= 2 and (_decided(times, clear) or clock() - start >= seconds):
                break
    finally:
        for pool in pools.values():
            pool.shutdown(wait=True)  # the probe's threads, and their OpenMP teams, end here
    means = {n: statistics.mean(t) for n, t in times.items()}
    return ThreadChoice(fewest_within(means), 'probe', means)


def _training_step(args, model: torch.nn.Module, input_size: Sequence[int], device: torch.device,
                   autocast: Callable) -> Callable[[], None]:
    """ One training step of a copy of `model` (forward, loss, backward, and the run's optimizer's update) on a
    random batch of the run's shape, drawn from a generator of its own: the model, its optimizer and the global
    random streams are left as they were. """
    from timm.optim import create_optimizer_v2, optimizer_kwargs
    probe_model = copy.deepcopy(model).train()
    optimizer = create_optimizer_v2(probe_model, **optimizer_kwargs(cfg=args), **args.opt_kwargs)
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(args.batch_size, *input_size, generator=generator).to(device)
    targets = torch.randint(0, max(1, args.num_classes), (args.batch_size,), generator=generator).to(device)

    def step() -> None:
        with torch.random.fork_rng(devices=[]):  # dropout and drop-path draw from the global generator
            with autocast():
                loss = torch.nn.functional.cross_entropy(probe_model(images).float(), targets)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    return step


def choose_threads(args, model: torch.nn.Module, input_size: Sequence[int], device: torch.device,
                   autocast: Callable, cores: int) -> ThreadChoice:
    """ The count the run trains with, set in this thread: the user's, else on a CPU the probe's over
    `candidate_counts(cores)`, else torch's default; a probe that fails keeps the default, saying why. """
    chosen = user_threads(getattr(args, 'threads', None))
    default = torch.get_num_threads()
    if chosen is None and device.type != 'cpu':
        chosen = ThreadChoice(default, 'default', why=f'the model trains on {device.type}')
    elif chosen is None:
        counts = [default] + [n for n in candidate_counts(cores) if n != default]
        if len(counts) == 1:
            return ThreadChoice(default, 'default', why=f'{cores} usable core{"s" if cores != 1 else ""}')
        try:
            step = _training_step(args, model, input_size, device, autocast)
            chosen = probe_threads(step, counts)
        except (RuntimeError, MemoryError) as e:  # the copy or its batch did not fit: train as torch would
            chosen = ThreadChoice(default, 'default', why=f'the probe failed: {type(e).__name__}: '
                                                          f'{" ".join(str(e).split())[:200]}')
    if chosen.threads != torch.get_num_threads():
        torch.set_num_threads(chosen.threads)
    return chosen
