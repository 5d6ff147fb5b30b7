""" `compare --launcher slurm` and the torchrun script on a real SLURM cluster of one node, started on the test
machine (`slurm_cluster`; skipped, naming why, where it cannot start): the cluster guide's own commands
(docs/cluster.md), shrunk through options a user could add (2 arms x 2 seeds, a tiny model, 3 epochs on a tiny image
folder, on the CPU). The comparison is submitted with --detach; the collecting call attaches to the jobs while one is
requeued by hand and one gets the time limit's signal in mid-run (both resume), one run fails and one job is cancelled
(each one line); a last call submits only those two, and the answer equals the one a local comparison of the same runs
writes. SLURM's own refusal of a partition is one line before anything is submitted. """
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from PIL import Image

from timm_structinit import cli

from slurm_cluster import ClusterUnavailable, free_port, start_cluster, stop_cluster
from test_docs import COMMAND_LINES

REPO = Path(__file__).resolve().parents[1]
GUIDE = Path('docs/cluster.md')
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group('slurm')]
# what makes the guide's comparison quick here: options a user could add
SHRINK = ['--inits', 'plain', 'mimetic', '--seeds', '2', '--epochs', '3', '--train-subset', '320', '--val-subset', '40',
          '-b', '4', '--workers', '0', '--warmup-epochs', '0', '--model-kwargs', 'embed_dim=16', 'depth=1', 'num_heads=2']
SLURM_SHRINK = ['--slurm-gpus', '0', '--slurm-cpus', '1', '--slurm-poll', '1']
RUNS = ('plain_s0', 'mimetic_s0', 'plain_s1', 'mimetic_s1')


def _guide_lines():
    return [line for doc, line, _ in COMMAND_LINES if doc == GUIDE]


def _guide_yaml() -> str:
    return re.findall(r'```yaml\n(.*?)```', (REPO / GUIDE).read_text(), flags=re.S)[0]


@pytest.fixture(scope='module')
def cluster(tmp_path_factory):
    folder = tmp_path_factory.mktemp('cluster')
    try:
        env = start_cluster(folder)
    except ClusterUnavailable as e:
        pytest.skip(f'no SLURM cluster on this machine: {e}')
    yield dict(env, OMP_NUM_THREADS='1', PYTHONPATH=os.pathsep.join(filter(None, [str(REPO),
                                                                                   env.get('PYTHONPATH')])))
    stop_cluster(folder)


@pytest.fixture(scope='module')
def workdir(tmp_path_factory):
    """ The folder the guide's commands run in: its cluster.yaml, and a tiny CIFAR-10-like image folder (32 training
    and 8 test images a class) for path/to/cifar10. """
    root = tmp_path_factory.mktemp('guide')
    (root / 'cluster.yaml').write_text(_guide_yaml())
    g = torch.Generator().manual_seed(0)
    for split, count in (('train', 32), ('test', 8)):
        for c in range(10):
            (root / 'cifar10' / split / f'class{c}').mkdir(parents=True)
            for i in range(count):
                pixels = torch.rand(32, 32, 3, generator=g) * 200 + c * 5
                Image.fromarray(pixels.byte().numpy()).save(root / 'cifar10' / split / f'class{c}' / f'{i}.png')
    return root


def _command(line: str, workdir: Path, *extra: str):
    """ A guide's command line as this test runs it: the package's command through this interpreter, the tiny image
    folder for path/to/cifar10, `extra` options after it. """
    tokens = shlex.split(line.replace('path/to/cifar10', str(workdir / 'cifar10')))
    assert tokens[0] == 'timm-structinit', line
    return [sys.executable, '-m', 'timm_structinit.cli', *tokens[1:], *extra]


def _compare_lines(detach: bool):
    return [line for line in _guide_lines() if line.startswith('timm-structinit compare') and
            '--launcher slurm' in line and ('--detach' in line) == detach]


def _wait(condition, seconds: float, what: str, shown=()) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f'waited {seconds:.0f} s for {what}; shown:\n' + ''.join(shown)
        time.sleep(0.1)


def _epochs_logged(out: Path, run: str) -> int:
    log = out / 'runs' / f'{run}.log'
    return len(re.findall(r'^epoch +\d+/', log.read_text(), flags=re.M)) if log.is_file() else 0


def _jobs(out: Path) -> dict:
    return json.loads((out / 'slurm' / 'jobs.json').read_text())['jobs']


def _in_process(argv, workdir: Path, env, monkeypatch, capsys):
    """ compare in this process (torch and timm are imported already: a process of its own would import them again),
    in `workdir` with the cluster's environment: its exit status, standard output and error. """
    for name in ('SLURM_CONF', 'OMP_NUM_THREADS', 'PYTHONPATH'):
        monkeypatch.setenv(name, env[name])
    monkeypatch.chdir(workdir)
    capsys.readouterr()
    try:
        code = cli.main(argv)
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def _slurm(line: str, job_id: str, env) -> None:
    """ One of the guide's SLURM commands on a job of the comparison (its example id replaced). """
    subprocess.run(shlex.split(line.replace('1234', job_id)), env=env, check=True, timeout=60)


