""" The one-line promise where the package meets what it does not own: readers of the user's files (PyYAML, torch.load,
safetensors, numpy, torchvision's datasets, the optimizer factory, model constructors), the data's meaning (class
folders, splits, file kinds), the process's environment (memory, pipes, launch variables, logins, file systems) and
the Python API. Each case is one line naming the value and what is valid, exit 2 before any work and 1 during. """
import errno
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from PIL import Image

import timm_structinit
from timm_structinit import cli
from timm_structinit import train as train_mod
from timm_structinit.data import DataError, ImageReadError, build_dataset, folder_dataset, named_item_reads
from timm_structinit.train import epochs as epochs_mod, output as output_mod
from train_command import lock_is_free, one_line, run_main

TINY = ['--model', 'vit_tiny_patch2_32_mimetic', '--model-kwargs', 'embed_dim=16', 'depth=1', 'num_heads=2',
        'patch_size=8']
FAST = ['--opt', 'adamw', '--lr', '1e-3', '--warmup-epochs', '0', '--workers', '0', '--batch-size', '4',
        '--log-interval', '1000', '--epochs', '1']
DIGITS = ['--dataset', 'sklearn/digits', '--val-split', 'test', '--train-subset', '16', '--val-subset', '10']
ENV = dict(os.environ, OMP_NUM_THREADS='1', PYTHONUNBUFFERED='1', PYTHONPATH=str(Path(__file__).parents[1]))


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    """ A run that is not refused as it should be writes its default output folder here, not in the checkout. """
    monkeypatch.chdir(tmp_path)


def image_folder(root: Path, classes=('cat', 'dog'), per_class: int = 4, sub: str = '') -> Path:
    for split in ('train', 'test'):
        for c, cls in enumerate(classes):
            folder = root / split / cls / sub
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                Image.new('RGB', (32, 32), (40 * i, 80 + 60 * c, 120)).save(folder / f'{i}.png')
    return root


def refused(argv, capsys, status=2, *named) -> str:
    code, out, err = run_main(argv, capsys)
    line = one_line(err)
    assert code == status, (code, line)
    for word in named:
        assert word in line, line
    return line


# --- readers the package does not own -------------------------------------------------------------------------

@pytest.mark.parametrize('text,named', [
    ('lr: ' + '[' * 3000 + ']' * 3000 + '\n', 'RecursionError'),  # PyYAML's recursion, 3,000 lists deep
    ('epochs: 2\n' + '{' * 3000 + '\n', 'YAML'),                    # unclosed, as deep
    ('epochs: !!python/object:os.system x\n', 'YAML'),             # a tag the safe loader refuses
    ('\x00\x01\x02binary', 'YAML'),                                  # not text YAML reads
])
def test_any_yaml_reader_failure_is_one_line(text, named, tmp_path, capsys):
    cfg = tmp_path / 'c.yaml'
    cfg.write_text(text, encoding='utf-8')
    refused(['-c', cfg, *TINY], capsys, 2, str(cfg), named)


def test_a_yaml_merge_key_is_read(tmp_path):
    cfg = tmp_path / 'c.yaml'
    cfg.write_text('model_kwargs: &small {embed_dim: 16, depth: 1}\nopt_kwargs:\n  <<: {}\n'
                   'model: vit_tiny_patch2_32_mimetic\n', encoding='utf-8')
    cfg2 = tmp_path / 'd.yaml'
    cfg2.write_text('model_kwargs:\n  <<: {embed_dim: 16, depth: 1, num_heads: 4}\n  num_heads: 2\n', encoding='utf-8')
    args = train_mod.parse_args(['-c', str(cfg2)])
    assert args.model_kwargs == dict(embed_dim=16, depth=1, num_heads=2)  # the mapping's own key overrides the merged
    assert train_mod.parse_args(['-c', str(cfg)]).model_kwargs == dict(embed_dim=16, depth=1)


