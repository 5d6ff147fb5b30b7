""" `compare --launcher slurm` without a SLURM cluster: the options and their YAML file (the guide's own), each
refusal in one line before any work (SLURM's own words through a stand-in `sbatch`), how squeue's and sacct's answers
are read, the line of every way a job ends without its run's result, the display, and, on a machine where no real
cluster can start, the jobs themselves through submitit's local executor (the same code as on SLURM: a run done, one
stopped at its job's signal and requeued, one failing; submitting what is missing, never a run twice).
tests/test_slurm.py runs the guide's commands on a real SLURM where it can start. """
import dataclasses
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

from timm_structinit import cli
from timm_structinit.compare.job_display import JobsDisplay
from timm_structinit.compare.plan import Arm
from timm_structinit.compare.runner import RunSpec
from timm_structinit.compare.slurm_job import RunJob, stopped_by_signal
from timm_structinit.compare.slurm_queue import GONE, JobState, SlurmUnavailable, job_states, read_jobs
from timm_structinit.compare.slurm_request import SlurmRequest, slurm_request
from timm_structinit.compare.slurm_session import _ENDED, _failure, _submit_missing, _watch
from timm_structinit.errors import ConfigError
from timm_structinit_cli.slurm_options import SET_BY_COMPARE, sbatch_item, slurm_minutes
from timm_structinit_cli.structinit_parser import parse

from slurm_cluster import why_not_here

REPO = Path(__file__).resolve().parents[1]
BASE = ['--out', '{out}', '--dataset', 'sklearn/digits', '--epochs', '1', '--warmup-epochs', '0', '--model-kwargs',
        'embed_dim=16', 'depth=1', 'num_heads=2', 'patch_size=8']
SLURM = ['--launcher', 'slurm', '--slurm-time', '10']


def _tool(folder: Path, name: str, stdout: str = '', stderr: str = '', status: int = 0) -> None:
    """ A stand-in for a SLURM command on PATH: it records its arguments in NAME.args, prints `stdout` and `stderr`
    and exits with `status`. """
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f'{name}.out').write_text(stdout)
    (folder / f'{name}.err').write_text(stderr)
    (folder / name).write_text(f'#!/bin/sh\necho "$@" >> "{folder}/{name}.args"\ncat "{folder}/{name}.out"\n'
                               f'cat "{folder}/{name}.err" >&2\nexit {status}\n')
    (folder / name).chmod(0o755)


@pytest.fixture
def slurm_tools(tmp_path, monkeypatch):
    """ SLURM's commands on PATH as stand-ins that answer as an idle cluster does; a test makes one answer otherwise
    by writing it again. """
    tools = tmp_path / 'bin'
    for name in ('sbatch', 'squeue', 'scontrol', 'sacct'):
        _tool(tools, name, stderr='sbatch: Job 1 to start at 2026-11-28T10:00:00' if name == 'sbatch' else '')
    monkeypatch.setenv('PATH', f'{tools}{os.pathsep}{os.environ["PATH"]}')
    return tools


def _compare(argv, out, capsys):
    try:
        code = cli.main(['compare', *[a.replace('{out}', str(out)) for a in BASE], *argv])
    except SystemExit as e:  # a usage error, said by the parser
        code = e.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize('text, minutes', [('90', 90), ('1:30', 2), ('0:59', 1), ('1:30:00', 90), ('2-0', 2880),
                                           ('1-12:30', 2190), ('1-00:00:01', 1441), ('4:00:00', 240)])
def test_a_time_limit_is_read_in_every_form_sbatch_takes(text, minutes):
    assert slurm_minutes(text) == minutes


@pytest.mark.parametrize('text', ['0', '0:00:00', 'soon', '1h', '-5', '1:2:3:4', '', '1.5'])
def test_a_time_limit_sbatch_would_not_take_is_refused(text):
    with pytest.raises(ValueError, match=re.escape(repr(text))):
        slurm_minutes(text)


