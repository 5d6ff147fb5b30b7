""" Tests of the training entry point (timm_structinit.train): real runs on tiny models and tiny data.

Data: the shared CIFAR-10 ImageFolder copy at ../shared/data/cifar10 beside the repository (its tests skip when it is
absent) and scikit-learn's bundled digits, which every machine has.
"""
import errno
import os
import signal
import subprocess
import sys
import time
import urllib.error
from pathlib import Path

import pytest
import torch
import timm

from timm_structinit import train as train_mod
from timm_structinit.data import DigitsDataset, ClassBalancedSubset

REPO = Path(__file__).resolve().parents[1]
from timm_structinit.recipes import RECIPES_DIR  # noqa: E402
from train_command import read_summary, run_main  # noqa: E402

CONFIGS = sorted(RECIPES_DIR.glob('*.yaml'))

TINY_MODEL = ['--model', 'vit_tiny_patch2_32_mimetic',
              '--model-kwargs', 'embed_dim=32', 'depth=2', 'num_heads=2', 'patch_size=8']
FAST = ['--opt', 'adamw', '--lr', '2e-3', '--weight-decay', '0.01', '--warmup-epochs', '0', '--workers', '0',
        '--batch-size', '32', '--log-interval', '1000', '--seed', '7']
DIGITS = ['--dataset', 'sklearn/digits', '--val-split', 'test', '--hflip', '0']


@pytest.fixture(scope='module', autouse=True)
def one_torch_thread():
    """ conftest's `one_torch_thread` for the whole module: the module-scoped reference run trains under it too. """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def subprocess_env():
    return dict(os.environ, OMP_NUM_THREADS='1')


def state_dicts_close(a, b, key='state_dict'):
    sa, sb = a[key], b[key]
    assert sa.keys() == sb.keys()
    return all(torch.allclose(sa[k].float(), sb[k].float(), rtol=1e-5, atol=1e-6) for k in sa)


def load(path):
    return torch.load(path, map_location='cpu', weights_only=False)


@pytest.mark.slow
def test_cifar10_slice_trains_and_writes_outputs(tmp_path, capsys, cifar10_dir):
    argv = [*TINY_MODEL, *FAST, '--data-dir', cifar10_dir, '--val-split', 'test', '--train-subset', 256,
            '--val-subset', 100, '--epochs', 3, '--smoothing', 0, '--output', tmp_path, '--experiment', 'c10',
            '--plot', '--checkpoint-hist', 2]
    code, out, err = run_main(argv, capsys)
    assert code == 0, err
    run = tmp_path / 'c10'
    rows = read_summary(run / 'summary.csv')
    assert [int(r['epoch']) for r in rows] == [0, 1, 2]
    losses = [float(r['train_loss']) for r in rows]
    assert losses[-1] < losses[0] - 0.02, losses
    assert {'train_loss', 'eval_loss', 'eval_top1', 'eval_top5', 'lr'} <= set(rows[0])
    for name in ('last.pth.tar', 'model_best.pth.tar', 'args.yaml', 'summary.png'):
        assert (run / name).is_file(), name
    assert len(list(run.glob('checkpoint-*.pth.tar'))) == 2  # --checkpoint-hist
    assert (run / 'summary.png').stat().st_size > 10_000
    # the checkpoint restores into a freshly built model of the same architecture
    model = timm.create_model('vit_tiny_patch2_32_mimetic', embed_dim=32, depth=2, num_heads=2, patch_size=8)
    assert timm.models.resume_checkpoint(model, str(run / 'last.pth.tar'), log_info=False) == 3
    # eval used the 100-image test subset, each image once; the final line reports the accuracy
    assert 'final top-1' in out and 'on 100 test images' in out
    assert abs(float(rows[-1]['eval_top1']) - float(out.split('final top-1 ')[1].split('%')[0])) < 0.01


@pytest.mark.slow
def test_digits_config_learns(tmp_path, capsys):
    """ The main job's config, shortened: accuracy must clear chance (10%) by a wide margin. """
    argv = ['-c', 'digits', '--epochs', 6, '--warmup-epochs', 1, '--batch-size', 32,
            '--model-kwargs', 'embed_dim=32', 'depth=2', 'num_heads=2', 'patch_size=4',
            '--output', tmp_path, '--experiment', 'd']
    code, out, err = run_main(argv, capsys)
    assert code == 0, err
    rows = read_summary(tmp_path / 'd' / 'summary.csv')
    assert len(rows) == 6
    assert float(rows[-1]['eval_top1']) > 50., rows[-1]
    assert 'on 450 test images' in out


