""" One call of `compare --launcher slurm` once its plan is checked: every run (arm x seed) not done and without a job
still queued or running is submitted as a SLURM job of its own (`slurm_job`, through submitit), its job id kept in
`--out/slurm/jobs.json` (`slurm_queue`); then, unless `--detach`, compare watches the jobs on one display
(`job_display`) until each run is done or has failed, and writes the answer from the runs as a local comparison does
(`session`). The run folders, their files, the resume rules and the answer are a local comparison's.

A run whose job ended without its result (it failed, was cancelled, timed out, lost its node) is one line naming the
run, its job, why and its log; the other runs go on, and the same command submits it again, resuming from its last
finished epoch. Ctrl-C stops the watching, not the jobs. The exit status: 0 when every run is done (or, with
`--detach`, submitted), 1 when a run failed, 128 + N when signal N stopped the watching, 2 for bad input (a refusal of
SLURM's included), before any job is submitted. """
import argparse
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from ..errors import ConfigError
from .job_display import JobsDisplay
from .plan import run_name
from .records import RESULT_FILE, read_result
from .runner import _EPOCH, RunSpec
from .slurm_job import RunJob, job_signal
from .slurm_queue import (
    GONE, JOBS_FOLDER, JobState, SlurmUnavailable, job_states, read_jobs, submit_job, write_jobs)
from .slurm_request import SlurmRequest, make_executor

__all__ = ['run_on_slurm', 'collect_command']

# what a job that ended without its run's result says, by SLURM's final state
_ENDED = {
    'CANCELLED': 'its job was cancelled (scancel)',
    'TIMEOUT': 'its job reached its time limit before it was requeued (raise --slurm-signal-delay)',
    'NODE_FAIL': 'the node of its job failed',
    'BOOT_FAIL': 'the node of its job failed to start',
    'OUT_OF_MEMORY': 'its job ran out of memory (ask for more: --slurm-extra mem=...)',
    'PREEMPTED': 'its job was pre-empted and not requeued',
    'DEADLINE': 'its job reached its deadline',
    'COMPLETED': "its job ended without writing the run's result",
    'FAILED': 'its job failed before its run could say why',
    GONE: 'its job is no longer known to SLURM and left no result',
}
# submitit's words for a job its checkpoint did not requeue (`RunJob.checkpoint` returned None), and what they mean here
_NOT_REQUEUED = ('checkpoint function returned None', 'no epoch finished before the time limit\'s signal, so the job '
                                                       'was not requeued (raise --slurm-time)')


def collect_command() -> str:
    """ The command that collects this call's comparison: the same, without --detach. """
    return 'timm-structinit compare ' + shlex.join(a for a in sys.argv[2:] if a != '--detach')


def _jobs(checked, out: Path, request: SlurmRequest) -> Dict[str, RunJob]:
    """ Each run of the plan as a job: the local comparison's training command, stopping also on the signal submitit
    has SLURM send before the time limit. """
    plan = checked.plan
    first = next(iter(checked.arm_args.values()))[0]
    stops = list(dict.fromkeys([*first.stop_signals, job_signal()]))
    runs_dir = out / 'runs'
    return {run_name(arm, seed): RunJob(
        RunSpec(run_name(arm, seed), plan.command(arm, seed, str(runs_dir)) + ['--stop-signals', *stops],
                runs_dir / run_name(arm, seed), first.epochs + first.cooldown_epochs),
        arm, seed, first.device, runs_dir, request.time * 60.0 - request.signal_delay) for arm, seed in plan.runs()}


def _is_done(job: RunJob) -> bool:
    return (job.spec.folder / RESULT_FILE).is_file()


def _submit_missing(jobs: Dict[str, RunJob], out: Path, request: SlurmRequest, cluster: str,
                    ) -> Tuple[Dict[str, List[str]], List[str]]:
    """ Submit every run that is not done and has no job queued or running; the record of every run's jobs and the
    runs submitted. Under the folder's lock, so that two calls never submit a run twice. """
    from filelock import FileLock, Timeout
    folder = out / JOBS_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    try:
        lock = FileLock(str(folder / 'jobs.json.lock'), timeout=0)
        lock.acquire()
    except Timeout:
        raise ConfigError(f'--out {out}: another compare is submitting its jobs now; wait for it') from None
    try:
        record = read_jobs(folder)
        current = {name: ids[-1] for name, ids in record.items() if name in jobs and not _is_done(jobs[name])}
        states = job_states(current.values(), cluster)
        missing = [name for name, job in jobs.items() if not _is_done(job) and
                   (name not in current or states[current[name]].kind == 'ended')]
        executor = make_executor(request, folder, cluster) if missing else None
        for done, name in enumerate(missing):
            try:
                job_id = submit_job(executor, jobs[name], f'{out.name}.{name}')
            except ConfigError as e:
                kept = f'; the {done} run(s) submitted before it are kept' if done else ''
                raise ConfigError(f'{e}{kept}; fix the --slurm options and run the same command again') from None
            record.setdefault(name, []).append(job_id)
            write_jobs(folder, record)
        return record, missing
    except SlurmUnavailable as e:
        raise ConfigError(f'--launcher slurm: SLURM does not answer ({e}); nothing was submitted, try again') from None
    finally:
        lock.release()