@pytest.mark.parametrize('key', sorted(SET_BY_COMPARE))
def test_an_sbatch_option_compare_sets_is_no_extra_option(key):
    with pytest.raises(ValueError, match=f'{key} is not an extra option'):
        sbatch_item(f'{key}=x')
    assert sbatch_item('mail-type=END') == ('mail-type', 'END')


@pytest.mark.parametrize('argv, words', [
    (['--slurm-time', '10'], '--slurm-time: an option of --launcher slurm'),
    (['--detach'], '--detach: an option of --launcher slurm'),
    ([*SLURM, '--concurrent', '2'], '--concurrent 2: with --launcher slurm every run is a job of its own'),
    ([*SLURM, '--time-limit', '60'], "--time-limit 60: with --launcher slurm each run's limit is --slurm-time"),
    (['--launcher', 'slurm'], "each run's time limit is needed: --slurm-time"),
    ([*SLURM, '--slurm-gpus', '2'], '--slurm-gpus 2: each run of a comparison is one process on one GPU at most'),
    ([*SLURM, '--slurm-time', '0'], "'0': a time limit must be longer than zero"),
    ([*SLURM, '--slurm-extra', 'output=x.log'], 'output is not an extra option'),
    ([*SLURM, '--slurm-config', '/nonexistent/cluster.yaml'],
     '--slurm-config /nonexistent/cluster.yaml: cannot be read'),
    ([*SLURM, '--slurm-signal-delay', '600'], '--slurm-signal-delay 600: the signal would come before a job starts'),
    ([*SLURM, '--device', 'cuda'], '--device cuda: the jobs ask for no GPU; add --slurm-gpus 1'),
])
def test_the_launchers_options_are_refused_in_one_line_before_any_work(tmp_path, capsys, slurm_tools, argv, words):
    code, stdout, err = _compare(argv, tmp_path / 'cmp', capsys)
    assert code == 2 and err.count('\n') == 1 and words in err, err
    assert not (tmp_path / 'cmp').exists() and not (slurm_tools / 'sbatch.args').exists()


def test_without_sbatch_on_the_machine_the_comparison_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv('PATH', str(tmp_path / 'no-tools'))
    code, stdout, err = _compare(SLURM, tmp_path / 'cmp', capsys)
    assert code == 2 and err.count('\n') == 1, err
    assert '--launcher slurm: no sbatch on this machine (PATH)' in err and not (tmp_path / 'cmp').exists()


ACCOUNT_REFUSAL = ('sbatch: error: Batch job submission failed: Invalid account or account/partition combination '
                   'specified\n')


def test_slurms_refusal_of_the_request_is_its_own_words_before_any_work(tmp_path, capsys, slurm_tools):
    _tool(slurm_tools, 'sbatch', stderr=ACCOUNT_REFUSAL, status=1)
    code, stdout, err = _compare([*SLURM, '--slurm-account', 'nobody'], tmp_path / 'cmp', capsys)
    assert code == 2 and err.count('\n') == 1, err
    assert ("SLURM refuses the jobs' request (the cluster's default partition, time limit 10 min, 0 GPUs, account "
            "nobody): Batch job submission failed: Invalid account or account/partition combination specified") in err
    assert '--test-only' in (slurm_tools / 'sbatch.args').read_text() and not (tmp_path / 'cmp').exists()


def _guide_yaml() -> str:
    return re.findall(r'```yaml\n(.*?)```', (REPO / 'docs' / 'cluster.md').read_text(), flags=re.S)[0]


def test_the_guides_yaml_is_read_and_the_command_line_wins(tmp_path, slurm_tools):
    (tmp_path / 'cluster.yaml').write_text(_guide_yaml())
    args = parse(['compare', '--out', 'x', '--launcher', 'slurm', '--slurm-config', str(tmp_path / 'cluster.yaml'),
                  '--slurm-time', '1:30:00', '--slurm-extra', 'constraint=a100'])
    request = slurm_request(args)
    assert request == SlurmRequest(time=90, partition='gpu', gpus=1, cpus=8, account='my_lab', qos='normal',
                                   extra={'constraint': 'a100'})
    asked = (slurm_tools / 'sbatch.args').read_text().split()
    for option in ('--test-only', '--time=90', '--partition=gpu', '--gpus-per-node=1', '--cpus-per-task=8',
                   '--account=my_lab', '--qos=normal', '--constraint=a100', '--signal=USR2@120', '--nodes=1'):
        assert option in asked, asked
    file_only = slurm_request(parse(['compare', '--out', 'x', '--launcher', 'slurm', '--slurm-config',
                                     str(tmp_path / 'cluster.yaml')]))
    assert file_only.time == 240 and file_only.extra == {'mem': '64G'}  # 4:00:00, not a base-60 number


