""" The options of `timm-structinit compare` that train its runs as SLURM jobs (`--launcher slurm`, one job per run):
what each run's job asks SLURM for, given on the command line or in a YAML file of them (`--slurm-config`), the
command line winning, and `--detach`. Plain Python, as the other parsers: a bad value is a usage error before torch is
imported, and the YAML file's values are read by the same functions (timm_structinit.compare.slurm_request). """
import argparse
import re
from typing import Any, Callable, Dict, Tuple

__all__ = ['LAUNCHERS', 'SLURM_KEYS', 'SET_BY_COMPARE', 'add_arguments', 'slurm_minutes', 'sbatch_item', 'option_of']

LAUNCHERS = ('local', 'slurm')
# sbatch options a run's job gets from compare (each run one task on one node, submitit's log files and signal) or
# from an option of its own; --slurm-extra cannot set them
SET_BY_COMPARE = {
    'output': "submitit writes each job's log in --out/slurm", 'error': "submitit writes each job's log in --out/slurm",
    'signal': 'set by --slurm-signal-delay', 'open-mode': 'submitit appends to each job\'s log',
    'array': 'each run is a job of its own', 'nodes': 'each run is one process on one node',
    'ntasks': 'each run is one process on one node', 'ntasks-per-node': 'each run is one process on one node',
    'job-name': 'compare names each job after its run', 'wrap': 'compare writes each job\'s script',
    'partition': 'set by --slurm-partition', 'time': 'set by --slurm-time', 'gpus-per-node': 'set by --slurm-gpus',
    'cpus-per-task': 'set by --slurm-cpus', 'account': 'set by --slurm-account', 'qos': 'set by --slurm-qos',
}


def slurm_minutes(text: Any) -> int:
    """ A time limit as sbatch's --time takes it (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS), in whole
    minutes (seconds rounded up, as submitit asks SLURM in minutes); ValueError naming the value and the forms. """
    value = str(text).strip()
    match = re.fullmatch(r'(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?', value)
    if match is None or isinstance(text, bool):
        raise ValueError(f'{text!r} is not a time limit; valid: minutes (90), HH:MM:SS (1:30:00) or D-HH:MM:SS '
                         f'(1-12:00:00), as sbatch --time takes it')
    days, first, second, third = match.groups()
    fields = [int(f) for f in (first, second, third) if f is not None]
    if days is not None:  # D-HH, D-HH:MM, D-HH:MM:SS
        seconds = int(days) * 86400 + sum(f * s for f, s in zip(fields, (3600, 60, 1)))
    else:  # MM, MM:SS, HH:MM:SS
        seconds = sum(f * s for f, s in zip(fields, {1: (60,), 2: (60, 1), 3: (3600, 60, 1)}[len(fields)]))
    if seconds <= 0:
        raise ValueError(f'{text!r}: a time limit must be longer than zero')
    return -(-seconds // 60)


def sbatch_item(text: Any) -> Tuple[str, str]:
    """ One extra sbatch option, `KEY=VALUE` (sbatch's long name without its dashes: `mem=32G`,
    `constraint=a100`, `mail-type=END`); ValueError naming it and what is valid. """
    key, sep, value = str(text).partition('=')
    key = key.strip().lstrip('-')
    if not sep or not re.fullmatch(r'[a-z][a-z0-9_-]*', key) or not value.strip():
        raise ValueError(f'{text!r} is not an sbatch option as KEY=VALUE (e.g. mem=32G, constraint=a100)')
    if key.replace('_', '-') in SET_BY_COMPARE:
        raise ValueError(f'{text!r}: {key} is not an extra option: {SET_BY_COMPARE[key.replace("_", "-")]}')
    return key, value.strip()


def _count(low: int) -> Callable[[Any], int]:
    def count(text: Any) -> int:
        try:
            value = int(str(text))
        except ValueError:
            value = low - 1
        if value < low or isinstance(text, bool):
            raise ValueError(f'{text!r} is not a whole number of at least {low}')
        return value
    return count


def _seconds(text: Any) -> float:
    try:
        value = float(str(text))
    except ValueError:
        value = 0.0
    if not value > 0 or isinstance(text, bool):
        raise ValueError(f'{text!r} is not a positive number of seconds')
    return value


def _name(text: Any) -> str:
    value = str(text).strip()
    if not value or any(c.isspace() for c in value) or isinstance(text, (bool, int, float)):
        raise ValueError(f'{text!r} is not a SLURM name (a word)')
    return value


# YAML key of --slurm-config -> (its option, the function reading a value, metavar, help); an option's dest is
# slurm_KEY, its default None (then the YAML file's value, then the default the help names)
SLURM_KEYS: Dict[str, Tuple[str, Callable[[Any], Any], str, str]] = {
    'partition': ('--slurm-partition', _name, 'NAME', "each run's partition (default: the cluster's)"),
    'time': ('--slurm-time', slurm_minutes, 'TIME',
             "each run's time limit, as sbatch --time: minutes or [D-]HH:MM:SS; a run that needs longer is stopped "
             'at its last finished epoch and requeued (needed: here or in --slurm-config)'),
    'gpus': ('--slurm-gpus', _count(0), 'N', 'GPUs of each run: 0 or 1 (each run is one process; default: 0, or '
                                              'the --slurm-config value)'),
    'cpus': ('--slurm-cpus', _count(1), 'N', "CPU cores of each run (its torch threads; default: the cluster's)"),
    'account': ('--slurm-account', _name, 'NAME', 'the account the jobs are charged to (default: yours)'),
    'qos': ('--slurm-qos', _name, 'NAME', "the jobs' quality of service (default: the account's)"),
    'extra': ('--slurm-extra', sbatch_item, 'KEY=VALUE',
              'more sbatch options for each job, by their long names (mem=32G constraint=a100 mail-type=END)'),
    'signal_delay': ('--slurm-signal-delay', _count(1), 'SECONDS',
                     'seconds before the time limit at which a run is stopped at its last finished epoch and '
                     'requeued (default: 120)'),
    'poll': ('--slurm-poll', _seconds, 'SECONDS', 'how often squeue is asked how the jobs stand (default: 30)'),
}
SLURM_DEFAULTS = {'gpus': 0, 'signal_delay': 120, 'poll': 30.0}


def option_of(key: str) -> str:
    return SLURM_KEYS[key][0]


def _argument_type(read: Callable[[Any], Any]) -> Callable[[str], Any]:
    def argument(text: str) -> Any:
        try:
            return read(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    argument.__name__ = read.__name__  # argparse names the type in its error
    return argument


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group('SLURM', 'each run (arm x seed) one SLURM job, submitted through submitit')
    group.add_argument('--launcher', choices=LAUNCHERS, default='local',
                       help='where the runs train: local (processes on this machine) or slurm (one job each)')
    group.add_argument('--detach', action='store_true',
                       help='with --launcher slurm: submit the jobs and return; the same command again collects them')
    group.add_argument('--slurm-config', metavar='FILE.yaml',
                       help=f'a YAML file of these options by key ({", ".join(SLURM_KEYS)}); the command line wins')
    for key, (option, read, metavar, text) in SLURM_KEYS.items():
        more = dict(nargs='+') if key == 'extra' else {}
        group.add_argument(option, dest=f'slurm_{key}', type=_argument_type(read), metavar=metavar, help=text, **more)