# options exercising every random source: shuffling, a loader worker, RandAugment (python), random erasing
# (torch), mixup (numpy), drop path (torch), plus the EMA and a warm-up/cosine schedule that depend on the epoch
RESUME_RUN = [*TINY_MODEL, *DIGITS, '--opt', 'adamw', '--lr', '2e-3', '--warmup-epochs', '1', '--workers', '1',
              '--batch-size', '32', '--log-interval', '1000', '--seed', '3', '--train-subset', '256',
              '--val-subset', '100', '--epochs', '3', '--aa', 'rand-m9-mstd0.5-inc1', '--reprob', '0.5',
              '--mixup', '0.4', '--drop-path', '0.1', '--model-ema', '--model-ema-decay', '0.9']


@pytest.fixture(scope='module')
def reference_run(tmp_path_factory, one_torch_thread):
    out = tmp_path_factory.mktemp('reference')
    assert train_mod.main([*RESUME_RUN, '--output', str(out), '--experiment', 'full']) == 0
    return out / 'full'


def test_resume_matches_uninterrupted_run(reference_run, tmp_path, capsys):
    code, out, err = run_main(
        [*RESUME_RUN, '--output', tmp_path, '--experiment', 'resumed',
         '--resume', reference_run / 'checkpoint-0.pth.tar'], capsys)
    assert code == 0, err
    full, resumed = load(reference_run / 'last.pth.tar'), load(tmp_path / 'resumed' / 'last.pth.tar')
    assert full['epoch'] == resumed['epoch'] == 2
    assert state_dicts_close(full, resumed)
    assert state_dicts_close(full, resumed, 'state_dict_ema')
    ref_rows = {r['epoch']: r for r in read_summary(reference_run / 'summary.csv')}
    new_rows = read_summary(tmp_path / 'resumed' / 'summary.csv')
    assert [r['epoch'] for r in new_rows] == ['1', '2']
    for row in new_rows:
        for key in ('train_loss', 'eval_loss', 'eval_top1', 'eval_ema_top1', 'lr'):
            assert float(row[key]) == pytest.approx(float(ref_rows[row['epoch']][key]), rel=1e-5, abs=1e-6), key


@pytest.mark.slow
def test_killed_run_resumes_from_last_good_checkpoint(reference_run, tmp_path):
    """ SIGKILL mid-run: last.pth.tar stays loadable and --resume DIR finishes with the uninterrupted weights. """
    run = tmp_path / 'killed'
    cmd = [sys.executable, '-m', 'timm_structinit.train', *map(str, RESUME_RUN), '--output', str(tmp_path),
           '--experiment', 'killed']
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp_path, env=subprocess_env())
    deadline = time.time() + 120
    while not (run / 'last.pth.tar').exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()
    meta = timm.utils.load_checkpoint_metadata(str(run / 'last.pth.tar'))
    assert meta['epoch'] < 2, 'the run finished before it could be killed'
    assert len(read_summary(run / 'summary.csv')) <= 2

    assert train_mod.main([*RESUME_RUN, '--resume', str(run)]) == 0  # continues in the checkpoint's folder
    assert [int(r['epoch']) for r in read_summary(run / 'summary.csv')] == [0, 1, 2]
    assert state_dicts_close(load(reference_run / 'last.pth.tar'), load(run / 'last.pth.tar'))


