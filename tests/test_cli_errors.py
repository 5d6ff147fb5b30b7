""" Bad input at either command line (timm-structinit-train, timm-structinit): one line on stderr naming the bad
value and what is valid, exit status 2 (invalid argument or data) or 1 (failure while working), no traceback, and
nothing half-written left behind.

Every run here is tiny: a one-block width-32 ViT on 8x8 images, a handful of images written by the test.
"""
import errno
import os
import pathlib
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from timm_structinit import cli, train as train_mod
from timm_structinit.train import epochs as epochs_mod

TINY_KWARGS = ['embed_dim=32', 'depth=1', 'num_heads=2', 'img_size=8', 'patch_size=2']
TINY = ['--model', 'vit_tiny_patch2_32_mimetic', '--model-kwargs', *TINY_KWARGS]
FAST = ['--opt', 'adamw', '--lr', '1e-3', '--warmup-epochs', '0', '--workers', '0', '--batch-size', '2',
        '--log-interval', '1000', '--epochs', '1', '--val-split', 'test', '--smoothing', '0']
# a run that ends in a second should a check let a bad value through
DIGITS = [*TINY, *FAST, '--dataset', 'sklearn/digits', '--train-subset', '20', '--val-subset', '10']
TRAIN_PROG = 'timm-structinit-train'


pytestmark = pytest.mark.usefixtures('one_torch_thread')


def image_folder(root: Path, classes=('cat', 'dog'), per_class: int = 2, size=(8, 8)) -> Path:
    from PIL import Image
    for split in ('train', 'test'):
        for c, cls in enumerate(classes):
            (root / split / cls).mkdir(parents=True)
            for i in range(per_class):
                Image.new('RGB', size, (60 * i, 90 * c, 120)).save(root / split / cls / f'{i}.png')
    return root


def run_train(argv, capsys):
    code = train_mod.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str, prog: str = TRAIN_PROG) -> str:
    """ The single error line, after checking that it is the whole of stderr. """
    assert err.startswith(f'{prog}: error: ') and err.count('\n') == 1, err
    assert 'Traceback' not in err
    return err


def files_under(path: Path):
    return sorted(str(p.relative_to(path)) for p in path.rglob('*')) if path.exists() else []


# ------------------------------------------------------------------------------------------------------------------
# 1. image folders


def test_empty_class_folder_is_refused(tmp_path, capsys):
    data = image_folder(tmp_path / 'data')
    for f in (data / 'train' / 'dog').iterdir():
        f.unlink()
    code, out, err = run_train([*TINY, *FAST, '--data-dir', data, '--output', tmp_path / 'out'], capsys)
    assert code == 2
    line = one_error_line(err)
    assert "--train-split 'train'" in line and 'class folder dog' in line and 'holds no images' in line
    assert not (tmp_path / 'out').exists()


def test_folder_without_images_is_refused(tmp_path, capsys):
    for split in ('train', 'test'):
        (tmp_path / 'data' / split / 'cat').mkdir(parents=True)
    code, out, err = run_train([*TINY, *FAST, '--data-dir', tmp_path / 'data', '--output', tmp_path / 'out'], capsys)
    assert code == 2
    line = one_error_line(err)
    assert f'no images found under {tmp_path / "data" / "train"}' in line and '.png' in line
    assert not (tmp_path / 'out').exists()


def test_a_single_class_is_refused(tmp_path, capsys):
    data = image_folder(tmp_path / 'data', classes=('cat',))
    code, out, err = run_train([*TINY, *FAST, '--data-dir', data, '--output', tmp_path / 'out'], capsys)
    assert code == 2
    assert "--train-split 'train'" in one_error_line(err) and "holds one class ('cat')" in err
    assert not (tmp_path / 'out').exists()


@pytest.mark.parametrize('workers', [0, 1])
def test_corrupt_image_is_named(tmp_path, capsys, workers):
    """ timm's dataset would log a warning and train on the next image instead; a loader worker wraps the error. """
    from PIL import Image
    data = image_folder(tmp_path / 'data')
    bad = data / 'train' / 'cat' / 'bad.jpg'
    Image.new('RGB', (8, 8), (1, 2, 3)).save(bad)
    bad.write_bytes(bad.read_bytes()[:120])  # truncated
    argv = [*TINY, *FAST, '--data-dir', data, '--output', tmp_path / 'out', '--workers', workers]
    code, out, err = run_train(argv, capsys)
    assert code == 1
    line = one_error_line(err)
    assert f'cannot read image {bad}' in line
    assert files_under(tmp_path / 'out') == []  # the run folder it had made is gone


