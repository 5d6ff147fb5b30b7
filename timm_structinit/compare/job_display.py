""" How a comparison's jobs stand, on one display: each run queued (with SLURM's reason when it is not the ordinary
wait), running (with its epoch), done or failed. On a terminal it is a tqdm bar over every run's epochs, updated in
place, its text beside it; elsewhere (a log file) the same text as a line each time it changes, so at most one line per
run per epoch. The lines that say what happened to a run ([done], [failed], [requeued]) go above it. """
import sys
from typing import Dict, List, Optional, TextIO, Tuple

__all__ = ['JobsDisplay', 'ORDINARY_WAITS']

# pending reasons every queued job passes through: not shown
ORDINARY_WAITS = {'', 'None', 'Priority', 'Resources', 'BeginTime', 'Dependency', 'Prolog', 'Reservation'}


class JobsDisplay:
    """ The display of `total` runs of `epochs` epochs each, written to `stream` (standard output by default), in
    place when it is a terminal. """

    def __init__(self, total: int, epochs: int, stream: Optional[TextIO] = None) -> None:
        self.total, self.epochs, self.stream = total, epochs, stream or sys.stdout
        self.bar, self.shown = None, ''
        if self.stream.isatty():
            from tqdm import tqdm
            self.bar = tqdm(total=total * epochs, file=self.stream, dynamic_ncols=True, unit='epoch',
                            bar_format='{bar:20} {desc}')

    def event(self, line: str) -> None:
        if self.bar is not None:
            self.bar.write(line, file=self.stream)
        else:
            print(line, file=self.stream, flush=True)

    def update(self, done: int, running: Dict[str, int], queued: List[Tuple[str, str]], failed: List[str],
               epochs_done: int) -> None:
        """ `done` runs finished, `running` (run -> its epoch), `queued` (run, SLURM's reason), `failed`, and the
        epochs finished over every run. """
        parts = []
        if running:
            parts.append('running: ' + ', '.join(f'{name} epoch {epoch}/{self.epochs}'
                                                 for name, epoch in running.items()))
        if queued:
            parts.append('queued: ' + ', '.join(name + ('' if reason in ORDINARY_WAITS else f' ({reason})')
                                                for name, reason in queued))
        if failed:
            parts.append('failed: ' + ', '.join(failed))
        text = '; '.join(parts)
        if self.bar is not None:
            self.bar.n = min(epochs_done, self.bar.total)
            self.bar.set_description_str(f'[{done}/{self.total} done] {text}', refresh=False)
            self.bar.refresh()
        elif text and f'[{done}/{self.total} done] {text}' != self.shown:  # nothing open: the events said it all
            self.shown = f'[{done}/{self.total} done] {text}'
            print(self.shown, file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
