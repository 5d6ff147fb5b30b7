""" Running training commands side by side: each run a process of `timm-structinit-train`, `concurrent` at a time,
resumed from its checkpoint where an earlier call stopped it, its output in its own log, its progress (epoch, time
left) shown as it goes, and a result written when it ends. One place starts, resumes, times and stops runs: the
`compare` command and the repository's benchmarks both run through `run_all`.

A run is done when its folder holds `result.json`; a stopped run's folder holds the training command's
`last.pth.tar`, and the next call resumes it with `--resume` (epochs are seeded, so the resumed run is the one that
would have run); a folder that holds a finished epoch's results is never removed; the seconds of its earlier parts
are kept beside it (`elapsed.json`), so a run's time counts every part of it. With a deadline, a run starts only if
the longest finished run (or, before any finished, the estimate given) would still end before it, and the runs under
way at the deadline are stopped as Ctrl-C stops them, keeping their checkpoints. Ctrl-C or SIGTERM to the caller
stops every run the same way. The progress shown off a terminal (a log file) is at most one line per run per epoch.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from ..utils.run_folder import holds_finished_epoch, resumable_checkpoint
from .records import ELAPSED_FILE, RESULT_FILE, read_elapsed, write_elapsed

__all__ = ['RunSpec', 'Outcome', 'run_all', 'is_done', 'read_summary', 'RESULT_FILE', 'ELAPSED_FILE']
_EPOCH = re.compile(r'^epoch\s+(\d+)/(\d+)\s')
_ERROR = re.compile(r'^timm-structinit-train: error: (.*)$')


@dataclass(frozen=True)
class RunSpec:
    """ One run: its name, the training command (the interpreter first), the folder it trains into (its `--output`
    and `--experiment`), its number of epochs (for the progress shown), and the folder that holds its result once
    it is done (its training folder, unless the caller moves it there); `env`, variables set for its process
    beside the caller's (its share of the cores, say). """
    name: str
    command: List[str]
    folder: Path
    epochs: int
    done_folder: Optional[Path] = None
    env: Optional[Dict[str, str]] = None

    @property
    def result_folder(self) -> Path:
        return self.done_folder or self.folder


@dataclass
class Outcome:
    """ What `run_all` did: the runs finished (name -> result), failed (name -> the one line saying why), stopped
    (their checkpoints resume them) and not started. """
    finished: Dict[str, dict] = field(default_factory=dict)
    failed: Dict[str, str] = field(default_factory=dict)
    stopped: List[str] = field(default_factory=list)
    not_started: List[str] = field(default_factory=list)


@dataclass
class _Active:
    spec: RunSpec
    process: subprocess.Popen
    resumed: bool
    start: float
    log: Path
    earlier: float = 0.0  # the seconds of its earlier parts (a resumed run)
    parts: int = 1
    epoch: int = 0
    first_epoch: int = 0
    epoch_start: float = 0.0
    epoch_seconds: List[float] = field(default_factory=list)
    error: str = ''
    reader: Optional[threading.Thread] = None


class KeptResults(RuntimeError):
    """ A run's folder holds results of finished epochs that it cannot resume from: the run is not started. """


def is_done(folder: Path) -> bool:
    return (folder / RESULT_FILE).is_file()


def read_summary(path: Path) -> List[dict]:
    """ The rows of a run's summary.csv, held to its schema (`SummaryRow`: an epoch, top-1 in [0, 100], finite
    numbers), each value as a number; ConfigError naming the file, its line and the field otherwise. """
    from ..utils.file_schema import SummaryRow, read_csv
    rows = read_csv(path, SummaryRow, "the run's summary of its epochs is not what it wrote; delete the run's folder "
                                      "to train it again, or start another --out")
    return [{k: float(v) for k, v in row.model_dump(exclude_none=True).items()} for row in rows]


def _start(spec: RunSpec, log_dir: Path) -> _Active:
    command = list(spec.command)
    resumed = resumable_checkpoint(str(spec.folder)) is not None
    if resumed:
        command += ['--resume', str(spec.folder)]  # its last.pth.tar, or its latest epoch's checkpoint
    elif holds_finished_epoch(str(spec.folder)):  # a finished epoch's results, never removed
        raise KeptResults(f'{spec.folder} holds the results of finished epochs but no checkpoint to resume them from; '
                          f'move it elsewhere to train the run again')
    elif spec.folder.exists():  # stopped before its first epoch ended: nothing to resume
        shutil.rmtree(spec.folder)
    log = log_dir / f'{spec.name}.log'
    with open(log, 'a' if resumed else 'w') as f:
        f.write(f'$ {" ".join(command)}\n')
    earlier, parts = (read_elapsed(spec.folder / ELAPSED_FILE) or (0.0, 1)) if resumed else (0.0, 0)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                               env={**os.environ, **(spec.env or {}), 'PYTHONUNBUFFERED': '1'})
    active = _Active(spec, process, resumed, time.time(), log, earlier, parts + 1, epoch_start=time.time())
    active.reader = threading.Thread(target=_read, args=(active,), daemon=True)
    active.reader.start()
    return active