# ------------------------------------------------------------------------------------------------------------------
# 2. checkpoints of another model


@pytest.fixture(scope='module')
def tiny_run(tmp_path_factory):
    root = tmp_path_factory.mktemp('tiny')
    data = image_folder(root / 'data')
    torch.set_num_threads(1)
    assert train_mod.main([*TINY, *FAST, '--data-dir', str(data), '--output', str(root), '--experiment', 'run']) == 0
    return root / 'run', data


def test_resume_with_other_model_kwargs_names_the_difference(tiny_run, tmp_path, capsys):
    run, data = tiny_run
    before = (run / 'last.pth.tar').stat().st_mtime_ns
    other = ['--model', 'vit_tiny_patch2_32_mimetic', '--model-kwargs', *TINY_KWARGS, 'depth=2']
    code, out, err = run_train([*other, *FAST, '--data-dir', data, '--resume', run, '--epochs', 2], capsys)
    assert code == 2
    line = one_error_line(err)
    assert f"--resume '{run}' does not fit --model vit_tiny_patch2_32_mimetic" in line
    assert "'depth': 1" in line and "'depth': 2" in line  # both model_kwargs shown
    assert '12 missing, e.g. blocks.1.' in line and f'pass --model-kwargs {" ".join(TINY_KWARGS)}' in line
    assert len(line) < 800  # not a dump of every key
    assert (run / 'last.pth.tar').stat().st_mtime_ns == before


def test_initial_checkpoint_of_another_architecture(tiny_run, tmp_path, capsys):
    run, data = tiny_run
    other = ['--model', 'vit_tiny_patch2_32_gap_sincos', '--model-kwargs', *TINY_KWARGS]
    code, out, err = run_train([*other, *FAST, '--data-dir', data, '--output', tmp_path / 'out',
                                '--initial-checkpoint', run / 'last.pth.tar'], capsys)
    assert code == 2
    line = one_error_line(err)
    assert 'does not fit --model vit_tiny_patch2_32_gap_sincos' in line
    assert 'it holds vit_tiny_patch2_32_mimetic weights' in line and 'pass --model vit_tiny_patch2_32_mimetic' in line
    assert 'missing, e.g. fc_norm.bias' in line and 'unexpected, e.g. cls_token' in line
    assert not (tmp_path / 'out').exists()


# ------------------------------------------------------------------------------------------------------------------
# 3. config file, output folder, full disk


def test_config_that_is_not_utf8(tmp_path, capsys):
    cfg = tmp_path / 'latin1.yaml'
    cfg.write_bytes('epochs: 2\n# café\n'.encode('latin-1'))
    code, out, err = run_train(['-c', cfg, *DIGITS, '--output', tmp_path], capsys)
    assert code == 2
    line = one_error_line(err)
    assert f"--config '{cfg}' is not UTF-8 text (byte 0xe9" in line


@pytest.mark.parametrize('text, key, lines', [('lr: 0.1\nepochs: 2\nlr: 0.2\n', 'lr', '1 and 3'),
                                              ('model_kwargs:\n  depth: 1\n  depth: 2\n', 'depth', '2 and 3')])
def test_a_key_given_twice_in_a_config_is_refused(text, key, lines, tmp_path, capsys):
    cfg = tmp_path / 'twice.yaml'
    cfg.write_text(text)
    code, out, err = run_train(['-c', cfg, *DIGITS, '--output', tmp_path / 'out'], capsys)
    assert code == 2
    assert f"key '{key}' is given twice (lines {lines})" in one_error_line(err)


