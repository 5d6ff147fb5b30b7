""" Writing a benchmark's result file: the lines it printed, whole or not at all (a temporary file, then a rename). """
from pathlib import Path
from typing import Sequence


def write_lines(out, lines: Sequence[str]) -> None:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f'.{out.name}.tmp')
    tmp.write_text('\n'.join(lines) + '\n')
    tmp.replace(out)


class Report:
    """ A benchmark's report: its header and then each line printed as it comes, all of them written to a result
    file at the end (`write`). """

    def __init__(self, header: Sequence[str]):
        self.lines = list(header)
        print('\n'.join(self.lines), flush=True)

    def add(self, *lines: str) -> None:
        self.lines += lines
        print('\n'.join(lines), flush=True)

    def write(self, out) -> None:
        """ The report into `out`, if one is named. """
        if out:
            write_lines(out, self.lines)