def _start_or_fail(spec: RunSpec, log_dir: Optional[Path], outcome: Outcome, show) -> Optional[_Active]:
    """ The run started (or resumed), said in a line; None, counted as failed, when its folder holds results it
    cannot resume from. """
    spec.folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        active = _start(spec, log_dir or spec.folder.parent)
    except KeptResults as e:
        outcome.failed[spec.name] = str(e)
        show(f'[failed] {spec.name}: {e}')
        return None
    show(f'[{"resume" if active.resumed else "start"}] {spec.name}')
    return active


def _read(active: _Active) -> None:
    """ The run's output, line by line, into its log; its epochs and its error line noted as they come. """
    with open(active.log, 'a') as log:
        for line in active.process.stdout:
            log.write(line)
            log.flush()
            epoch = _EPOCH.match(line)
            if epoch:
                now = time.time()
                if active.epoch:
                    active.epoch_seconds.append(now - active.epoch_start)
                else:
                    active.first_epoch = int(epoch.group(1)) - 1
                active.epoch, active.epoch_start = int(epoch.group(1)), now
            error = _ERROR.match(line.strip())
            if error:
                active.error = error.group(1)


def _seconds_per_epoch(active: List[_Active], finished: Dict[str, dict], estimate: Optional[float],
                       epochs: int) -> Optional[float]:
    """ A run's seconds per epoch: the finished runs' once any has finished (their whole time, start-up and
    evaluations included, over their epochs), else the epochs under way, else the estimate of a run. """
    done = [r['seconds'] / max(1, r.get('epochs_trained', r.get('epochs', 1))) for r in finished.values()
            if r.get('seconds')]
    spans = done or [s for a in active for s in a.epoch_seconds]
    if spans:
        return sum(spans) / len(spans)
    return estimate / max(1, epochs) if estimate else None


def _progress(active: List[_Active], pending: List[RunSpec], outcome: Outcome, total: int, concurrent: int,
              estimate: Optional[float]) -> str:
    epochs = max([a.spec.epochs for a in active] + [s.epochs for s in pending] + [1])
    per_epoch = _seconds_per_epoch(active, outcome.finished, estimate, epochs)
    going = ', '.join(f'{a.spec.name} epoch {a.epoch}/{a.spec.epochs}' for a in active)
    line = f'[{len(outcome.finished)}/{total} done] {going or "-"}'
    if per_epoch:
        left = sum(a.spec.epochs - a.epoch for a in active) + sum(s.epochs for s in pending)
        line += f'; about {left * per_epoch / max(1, min(concurrent, len(active) + len(pending))) / 60:.0f} min left'
    return line


def _keep_elapsed(a: _Active) -> None:
    """ Record the run's seconds over all its parts so far beside its checkpoint, for the part that resumes it and
    for its result; a run with nothing to resume (stopped in its first epoch) keeps none. """
    if resumable_checkpoint(str(a.spec.folder)) is not None:
        write_elapsed(a.spec.folder / ELAPSED_FILE, a.earlier + time.time() - a.start, a.parts)


def _stop(active: List[_Active], outcome: Outcome) -> None:
    """ Stop the runs under way as Ctrl-C stops them (each keeps its last finished epoch's checkpoint). SIGTERM, one
    of the training command's stop signals, rather than SIGINT: a process started with SIGINT ignored (under nohup,
    from a background job of a script, in a pytest-xdist worker) hands that on to its children, which would not stop. """
    for a in active:
        if a.process.poll() is None:
            a.process.send_signal(signal.SIGTERM)
    for a in active:
        try:
            a.process.wait(timeout=60)
        except subprocess.TimeoutExpired:  # a stop that hangs (a loader worker, say) is not waited for
            a.process.kill()
            a.process.wait()
        if a.reader is not None:
            a.reader.join(timeout=10)
        _keep_elapsed(a)
        outcome.stopped.append(a.spec.name)