@pytest.mark.parametrize('output', ['a-file', 'a-file/run'])
def test_output_that_is_a_file(tmp_path, capsys, output):
    data = image_folder(tmp_path / 'data')
    (tmp_path / 'a-file').write_text('x')
    code, out, err = run_train([*TINY, *FAST, '--data-dir', data, '--output', tmp_path / output], capsys)
    assert code == 2
    line = one_error_line(err)
    assert f"--output '{tmp_path / output}': {tmp_path / 'a-file'} is a file, not a folder" in line
    assert (tmp_path / 'a-file').read_text() == 'x'

    code = cli.main(['export', 'vit_tiny_patch2_32_mimetic', str(tmp_path / output), '--model-kwargs', 'depth=1'])
    assert code == 2
    one_error_line(capsys.readouterr().err, 'timm-structinit export')


def test_output_the_file_system_refuses_is_one_line(tmp_path, capsys):
    """ A folder the permission check passes but the file system will not make (/proc takes no new folders). """
    data = image_folder(tmp_path / 'data')
    code, out, err = run_train([*TINY, *FAST, '--data-dir', data, '--output', '/proc/timm-structinit-runs'], capsys)
    assert code == 2
    assert 'cannot create the output folder /proc/timm-structinit-runs/' in one_error_line(err)
    assert not os.path.exists('/proc/timm-structinit-runs')


def _file_size_limit(limit: int):
    """ A subprocess's preexec_fn: every file it writes is capped at `limit` bytes (RLIMIT_FSIZE), so a longer
    write fails as on a full disk (Python ignores SIGXFSZ; the write returns EFBIG). """
    def apply():
        import resource
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def _run_capped(argv, limit: int) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, preexec_fn=_file_size_limit(limit),
                          env=dict(os.environ, OMP_NUM_THREADS='1'))


@pytest.mark.slow
def test_a_checkpoint_the_disk_refuses_is_one_line_and_leaves_nothing_half_written(tmp_path):
    data = image_folder(tmp_path / 'data')
    out = tmp_path / 'out'
    # args.yaml and summary.csv fit in 20 kB, the first checkpoint does not
    proc = _run_capped([sys.executable, '-m', 'timm_structinit.train', *map(str, [*TINY, *FAST, '--data-dir', data,
                        '--output', out, '--experiment', 'full'])], 20_000)
    assert proc.returncode == 1, proc.stderr
    line = one_error_line(proc.stderr)
    assert f'cannot write a checkpoint in the output folder {out / "full"}: ' in line, line
    # the first epoch's results (its summary row, written before its checkpoint, as timm's train.py does) are kept;
    # nothing half-written is: no checkpoint, whole or partial, and no staging file
    run = out / 'full'
    rows = (run / 'summary.csv').read_text().splitlines()
    assert len(rows) == 2 and rows[1].startswith('0,'), rows
    from timm_structinit.train.output import LOCK_NAME  # the lock file a kept run folder keeps, as any run's
    assert sorted(p.name for p in run.iterdir()) == sorted(['args.yaml', 'summary.csv', LOCK_NAME]), \
        sorted(run.iterdir())


def test_a_refused_save_keeps_the_last_whole_checkpoint_and_says_how_to_resume(tmp_path):
    from timm_structinit.train.output import OutputWriteError, writing_output
    for name in ('last.pth.tar', 'model_best.pth.tar', 'checkpoint-2.pth.tar'):
        (tmp_path / name).write_bytes(b'x' * 100)  # an earlier epoch's, whole
    with pytest.raises(OutputWriteError) as error:
        with writing_output(str(tmp_path)):
            (tmp_path / 'tmp.pth.tar').write_bytes(b'x' * 10)  # torch.save's half-written file
            (tmp_path / 'checkpoint-3.pth.tar').write_bytes(b'x' * 10)  # a copy cut short
            torch.save(torch.zeros(1000), '/dev/full')  # torch.save's own error for a full device: no errno
    assert sorted(os.listdir(tmp_path)) == ['checkpoint-2.pth.tar', 'last.pth.tar', 'model_best.pth.tar']
    assert f'continue with --resume {tmp_path / "last.pth.tar"} once there is room' in str(error.value)
    with pytest.raises(RuntimeError, match='not a write'):  # any other error is not taken for a refused write
        with writing_output(str(tmp_path)):
            raise RuntimeError('not a write')
    # torch.save's words, raised elsewhere, are not one either: a refused write is known by where it was raised
    with pytest.raises(RuntimeError, match='unexpected pos'):
        with writing_output(str(tmp_path)):
            raise RuntimeError('[enforce fail at inline_container.cc:672] . unexpected pos 10 vs 7')


