""" Each run's share of the CPU cores and its torch threads. One run at a time has the cores to itself and trains
with the thread count the user sets (`--threads`, `OMP_NUM_THREADS`), else with the one its training command's probe
finds fastest when it starts (`train.thread_count`). `--concurrent N` runs side by side each get their share of the
cores: torch's threads (`--threads`) and the loader's worker processes of every run sized to it (fewer where the user
asks for fewer), so that N runs do not each start a team of threads and workers for the whole machine (which, on 2
cores, left four or more busy processes per core and threads spinning on each other). The estimate times a run as
it will train (`on_share`). """
import contextlib
import os
from dataclasses import dataclass
from typing import Iterator, List, Mapping, Optional

__all__ = ['CoreShare', 'core_share', 'on_share']


@dataclass(frozen=True)
class CoreShare:
    """ `concurrent` runs on `cores` cores: each gets `per_run` of them (one at least), and when the runs outnumber
    the cores each core is shared by `crowding` runs on average; `asked`: the thread count the user set, and how
    (`--threads` among the training options, else OMP_NUM_THREADS), None when the runs choose their own. """
    cores: int
    concurrent: int
    asked: Optional[int] = None
    asked_how: str = ''

    @property
    def per_run(self) -> int:
        return max(1, self.cores // self.concurrent)

    @property
    def crowding(self) -> float:
        return max(1.0, self.concurrent / self.cores)

    def threads(self) -> Optional[int]:
        """ torch's threads in a run: the user's count (at most the share, beside other runs), the share beside
        other runs, or None: one run at a time, which chooses its own. """
        if self.concurrent == 1:
            return self.asked
        return min(self.per_run, self.asked) if self.asked else self.per_run

    def workers(self, requested: int) -> int:
        """ A run's loader processes: what it asks for (`--workers`), at most one per core of its share. """
        return min(requested, self.per_run)

    def run_options(self, requested_workers: int) -> List[str]:
        """ The training options a run gets beside the comparison's: its threads when its share sets another count
        than the one the run would take itself, and its loader processes when its share holds fewer than it asks
        for (the batches are the same whatever `--workers` says). """
        threads = self.threads()
        options = ['--threads', str(threads)] if threads is not None and threads != self.asked else []
        workers = self.workers(requested_workers)
        return options + (['--workers', str(workers)] if workers < min(requested_workers, self.cores) else [])

    def description(self, requested_workers: int) -> str:
        """ Each run's share in words, for the comparison's header (after '1 at a time, '). """
        from ..train.thread_count import candidate_counts
        threads, workers = self.threads(), self.workers(requested_workers)
        loaders = f'{workers} loader process{"es" if workers != 1 else ""}'
        if threads is None:
            counts = [str(n) for n in candidate_counts(self.cores)]
            counts = ', '.join(counts[:-1]) + f' or {counts[-1]}' if len(counts) > 1 else counts[0]
            return (f'each with the torch threads ({counts}, of the {self.cores} cores) that a probe of its '
                    f'training step finds fastest as it starts (each run\'s count is in the answer) and {loaders}')
        counted = f'{threads} torch thread{"s" if threads != 1 else ""}'
        how = f'as {self.asked_how} sets' if self.asked == threads else ''
        if self.concurrent == 1:
            return f'each with {counted} ({how}) and {loaders}'
        cores = f'{self.per_run} of the {self.cores} cores' if self.crowding == 1 else \
            f'{self.cores / self.concurrent:.2g} of the {self.cores} cores'
        return f'each on {cores} ({counted}{", " + how + ";" if how else ","} {loaders})'


def core_share(concurrent: int, threads_option: Optional[int] = None,
               environ: Mapping[str, str] = os.environ) -> CoreShare:
    """ The share of each of `concurrent` runs on the cores this process may use, with the thread count the user
    set: `threads_option` (the runs' `--threads`), else OMP_NUM_THREADS. """
    from ..train.loaders import usable_cores
    from ..train.thread_count import user_threads
    asked = user_threads(threads_option, environ)
    return CoreShare(usable_cores(), concurrent, asked.threads if asked else None, asked.how if asked else '')


@contextlib.contextmanager
def on_share(share: CoreShare) -> Iterator[None]:
    """ This process's torch threads as one run's share fixes them, while the context lasts (a share that leaves
    the count to the run leaves it as it is: the estimate then chooses it as a run does). """
    import torch
    threads = torch.get_num_threads()
    if share.threads() is not None:
        torch.set_num_threads(share.threads())
    try:
        yield
    finally:
        torch.set_num_threads(threads)
