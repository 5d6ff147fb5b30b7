""" What each run's SLURM job asks for (`compare --launcher slurm`): the `--slurm-*` options over the values of
`--slurm-config` (a YAML file keyed as timm_structinit_cli.slurm_options.SLURM_KEYS), each checked as the command line
checks it, and the submitit executor that asks for it. Every refusal is one line before any work: an option of the
launcher without `--launcher slurm`, a local-only option with it, a bad value or key in the file, no time limit, and
no `sbatch` on this machine. """
import argparse
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from timm_structinit_cli.slurm_options import SLURM_DEFAULTS, SLURM_KEYS, option_of

from ..errors import ConfigError

__all__ = ['SlurmRequest', 'slurm_request', 'make_executor', 'check_elsewhere']


@dataclass(frozen=True)
class SlurmRequest:
    """ What each run's job asks SLURM for: its partition, time limit (minutes), GPUs, CPU cores, account, QOS and
    extra sbatch options; the seconds before the time limit at which it is stopped and requeued; how often compare
    asks SLURM how its jobs stand. None: the cluster's default. """
    time: int
    partition: Optional[str] = None
    gpus: int = 0
    cpus: Optional[int] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    extra: Dict[str, str] = field(default_factory=dict)
    signal_delay: int = SLURM_DEFAULTS['signal_delay']
    poll: float = SLURM_DEFAULTS['poll']

    @property
    def asks_gpus(self) -> bool:
        """ Whether the jobs ask for GPUs: --slurm-gpus, or sbatch's own options for them in --slurm-extra. """
        return bool(self.gpus) or any(key.startswith(('gres', 'gpu')) for key in self.extra)

    def describe(self) -> str:
        """ The request in words, for the comparison's header. """
        parts = [f'partition {self.partition}' if self.partition else "the cluster's default partition",
                 f'time limit {self.time} min', f'{self.gpus} GPU{"s" if self.gpus != 1 else ""}']
        parts += [f'{self.cpus} CPU core{"s" if self.cpus != 1 else ""}'] if self.cpus else []
        parts += [f'{name} {value}' for name, value in (('account', self.account), ('QOS', self.qos)) if value]
        parts += [f'--{key}={value}' for key, value in self.extra.items()]
        return ', '.join(parts)


def _file_values(path: str) -> Dict[str, Any]:
    """ The values of a --slurm-config file, each read as its option reads it; ConfigError naming the file. """
    import yaml
    fix = f'see --help for the keys: {", ".join(SLURM_KEYS)}'
    try:  # every value as the text written, as sbatch reads it: `time: 4:00:00` is no base-60 number
        values = yaml.load(Path(path).read_text(encoding='utf-8'), Loader=yaml.BaseLoader)
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f'--slurm-config {path}: cannot be read ({getattr(e, "strerror", None) or e})') from None
    except yaml.YAMLError as e:
        raise ConfigError(f'--slurm-config {path}: not valid YAML ({" ".join(str(e).split())})') from None
    values = {} if values in (None, '') else values
    if not isinstance(values, dict):
        raise ConfigError(f'--slurm-config {path}: holds a {type(values).__name__}, not a mapping of keys; {fix}')
    read = {}
    for key, value in values.items():
        if key not in SLURM_KEYS:
            raise ConfigError(f'--slurm-config {path}: unknown key {key!r}; {fix}')
        try:
            if key == 'extra':
                if not isinstance(value, dict):
                    raise ValueError(f'{value!r} is not a mapping of sbatch options (mem: 32G)')
                read[key] = [SLURM_KEYS[key][1](f'{k}={v}') for k, v in value.items()]
            else:
                read[key] = SLURM_KEYS[key][1](value)
        except ValueError as e:
            raise ConfigError(f'--slurm-config {path}: {key}: {e}') from None
    return read


def _refuse_mixed(args: argparse.Namespace) -> None:
    """ The launcher's options only with --launcher slurm; the local scheduling options only without. """
    if args.launcher != 'slurm':
        given = [option_of(key) for key in SLURM_KEYS if getattr(args, f'slurm_{key}', None) is not None]
        given += ['--slurm-config'] * (args.slurm_config is not None) + ['--detach'] * bool(args.detach)
        if given:
            raise ConfigError(f'{given[0]}: an option of --launcher slurm; add --launcher slurm to train the runs as '
                              f'SLURM jobs, or leave {given[0]} out to train them here')
        return
    if args.concurrent != 1:
        raise ConfigError(f'--concurrent {args.concurrent}: with --launcher slurm every run is a job of its own and '
                          f'SLURM decides how many run at a time; leave --concurrent out')
    if args.time_limit is not None:
        raise ConfigError(f'--time-limit {args.time_limit:g}: with --launcher slurm each run\'s limit is --slurm-time '
                          f'(a run that needs longer is requeued at its last finished epoch); leave --time-limit out')