def _job_error(out: Path, job_id: str) -> Optional[str]:
    """ The error a job's run ended with, as the job wrote it (submitit's result file), on one line. """
    from submitit.core.utils import JobPaths, pickle_load
    try:
        outcome, value = pickle_load(JobPaths(out / JOBS_FOLDER, job_id, task_id=0).result_pickle)
    except (OSError, EOFError, ValueError, ImportError, AttributeError):
        return None
    if outcome != 'error':
        return None
    last = next((line for line in reversed(str(value).splitlines()) if line.strip()), '')
    if _NOT_REQUEUED[0] in last:
        return _NOT_REQUEUED[1]
    return re.sub(r'^[\w.]+(Error|Failed|Exception): ', '', last.strip()) or None


def _failure(out: Path, job: RunJob, job_id: str, state: JobState) -> str:
    """ One line: why a run's job ended without its result, where its log is, and what to do. """
    why = (_job_error(out, job_id) if state.state in ('FAILED', GONE, 'COMPLETED') else None) or \
        _ENDED.get(state.state, f'its job ended {state.state}')
    log = job.log_dir / f'{job.spec.name}.log'
    if '(log: ' not in why:
        from submitit.core.utils import JobPaths
        why += f' (log: {log if log.is_file() else JobPaths(out / JOBS_FOLDER, job_id, task_id=0).stderr})'
    resume = ', resuming from its last finished epoch' if (job.spec.folder / 'last.pth.tar').is_file() else ''
    return f'[failed] {job.spec.name} (job {job_id}): {why}; the same command submits it again{resume}'


def _epoch(job: RunJob) -> int:
    """ The last epoch the run's log says it finished (0 before any). """
    log = job.log_dir / f'{job.spec.name}.log'
    try:
        with open(log, 'rb') as f:
            f.seek(max(0, f.seek(0, 2) - 8192))
            lines = f.read().decode('utf-8', 'replace').splitlines()
    except OSError:
        return 0
    return next((int(m.group(1)) for m in map(_EPOCH.match, reversed(lines)) if m), 0)


# seconds a job SLURM says ended is watched before its run counts as failed: a COMPLETED job's result.json may take
# that long to show on a shared file system, and SLURM requeues a job pre-empted or whose node failed where the
# cluster says so (PreemptMode=REQUEUE, JobRequeue)
ENDED_GRACE = 30.0
_MAY_COME_BACK = ('COMPLETED', 'PREEMPTED', 'NODE_FAIL', 'BOOT_FAIL')


def _done_line(name: str, result: dict) -> str:
    return (f'[done] {name}: final top-1 {result["final_top1"]:.2f}, best {result["best_top1"]:.2f}, '
            f'{result["seconds"] / 60:.1f} min')


def _ask(record: Dict[str, List[str]], names: List[str], cluster: str, display: JobsDisplay,
         unavailable: List[str]) -> Optional[Dict[str, JobState]]:
    """ How the current jobs of `names` stand; None (said once) while squeue does not answer. """
    try:
        states = job_states([record[name][-1] for name in names], cluster)
    except SlurmUnavailable as e:
        if str(e) not in unavailable:
            display.event(f'[squeue] {e}; asking again')
            unavailable.append(str(e))
        return None
    unavailable.clear()
    return states


def _changed(display: JobsDisplay, name: str, job_id: str, state: JobState, seen: bool) -> None:
    """ The line of a run whose job started running, or went back to the queue (requeued) after it was `seen`. """
    if state.kind == 'running':
        display.event(f'[running] {name} (job {job_id}{", " + state.node if state.node else ""})')
    elif seen:
        display.event(f'[requeued] {name} (job {job_id}): it resumes from its last finished epoch')