def test_a_second_config_is_refused(tmp_path, capsys):
    a, b = tmp_path / 'a.yaml', tmp_path / 'b.yaml'
    a.write_text('epochs: 3\n')
    b.write_text('batch_size: 8\n')
    refused(['-c', a, '--config', b, *TINY], capsys, 2, '2 times', str(a), str(b))


@pytest.mark.parametrize('opt,items,named', [
    ('adamw', ['betas=(0.9,)'], 'IndexError'),           # the optimizer's own unpacking, not a type check of ours
    ('adamw', ['betas=(0.9, "x")'], 'not supported'),
    ('momentum', ['dampening="x"'], 'unsupported operand'),  # read in the second step only
    ('adamw', ['capturable=True', 'foreach=True', 'fused=True'], 'fused'),
])
def test_any_optimizer_dry_build_failure_is_one_line(opt, items, named, capsys):
    refused([*TINY, *DIGITS, *FAST, '--opt', opt, '--opt-kwargs', *items], capsys, 2, f'--opt {opt}', named)


@pytest.mark.parametrize('opt,ok', [('foo_adamw', False), ('adamw_sgd', False), ('lookahead_adamw', True),
                                    ('AdamW', True), ('lookahead_lookahead_adamw', False)])
def test_opt_is_what_timm_accepts_exactly(opt, ok, capsys):
    from timm_structinit.train.checks import check_args
    args = train_mod.parse_args([*TINY, *DIGITS, '--opt', opt])
    if ok:
        check_args(args)
    else:
        with pytest.raises(train_mod.ConfigError, match=f"--opt '{opt}' is not a timm optimizer"):
            check_args(args)


def exported(tmp_path) -> Path:
    folder = tmp_path / 'export'
    timm_structinit.hub.export_model('vit_tiny_patch2_32_mimetic', folder,
                                     model_kwargs=dict(embed_dim=16, depth=1, num_heads=2, patch_size=8))
    return folder