@pytest.mark.parametrize('text, words', [
    ('time: soon', "time: 'soon' is not a time limit"),
    ('time: 10\ngpus: -1', "gpus: '-1' is not a whole number of at least 0"),
    ('time: 10\nextra: mem', "extra: 'mem' is not a mapping of sbatch options"),
    ('time: 10\nextra:\n  signal: USR1@60', 'signal is not an extra option: set by --slurm-signal-delay'),
    ('time: 10\nnodes: 2', "unknown key 'nodes'"),
    ('- time\n- 10', 'holds a list, not a mapping of keys'),
    ('time: [10', 'not valid YAML'),
])
def test_a_bad_yaml_file_is_one_line_naming_it(tmp_path, slurm_tools, text, words):
    (tmp_path / 'cluster.yaml').write_text(text)
    with pytest.raises(ConfigError) as e:
        slurm_request(parse(['compare', '--out', 'x', '--launcher', 'slurm', '--slurm-config',
                             str(tmp_path / 'cluster.yaml')]))
    assert str(e.value).startswith(f'--slurm-config {tmp_path / "cluster.yaml"}: ') and words in str(e.value)
    assert '\n' not in str(e.value) and not (slurm_tools / 'sbatch.args').exists()


# --- how the jobs stand ------------------------------------------------------------------------------------------

def test_squeue_then_sacct_say_how_the_jobs_stand(slurm_tools):
    _tool(slurm_tools, 'squeue', stdout='7|RUNNING|None|node3\n8|PENDING|Priority|\n10|CANCELLED by 0|None|\n')
    _tool(slurm_tools, 'sacct', stdout='9|COMPLETED|node2\n')
    states = job_states(['7', '8', '9', '10', '11'])
    assert states == {'7': JobState('RUNNING', 'None', 'node3'), '8': JobState('PENDING', 'Priority', ''),
                      '9': JobState('COMPLETED', '', 'node2'), '10': JobState('CANCELLED', 'None', ''),
                      '11': JobState(GONE)}
    assert [states[i].kind for i in ('7', '8', '9', '10', '11')] == ['running', 'queued', 'ended', 'ended', 'ended']
    assert '--jobs=7,8,9,10,11' in (slurm_tools / 'squeue.args').read_text()
    assert '--jobs=9,10,11' not in (slurm_tools / 'sacct.args').read_text()  # only those squeue did not know
    _tool(slurm_tools, 'squeue', stderr='slurm_load_jobs error: Invalid job id specified', status=1)
    _tool(slurm_tools, 'sacct', stderr='Slurm accounting storage is disabled', status=1)
    assert job_states(['12']) == {'12': JobState(GONE)}  # squeue's answer when the one job asked for is unknown
    _tool(slurm_tools, 'squeue', stderr='slurm_load_jobs error: Unable to contact slurm controller', status=1)
    with pytest.raises(SlurmUnavailable, match='Unable to contact slurm controller'):
        job_states(['12'])


@pytest.mark.parametrize('text', ['{"jobs": {"plain_s0": []}}', '{"jobs": ["1"]}', '{"jobs": {"plain_s0": [7]}}',
                                  '[]', '{"jobs"'])