@pytest.mark.slow
def test_files_the_disk_refuses_in_export_and_show_are_named(tmp_path):
    command = [sys.executable, '-m', 'timm_structinit.cli']
    target = tmp_path / 'export'
    proc = _run_capped([*command, 'export', 'vit_tiny_patch2_32_mimetic', str(target), '--model-kwargs',
                        *TINY_KWARGS], 2_000)
    assert proc.returncode == 1
    line = one_error_line(proc.stderr, 'timm-structinit export')
    assert f'cannot write the export to {target}: ' in line and '[Errno' not in line, line
    assert list(tmp_path.iterdir()) == []
    figure = tmp_path / 'maps.png'
    proc = _run_capped([*command, 'show', 'vit_tiny_patch2_32_mimetic', '--model-kwargs', *TINY_KWARGS, '--out',
                        str(figure)], 2_000)
    assert proc.returncode == 1
    line = one_error_line(proc.stderr, 'timm-structinit show')
    assert f'cannot write the figure {figure}: File too large' in line, line
    assert list(tmp_path.iterdir()) == []


def assert_unwritable_refused(data, locked, capsys):
    """ Training into, and exporting into, a folder this user cannot write: one line each, exit 2, nothing made. """
    code, out, err = run_train([*TINY, *FAST, '--data-dir', data, '--output', locked / 'runs'], capsys)
    assert code == 2
    assert f"--output '{locked / 'runs'}': no permission to write in {locked}" in one_error_line(err)
    code = cli.main(['export', 'vit_tiny_patch2_32_mimetic', str(locked / 'export'), '--model-kwargs', 'depth=1'])
    assert code == 2
    line = one_error_line(capsys.readouterr().err, 'timm-structinit export')
    assert f'export target {locked / "export"}: no permission to write in {locked}' in line
    assert list(locked.iterdir()) == []


def test_read_only_output_folder(tmp_path, capsys):
    data = image_folder(tmp_path / 'data')
    locked = tmp_path / 'locked'
    locked.mkdir()
    locked.chmod(0o555)
    try:
        if os.access(locked, os.W_OK):  # root writes anyway: nothing to refuse
            pytest.skip('this user can write into a read-only folder')
        assert_unwritable_refused(data, locked, capsys)
    finally:
        locked.chmod(0o755)


def test_unwritable_output_folder_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    """ The same refusal where permissions do not stop this user (root): the folder reports itself read-only. """
    data = image_folder(tmp_path / 'data')
    locked = tmp_path / 'locked'
    locked.mkdir()
    access = os.access
    monkeypatch.setattr(os, 'access', lambda path, mode: access(path, mode) and Path(path) != locked)
    assert_unwritable_refused(data, locked, capsys)


def test_full_disk_during_export_leaves_nothing(tmp_path, capsys, monkeypatch):
    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(pathlib.Path, 'write_text', full)  # the model card, the last file written
    target = tmp_path / 'export'
    code = cli.main(['export', 'vit_tiny_patch2_32_mimetic', str(target), '--model-kwargs', *TINY_KWARGS])
    assert code == 1
    line = one_error_line(capsys.readouterr().err, 'timm-structinit export')
    assert f'cannot write the export to {target}: No space left on device' in line
    assert list(tmp_path.iterdir()) == []  # no export folder, no staging folder