@pytest.mark.parametrize('damage,named', [
    (lambda f: f.write_bytes(f.read_bytes()[:len(f.read_bytes()) // 2]), 'model.safetensors'),  # truncated
    (lambda f: f.write_bytes(b'\xff' * 64), 'model.safetensors'),                                 # garbage
    (lambda f: f.write_bytes(b''), 'model.safetensors'),                                          # empty
    (lambda f: (f.parent / 'config.json').write_text('{"architecture": '), 'config.json'),       # cut JSON
    (lambda f: (f.parent / 'config.json').write_text('[1, 2]'), 'config.json'),                  # not an object
])
def test_a_damaged_local_dir_model_is_one_line_before_any_work(damage, named, tmp_path, capsys):
    folder = exported(tmp_path)
    damage(folder / 'model.safetensors')
    line = refused(['--model', f'local-dir:{folder}', *DIGITS, '--output', tmp_path / 'o'], capsys, 2, named)
    assert 'not readable' in line or 'not a readable' in line
    assert not (tmp_path / 'o').exists()
    code = cli.main(['show', f'local-dir:{folder}', '--out', str(tmp_path / 'x.png')])
    assert code == 2 and one_line(capsys.readouterr().err)


@pytest.mark.parametrize('content', [b'garbage, not a zip', b'PK\x03\x04' + b'\0' * 40])
def test_a_damaged_npz_initial_checkpoint_is_one_line(content, tmp_path, capsys):
    path = tmp_path / 'w.npz'
    path.write_bytes(content)
    refused([*TINY, *DIGITS, '--initial-checkpoint', path, '--output', tmp_path / 'o'], capsys, 2, str(path))


def test_an_npz_of_other_arrays_is_one_line(tmp_path, capsys):
    path = tmp_path / 'w.npz'
    np.savez(path, foo=np.zeros(3))
    refused([*TINY, *DIGITS, '--initial-checkpoint', path, '--output', tmp_path / 'o'], capsys, 2, str(path))


def test_model_kwargs_any_constructor_failure_is_one_line(capsys):
    # a value whose type no constructor check foresees: the dry build's exception, whatever it is, as one line
    refused([*TINY[:3], 'embed_dim=16', 'depth=1', 'num_heads=2', 'patch_size=8', 'mlp_ratio="x"', *DIGITS], capsys,
            2, 'mlp_ratio')


def test_an_item_read_failure_of_any_kind_is_one_line_naming_the_item():
    class Broken(torch.utils.data.Dataset):
        def __len__(self):
            return 3

        def __getitem__(self, index):
            return {}[index]  # a KeyError no list of expected types would hold

    dataset = named_item_reads(Broken(), 'torch/x --val-split test')
    with pytest.raises(ImageReadError, match=r"^torch/x --val-split test: cannot read item 1: KeyError: 1$"):
        dataset[1]
    assert isinstance(dataset, Broken)  # the same instance, its class kept


# --- a corrupt copy of each file of every dataset source ---------------------------------------------------------

def make_mnist(root: Path) -> None:
    """ MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte in the idx format (big-endian header). """
    raw = root / 'MNIST' / 'raw'
    raw.mkdir(parents=True)
    for prefix, n in (('train', 6), ('t10k', 3)):
        images = np.zeros((n, 28, 28), dtype=np.uint8)
        header = np.array([0x0803, n, 28, 28], dtype='>i4').tobytes()
        (raw / f'{prefix}-images-idx3-ubyte').write_bytes(header + images.tobytes())
        labels = np.arange(n, dtype=np.uint8) % 3
        (raw / f'{prefix}-labels-idx1-ubyte').write_bytes(np.array([0x0801, n], dtype='>i4').tobytes()
                                                          + labels.tobytes())


def make_folder(root: Path) -> None:
    image_folder(root, per_class=2)


def _sources():
    sys.path.insert(0, str(Path(__file__).parent))
    from test_torchvision_data import CASES
    sources = {name: (writer, list(splits)) for name, (writer, splits, _) in CASES.items()}
    sources['torch/mnist'] = (make_mnist, ['train', 'test'])
    sources[''] = (make_folder, ['train', 'test'])
    return sources


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == 'random':
        path.write_bytes(np.random.default_rng(len(data)).integers(0, 256, max(len(data), 16), dtype=np.uint8)
                         .tobytes())
    elif how == 'truncated':
        path.write_bytes(data[:len(data) // 2])
    else:
        path.write_bytes(b'')


@pytest.mark.slow
@pytest.mark.parametrize('name', ['torch/svhn', 'torch/food101', 'torch/stl10', 'torch/flowers102',
                                  'torch/oxford_iiit_pet', 'torch/mnist', ''])
def test_every_dataset_source_with_a_corrupt_copy_of_each_file(name, tmp_path):
    """ Each file of a tiny copy in the source's real layout, damaged three ways: building the splits and reading
    every item either works or fails as one line (DataError at construction, ImageReadError at an item), whatever
    the reader (scipy, JSON, numpy, PIL, torchvision's parsers) raised. """
    import shutil
    writer, splits = _sources()[name]
    clean = tmp_path / 'clean'
    clean.mkdir()
    writer(clean)
    files = sorted(p.relative_to(clean) for p in clean.rglob('*') if p.is_file())
    assert files
    outcomes = {'ok': 0, 'refused': 0, 'item': 0}
    for i, rel in enumerate(files):
        for how in ('random', 'truncated', 'empty'):
            copy = tmp_path / f'c{i}{how}'
            shutil.copytree(clean, copy)
            _damage(copy / rel, how)
            for split in splits:
                try:
                    dataset = build_dataset(name, str(copy), split, '--val-split')
                except DataError as e:
                    assert '\n' not in str(e) and ('--val-split' in str(e) or str(copy) in str(e)), str(e)
                    outcomes['refused'] += 1
                    continue
                try:
                    for index in range(len(dataset)):
                        dataset[index]
                    outcomes['ok'] += 1
                except ImageReadError as e:
                    assert '\n' not in str(e) and 'item' in str(e) or 'image' in str(e), str(e)
                    outcomes['item'] += 1
            shutil.rmtree(copy)
    assert outcomes['refused'] + outcomes['item'] > 0, outcomes


# --- the data's meaning ----------------------------------------------------------------------------------------

def test_labels_follow_the_class_folder_however_deep(tmp_path):
    data = image_folder(tmp_path, sub='extra')
    dataset = folder_dataset(str(data / 'train'), '--train-split train')
    assert dataset.reader.class_to_idx == {'cat': 0, 'dog': 1}
    assert sorted({t for _, t in dataset.reader.samples}) == [0, 1]
    assert all(Path(p).parts[-3] == ('cat', 'dog')[t] for p, t in dataset.reader.samples)


def test_a_nested_folder_trains_the_classes_the_user_sees(tmp_path, capsys, caplog):
    data = image_folder(tmp_path / 'data', sub='extra')
    code, out, err = run_main(['--data-dir', data, '--val-split', 'test', *TINY, *FAST, '--output', tmp_path / 'o'],
                              capsys)
    assert code == 0, err
    assert '2 classes' in caplog.text


@pytest.mark.parametrize('link', ['split', 'class'])
def test_splits_are_compared_by_the_files_they_read(link, tmp_path, capsys):
    data = image_folder(tmp_path / 'data')
    if link == 'split':  # val -> train
        (data / 'val').symlink_to(data / 'train', target_is_directory=True)
        split = 'val'
    else:  # a class folder of the evaluation split linked to the training one
        import shutil
        shutil.rmtree(data / 'test' / 'cat')
        (data / 'test' / 'cat').symlink_to(data / 'train' / 'cat', target_is_directory=True)
        split = 'test'
    refused(['--data-dir', data, '--val-split', split, *TINY, *FAST, '--output', tmp_path / 'o'], capsys, 2,
            'training images')
    assert not (tmp_path / 'o').exists()


def test_a_fifo_named_like_an_image_is_refused_not_read(tmp_path):
    data = image_folder(tmp_path / 'data')
    os.mkfifo(data / 'train' / 'cat' / 'x.jpg')
    with pytest.raises(DataError, match=r"--train-split 'train': .*x\.jpg is a FIFO \(named pipe\), not a regular"):
        build_dataset('', str(data), 'train', '--train-split')


def test_a_fifo_is_not_opened_by_the_image_reader(tmp_path):
    from timm_structinit.data import read_image
    fifo = tmp_path / 'x.png'
    os.mkfifo(fifo)
    # a writer that lets a reader that opened the FIFO go on (empty), so that a regression fails instead of hanging
    writer = threading.Thread(target=lambda: os.close(os.open(fifo, os.O_WRONLY)), daemon=True)
    writer.start()
    try:
        with pytest.raises(ImageReadError, match='not a regular file'):
            read_image(str(fifo))
    finally:
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # the writer's open returns
        writer.join(10)


# --- the process's environment ---------------------------------------------------------------------------------

@pytest.mark.parametrize('error', [
    torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 20.00 GiB\nmore allocator text'),
    RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried "
                 "to allocate 1099511627776 bytes. Error code 12 (Cannot allocate memory)"),
    MemoryError(),
])
def test_out_of_memory_during_the_work_is_one_line(error, tmp_path, capsys, monkeypatch):
    def fail(*args, **kwargs):
        raise error
    monkeypatch.setattr(epochs_mod, 'train_one_epoch', fail)
    line = refused([*TINY, *DIGITS, *FAST, '--output', tmp_path / 'o'], capsys, 1, 'out of memory', '--batch-size')
    assert 'allocator text' not in line
    assert not (tmp_path / 'o').exists() or not any((tmp_path / 'o').rglob('*.pth.tar'))


@pytest.mark.slow
def test_a_read_only_file_system_after_the_first_epoch_is_one_line(tmp_path, capsys, monkeypatch):
    from timm.utils import CheckpointSaver
    real_save, real_remove = CheckpointSaver.save_checkpoint, os.remove
    calls = []

    def save(self, epoch, metric=None):
        calls.append(epoch)
        if epoch >= 1:
            raise OSError(errno.EROFS, 'Read-only file system', str(Path(self.checkpoint_dir) / 'tmp.pth.tar'))
        return real_save(self, epoch, metric)

    def remove(path, *args, **kwargs):
        if calls and calls[-1] >= 1:
            raise OSError(errno.EROFS, 'Read-only file system', path)
        return real_remove(path, *args, **kwargs)
    monkeypatch.setattr(CheckpointSaver, 'save_checkpoint', save)
    monkeypatch.setattr(os, 'remove', remove)
    argv = [*TINY, *DIGITS, *FAST[:-1], '2', '--output', tmp_path / 'o', '--experiment', 'r']
    refused(argv, capsys, 1, 'Read-only file system', 'last.pth.tar')
    monkeypatch.setattr(os, 'remove', real_remove)
    # the lock went with the run (the kernel's), though its file could not be removed
    output_mod.claim_output_dir(str(tmp_path / 'o' / 'r'), True, False)
    output_mod.release_output_dir(str(tmp_path / 'o' / 'r'))


@pytest.mark.slow
def test_a_closed_pipe_is_one_line(tmp_path):
    cmd = [sys.executable, '-m', 'timm_structinit.train', *TINY, *DIGITS, *FAST[:-1], '2', '--output',
           str(tmp_path / 'o')]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    proc.stdout.readline()  # as `| head -1`
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(timeout=300)
    line = one_line(err)
    assert proc.returncode == 1 and 'broken pipe' in line, line


@pytest.mark.parametrize('env,named', [
    (dict(RANK='1'), 'RANK=1'),
    (dict(WORLD_SIZE='2'), 'WORLD_SIZE=2'),
    (dict(LOCAL_RANK='3'), 'LOCAL_RANK=3'),
    (dict(RANK='x'), "RANK='x'"),
    (dict(RANK='2', WORLD_SIZE='2', MASTER_ADDR='127.0.0.1', MASTER_PORT='1'), 'below WORLD_SIZE'),
])
def test_launch_variables_left_in_the_environment_are_said(env, named, capsys, monkeypatch):
    for key in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT'):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    refused([*TINY, *DIGITS, *FAST], capsys, 2, named)


def test_log_wandb_without_a_login_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    pytest.importorskip('wandb')
    for key in ('WANDB_API_KEY', 'WANDB_MODE', 'WANDB_IDENTITY_TOKEN_FILE'):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv('NETRC', str(tmp_path / 'netrc'))
    monkeypatch.setenv('HOME', str(tmp_path))
    refused([*TINY, *DIGITS, *FAST, '--log-wandb', '--output', tmp_path / 'o'], capsys, 2, 'wandb login',
            'WANDB_MODE=offline')
    (tmp_path / 'netrc').write_text('machine api.wandb.ai\n  login user\n  password abc\n')
    from timm_structinit.train.checks import _wandb_can_log
    assert _wandb_can_log()


def test_a_file_size_limit_is_said_as_such(tmp_path, monkeypatch):
    with pytest.raises(output_mod.OutputWriteError) as info:
        with output_mod.writing_output(str(tmp_path)):
            raise OSError(errno.EFBIG, 'File too large', str(tmp_path / 'last.pth.tar'))
    assert 'File too large' in str(info.value) and 'MiB free' not in str(info.value)
    from timm_structinit.utils import write_failures
    monkeypatch.setattr(write_failures, 'file_size_limit', lambda: 1 << 20)
    with pytest.raises(output_mod.OutputWriteError, match='file-size limit of 1,048,576 bytes'):
        with output_mod.writing_output(str(tmp_path)):
            torch.save(torch.zeros(1000), '/dev/full')  # a RuntimeError without an errno, as torch.save gives


@pytest.mark.slow
def test_a_real_file_size_limit_is_said_as_such(tmp_path):
    import resource
    cmd = [sys.executable, '-m', 'timm_structinit.train', *TINY, *DIGITS, *FAST, '--output', str(tmp_path / 'o')]

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, resource.RLIM_INFINITY))
    result = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=300, preexec_fn=limit)
    line = one_line(result.stderr)
    assert result.returncode == 1 and 'file-size limit' in line and 'MiB free' not in line, line


@pytest.mark.slow
def test_a_stop_after_the_command_finished_says_so():
    code = ("import sys; sys.argv = ['timm-structinit']; import os, signal, timm_structinit\n"
            "from timm_structinit.train.failures import stop_on_signals\n"
            "stop_on_signals()()\n"  # the command's own handlers, put back when it returns
            "os.kill(os.getpid(), signal.SIGTERM)\n")
    result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, env=ENV, timeout=120)
    assert result.returncode == 128 + signal.SIGTERM
    assert 'after the command had finished' in one_line(result.stderr)