def test_a_damaged_record_of_the_jobs_is_one_line_and_nothing_is_lost(tmp_path, capsys, slurm_tools, text):
    (tmp_path / 'cmp' / 'slurm').mkdir(parents=True)
    (tmp_path / 'cmp' / 'slurm' / 'jobs.json').write_text(text)
    before = {p: p.read_bytes() for p in tmp_path.rglob('*') if p.is_file() and 'bin' not in p.parts}
    code, stdout, err = _compare(SLURM, tmp_path / 'cmp', capsys)
    assert code == 2 and err.count('\n') == 1 and str(tmp_path / 'cmp' / 'slurm' / 'jobs.json') in err, err
    assert 'submits every unfinished run again' in err and 'Traceback' not in err
    assert {p: p.read_bytes() for p in tmp_path.rglob('*') if p.is_file() and 'bin' not in p.parts} == before


def test_a_local_comparison_refuses_runs_whose_jobs_are_still_queued(tmp_path, capsys, slurm_tools):
    (tmp_path / 'cmp' / 'slurm').mkdir(parents=True)
    (tmp_path / 'cmp' / 'slurm' / 'jobs.json').write_text('{"jobs": {"plain_s0": ["7"], "mimetic_s0": ["8"]}}')
    _tool(slurm_tools, 'squeue', stdout='7|COMPLETED|None|node3\n8|PENDING|Priority|\n')
    code, stdout, err = _compare(['--inits', 'plain', 'mimetic', '--seeds', '1', '--time-limit', '0.001'],
                                 tmp_path / 'cmp', capsys)
    assert code == 2 and err.count('\n') == 1, err
    assert 'holds runs submitted to SLURM whose jobs may still train them: mimetic_s0 (job 8)' in err, err
    assert 'plain_s0' not in err and not (tmp_path / 'cmp' / 'runs').exists()


# --- a job that ends without its run's result ----------------------------------------------------------------------

def _job(tmp_path, name='plain_s1', command=None) -> RunJob:
    runs = tmp_path / 'runs'
    return RunJob(RunSpec(name, command or ['true'], runs / name, 3), Arm('plain', None), 1, 'cpu', runs, 600.0)


@pytest.mark.parametrize('state', sorted(_ENDED))
@pytest.mark.parametrize('kept', [False, True])
def test_every_way_a_job_ends_without_its_result_is_one_line_naming_the_run_and_what_to_do(tmp_path, state, kept):
    job = _job(tmp_path)
    if kept:
        job.spec.folder.mkdir(parents=True)
        (job.spec.folder / 'last.pth.tar').write_bytes(b'epoch 1')
    line = _failure(tmp_path, job, '41', JobState(state))
    assert line.startswith(f'[failed] plain_s1 (job 41): {_ENDED[state].split(" (")[0]}') and '\n' not in line, line
    assert f'(log: {tmp_path / "slurm" / "41_0_log.err"})' in line  # the job's own log: the run wrote none
    assert line.endswith('the same command submits it again' + (', resuming from its last finished epoch' if kept
                                                                 else ''))


def test_a_failed_runs_line_is_its_own_error_and_log(tmp_path):
    from submitit.core.utils import JobPaths, cloudpickle_dump
    job = _job(tmp_path)
    job.log_dir.mkdir(parents=True)
    (job.log_dir / 'plain_s1.log').write_text('$ timm-structinit-train ...\n')
    trace = ('Traceback (most recent call last):\n  File "x.py", line 1\ntimm_structinit.compare.slurm_job.RunFailed: '
             f'--lr -1 must be > 0 (log: {job.log_dir / "plain_s1.log"})\n')
    (tmp_path / 'slurm').mkdir()
    cloudpickle_dump(('error', trace), JobPaths(tmp_path / 'slurm', '42', task_id=0).result_pickle)
    line = _failure(tmp_path, job, '42', JobState('FAILED'))
    assert line == (f'[failed] plain_s1 (job 42): --lr -1 must be > 0 (log: {job.log_dir / "plain_s1.log"}); the '
                    f'same command submits it again')


