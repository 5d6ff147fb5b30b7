""" Each run's share of the CPU cores when `--concurrent N` runs train side by side: torch's threads and the loader's
worker processes of every run are sized to its share, so that N runs do not each start a team of threads and
workers for the whole machine (which, on 2 cores, left four or more busy processes per core and threads spinning on
each other). The estimate times a run with one share's threads (`on_share`). """
import contextlib
import os
from dataclasses import dataclass
from typing import Dict, Iterator, List

__all__ = ['CoreShare', 'core_share', 'on_share']


@dataclass(frozen=True)
class CoreShare:
    """ `concurrent` runs on `cores` cores: each gets `per_run` of them (one at least), and when the runs outnumber
    the cores each core is shared by `crowding` runs on average. """
    cores: int
    concurrent: int

    @property
    def per_run(self) -> int:
        return max(1, self.cores // self.concurrent)

    @property
    def crowding(self) -> float:
        return max(1.0, self.concurrent / self.cores)

    def threads(self, environ: Dict[str, str] = os.environ) -> int:
        """ torch's threads in a run: its share, or fewer where OMP_NUM_THREADS already asks for fewer. """
        asked = environ.get('OMP_NUM_THREADS', '')
        return min(self.per_run, int(asked)) if asked.isdigit() and int(asked) > 0 else self.per_run

    def workers(self, requested: int) -> int:
        """ A run's loader processes: what it asks for (`--workers`), at most one per core of its share. """
        return min(requested, self.per_run)

    def run_env(self) -> Dict[str, str]:
        """ The environment a run's process gets beside the caller's: its threads, when fewer than the cores. """
        threads = self.threads()
        return {'OMP_NUM_THREADS': str(threads)} if threads < self.cores else {}

    def run_options(self, requested_workers: int) -> List[str]:
        """ The training options a run gets beside the comparison's: its loader processes, when its share holds fewer
        than it asks for (the batches are the same whatever `--workers` says). """
        workers = self.workers(requested_workers)
        return ['--workers', str(workers)] if workers < min(requested_workers, self.cores) else []

    def description(self, requested_workers: int) -> str:
        threads = self.threads()
        cores = f'{self.per_run} of the {self.cores} cores' if self.crowding == 1 else \
            f'{self.cores / self.concurrent:.2g} of the {self.cores} cores'
        workers = self.workers(requested_workers)
        return (f'each on {cores} ({threads} torch thread{"s" if threads != 1 else ""}, {workers} loader '
                f'process{"es" if workers != 1 else ""})')


def core_share(concurrent: int) -> CoreShare:
    """ The share of each of `concurrent` runs on the cores this process may use. """
    from ..train.loaders import usable_cores
    return CoreShare(usable_cores(), concurrent)


@contextlib.contextmanager
def on_share(share: CoreShare) -> Iterator[None]:
    """ This process's torch threads as one run's share gives them, while the context lasts. """
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(share.threads())
    try:
        yield
    finally:
        torch.set_num_threads(threads)
