""" A comparison's jobs on SLURM: the record of the jobs submitted for each run (`--out/slurm/jobs.json`, read back
checked, so that a later call attaches to them and never submits a run twice), a run's job submitted through submitit
with SLURM's refusal as one line, and how the jobs stand: squeue for the jobs the controller knows, sacct for older
ones where the cluster keeps accounting. (With submitit's local executor, which the tests use, a job is a process
here: running while it lives.) """
import contextlib
import io
import json
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List

from ..errors import ConfigError
from ..utils.atomic import atomic_file
from ..utils.file_schema import SlurmJobs, read_json

__all__ = ['JOBS_FOLDER', 'JOBS_FILE', 'JobState', 'GONE', 'SlurmUnavailable', 'read_jobs', 'write_jobs', 'submit_job',
           'job_states', 'refuse_jobs_running', 'sbatch_refusal']

JOBS_FOLDER = 'slurm'  # under --out: submitit's scripts, pickles and job logs, and the record of the jobs
JOBS_FILE = 'jobs.json'
GONE = 'GONE'  # neither squeue nor sacct knows the job (long ended, on a cluster without accounting)
_QUEUED = {'PENDING', 'REQUEUED', 'REQUEUE_FED', 'REQUEUE_HOLD', 'SPECIAL_EXIT', 'RESV_DEL_HOLD'}
_RUNNING = {'CONFIGURING', 'RUNNING', 'COMPLETING', 'SIGNALING', 'STAGE_OUT', 'SUSPENDED', 'STOPPED', 'RESIZING'}


@dataclass(frozen=True)
class JobState:
    """ A job as SLURM reports it: its state (GONE when SLURM no longer knows it), why it waits, where it runs. """
    state: str
    reason: str = ''
    node: str = ''

    @property
    def kind(self) -> str:
        """ queued, running or ended. """
        return 'queued' if self.state in _QUEUED else 'running' if self.state in _RUNNING else 'ended'


class SlurmUnavailable(RuntimeError):
    """ squeue did not answer (the controller down or unreachable): how the jobs stand is not known. """


def _jobs_fix(path: Path) -> str:
    return ('put back the file compare wrote, or delete it once none of its jobs is queued or running (squeue --me): '
            'without it, a rerun submits every unfinished run again')


def read_jobs(folder: Path) -> Dict[str, List[str]]:
    """ The jobs submitted for each run (run name -> job ids, the last one current), from `folder`/jobs.json; {} when
    there is none. ConfigError naming the file when it is not what compare wrote. """
    path = folder / JOBS_FILE
    if not path.exists():
        return {}
    return read_json(path, SlurmJobs, _jobs_fix(path)).jobs