@pytest.mark.parametrize('signum', [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_during_export_leaves_nothing(signum, tmp_path, capsys, monkeypatch):
    """ `timeout`, SLURM or a closing terminal stop `timm-structinit` as Ctrl-C does: one line, 128 + the signal,
    and the export being staged is removed (the default action would leave it for the next export to clean). """
    def stopped(self, *args, **kwargs):
        os.kill(os.getpid(), signum)
        time.sleep(1)  # the handler runs at the next bytecode: this line is never finished
        raise AssertionError('the stop signal was not acted on')

    monkeypatch.setattr(pathlib.Path, 'write_text', stopped)  # the model card, the last file written
    before = signal.getsignal(signum)
    code = cli.main(['export', 'vit_tiny_patch2_32_mimetic', str(tmp_path / 'export'), '--model-kwargs',
                     *TINY_KWARGS])
    assert code == 128 + signum
    assert capsys.readouterr().err == f'timm-structinit export: interrupted ({signal.Signals(signum).name})\n'
    assert list(tmp_path.iterdir()) == []  # no export folder, no staging folder
    assert signal.getsignal(signum) is before


# ------------------------------------------------------------------------------------------------------------------
# 4. timm-structinit export / show inputs


def test_truncated_safetensors_checkpoint(tmp_path, capsys):
    import safetensors.torch
    good = tmp_path / 'w.safetensors'
    safetensors.torch.save_file({'w': torch.zeros(64, 64)}, str(good))
    bad = tmp_path / 'bad.safetensors'
    bad.write_bytes(good.read_bytes()[:1000])
    for command in (['export', 'vit_tiny_patch2_32_mimetic', str(tmp_path / 'out')],
                    ['show', 'vit_tiny_patch2_32_mimetic', '--out', str(tmp_path / 'fig.png')]):
        assert cli.main([*command, '--checkpoint', str(bad)]) == 2
        line = one_error_line(capsys.readouterr().err, f'timm-structinit {command[0]}')
        assert f'cannot read checkpoint {bad} as safetensors' in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ['bad.safetensors', 'w.safetensors']


def test_show_images_empty_folder_and_other_size(tmp_path, capsys):
    from PIL import Image
    base = ['show', 'vit_tiny_patch2_32_impulse3', '--model-kwargs', *TINY_KWARGS, '--out', str(tmp_path / 'f.png')]
    (tmp_path / 'empty').mkdir()
    assert cli.main([*base, '--images', str(tmp_path / 'empty')]) == 2
    line = one_error_line(capsys.readouterr().err, 'timm-structinit show')
    assert f"--images '{tmp_path / 'empty'}': no images found" in line
    assert not (tmp_path / 'f.png').exists()

    (tmp_path / 'big').mkdir()  # 64x48 images for a model of 8x8 inputs: resized to what the model takes
    for i in range(3):
        Image.new('RGB', (64, 48), (40 * i, 0, 0)).save(tmp_path / 'big' / f'{i}.png')
    assert cli.main([*base, '--images', str(tmp_path / 'big')]) == 0
    assert 'img mass' in capsys.readouterr().out and (tmp_path / 'f.png').is_file()


# ------------------------------------------------------------------------------------------------------------------
# 5. non-finite numbers and malformed auto-augment policies


@pytest.mark.parametrize('option, expected', [
    (['--lr', 'inf'], '--lr inf must be a finite number'),
    (['--mean', 'nan'], '--mean [nan] must be a finite number'),
    (['--warmup-lr=-inf'], '--warmup-lr -inf must be a finite number'),
    (['--scale', '0.5', 'inf'], '--scale [0.5, inf] must be a finite number'),
    (['--decay-rate', 'nan'], '--decay-rate nan must be a finite number'),
])
def test_non_finite_numbers_are_refused(option, expected, tmp_path, capsys):
    code, out, err = run_train([*DIGITS, *option, '--output', tmp_path], capsys)
    assert code == 2 and expected in one_error_line(err)


def test_non_finite_number_in_config(tmp_path, capsys):
    cfg = tmp_path / 'c.yaml'
    cfg.write_text('lr: .inf\n')
    argv = ['-c', cfg, *TINY, '--dataset', 'sklearn/digits', '--train-subset', 20, '--val-subset', 10, '--epochs', 1,
            '--workers', 0, '--batch-size', 10, '--output', tmp_path]
    code, out, err = run_train(argv, capsys)
    assert code == 2 and '--lr inf must be a finite number' in one_error_line(err)


@pytest.mark.parametrize('policy, section', [
    ('rand-zz', "'zz'"),
    ('rand-m9-tbogus', "'tbogus'"),
    ('rand-m9-w1', "'w1'"),  # timm 1.0 removed the 'w' section of RandAugment
    ('rand-m9.5', "'m9.5'"),
    ('rand-m9-', "''"),
    ('augmix-m5-q3', "'q3'"),
    ('original-x', "'x'"),
    ('v1', "unknown policy 'v1'"),
])
def test_malformed_auto_augment_policy(policy, section, tmp_path, capsys):
    code, out, err = run_train([*DIGITS, '--aa', policy, '--output', tmp_path], capsys)
    assert code == 2
    line = one_error_line(err)
    assert f'--aa {policy!r}' in line and section in line and 'rand-m9-mstd0.5-inc1' in line


@pytest.mark.parametrize('policy', ['rand-m9-mstd0.5-inc1', 'rand-m7-n3-mstd101-mmax10-p0.5-tweights', 'rand-t3a',
                                    'augmix-m5-w4-d2-a1.0-b1-mstd0.3', 'original-mstd0.5', 'originalr', 'v0', 'v0r',
                                    '3a'])
def test_valid_auto_augment_policies_pass(policy):
    train_mod.check_args(train_mod.parse_args(['--dataset', 'sklearn/digits', '--aa', policy]))


# ------------------------------------------------------------------------------------------------------------------
# 6. argparse usage errors


@pytest.mark.parametrize('argv, prog, expected', [
    (['--bogus'], TRAIN_PROG, 'unrecognized arguments: --bogus'),
    (['--lr', 'fast'], TRAIN_PROG, "argument --lr: invalid float value: 'fast'"),
    (['-c'], TRAIN_PROG, 'argument -c/--config: expected one argument'),
    (['--model-kwargs', 'depth'], TRAIN_PROG, "--model-kwargs expects key=value pairs, got 'depth'"),
])
def test_train_usage_error_is_one_line(argv, prog, expected, capsys):
    with pytest.raises(SystemExit) as exit_:
        train_mod.main(argv)
    assert exit_.value.code == 2
    line = one_error_line(capsys.readouterr().err, prog)
    assert expected in line and f'(see {prog} --help)' in line


@pytest.mark.parametrize('argv, prog, expected', [
    ([], 'timm-structinit', 'the following arguments are required: COMMAND'),
    (['exprot'], 'timm-structinit', "invalid choice: 'exprot'"),
    (['export', 'vit_tiny_patch2_32_mimetic'], 'timm-structinit export', 'required: DIR'),
    (['show', 'm', '--layer', 'one'], 'timm-structinit show', "argument --layer: invalid int value: 'one'"),
    # the training command's --model is not an abbreviation of --model-kwargs here
    (['export', '--model', 'vit_tiny_patch2_32_mimetic', 'out'], 'timm-structinit export',
     'unrecognized arguments: --model; name the model without --model: timm-structinit export MODEL'),
    (['show', 'm', '--layr', '2'], 'timm-structinit show', 'unrecognized arguments: --layr 2; did you mean --layer?'),
])
def test_cli_usage_error_is_one_line(argv, prog, expected, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    line = one_error_line(capsys.readouterr().err, prog)
    assert expected in line and f'(see {prog} --help)' in line


@pytest.mark.slow
def test_usage_error_of_the_installed_command():
    proc = subprocess.run([sys.executable, '-m', 'timm_structinit.train', '--epochs', 'x'], capture_output=True,
                          text=True, env=dict(os.environ, OMP_NUM_THREADS='1'))
    assert proc.returncode == 2
    assert proc.stderr == (f"{TRAIN_PROG}: error: argument --epochs: invalid int value: 'x' "
                           f"(see {TRAIN_PROG} --help)\n")


# ------------------------------------------------------------------------------------------------------------------
# 7. nothing to resume


def test_run_stopped_in_its_first_epoch_keeps_nothing_and_offers_no_resume(tmp_path, capsys, monkeypatch):
    data = image_folder(tmp_path / 'data')

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(epochs_mod, 'train_one_epoch', interrupted)
    argv = [*TINY, *FAST, '--data-dir', data, '--output', tmp_path / 'out', '--experiment', 'x', '--epochs', 3]
    code, out, err = run_train(argv, capsys)
    assert code == 130
    assert err == 'interrupted in epoch 1/3, before any epoch finished: nothing to resume, and nothing was kept\n'
    assert not (tmp_path / 'out').exists()


def test_folder_of_a_killed_first_epoch_offers_no_resume(tmp_path, capsys):
    data = image_folder(tmp_path / 'data')
    run = tmp_path / 'out' / 'x'
    run.mkdir(parents=True)
    (run / 'args.yaml').write_text('epochs: 3\n')  # what a run killed in its first epoch leaves
    argv = [*TINY, *FAST, '--data-dir', data, '--output', tmp_path / 'out', '--experiment', 'x']
    code, out, err = run_train(argv, capsys)
    assert code == 2
    line = one_error_line(err)
    assert 'nothing to resume' in line and '--resume' not in line and '--overwrite' in line
    code, out, err = run_train([*TINY, *FAST, '--data-dir', data, '--resume', run], capsys)
    assert code == 2
    assert f"--resume '{run}': nothing to resume, {run} holds no last.pth.tar" in one_error_line(err)
    assert files_under(run) == ['args.yaml']


# ------------------------------------------------------------------------------------------------------------------
# 8. staging folders of a killed export


def test_export_removes_the_staging_folders_of_a_killed_export(tmp_path, capsys):
    dead = subprocess.Popen([sys.executable, '-c', 'pass'])
    dead.wait(timeout=60)
    stale = [tmp_path / '.tgt.0123abcd.tmp', tmp_path / f'.tgt.{dead.pid}-89abcdef.tmp',
             tmp_path / f'.tgt.{dead.pid}-89abcdef.old']
    live = tmp_path / f'.tgt.{os.getppid()}-01234567.tmp'  # an export still running in another process
    other = tmp_path / '.other.0123abcd.tmp'  # another target's
    for folder in (*stale, live, other):
        folder.mkdir()
        (folder / 'model.safetensors').write_bytes(b'\0' * 1024)
    assert cli.main(['export', 'vit_tiny_patch2_32_mimetic', str(tmp_path / 'tgt'), '--model-kwargs',
                     *TINY_KWARGS]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name, 'tgt'])


# ------------------------------------------------------------------------------------------------------------------
# 9. epochs counted from 1 in every printed line


def test_epochs_are_numbered_from_one(tiny_run, tmp_path, capsys, caplog):
    run, data = tiny_run
    caplog.set_level('INFO')
    argv = [*TINY, *FAST, '--data-dir', data, '--output', tmp_path, '--experiment', 'e', '--epochs', 2]
    code, out, err = run_train(argv, capsys)
    assert code == 0, err
    assert 'epochs 1..2 of 2' in caplog.text and 'Train: epoch 1 [' in caplog.text
    assert 'Train: epoch 2 [' in caplog.text and 'Train: epoch 0' not in caplog.text
    assert '\nepoch   1/2 ' in '\n' + out and '\nepoch   2/2 ' in out
    best = int(out.split('(epoch ')[1].split(')')[0])
    assert best in (1, 2)
    with open(tmp_path / 'e' / 'summary.csv') as f:  # timm's own column keeps counting from 0
        assert [line.split(',')[0] for line in f.read().splitlines()[1:]] == ['0', '1']

    caplog.clear()
    argv = [*argv[:-4], '--experiment', 'r', '--epochs', 2, '--resume', tmp_path / 'e' / 'checkpoint-0.pth.tar']
    code, out, err = run_train(argv, capsys)
    assert code == 0, err
    assert 'epochs 2..2 of 2' in caplog.text and '\nepoch   2/2 ' in '\n' + out


# ------------------------------------------------------------------------------------------------------------------
# 10. model_kwargs in_chans without --in-chans


def test_model_kwargs_in_chans_trains_on_one_channel(tmp_path, capsys):
    argv = ['-c', 'digits', '--model-kwargs', 'in_chans=1', 'depth=1', 'embed_dim=32', 'num_heads=2', '--epochs', 1,
            '--train-subset', 64, '--val-subset', 20, '--batch-size', 32, '--output', tmp_path, '--experiment', 'g']
    code, out, err = run_train(argv, capsys)
    assert code == 0, err
    state = torch.load(tmp_path / 'g' / 'last.pth.tar', map_location='cpu', weights_only=False)['state_dict']
    assert state['patch_embed.proj.weight'].shape[1] == 1
    assert 'final top-1' in out

    code, out, err = run_train([*argv[:-2], '--experiment', 'h', '--in-chans', 3], capsys)
    assert code == 2  # a value the user did set still contradicts
    assert 'model_kwargs in_chans=1 contradicts --in-chans/--input-size 3' in one_error_line(err)
    assert not (tmp_path / 'h').exists()