def test_a_job_not_requeued_for_want_of_an_epoch_says_so(tmp_path):
    from submitit.core.utils import JobPaths, cloudpickle_dump
    (tmp_path / 'slurm').mkdir()
    trace = ('Traceback (most recent call last):\nsubmitit.core.utils.UncompletedJobError: Job not requeued because: '
             'checkpoint function returned None.\n')
    cloudpickle_dump(('error', trace), JobPaths(tmp_path / 'slurm', '43', task_id=0).result_pickle)
    line = _failure(tmp_path, _job(tmp_path), '43', JobState('FAILED'))
    assert line.startswith("[failed] plain_s1 (job 43): no epoch finished before the time limit's signal, so the job "
                           'was not requeued (raise --slurm-time) (log: '), line


@pytest.mark.parametrize('status, stopped', [(143, True), (140, True), (138, True), (130, True), (-15, True),
                                             (-12, True), (1, False), (2, False), (-11, False), (-6, False),
                                             (139, False), (0, False), (None, False)])
def test_a_stop_by_a_schedulers_signal_is_told_from_a_failure(status, stopped):
    assert stopped_by_signal(status) is stopped


class _Ended:
    returncode = 143

    def poll(self):
        return self.returncode


@pytest.mark.parametrize('epochs_before, epochs_now, ran, requeued', [
    (0, 1, 100.0, True),   # an epoch finished in this part: requeued
    (2, 2, 10.0, True),    # stopped early (a pre-emption): requeued
    (2, 2, 95.0, False),   # ran to the signal before its time limit without an epoch: another part would not either
])
def test_a_job_at_its_signal_is_requeued_unless_its_part_finished_no_epoch_in_all_its_time(
        tmp_path, epochs_before, epochs_now, ran, requeued):
    from submitit.helpers import DelayedSubmission
    from timm_structinit.compare.runner import _Active
    job = dataclasses.replace(_job(tmp_path), signal_after=100.0)
    job.spec.folder.mkdir(parents=True)
    (job.spec.folder / 'summary.csv').write_text('epoch\n' + '0\n' * epochs_now)
    job._first_epoch = epochs_before
    job._active = _Active(job.spec, _Ended(), True, time.time() - ran, tmp_path / 'log', reader=None)
    job._active.settled = True
    again = job.checkpoint()
    assert isinstance(again, DelayedSubmission) is requeued
    if requeued:  # the same run, without this part's process
        assert again.function == job and not hasattr(again.function, '_active')


# --- the display -------------------------------------------------------------------------------------------------

class _Terminal:
    def __init__(self):
        self.text = ''

    def write(self, text):
        self.text += text

    def flush(self):
        pass

    def isatty(self):
        return True


def test_off_a_terminal_the_display_is_a_line_each_time_it_changes(capsys):
    display = JobsDisplay(4, 3)
    for _ in range(3):
        display.update(1, {'plain_s0': 2}, [('mimetic_s0', 'Priority'), ('plain_s1', 'PartitionTimeLimit')],
                       ['mimetic_s1'], 5)
    display.update(1, {'plain_s0': 3}, [], ['mimetic_s1'], 6)
    display.event('[done] plain_s0: final top-1 30.00')
    lines = capsys.readouterr().out.splitlines()
    assert lines == ['[1/4 done] running: plain_s0 epoch 2/3; queued: mimetic_s0, plain_s1 (PartitionTimeLimit); '
                     'failed: mimetic_s1', '[1/4 done] running: plain_s0 epoch 3/3; failed: mimetic_s1',
                     '[done] plain_s0: final top-1 30.00']


def test_on_a_terminal_the_display_updates_in_place():
    terminal = _Terminal()
    display = JobsDisplay(2, 3, terminal)
    display.update(0, {'plain_s0': 1}, [('mimetic_s0', '')], [], 1)
    display.event('[running] mimetic_s0 (job 8)')
    display.update(0, {'plain_s0': 2, 'mimetic_s0': 1}, [], [], 3)
    display.close()
    assert '\r' in terminal.text and terminal.text.count('\n') <= 3, repr(terminal.text)
    assert 'running: plain_s0 epoch 2/3, mimetic_s0 epoch 1/3' in terminal.text and '3/6' not in terminal.text
    assert '[running] mimetic_s0 (job 8)\n' in terminal.text


# --- the jobs, through submitit's local executor --------------------------------------------------------------------