def write_jobs(folder: Path, jobs: Dict[str, List[str]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_file(folder / JOBS_FILE) as tmp:
        tmp.write_text(json.dumps(dict(jobs=jobs), indent=1) + '\n')


def sbatch_refusal(message: str) -> str:
    """ sbatch's own words for a refusal, on one line. """
    lines = [re.sub(r'^\w+: (error: )?', '', line.strip()) for line in message.splitlines() if line.strip()]
    return '; '.join(dict.fromkeys(lines)) or 'no reason given'


def submit_job(executor, job, name: str) -> str:
    """ Submit `job` as a job named `name`; its id. ConfigError with sbatch's reason when SLURM refuses it (an unknown
    partition, account or QOS, a request no node can hold), and nothing of the attempt left in the folder. """
    from submitit.core.utils import FailedJobError
    executor.update_parameters(name=name)
    folder, started = Path(executor.folder), time.time()
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # submitit prints sbatch's refusal before raising it
            return executor.submit(job).job_id
    except (FailedJobError, OSError, subprocess.SubprocessError) as e:
        for leftover in [*folder.glob('*.pkl'), *folder.glob('.submission_file_*.sh')]:
            if re.fullmatch(r'(\.submission_file_)?[0-9a-f]{32}\.(pkl|sh)', leftover.name) and \
                    leftover.stat().st_mtime >= started - 1:
                leftover.unlink()
        raise ConfigError(f'SLURM refused the job of {name}: {sbatch_refusal(str(e))}') from None


def _squeue(ids: List[str]) -> Dict[str, JobState]:
    command = ['squeue', '--noheader', '--states=all', '--format=%i|%T|%r|%N', f'--jobs={",".join(ids)}']
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        raise SlurmUnavailable(f'squeue: {e}') from None
    if done.returncode != 0:
        if 'Invalid job id' in done.stderr:  # the one job asked for is no longer known
            return {}
        raise SlurmUnavailable(f'squeue: {sbatch_refusal(done.stderr or done.stdout)}')
    states = {}
    for line in done.stdout.splitlines():
        fields = line.strip().split('|')
        if len(fields) == 4 and fields[0] in ids:
            states[fields[0]] = JobState(fields[1].split()[0], fields[2], fields[3])
    return states


def _sacct(ids: List[str]) -> Dict[str, JobState]:
    """ The final states of jobs the controller has forgotten, where the cluster keeps accounting ({} elsewhere). """
    command = ['sacct', '--noheader', '--parsable2', '--allocations', '--format=JobID,State,NodeList',
               f'--jobs={",".join(ids)}']
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return {}
    states = {}
    for line in done.stdout.splitlines() if done.returncode == 0 else []:
        fields = line.strip().split('|')
        if len(fields) == 3 and fields[0] in ids:
            states[fields[0]] = JobState(fields[1].split()[0], '', fields[2])
    return states


def _local_state(job_id: str) -> JobState:
    """ A job of submitit's local executor: its controller process, running while it lives. """
    try:
        pid = int(job_id)
        os.kill(pid, 0)
        with open(f'/proc/{pid}/stat') as f:
            ended = f.read().rpartition(')')[2].split()[0] == 'Z'  # ended, not yet reaped by its parent
    except (ValueError, ProcessLookupError, OSError):
        ended = True
    return JobState(GONE if ended else 'RUNNING')


def job_states(ids: Iterable[str], cluster: str = 'slurm') -> Dict[str, JobState]:
    """ How each job stands; GONE for those SLURM no longer knows. SlurmUnavailable when squeue does not answer. """
    ids = sorted(set(ids), key=lambda i: (len(i), i))
    if not ids:
        return {}
    if cluster == 'local':
        return {i: _local_state(i) for i in ids}
    states = _squeue(ids)
    forgotten = [i for i in ids if i not in states]
    if forgotten:
        states.update(_sacct(forgotten))
    return {i: states.get(i, JobState(GONE)) for i in ids}


def refuse_jobs_running(out: Path, record: Dict[str, List[str]]) -> None:
    """ A comparison trained here refuses a folder whose runs have SLURM jobs (`record`, its jobs.json) still queued
    or running (both would train the same runs), naming them and what to do; where SLURM cannot be asked, any
    unfinished run's job counts. """
    import shutil
    from .records import RESULT_FILE
    current = {name: ids[-1] for name, ids in record.items() if not (out / 'runs' / name / RESULT_FILE).is_file()}
    if not current:
        return
    try:
        states = job_states(current.values()) if shutil.which('squeue') else None
    except SlurmUnavailable:
        states = None
    going = [f'{name} (job {job_id})' for name, job_id in current.items()
             if states is None or states[job_id].kind != 'ended']
    if going:
        where = '' if states is not None else ' (SLURM cannot be asked from here)'
        raise ConfigError(f'--out {out} holds runs submitted to SLURM whose jobs may still train them{where}: '
                          f'{", ".join(going)}; collect them with --launcher slurm, or cancel them (scancel) and '
                          f'delete {out / JOBS_FOLDER / JOBS_FILE}')