def test_failed_save_leaves_a_resumable_run(tmp_path, monkeypatch, capsys):
    """ A checkpoint write that fails after the first epoch (a full disk) ends the run with one line saying how to
    resume; the folder keeps what the finished epoch wrote (it is not removed like a run with nothing to resume), and
    --resume of the folder finishes the run, the summary cut back to the finished epochs. """
    save = timm.utils.CheckpointSaver.save_checkpoint

    def full_disk_after_epoch_0(saver, epoch, metric=None):
        if epoch > 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return save(saver, epoch, metric)

    monkeypatch.setattr(timm.utils.CheckpointSaver, 'save_checkpoint', full_disk_after_epoch_0)
    run = tmp_path / 'x'
    argv = [str(a) for a in (*TINY_MODEL, *FAST, *DIGITS, '--train-subset', 64, '--val-subset', 20, '--epochs', 3)]
    assert train_mod.main([*argv, '--output', str(tmp_path), '--experiment', 'x']) == 1
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and 'No space left on device' in err, err
    assert f'continue with --resume {run / "last.pth.tar"} once there is room' in err
    assert load(run / 'last.pth.tar')['epoch'] == 0
    assert [int(r['epoch']) for r in read_summary(run / 'summary.csv')] == [0, 1]  # epoch 1's row, not its checkpoint
    monkeypatch.undo()
    assert train_mod.main([*argv, '--resume', str(run)]) == 0
    assert [int(r['epoch']) for r in read_summary(run / 'summary.csv')] == [0, 1, 2]
    assert load(run / 'last.pth.tar')['epoch'] == 2


@pytest.mark.slow
def test_ddp_two_processes(tmp_path):
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2',
           '-m', 'timm_structinit.train', *map(str, TINY_MODEL), *FAST, *DIGITS, '--train-subset', '256',
           '--val-subset', '101', '--epochs', '2', '--output', str(tmp_path), '--experiment', 'ddp']
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=subprocess_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'Distributed training: 2 processes, backend gloo' in proc.stdout
    rows = read_summary(tmp_path / 'ddp' / 'summary.csv')
    assert len(rows) == 2
    # 101 images over 2 processes: the padding repeat is not counted
    assert 'on 101 test images' in proc.stdout
    # 256 images / (32 per process x 2 processes) = 4 updates per epoch: the processes split the data
    state = load(tmp_path / 'ddp' / 'last.pth.tar')
    assert state['optimizer']['state'][0]['step'].item() == 8


@pytest.mark.parametrize('config', CONFIGS, ids=[c.stem for c in CONFIGS])
def test_config_parses_into_valid_arguments(config, monkeypatch, tmp_path):
    text = config.read_text()
    assert text.startswith('#'), 'every config starts with a comment header'
    assert '\n# Source: ' in text, 'every config names its source on one line'
    if config.stem.startswith(('mimetic', 'impulse', 'default')):
        assert 'arXiv' in text and ('Not pinned down' in text or 'Left open' in text)
    if 'aug_repeats' in text:  # a distributed recipe: checked as one process of a torchrun would check it
        for key, value in dict(WORLD_SIZE='16', RANK='0', LOCAL_RANK='0', MASTER_ADDR='127.0.0.1',
                               MASTER_PORT='29500').items():
            monkeypatch.setenv(key, value)
    # a shipped recipe names no data folder: the user gives one
    args = train_mod.parse_args(['-c', config.stem, '--data-dir', str(tmp_path)])
    train_mod.check_args(args)  # the model among them: registered
    # every key is used as written: the parsed value equals the YAML value
    import yaml
    for key, value in yaml.safe_load(text).items():
        parsed = getattr(args, key)
        assert parsed == value or (isinstance(value, (int, float)) and parsed == pytest.approx(value)), key


def test_config_defaults_and_command_line_override(tmp_path):
    cfg = tmp_path / 'c.yaml'
    cfg.write_text('batch_size: 8\nlr: 3e-3\nmodel_kwargs: {embed_dim: 64, depth: 2}\nmean: [0.5, 0.5, 0.5]\n')
    args = train_mod.parse_args(['-c', str(cfg), '--batch-size', '16', '--model-kwargs', 'depth=3'])
    assert args.batch_size == 16 and args.lr == 3e-3  # YAML 1.1 reads 3e-3 as a string; converted
    assert args.model_kwargs == {'embed_dim': 64, 'depth': 3}
    assert args.mean == [0.5, 0.5, 0.5]


def test_unknown_config_key_fails_naming_it(tmp_path, capsys):
    cfg = tmp_path / 'bad.yaml'
    cfg.write_text('epochs: 2\nbatch_szie: 8\n')
    with pytest.raises(train_mod.ConfigError, match="unknown key 'batch_szie'.*did you mean 'batch_size'"):
        train_mod.parse_args(['-c', str(cfg)])
    code, out, err = run_main(['-c', cfg], capsys)
    assert code == 2 and 'batch_szie' in err and 'Traceback' not in err


