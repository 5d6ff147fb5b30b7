""" The committed mutation passes stay runnable: every mutation of both lists (benchmarks/mutations.py's own and
benchmarks/mutations_second_pass.py) finds each text it replaces exactly once in the package's current source, so a
change to the code that moves a mutation's target shows here, not as a mutant that is never applied. """
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / 'benchmarks'))

import mutations  # noqa: E402  (benchmarks/mutations.py)

LISTS = {'mutations': mutations.MUTATIONS,
         'mutations_second_pass': mutations.load_mutations(str(REPO / 'benchmarks' / 'mutations_second_pass.py'))}
CASES = [(list_name, m) for list_name, ms in LISTS.items() for m in ms]


@pytest.mark.parametrize('list_name, mutation', CASES, ids=[f'{n}-{m.name}' for n, m in CASES])
def test_every_mutation_replaces_text_that_occurs_once(list_name, mutation):
    for file, text, replacement in mutation.edits:
        source = (REPO / 'timm_structinit' / file).read_text()
        assert source.count(text) == 1, (file, text)
        assert replacement != text


def test_mutation_names_are_unique_within_each_list():
    for ms in LISTS.values():
        names = [m.name for m in ms]
        assert len(names) == len(set(names))
