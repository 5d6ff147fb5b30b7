""" The training command run in-process by the tests, and its one error line. """
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