FAKE_TRAINING = [sys.executable, str(REPO / 'tests' / 'fake_training.py')]


def _fake_job(runs: Path, name: str, *options: str) -> RunJob:
    """ A run of the stand-in training command as a job, stopping on SIGTERM and the job's signal. """
    command = [*FAKE_TRAINING, '--output', str(runs), '--experiment', name, '--epochs', '3', *options,
               '--stop-signals', 'SIGTERM', 'SIGUSR2']
    return RunJob(RunSpec(name, command, runs / name, 3), Arm(name.split('_')[0], None), 0, 'cpu', runs, 600.0)


def _processes_below(pid: int):
    """ The processes `pid` started, and theirs. """
    try:
        children = Path(f'/proc/{pid}/task/{pid}/children').read_text().split()
    except OSError:
        return []
    return [p for child in map(int, children) for p in (child, *_processes_below(child))]


def _wait_for(condition, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.skipif(why_not_here() is None, reason='a real SLURM cluster can start here: tests/test_slurm.py submits, '
                                                   'watches, requeues and fails jobs on it')
def test_jobs_through_submitit_are_submitted_once_watched_requeued_at_their_signal_and_failed_in_one_line(tmp_path,
                                                                                                      capsys):
    """ Two runs as jobs of submitit's local executor (the code that runs on SLURM): a second call while they run
    submits nothing; one gets its job's signal in mid-run (sent to every process of the job, as SLURM sends it), is
    requeued by submitit's checkpointing and resumes from its last finished epoch to the result an unstopped run gives
    (the stand-in's top-1 is 10 k at epoch k), one fails with its training command's line and its log; the watching
    ends with one run done and that line, and a call once the jobs have ended submits the failed run alone. """
    out = tmp_path / 'cmp'
    jobs = {name: _fake_job(out / 'runs', name, *options) for name, options in (
        ('mimetic_s0', ['--epoch-seconds', '1.5']), ('impulse3_s0', ['--fail']))}
    request = SlurmRequest(time=10, poll=0.2)
    record, submitted = _submit_missing(jobs, out, request, 'local')
    assert submitted == ['mimetic_s0', 'impulse3_s0'] and record == read_jobs(out / 'slurm')
    assert _submit_missing(jobs, out, request, 'local') == (record, [])  # attached: nothing submitted again
    summary = out / 'runs' / 'mimetic_s0' / 'summary.csv'
    _wait_for(lambda: summary.is_file() and len(summary.read_text().splitlines()) == 2)  # its first epoch kept
    for pid in _processes_below(int(record['mimetic_s0'][0])):  # the job's processes, below the local controller
        os.kill(pid, signal.SIGUSR2)
    finished, failed = _watch(jobs, out, request, 'local', JobsDisplay(2, 3), poll_display=0.1)
    assert list(finished) == ['mimetic_s0'] and list(failed) == ['impulse3_s0']
    resumed = finished['mimetic_s0']
    assert resumed['curve'] == [10.0, 20.0, 30.0] and resumed['resumed'] and resumed['parts'] == 2, resumed
    log = (out / 'runs' / 'mimetic_s0.log').read_text()
    assert log.count('$ ') == 2 and log.splitlines()[-1].startswith('epoch   3/3') and 'epoch   1/3' in log
    assert failed['impulse3_s0'] == (f'[failed] impulse3_s0 (job {record["impulse3_s0"][0]}): --lr -1 must be > 0 '
                                     f'(log: {out / "runs" / "impulse3_s0.log"}); the same command submits it again')
    shown = capsys.readouterr().out
    assert '[done] mimetic_s0: final top-1 30.00' in shown and failed['impulse3_s0'] in shown, shown
    assert 'running: mimetic_s0 epoch 1/3' in shown
    again, resubmitted = _submit_missing(jobs, out, request, 'local')
    assert resubmitted == ['impulse3_s0'] and again['impulse3_s0'][0] == record['impulse3_s0'][0]
    assert len(again['impulse3_s0']) == 2 and again['mimetic_s0'] == record['mimetic_s0']