# --- the output folder's lock ----------------------------------------------------------------------------------

def test_a_held_lock_names_its_file_and_holder(tmp_path, capsys):
    from filelock import FileLock
    run = tmp_path / 'o' / 'r'
    run.mkdir(parents=True)
    lock = FileLock(str(run / output_mod.LOCK_NAME), timeout=0,
                    on_acquired=lambda fd: os.write(fd, b'otherhost 4242'))
    ready, done = threading.Event(), threading.Event()

    def hold():  # another open of the lock file (flock is per open file description)
        with lock:
            ready.set()
            done.wait(60)
    thread = threading.Thread(target=hold)
    thread.start()
    ready.wait(60)
    try:
        refused([*TINY, *DIGITS, *FAST, '--output', tmp_path / 'o', '--experiment', 'r'], capsys, 2,
                str(run / output_mod.LOCK_NAME), 'process 4242 on otherhost')
    finally:
        done.set()
        thread.join()


def test_a_lock_file_of_another_host_that_nobody_holds_is_taken(tmp_path, capsys):
    run = tmp_path / 'o' / 'r'
    run.mkdir(parents=True)
    (run / output_mod.LOCK_NAME).write_text('a-host-that-crashed 77 123')
    code, out, err = run_main([*TINY, *DIGITS, *FAST, '--output', tmp_path / 'o', '--experiment', 'r'], capsys)
    assert code == 0, err
    assert (run / 'last.pth.tar').exists() and lock_is_free(run)  # taken, then released, its file in place



