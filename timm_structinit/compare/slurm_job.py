""" One run of a comparison as a SLURM job (`compare --launcher slurm`): the callable submitit runs on the job's node.
It trains the run as a local comparison does (`runner`: the training command as a process of its own, resumed from its
checkpoint, its output in `runs/NAME.log`, its time over every part in `elapsed.json`) and writes the run's
`result.json` (`session`), so a run finishes whether compare watches it or not.

How a job ends before its run does. SLURM signals every process of a job. The training command stops on SIGTERM (a
cancel, `scontrol requeue`, a pre-emption, the time limit itself) and on the signal submitit has SLURM send
`--slurm-signal-delay` seconds before the time limit (SIGUSR2, added to the run's `--stop-signals`), keeping its last
finished epoch. At that signal submitit calls `RunJob.checkpoint`, which waits for the run to stop (stopping it where
the signal did not reach it), and requeues the job with the same run, which resumes from that epoch: the run gives the
result it would have given unstopped (every epoch is seeded). After a SIGTERM the job ends without a result; SLURM
requeues it (`scontrol requeue`, a pre-emption) or ends it (a cancel), and compare says which. """
import dataclasses
import os
import signal
import time
from pathlib import Path
from typing import Any, Dict, Optional

import submitit

from .plan import Arm
from .runner import Outcome, RunSpec, _Active, _keep_elapsed, _start, _stop

__all__ = ['RunJob', 'RunFailed', 'job_signal', 'stopped_by_signal', 'STOP_WAIT']

# seconds a job whose run a SIGTERM stopped waits for SLURM to requeue or end it (or for the signal that requeues it
# itself, which a pre-emption may send next) before it ends as failed
STOP_WAIT = 120.0
# seconds a run has to stop on its job's signal before the job stops it itself (the signal may not have reached it)
STOP_GRACE = 10.0


def job_signal() -> str:
    """ The signal submitit has SLURM send before a job's time limit (SUBMITIT_PREEMPT_SIGNAL, SIGUSR2 by default). """
    return 'SIG' + submitit.JobEnvironment.USR_SIG


def stopped_by_signal(status: Optional[int]) -> bool:
    """ Whether a run's exit status is that of a stop (128 + N, or killed by N) by one of the signals a scheduler
    stops a job with, rather than a failure (a fault such as SIGSEGV is one). """
    if status is None or status == 0:
        return False
    number = -status if status < 0 else status - 128
    stops = {'SIGINT', 'SIGTERM', 'SIGHUP', 'SIGUSR1', 'SIGUSR2', 'SIGCONT', job_signal()}
    return any(getattr(signal, name, None) == number for name in stops)


class RunFailed(RuntimeError):
    """ A job's run failed: its one line, the log that says more. """


@dataclasses.dataclass
class RunJob(submitit.helpers.Checkpointable):
    """ One run (`spec`, the `arm` and `seed` it trains, on `device`) as a job whose signal comes `signal_after`
    seconds into each part (its time limit less the signal's delay); its output goes to `log_dir`/NAME.log. Called in
    the job, it returns the run's result, raises RunFailed, or ends the job without a result when SLURM stopped the
    run. """
    spec: RunSpec
    arm: Arm
    seed: int
    device: str
    log_dir: Path
    signal_after: float

    def __getstate__(self) -> Dict[str, Any]:  # what a requeued job gets: the run, not its process of this part
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def _spec_here(self) -> RunSpec:
        """ The run's spec with the job's cores as its torch threads (where SLURM gave a number and the environment
        sets none). """
        cpus = os.environ.get('SLURM_CPUS_PER_TASK')
        if not cpus or 'OMP_NUM_THREADS' in os.environ:
            return self.spec
        return dataclasses.replace(self.spec, env={**(self.spec.env or {}), 'OMP_NUM_THREADS': cpus})

    def __call__(self) -> Dict[str, Any]:
        spec = self._spec_here()
        spec.folder.parent.mkdir(parents=True, exist_ok=True)
        active = self._active = _start(spec, self.log_dir)
        self._first_epoch = _epoch_of(spec.folder)
        print(f'[{"resume" if active.resumed else "start"}] {spec.name}', flush=True)
        while active.process.poll() is None:  # polled, not waited for: the checkpoint signal's handler waits for it
            time.sleep(0.5)
        self._settle(active)
        status = active.process.returncode
        if status == 0:
            return self._result(active)
        if stopped_by_signal(status):
            print(f'{spec.name}: stopped by a signal ({_signal_name(status)}), its last finished epoch kept; '
                  f'waiting for SLURM to requeue or end the job', flush=True)
            time.sleep(STOP_WAIT)
            raise SystemExit(status)  # no result: SLURM's state says what became of the job
        raise RunFailed(f'{active.error or f"exit status {status}"} (log: {active.log})')

    def _settle(self, active: _Active) -> None:
        """ Once the run's process has ended: its output read to the end, its time kept beside its checkpoint. """
        if getattr(active, 'settled', False):
            return
        if active.reader is not None:
            active.reader.join(timeout=30)
        _keep_elapsed(active)
        active.settled = True

    def _result(self, active: _Active) -> Dict[str, Any]:
        from .session import _finish, device_record
        finish = _finish({self.spec.name: (self.arm, self.seed)}, device_record(self.device))
        try:
            result = finish(active.spec, active.earlier + time.time() - active.start, active.resumed)
        except (OSError, ValueError, KeyError, RuntimeError) as e:
            raise RunFailed(f'its result could not be read ({type(e).__name__}: {e}) (log: {active.log})') from None
        print(f'[done] {self.spec.name}: final top-1 {result["final_top1"]:.2f}, best {result["best_top1"]:.2f}',
              flush=True)
        return result

    def checkpoint(self, *args: Any, **kwargs: Any) -> Optional[submitit.helpers.DelayedSubmission]:
        """ At the job's signal: the run stopped at its last finished epoch (stopped here if the signal did not reach
        it), and this run again as the requeued job's work; None (no requeue, the job fails) when this part ran to the
        signal before its time limit without finishing an epoch, which another part would not do either. """
        active: Optional[_Active] = getattr(self, '_active', None)
        if active is not None:
            deadline = time.monotonic() + STOP_GRACE
            while active.process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            if active.process.poll() is None:
                _stop([active], Outcome())
            self._settle(active)
            ran = time.time() - active.start
            if _epoch_of(self.spec.folder) == self._first_epoch and ran >= 0.9 * self.signal_after:
                print(f'{self.spec.name}: no epoch finished in {ran / 60:.0f} min, this job\'s time before its limit; '
                      f'not requeued (raise --slurm-time)', flush=True)
                return None
        print(f'{self.spec.name}: stopped at the job\'s signal; requeued, it resumes from its last finished epoch',
              flush=True)
        return submitit.helpers.DelayedSubmission(dataclasses.replace(self))


def _epoch_of(folder: Path) -> int:
    """ The epochs a run's folder holds (its summary's rows), 0 for none. """
    summary = folder / 'summary.csv'
    try:
        return max(0, len(summary.read_text().splitlines()) - 1)
    except OSError:
        return 0


def _signal_name(status: int) -> str:
    try:
        return signal.Signals(-status if status < 0 else status - 128).name
    except ValueError:
        return f'exit status {status}'