@pytest.mark.parametrize('yaml_text, expected', [
    ('lr: fast\n', 'lr='),
    ('epochs: 2.5\n', 'epochs='),
    ('amp: 1\n', 'amp='),
    ('scale: 0.5\n', 'scale='),
    ('remode: zeros\n', 'remode='),
])
def test_bad_config_values_fail_naming_them(tmp_path, yaml_text, expected):
    cfg = tmp_path / 'bad.yaml'
    cfg.write_text(yaml_text)
    with pytest.raises(train_mod.ConfigError, match=expected):
        train_mod.parse_args(['-c', str(cfg)])


@pytest.mark.parametrize('argv, expected', [
    (['--model', 'vit_tiny_patch2_32_mimetc'], 'did you mean vit_tiny_patch2_32_mimetic'),
    (['--dataset', 'torch/imagenet21k', '--data-dir', '.'], 'unknown torch dataset'),
    (['--dataset', 'torch/cifar10'], 'needs --data-dir'),
    (['--dataset', 'torch/mnist', '--data-dir', '.'], 'pass --in-chans 1'),
    (['--dataset', 'sklearn/digits', '--mixup', '0.2', '--batch-size', '33'], '--batch-size 33 must be even'),
    (['--dataset', 'sklearn/digits', '--epochs', '0'], '--epochs 0 must be >= 1'),
    (['--dataset', 'sklearn/digits', '--aa', 'bogus'], "--aa 'bogus'"),
    (['--dataset', 'sklearn/digits', '--sched', 'cosinus'], "--sched 'cosinus'"),
    (['--dataset', 'sklearn/digits', '--resume', 'nowhere.pth.tar'], 'no checkpoint at'),
])
def test_bad_arguments_fail_before_any_work(argv, expected, capsys):
    code, out, err = run_main(argv, capsys)
    assert code == 2 and expected in err, err
    assert 'Traceback' not in err


def _image_folder(root: Path, splits):
    from PIL import Image
    for split in splits:
        for cls in ('cat', 'dog'):
            (root / split / cls).mkdir(parents=True)
            for i in range(2):
                Image.new('RGB', (32, 32), (40 * i, 80, 120)).save(root / split / cls / f'{i}.png')


def test_missing_split_folder_is_refused(tmp_path, capsys):
    _image_folder(tmp_path / 'data', ['train', 'test'])
    argv = [*TINY_MODEL, *FAST, '--data-dir', tmp_path / 'data', '--epochs', 1, '--output', tmp_path / 'out']
    code, out, err = run_main(argv, capsys)  # default --val-split validation: no such folder
    assert code == 2
    assert "--val-split 'validation'" in err and 'test, train' in err and '--val-split test' in err
    assert not (tmp_path / 'out').exists()  # refused before anything was written
    code, out, err = run_main([*argv, '--val-split', 'train'], capsys)
    assert code == 2 and 'evaluating on training images is refused' in err


def test_offline_without_local_copy_says_how_to_fix(tmp_path, capsys, monkeypatch):
    empty = tmp_path / 'nothing-here'
    empty.mkdir()
    base = [*TINY_MODEL, *FAST, '--data-dir', empty, '--val-split', 'test']
    argv = [*base, '--dataset', 'torch/cifar10']
    code, out, err = run_main(argv, capsys)
    assert code == 2 and 'Traceback' not in err
    assert f'--data-dir {empty}' in err and 'cifar-10-batches-py' in err and '--dataset-download' in err
    assert "--dataset '' --data-dir DIR" in err  # the ImageFolder route that needs no download

    def no_network(*args, **kwargs):
        raise urllib.error.URLError('[Errno -3] Temporary failure in name resolution')

    code, out, err = run_main([*base, '--dataset', 'svhn'], capsys)
    assert code == 2 and 'torch/svhn: no local copy' in err and 'train_32x32.mat' in err

    import torchvision.datasets.cifar
    monkeypatch.setattr(torchvision.datasets.cifar, 'download_and_extract_archive', no_network)
    code, out, err = run_main([*argv, '--dataset-download'], capsys)
    assert code == 2 and 'could not download torch/cifar10' in err and 'drop --dataset-download' in err


