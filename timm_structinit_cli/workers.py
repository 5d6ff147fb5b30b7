""" How many loader processes a training process starts: what `--workers` asks for, at most one per core the process
may run on. Here, without torch, so that `timm-structinit-train --help` says the count a run on this machine starts,
and the run (timm_structinit.train.loaders) starts that count. """
import os

__all__ = ['DEFAULT_WORKERS', 'usable_cores', 'loader_workers', 'workers_help']

DEFAULT_WORKERS = 4  # timm train.py's


def usable_cores() -> int:
    """ The cores this process may run on, counted as torch's DataLoader counts them for its worker-count warning. """
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no CPU affinity outside Linux
        return os.cpu_count() or 1


def loader_workers(requested: int) -> int:
    """ `requested` loader processes, at most one per usable core: more only wait for a core, and torch warns. """
    return min(requested, usable_cores())


def workers_help() -> str:
    """ The help of `--workers`: its default, and the count that default starts on this machine when the cores are
    fewer. """
    cores = usable_cores()
    here = (f'{DEFAULT_WORKERS}' if loader_workers(DEFAULT_WORKERS) == DEFAULT_WORKERS else
            f'{DEFAULT_WORKERS}, so {loader_workers(DEFAULT_WORKERS)} on this machine')
    return (f'data loading processes per training process, at most one per core it may use ({cores} here); 0 loads '
            f'in the training process (default: {here})')