def test_the_lock_file_stays_after_the_run_as_the_docs_say(tmp_path):
    """ The run's lock file stays in its folder after the run (kept on purpose: see `claim_output_dir`), and the
    training guide says so. """
    folder = str(tmp_path / 'run')
    output_mod.claim_output_dir(folder, False, False)
    output_mod.release_output_dir(folder)
    assert (tmp_path / 'run' / output_mod.LOCK_NAME).is_file()
    guide = Path(__file__).parents[1] / 'docs' / 'training.md'
    text = ' '.join(guide.read_text(encoding='utf-8').split())
    said = text[text.index(output_mod.LOCK_NAME):].split('. ')[0]
    assert 'the file stays in the folder after the run' in said and 'removed' not in said, said

# --- two spellings of one setting ------------------------------------------------------------------------------

@pytest.mark.parametrize('item,named', [
    ('drop_path_rate=1.5', 'in [0, 1)'), ('drop_rate=-0.1', 'drop_rate'), ('drop_path_rate="0.1"', 'number'),
    ('num_classes=0', 'num_classes'), ('drop_block_rate=1.0', 'drop_block_rate'),
])
def test_model_kwargs_take_the_range_of_their_option(item, named, capsys):
    refused([*TINY, item, *DIGITS, *FAST], capsys, 2, named)