def test_impulse_run_tracks_target_mass_through_training_and_resume(reference_run, tmp_path, capsys):
    """ An impulse model's run measures the real-image mass on its targets before training and after every epoch
    (target_mass.csv, the summary's target_mass columns, a figure); a run resumed from a checkpoint measures the
    same masses from the saved weights. A mimetic run has no targets and no such output. """
    argv = ['--model', 'vit_tiny_patch2_32_impulse3', '--model-kwargs', 'embed_dim=32', 'depth=2', 'num_heads=2',
            'patch_size=8', *FAST, *DIGITS, '--train-subset', 256, '--val-subset', 100, '--epochs', 2,
            '--output', tmp_path]
    code, out, err = run_main([*argv, '--experiment', 'full', '--plot'], capsys)
    assert code == 0, err
    full = tmp_path / 'full'
    mass = read_summary(full / 'target_mass.csv')
    assert [int(r['epoch']) for r in mass] == [0, 1, 2] and list(mass[0]) == ['epoch', 'mean', 'layer1', 'layer2']
    for row in mass:
        layers = [float(row['layer1']), float(row['layer2'])]
        assert all(0 < m < 1 for m in layers) and float(row['mean']) == pytest.approx(sum(layers) / 2, abs=1e-7)
    assert float(mass[0]['mean']) > 1.5 / 17  # 4 x 4 patches and a class token: well above uniform at init
    for summary_row, mass_row in zip(read_summary(full / 'summary.csv'), mass[1:]):
        assert [float(summary_row[f'eval_target_mass{k}']) for k in ('', '_layer1', '_layer2')] == pytest.approx(
            [float(mass_row[k]) for k in ('mean', 'layer1', 'layer2')], abs=1e-7)
    assert (full / 'target_mass.png').stat().st_size > 0 and 'target mass at epoch 0: ' in out
    code, out, err = run_main([*argv, '--experiment', 'resumed', '--resume', full / 'checkpoint-0.pth.tar'], capsys)
    assert code == 0, err
    resumed = read_summary(tmp_path / 'resumed' / 'target_mass.csv')
    assert [int(r['epoch']) for r in resumed] == [1, 2]
    for row, ref in zip(resumed, mass[1:]):
        assert [float(row[k]) for k in ('layer1', 'layer2')] == pytest.approx(
            [float(ref[k]) for k in ('layer1', 'layer2')], abs=1e-5)
    assert not (reference_run / 'target_mass.csv').exists()
    assert 'eval_target_mass' not in read_summary(reference_run / 'summary.csv')[0]


def test_existing_output_folder_is_not_overwritten(reference_run, capsys):
    before = (reference_run / 'last.pth.tar').stat().st_mtime_ns
    argv = [*RESUME_RUN, '--output', reference_run.parent, '--experiment', reference_run.name]
    code, out, err = run_main(argv, capsys)
    assert code == 2 and 'already exists' in err and '--resume' in err and '--overwrite' in err
    assert (reference_run / 'last.pth.tar').stat().st_mtime_ns == before


def test_overwrite_replaces_previous_run_files(tmp_path, capsys):
    argv = [*TINY_MODEL, *FAST, *DIGITS, '--train-subset', 64, '--val-subset', 20, '--output', tmp_path,
            '--experiment', 'o']
    assert run_main([*argv, '--epochs', 3], capsys)[0] == 0
    (tmp_path / 'o' / 'notes.txt').write_text('mine')
    assert run_main([*argv, '--epochs', 1, '--overwrite'], capsys)[0] == 0
    assert len(read_summary(tmp_path / 'o' / 'summary.csv')) == 1
    assert sorted(p.name for p in (tmp_path / 'o').glob('checkpoint-*')) == ['checkpoint-0.pth.tar']
    assert (tmp_path / 'o' / 'notes.txt').read_text() == 'mine'  # files it did not write are kept


def test_class_balanced_subset_is_deterministic():
    digits = DigitsDataset('train')
    assert len(digits) == 1347 and len(DigitsDataset('test')) == 450
    a, b = ClassBalancedSubset(digits, 105, seed=0), ClassBalancedSubset(digits, 105, seed=0)
    assert list(a.indices) == list(b.indices)
    counts = torch.bincount(torch.tensor(a.targets), minlength=10)
    assert counts.tolist() == [11] * 5 + [10] * 5
    assert list(ClassBalancedSubset(digits, 105, seed=1).indices) != list(a.indices)
