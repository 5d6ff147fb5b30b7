""" Writing a benchmark's result file: the lines it printed, whole or not at all (a temporary file, then a rename). """
from pathlib import Path
from typing import Sequence


def write_lines(out, lines: Sequence[str]) -> None:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f'.{out.name}.tmp')
    tmp.write_text('\n'.join(lines) + '\n')
    tmp.replace(out)