def _finish(a: _Active, finish: Callable[[RunSpec, float, bool], dict], outcome: Outcome, show) -> None:
    if a.reader is not None:
        a.reader.join(timeout=30)
    name = a.spec.name
    _keep_elapsed(a)
    if a.process.returncode:
        why = a.error or f'exit status {a.process.returncode}'
        outcome.failed[name] = f'{why} (log: {a.log})'
        show(f'[failed] {name}: {outcome.failed[name]}')
        return
    try:
        result = finish(a.spec, a.earlier + time.time() - a.start, a.resumed)
    except (OSError, ValueError, KeyError, RuntimeError, subprocess.CalledProcessError) as e:
        outcome.failed[name] = f'its result could not be read ({type(e).__name__}: {e}) (log: {a.log})'
        show(f'[failed] {name}: {outcome.failed[name]}')
        return
    outcome.finished[name] = result
    show(f'[done] {name}: final top-1 {result["final_top1"]:.2f}, best {result["best_top1"]:.2f}, '
         f'{result["seconds"] / 60:.1f} min')


def run_all(specs: List[RunSpec], finish: Callable[[RunSpec, float, bool], dict], concurrent: int = 1,
            deadline: Optional[float] = None, estimate: Optional[float] = None, log_dir: Optional[Path] = None,
            show: Callable[[str], None] = print, poll: float = 0.5, progress_every: Optional[float] = 30.0,
            read_result: Callable[[Path], Dict[str, Any]] = lambda path: json.loads(path.read_text())) -> Outcome:
    """ Run `specs` (those not done yet), `concurrent` at a time, in the order given; `finish(spec, seconds,
    resumed)` writes and returns a finished run's result (`seconds`: every part of the run). `deadline` is a
    time.monotonic() value; `estimate` the seconds a run takes, until one has finished (then the longest finished
    run's count). Progress is shown every `progress_every` seconds, or with None (off a terminal) once each time a
    run ends an epoch. `read_result` reads a done run's result file. KeyboardInterrupt (Ctrl-C, or SIGTERM turned
    into one) stops every run under way and is raised again, the outcome in its `outcome` attribute. """
    outcome = Outcome(finished={s.name: read_result(s.result_folder / RESULT_FILE) for s in specs
                                if is_done(s.result_folder)})
    pending = [s for s in specs if s.name not in outcome.finished]
    seconds = [r['seconds'] for r in outcome.finished.values() if r.get('seconds')]
    longest = max(seconds) if seconds else estimate or 0.0
    total, active, last_shown, shown_epochs = len(specs), [], time.monotonic(), 0
    finishing: Optional[_Active] = None
    try:
        while pending or active:
            while pending and len(active) < concurrent:
                left = deadline - time.monotonic() if deadline is not None else None
                if left is not None and (left <= 0 or longest > left):
                    outcome.not_started += [s.name for s in pending]
                    show(f'[not started] {", ".join(s.name for s in pending)}: {max(left, 0):.0f} s left of the time '
                         f'limit, a run takes about {longest:.0f} s')
                    pending = []
                    break
                started = _start_or_fail(pending.pop(0), log_dir, outcome, show)
                active += [started] if started is not None else []
            for a in [a for a in active if a.process.poll() is not None]:
                active.remove(a)
                finishing = a
                _finish(a, finish, outcome, show)
                finishing = None
                if a.spec.name in outcome.finished:  # the estimate gives way to the runs that finished
                    seconds.append(outcome.finished[a.spec.name]['seconds'])
                    longest = max(seconds)
            if deadline is not None and time.monotonic() > deadline and active:
                _stop(active, outcome)
                show(f'[stopped] {", ".join(a.spec.name for a in active)}: at the time limit; their checkpoints '
                     f'resume them')
                active = []
            epochs = sum(a.epoch for a in active)
            if active and (time.monotonic() - last_shown > progress_every if progress_every is not None else
                           epochs > shown_epochs):
                show(_progress(active, pending, outcome, total, concurrent, estimate))
                last_shown = time.monotonic()
            shown_epochs = epochs
            time.sleep(poll)
    except KeyboardInterrupt as e:
        if finishing is not None:  # interrupted in its final evaluation: not finished, a later call takes it up
            outcome.stopped.append(finishing.spec.name)
        _stop(active, outcome)
        outcome.not_started += [s.name for s in pending]
        e.outcome = outcome
        raise
    return outcome
