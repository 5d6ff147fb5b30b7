""" A one-node SLURM cluster on the test machine, for the tests that submit real jobs: Debian's `slurm-wlm` and
`munge`, started as root in a temporary folder with a key, ports, state and logs of their own (munged, then slurmctld,
then slurmd, as SLURM's guide orders them), and stopped at the end. The node is this machine, by its name (which
torchrun's rendezvous resolves), with 2 CPUs whatever the machine has
(`SlurmdParameters=config_overrides`), no GPU, and one partition named as the cluster guide's (docs/cluster.md);
processes are tracked by their parents (`proctrack/linuxproc`, no cgroups), a requeued job may start again after 5 s
(`cred_expire`, 2 min by default) and the scheduler looks at its queue every 2 s.

`start_cluster(folder)` returns the environment a process needs to reach it (`SLURM_CONF`), or raises
ClusterUnavailable saying why it cannot start here (not root, a package missing, a daemon that would not start),
which the tests skip with. """
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional

__all__ = ['ClusterUnavailable', 'why_not_here', 'start_cluster', 'stop_cluster', 'free_port', 'PARTITION', 'DAEMONS']

PARTITION = 'gpu'  # the partition of the guide's cluster.yaml
DAEMONS = ('munged', 'slurmctld', 'slurmd')
TOOLS = ('sbatch', 'squeue', 'scontrol', 'scancel', 'srun')


class ClusterUnavailable(RuntimeError):
    """ The cluster cannot start here; the message says why. """


def free_port() -> int:
    """ A TCP port no process listens on now. """
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _config(folder: Path, host: str) -> str:
    return '\n'.join([
        'ClusterName=structinit-tests', f'SlurmctldHost={host}(127.0.0.1)',
        f'SlurmctldPort={free_port()}', f'SlurmdPort={free_port()}', 'SlurmUser=root', 'SlurmdUser=root',
        'AuthType=auth/munge', f'AuthInfo=socket={folder}/munge/munge.socket,cred_expire=5', 'CredType=cred/munge',
        f'StateSaveLocation={folder}/state', f'SlurmdSpoolDir={folder}/spool',
        f'SlurmctldPidFile={folder}/slurmctld.pid', f'SlurmdPidFile={folder}/slurmd.pid',
        f'SlurmctldLogFile={folder}/log/slurmctld.log', f'SlurmdLogFile={folder}/log/slurmd.log',
        'ProctrackType=proctrack/linuxproc', 'TaskPlugin=task/none', 'SelectType=select/cons_tres',
        'SelectTypeParameters=CR_Core', 'MpiDefault=none', 'JobAcctGatherType=jobacct_gather/none',
        'AccountingStorageType=accounting_storage/none', 'SlurmdParameters=config_overrides', 'ReturnToService=2',
        'KillWait=5', 'MinJobAge=3600', 'InactiveLimit=0', 'SchedulerParameters=sched_interval=2,bf_interval=1',
        f'NodeName={host} NodeAddr=127.0.0.1 CPUs=2 RealMemory=65536 State=UNKNOWN',
        f'PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP', ''])


def _run(command: List[str], env: Dict[str, str], what: str) -> None:
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise ClusterUnavailable(f'{what} did not start: {" ".join((done.stderr or done.stdout).split())[:300]}')


def why_not_here() -> Optional[str]:
    """ Why the cluster cannot start on this machine before anything is tried (not root, a package missing), or
    None: it can be tried. """
    if os.geteuid() != 0:
        return 'the SLURM daemons of the tests run as root, and the tests do not'
    missing = [tool for tool in (*DAEMONS, *TOOLS) if shutil.which(tool) is None]
    if missing:
        return (f'{", ".join(missing)} not installed (apt-get install slurm-wlm munge; .ci/run does it where it runs '
                f'as root with apt)')
    return None


def start_cluster(folder: Path) -> Dict[str, str]:
    """ Start the cluster with its files in `folder`; the environment that reaches it. """
    reason = why_not_here()
    if reason:
        raise ClusterUnavailable(reason)
    for sub in ('munge', 'state', 'spool', 'log'):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    (folder / 'munge').chmod(0o700)
    key = folder / 'munge.key'
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    host = socket.gethostname().split('.')[0]
    try:
        socket.gethostbyname(host)  # the node's name, as torchrun's rendezvous reaches it
    except OSError as e:
        raise ClusterUnavailable(f'this machine\'s name {host!r} does not resolve ({e})') from None
    (folder / 'slurm.conf').write_text(_config(folder, host))
    env = dict(os.environ, SLURM_CONF=str(folder / 'slurm.conf'))
    _run(['munged', '--force', f'--socket={folder}/munge/munge.socket', f'--key-file={key}',
          f'--pid-file={folder}/munge/munged.pid', f'--log-file={folder}/log/munged.log',
          f'--seed-file={folder}/munge/seed'], env, 'munged')
    _run(['slurmctld', '-i'], env, 'slurmctld')
    _run(['slurmd', '-N', host], env, 'slurmd')
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = subprocess.run(['sinfo', '--noheader', '--format=%t'], env=env, capture_output=True, text=True)
        if state.stdout.strip() == 'idle':
            return env
        time.sleep(0.5)
    stop_cluster(folder)
    log = (folder / 'log' / 'slurmctld.log').read_text(errors='replace').splitlines()[-3:]
    answer = state.stdout.strip() or state.stderr.strip()
    raise ClusterUnavailable(f'the node did not come up within 60 s (sinfo: {answer}; slurmctld: {" / ".join(log)})')


def stop_cluster(folder: Path) -> None:
    """ Stop the daemons the cluster in `folder` started (by the process ids they wrote), every job with them. """
    env = dict(os.environ, SLURM_CONF=str(folder / 'slurm.conf'))
    subprocess.run(['scancel', '--full', '--user=root'], env=env, capture_output=True, timeout=60)
    for pid_file in (folder / 'slurmd.pid', folder / 'slurmctld.pid', folder / 'munge' / 'munged.pid'):
        try:
            pid = int(pid_file.read_text().split()[0])
            os.kill(pid, 15)
        except (OSError, ValueError, IndexError):
            continue
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except OSError:
                break
            time.sleep(0.1)