@pytest.mark.parametrize('flags', [['--in-chans', '2'], ['--input-size', '4', '32', '32'], ['--in-chans', '2',
                                                                                           '--model-kwargs',
                                                                                           'in_chans=2']])
def test_input_channels_the_images_do_not_have_are_refused_before_the_epochs(flags, tmp_path, capsys):
    data = image_folder(tmp_path / 'data')
    refused(['--data-dir', data, '--val-split', 'test', *TINY, *FAST, *flags, '--output', tmp_path / 'o'], capsys, 2,
            'channel')


def test_one_channel_on_rgb_only_data_is_refused(tmp_path, capsys):
    sys.path.insert(0, str(Path(__file__).parent))
    from test_torchvision_data import make_stl10
    make_stl10(tmp_path / 'data')
    refused(['--dataset', 'torch/stl10', '--data-dir', tmp_path / 'data', '--val-split', 'test', *TINY, *FAST,
             '--in-chans', '1', '--output', tmp_path / 'o'], capsys, 2, 'have 3')


# --- the Python API --------------------------------------------------------------------------------------------

@pytest.mark.parametrize('wrap', ['parametrizations.weight_norm', 'weight_norm', 'spectral_norm', 'orthogonal'])
def test_apply_init_refuses_a_weight_computed_from_others(wrap):
    model = timm.create_model('vit_tiny_patch16_224', embed_dim=32, depth=2, num_heads=2, img_size=32,
                              patch_size=8, num_classes=3)
    qkv = model.blocks[1].attn.qkv
    import torch.nn.utils as nn_utils
    if wrap == 'parametrizations.weight_norm':
        torch.nn.utils.parametrizations.weight_norm(qkv)
    elif wrap == 'orthogonal':
        torch.nn.utils.parametrizations.orthogonal(model.blocks[0].attn.proj)
    else:
        getattr(nn_utils, wrap)(qkv)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match='blocks.[01].attn.(qkv|proj) .* an init cannot write it'):
        timm_structinit.apply_init(model, 'mimetic', seed=0)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not hasattr(model, 'struct_init_record')


