""" The training command run in-process by the tests, its one error line, and whether a run folder's lock is free. """
from filelock import FileLock, Timeout

from timm_structinit import train as train_mod


def run_main(argv, capsys):
    """ (exit code, stdout, stderr) of `timm-structinit-train ARGV`, run in this process. """
    code = train_mod.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    """ The single non-empty line of `err`, after checking that it is the only one and no traceback. """
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and 'Traceback' not in err, err
    return lines[0]


def lock_is_free(run_folder) -> bool:
    """ Whether the lock file a run leaves in `run_folder` is there and held by no process (filelock's own test: an
    acquire that does not wait). """
    path = run_folder / '.timm-structinit.lock'
    if not path.is_file():
        return False
    try:
        with FileLock(str(path), timeout=0, preserve_lock_file=True):
            return True
    except Timeout:
        return False
