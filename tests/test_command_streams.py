""" `--help` and `--version` of every command and subcommand, on a standard output that refuses the text (a full
device): one line on standard error naming the stream and the reason, exit status 1, as the commands' own output
does (`timm-structinit models > /dev/full`), where argparse drops the text silently and exits 0. The light entry
points answer these without torch, so each case takes a fraction of a second. """
import os
import subprocess
import sys

import pytest

from timm_structinit_cli.structinit_parser import SUBCOMMANDS

ENTRY = 'import sys; from timm_structinit_cli.entry import {0}; sys.exit({0}())'
CASES = [('structinit', ['--version']), ('structinit', ['--help']), ('train', ['--version']), ('train', ['--help']),
         *[('structinit', [name, '--help']) for name in SUBCOMMANDS]]


@pytest.mark.skipif(not os.path.exists('/dev/full'), reason='needs /dev/full')
@pytest.mark.parametrize('entry, argv', CASES, ids=[' '.join([e, *a]) for e, a in CASES])
def test_help_and_version_that_cannot_be_written_are_one_line(entry, argv):
    with open('/dev/full', 'w') as full:
        done = subprocess.run([sys.executable, '-c', ENTRY.format(entry), *argv], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    prog = 'timm-structinit-train' if entry == 'train' else ' '.join(['timm-structinit', *argv[:-1]])
    assert done.returncode == 1 and done.stderr.count('\n') == 1, done.stderr
    assert done.stderr == (f'{prog}: error: cannot write to standard output (/dev/full): No space left on device; '
                           f'write it to a device with room (or redirect it to /dev/null)\n')


@pytest.mark.parametrize('entry, argv', CASES[:2], ids=['--version', '--help'])
def test_help_and_version_that_can_be_written_are_as_before(entry, argv):
    done = subprocess.run([sys.executable, '-c', ENTRY.format(entry), *argv], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stderr == '' and done.stdout.startswith(('timm-structinit ', 'usage:'))