def slurm_request(args: argparse.Namespace) -> Optional[SlurmRequest]:
    """ What each run's job asks for, from the command line over --slurm-config; None for a local comparison. Checks
    that sbatch is on this machine. """
    _refuse_mixed(args)
    if args.launcher != 'slurm':
        return None
    values = _file_values(args.slurm_config) if args.slurm_config is not None else {}
    values.update({key: getattr(args, f'slurm_{key}') for key in SLURM_KEYS
                   if getattr(args, f'slurm_{key}', None) is not None})
    if 'time' not in values:
        raise ConfigError('--launcher slurm: each run\'s time limit is needed: --slurm-time MINUTES (or [D-]HH:MM:SS), '
                          'or time: in --slurm-config')
    if values.get('gpus', 0) > 1:
        raise ConfigError(f'--slurm-gpus {values["gpus"]}: each run of a comparison is one process on one GPU at most; '
                          f'for one run over several GPUs see the torchrun script of docs/cluster.md')
    values['extra'] = dict(values.get('extra', []))
    if values.get('signal_delay', SLURM_DEFAULTS['signal_delay']) >= values['time'] * 60:
        raise ConfigError(f'--slurm-signal-delay {values.get("signal_delay", SLURM_DEFAULTS["signal_delay"])}: the '
                          f'signal would come before a job starts; make it shorter than --slurm-time '
                          f'({values["time"]} min)')
    missing = [tool for tool in ('sbatch', 'squeue', 'scontrol') if shutil.which(tool) is None]
    if missing:
        raise ConfigError(f'--launcher slurm: no {missing[0]} on this machine (PATH); run compare on a machine that '
                          f'submits SLURM jobs (a login node), or leave --launcher slurm out to train here')
    request = SlurmRequest(**values)
    if (args.device or '').startswith('cuda') and not request.asks_gpus:
        raise ConfigError(f'--device {args.device}: the jobs ask for no GPU; add --slurm-gpus 1 (or leave --device '
                          f'out to train on the CPU)')
    _test_only(request)
    return request


def _sbatch_options(request: SlurmRequest) -> List[str]:
    """ The sbatch options of each run's job, as submitit writes them into its script. """
    import submitit
    options = [f'--time={request.time}', '--nodes=1', '--ntasks-per-node=1', f'--gpus-per-node={request.gpus}',
               f'--signal={submitit.JobEnvironment.USR_SIG}@{request.signal_delay}']
    options += [f'--{name}={value}' for name, value in (('partition', request.partition), ('account', request.account),
                                                         ('qos', request.qos), ('cpus-per-task', request.cpus))
                if value is not None]
    return options + [f'--{key}={value}' for key, value in request.extra.items()]


def _test_only(request: SlurmRequest) -> None:
    """ SLURM's verdict on the jobs' request before any work (`sbatch --test-only`, which submits nothing): an
    unknown partition, account or QOS, a request no node holds, each in SLURM's own words. """
    from .slurm_queue import sbatch_refusal
    command = ['sbatch', '--test-only', *_sbatch_options(request), '--output=/dev/null', '--wrap=true']
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        raise ConfigError(f'--launcher slurm: sbatch did not answer ({e})') from None
    if done.returncode != 0:
        raise ConfigError(f'--launcher slurm: SLURM refuses the jobs\' request ({request.describe()}): '
                          f'{sbatch_refusal(done.stderr or done.stdout)}')


def make_executor(request: SlurmRequest, folder: Path, cluster: str = 'slurm'):
    """ The submitit executor of the jobs: SLURM's (`cluster='local'`: submitit's local executor, which runs the same
    jobs as processes here, for the tests). Each job is one task on one node; a run stopped at its time limit is
    requeued until it ends, however many limits it takes. """
    import submitit
    executor = submitit.AutoExecutor(folder=folder, cluster=cluster, slurm_max_num_timeout=1000)
    slurm = dict(slurm_partition=request.partition, slurm_account=request.account, slurm_qos=request.qos,
                 slurm_signal_delay_s=request.signal_delay,
                 slurm_additional_parameters=dict(request.extra) or None)
    executor.update_parameters(timeout_min=request.time, nodes=1, tasks_per_node=1, gpus_per_node=request.gpus,
                               cpus_per_task=request.cpus, **{k: v for k, v in slurm.items() if v is not None})
    return executor


def check_elsewhere(run_args: argparse.Namespace):
    """ The training command's checks of a run that trains on another machine (a job's node): every check but the
    device's presence, which is this machine's (a login node has no GPU), of which the name alone is checked here;
    the run checks its device on its node. """
    import torch
    from ..train import check_args
    try:
        torch.device(run_args.device)
    except (RuntimeError, ValueError):
        raise ConfigError(f'--device {run_args.device!r} is not a torch device; valid: cpu, cuda, cuda:N, '
                          f'...') from None
    return check_args(argparse.Namespace(**{**vars(run_args), 'device': 'cpu'}))