def test_register_init_over_a_registered_name_needs_replace():
    from timm_structinit.inits import get_init
    builtin = get_init('mimetic')
    other = timm_structinit.inits.StructInit('mimetic', builtin.cfg_cls, builtin.apply, description='mine')
    with pytest.raises(ValueError, match="'mimetic' is already registered .* replace=True"):
        timm_structinit.register_init(other)
    assert get_init('mimetic') is builtin
    timm_structinit.register_init(builtin)  # the same init again: nothing changes
    try:
        timm_structinit.register_init(other, replace=True)
        assert get_init('mimetic') is other
    finally:
        timm_structinit.register_init(builtin, replace=True)


@pytest.mark.parametrize('value', ['"no"', '"False"', '0', '1', 'None'])
def test_boolean_model_arguments_are_strict(value, capsys):
    refused([*TINY, f'qkv_bias={value}', *DIGITS, *FAST], capsys, 2, 'qkv_bias', 'True or False')


# --- export -----------------------------------------------------------------------------------------------------

def test_export_force_into_the_folder_of_its_checkpoint_is_refused(tmp_path, capsys):
    run = tmp_path / 'o' / 'r'
    assert train_mod.main([*TINY, *DIGITS, *FAST, '--output', str(tmp_path / 'o'), '--experiment', 'r']) == 0
    capsys.readouterr()
    before = sorted(p.name for p in run.iterdir())
    code = cli.main(['export', 'vit_tiny_patch2_32_mimetic', str(run), '--checkpoint', str(run / 'last.pth.tar'),
                     '--model-kwargs', 'embed_dim=16', 'depth=1', 'num_heads=2', 'patch_size=8', 'num_classes=10',
                     '--force'])
    line = one_line(capsys.readouterr().err)
    assert code == 2 and 'holds the checkpoint it exports' in line, line
    assert sorted(p.name for p in run.iterdir()) == before