def _watch(jobs: Dict[str, RunJob], out: Path, request: SlurmRequest, cluster: str, display: JobsDisplay,
           poll_display: float = 1.0) -> Tuple[Dict[str, dict], Dict[str, str]]:
    """ Follow the jobs until each run is done or has failed: the finished runs' results and the failed runs' lines. """
    finished = {name: read_result(job.spec.folder / RESULT_FILE) for name, job in jobs.items() if _is_done(job)}
    failed: Dict[str, str] = {}
    kinds: Dict[str, str] = {}
    ended_since: Dict[str, float] = {}
    states: Dict[str, JobState] = {}
    asked, unavailable = float('-inf'), []
    while True:
        open_runs = [name for name in jobs if name not in finished and name not in failed]
        record = read_jobs(out / JOBS_FOLDER)  # again: another call may have submitted a run since
        if open_runs and time.monotonic() - asked >= request.poll:
            states = _ask(record, open_runs, cluster, display, unavailable) or states
            asked = time.monotonic()
        for name in open_runs:
            job, job_id = jobs[name], record[name][-1]
            state = states.get(job_id)
            if _is_done(job):
                finished[name] = read_result(job.spec.folder / RESULT_FILE)
                display.event(_done_line(name, finished[name]))
            elif state is not None and state.kind == 'ended':
                if state.state in _MAY_COME_BACK and \
                        time.monotonic() - ended_since.setdefault(name, time.monotonic()) < ENDED_GRACE:
                    continue
                failed[name] = _failure(out, job, job_id, state)
                display.event(failed[name])
            elif state is not None:
                ended_since.pop(name, None)
                if state.kind != kinds.get(name):
                    _changed(display, name, job_id, state, name in kinds)
                    kinds[name] = state.kind
        _show(display, jobs, finished, failed, kinds, states, record)
        if len(finished) + len(failed) == len(jobs):
            return finished, failed
        time.sleep(poll_display)


def _show(display: JobsDisplay, jobs: Dict[str, RunJob], finished: Dict[str, dict], failed: Dict[str, str],
          kinds: Dict[str, str], states: Dict[str, JobState], record: Dict[str, List[str]]) -> None:
    open_runs = [name for name in jobs if name not in finished and name not in failed]
    epochs = {name: _epoch(jobs[name]) for name in open_runs}
    running = {name: epochs[name] for name in open_runs if kinds.get(name) == 'running'}
    queued = [(name, states[record[name][-1]].reason if record[name][-1] in states else '')
              for name in open_runs if kinds.get(name) != 'running']
    total = sum(jobs[name].spec.epochs for name in finished) + sum(epochs.values())
    display.update(len(finished), running, queued, list(failed), total)


def _print_header(checked, jobs: Dict[str, RunJob], record: Dict[str, List[str]], submitted: List[str],
                  request: SlurmRequest, out: Path) -> None:
    plan, images = checked.plan, checked.images
    epochs = next(iter(jobs.values())).spec.epochs
    print(f'{len(jobs)} runs ({len(plan.arms)} arms x {plan.seeds} seeds) of {checked.model_built} on {images[0]} '
          f'training and {images[1]} evaluation images, {epochs} epochs each', flush=True)
    print(f'each a SLURM job: {request.describe()} (job logs in {out / JOBS_FOLDER})', flush=True)
    done = [name for name, job in jobs.items() if _is_done(job)]
    waiting = [name for name in jobs if name not in done and name not in submitted]
    parts = [f'submitted {", ".join(f"{name} (job {record[name][-1]})" for name in submitted)}'] if submitted else []
    parts += [f'queued or running already {", ".join(f"{n} (job {record[n][-1]})" for n in waiting)}'] if waiting \
        else []
    parts += [f'done already {", ".join(done)}'] if done else []
    print('; '.join(parts), flush=True)


def run_on_slurm(args: argparse.Namespace, out: Path, checked, request: SlurmRequest, cluster: str = 'slurm') -> int:
    """ Submit what is missing, then (unless --detach) watch the jobs and write the answer; the exit status. """
    from ..errors import exit_status
    from .records import SETTINGS_FILE, read_settings
    from .session import PROG, _print_answer, _write
    jobs = _jobs(checked, out, request)
    record, submitted = _submit_missing(jobs, out, request, cluster)
    _print_header(checked, jobs, record, submitted, request, out)
    if args.detach and not all(_is_done(job) for job in jobs.values()):
        print(f'detached: the jobs train on their own; collect the answer with: {collect_command()}', flush=True)
        return 0
    settings = read_settings(out / SETTINGS_FILE)
    display = JobsDisplay(len(jobs), next(iter(jobs.values())).spec.epochs)
    try:
        finished, failed = _watch(jobs, out, request, cluster, display)
    except KeyboardInterrupt as e:
        display.close()
        _write(out, settings)  # the answer from the runs finished so far
        going = [ids[-1] for name, ids in read_jobs(out / JOBS_FOLDER).items() if name in jobs and
                 not _is_done(jobs[name])]
        print(f'{PROG}: stopped watching ({e.args[0] if e.args else "SIGINT"}); the jobs go on in SLURM'
              + (f' (scancel {" ".join(going)} cancels them)' if going else '')
              + f'; collect the answer with: {collect_command()}', file=sys.stderr)
        return exit_status(e)
    display.close()
    _print_answer(out, _write(out, settings))
    if failed:
        print(f'{PROG}: {len(failed)} of {len(jobs)} runs not finished ({", ".join(failed)}); the same command '
              f'submits them again (exit status 1)', file=sys.stderr)
        return 1
    return 0