def test_the_guides_comparison_runs_on_slurm_and_answers_as_a_local_one(cluster, workdir, monkeypatch, capsys):
    env, out = cluster, workdir / 'compare' / 'cifar10_10k'
    detach, = _compare_lines(detach=True)
    collect, = _compare_lines(detach=False)
    requeue, = [line for line in _guide_lines() if line.startswith('scontrol requeue')]
    signal_line, = [line for line in _guide_lines() if line.startswith('scancel --signal=USR2')]
    # mimetic_s1 fails: its folder holds a checkpoint that is none, which its training command refuses
    (out / 'runs' / 'mimetic_s1').mkdir(parents=True)
    (out / 'runs' / 'mimetic_s1' / 'last.pth.tar').write_bytes(b'not a checkpoint')
    done = subprocess.run(_command(detach, workdir, *SHRINK, *SLURM_SHRINK), cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    collecting = done.stdout.strip().splitlines()[-1].split('collect the answer with: ')[1]
    assert collecting == shlex.join(['timm-structinit', *_command(collect, workdir, *SHRINK, *SLURM_SHRINK)[3:]])
    jobs = _jobs(out)
    assert sorted(jobs) == sorted(RUNS) and all(len(ids) == 1 for ids in jobs.values())
    # the jobs wait until the collecting call has attached: on a busy machine a tiny job can end before that call
    # has started, and the call then finds it done (held while queued, suspended while running; scontrol refuses
    # the one that does not apply to a job's state)
    ids = [job_ids[0] for job_ids in jobs.values()]
    for action in ('hold', 'suspend'):
        for job_id in ids:
            subprocess.run(['scontrol', action, job_id], env=env, capture_output=True, timeout=60)
    watcher = subprocess.Popen([sys.executable, '-m', 'timm_structinit.cli', *shlex.split(collecting)[1:]],
                               cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    shown = []
    reader = threading.Thread(target=lambda: shown.extend(watcher.stdout), daemon=True)
    reader.start()
    _wait(lambda: any(line.startswith('queued or running already plain_s0') for line in shown), 240, 'attaching',
          shown)
    for action in ('release', 'resume'):
        for job_id in ids:
            subprocess.run(['scontrol', action, job_id], env=env, capture_output=True, timeout=60)
    subprocess.run(['scancel', jobs['plain_s1'][0]], env=env, check=True, timeout=60)  # cancelled by hand
    for run, line in (('plain_s0', requeue), ('mimetic_s0', signal_line)):  # SIGTERM, SLURM requeues the job; the
        # time limit's signal, submitit requeues it
        _wait(lambda: any(s.startswith(f'[running] {run}') for s in shown) and _epochs_logged(out, run) >= 1, 240,
              f'the first epoch of {run}', shown)
        _slurm(line, jobs[run][0], env)
    watcher.wait(timeout=400)
    reader.join(timeout=30)
    stdout, stderr = ''.join(shown), watcher.stderr.read()
    assert watcher.returncode == 1, stdout + stderr
    _check_the_collecting_call(out, jobs, stdout, stderr)
    # the failed and the cancelled run again: only they are submitted
    (out / 'runs' / 'mimetic_s1' / 'last.pth.tar').unlink()
    code, again, err = _in_process(shlex.split(collecting)[1:], workdir, env, monkeypatch, capsys)
    assert code == 0, again + err
    assert re.search(r'submitted plain_s1 \(job \d+\), mimetic_s1 \(job \d+\); done already plain_s0, mimetic_s0',
                     again), again
    assert {run: len(ids) for run, ids in _jobs(out).items()} == dict(plain_s0=1, mimetic_s0=1, plain_s1=2,
                                                                       mimetic_s1=2)
    _check_the_answer_is_the_local_ones(out, detach, workdir, env, monkeypatch, capsys)


def _check_the_collecting_call(out: Path, jobs: dict, stdout: str, stderr: str) -> None:
    for run in ('plain_s0', 'mimetic_s0'):
        assert f'[requeued] {run} (job {jobs[run][0]})' in stdout, stdout
        assert re.search(rf'^\[done\] {run}: final top-1', stdout, flags=re.M), stdout
        result = json.loads((out / 'runs' / run / 'result.json').read_text())
        assert result['resumed'] and result['parts'] == 2 and result['epochs'] == 3, result
    assert 'Requeued job' in (out / 'slurm' / f'{jobs["mimetic_s0"][0]}_0_log.err').read_text() + \
        (out / 'slurm' / f'{jobs["mimetic_s0"][0]}_0_log.out').read_text()  # submitit's checkpoint requeued it
    failed = sorted(line for line in stdout.splitlines() if line.startswith('[failed]'))
    assert len(failed) == 2, stdout
    assert failed[1].startswith(f'[failed] plain_s1 (job {jobs["plain_s1"][0]}): its job was cancelled (scancel)')
    assert failed[0].startswith(f'[failed] mimetic_s1 (job {jobs["mimetic_s1"][0]}): ') and 'last.pth.tar' in \
        failed[0] and f'(log: {Path(*out.parts[-2:]) / "runs" / "mimetic_s1.log"})' in failed[0], failed[0]
    assert all(line.endswith('the same command submits it again') or line.endswith('last finished epoch')
               for line in failed), failed
    assert 'runs not finished (plain_s1, mimetic_s1)' in stderr and stderr.count('\n') == 1, stderr
    assert 'Traceback' not in stdout + stderr


def _check_the_answer_is_the_local_ones(out: Path, detach: str, workdir: Path, env, monkeypatch, capsys) -> None:
    """ The same comparison trained here, without the launcher's options: the same answer, run for run. """
    local = workdir / 'compare' / 'local'
    command, launcher_options = [], {'--launcher': 1, '--slurm-config': 1, '--detach': 0}
    tokens = iter(_command(detach, workdir, *SHRINK))
    for token in tokens:
        if token in launcher_options:
            for _ in range(launcher_options[token]):
                next(tokens)
        else:
            command.append(token)
    command[command.index('--out') + 1] = str(local)
    code, stdout, stderr = _in_process([*command[3:], '--concurrent', '2'], workdir, env, monkeypatch, capsys)
    assert code == 0, stdout + stderr
    answers = [json.loads((folder / 'results.json').read_text()) for folder in (out, local)]
    kept = ('arm', 'seed', 'final_top1', 'best_top1', 'epochs', 'curve', 'curve_epochs', 'train_loss')
    runs = [[{k: r[k] for k in kept} for r in answer['runs']] for answer in answers]
    assert runs[0] == runs[1] and len(runs[0]) == 4
    for key in ('stats', 'gains', 'decision', 'test_split'):
        assert answers[0][key] == answers[1][key], key


def test_a_partition_slurm_does_not_know_is_its_one_line_before_any_job(cluster, workdir, monkeypatch, capsys):
    detach, = _compare_lines(detach=True)
    out = workdir / 'compare' / 'refused'
    command = _command(detach, workdir, *SHRINK, *SLURM_SHRINK, '--slurm-partition', 'nope')
    command[command.index('--out') + 1] = str(out)
    code, stdout, stderr = _in_process(command[3:], workdir, cluster, monkeypatch, capsys)
    assert code == 2 and stderr.count('\n') == 1, stdout + stderr
    assert "SLURM refuses the jobs' request (partition nope" in stderr
    assert 'Invalid partition name specified' in stderr and not out.exists()


ENDED = ('COMPLETED', 'FAILED', 'CANCELLED', 'TIMEOUT', 'NODE_FAIL')


def _job_state(job_id: str, env) -> str:
    return subprocess.run(['squeue', '--noheader', '--states=all', '--format=%T', f'--jobs={job_id}'], env=env,
                          capture_output=True, text=True, timeout=60).stdout.strip()


def test_the_guides_torchrun_script_trains_requeues_itself_before_its_time_limit_and_resumes(cluster, workdir):
    """ The guide's CPU run of the torchrun script (two processes, gloo), shrunk; the time limit's signal, sent to the
    script as `--signal=B:USR1@300` sends it, in mid-run: the job requeues itself and the run resumes. """
    line, = [line for line in _guide_lines() if ' sbatch ' in f' {line} ' and '--device cpu' in line]
    tokens = shlex.split(line.replace('docs/cluster_train.sbatch', str(REPO / 'docs' / 'cluster_train.sbatch')))
    env = dict(cluster, PATH=f'{Path(sys.executable).parent}{os.pathsep}{cluster["PATH"]}',
               MASTER_PORT=str(free_port()))
    while '=' in tokens[0]:  # the line's environment
        name, _, value = tokens.pop(0).partition('=')
        env[name] = value
    shrink = ['--epochs', '3', '--workers', '0', '--warmup-epochs', '0', '--model-kwargs', 'embed_dim=16', 'depth=1',
              'num_heads=2']
    done = subprocess.run([tokens[0], '--parsable', *tokens[1:], *shrink], cwd=workdir, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    log = workdir / f'digits_ddp-{job_id}.out'
    _wait(lambda: log.is_file() and 'epoch   1/3' in log.read_text() or _job_state(job_id, env) in ENDED, 240,
          'the first epoch')
    assert _job_state(job_id, env) == 'RUNNING', log.read_text()[-3000:]
    subprocess.run(['scancel', '--signal=USR1', '--batch', job_id], env=env, check=True, timeout=60)
    _wait(lambda: _job_state(job_id, env) in ENDED, 300, 'the job to end')
    text = log.read_text()
    assert _job_state(job_id, env) == 'COMPLETED', text[-3000:]
    assert f'time limit near: requeuing job {job_id}' in text and 'interrupted (SIGTERM) in epoch' in text, text
    resumed = re.search(r'Output: .*; epochs (\d)\.\.3 of 3', text.split('requeuing job')[1])
    assert resumed and resumed.group(1) in ('2', '3'), text[-3000:]
    summary = (workdir / 'output' / 'train' / 'digits_ddp' / 'summary.csv').read_text().splitlines()
    assert [row.split(',')[0] for row in summary[1:]] == ['0', '1', '2'] and 'Done: ' in text
