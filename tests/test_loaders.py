""" The two data paths of the training command: timm's loader with workers kept through the run and per-image seeds
(its batches, and so the trained weights, the same whatever --workers says), and the device loader (--loader device:
every registered family trains with it, a resumed run repeats the uninterrupted one bit for bit, distributed runs
take their shards, and what it cannot do is refused in one line). """
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from timm_structinit import train as train_mod
from timm_structinit.data import device_loader

from train_command import one_line, run_main

TINY = ['--model-kwargs', 'embed_dim=16', 'depth=1', 'num_heads=2', 'patch_size=8']
FAST = ['--opt', 'adamw', '--lr', '2e-3', '--warmup-epochs', '0', '--batch-size', '16', '--log-interval', '1000',
        '--seed', '3']
DIGITS = ['--dataset', 'sklearn/digits', '--val-split', 'test', '--train-subset', '64', '--val-subset', '32']
# every random part of the training transform and of the batch
AUGMENTED = ['--aa', 'rand-m9-mstd0.5-inc1', '--mixup', '0.8', '--cutmix', '1.0', '--reprob', '0.25',
             '--drop-path', '0.1', '--scale', '0.5', '1.0']


pytestmark = pytest.mark.usefixtures('one_torch_thread')


def _weights(run: Path):
    return torch.load(run / 'last.pth.tar', map_location='cpu', weights_only=False)['state_dict']


def _equal(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _train(tmp_path, name, *extra, model='vit_tiny_patch2_32_mimetic', epochs=2, capsys=None):
    argv = ['--model', model, *TINY, *FAST, *DIGITS, '--epochs', str(epochs), *extra, '--output', str(tmp_path),
            '--experiment', name]
    code, out, err = run_main(argv, capsys)
    assert code == 0, err
    return tmp_path / name


@pytest.mark.slow
def test_timms_loader_gives_the_same_run_whatever_the_workers(tmp_path, capsys):
    """ With RandAugment, mixup, cutmix, random erasing and drop path, over two epochs (the workers kept from the
    first to the second): no worker, one or two, the same weights bit for bit. """
    runs = [_train(tmp_path, f'w{w}', '--workers', str(w), *AUGMENTED, capsys=capsys) for w in (0, 1, 2)]
    assert _equal(_weights(runs[0]), _weights(runs[1])) and _equal(_weights(runs[0]), _weights(runs[2]))


def test_timms_loader_seeds_differ_by_epoch_and_seed(tmp_path, capsys):
    base = _weights(_train(tmp_path, 'a', '--workers', '0', *AUGMENTED, capsys=capsys))
    other = _weights(_train(tmp_path, 'b', '--workers', '0', *AUGMENTED, '--seed', '4', capsys=capsys))
    assert not _equal(base, other)


@pytest.mark.parametrize('model', ['vit_tiny_patch2_32_mimetic', 'vit_tiny_patch2_32_impulse3',
                                   'swin_tiny_patch2_window4_32', 'mixer_s4_32_impulse3'])
def test_every_family_trains_with_the_device_loader(tmp_path, capsys, model):
    kwargs = {'swin': ['--model-kwargs', 'embed_dim=16', 'depths=(1,1,1,1)', 'num_heads=(1,1,2,2)'],
              'mixer': ['--model-kwargs', 'embed_dim=64', 'num_blocks=1', 'mlp_ratio=(2.0,4.0)']}
    family = model.split('_')[0]
    argv = ['--model', model, *kwargs.get(family, TINY), *FAST, *DIGITS, '--epochs', '1', '--loader', 'device',
            '--workers', '0', *AUGMENTED, '--output', str(tmp_path), '--experiment', family]
    code, out, err = run_main(argv, capsys)
    assert code == 0, err
    assert 'Done:' in out and (tmp_path / family / 'last.pth.tar').is_file()


def test_device_loader_resumes_bit_for_bit(tmp_path, capsys):
    """ Two epochs in one run, and one epoch then a resume: the same weights, EMA and optimizer state, with
    gradient accumulation and every random part of the batch. """
    options = ['--loader', 'device', '--workers', '0', *AUGMENTED, '--model-ema', '--grad-accum-steps', '2']
    full = _train(tmp_path, 'full', *options, capsys=capsys)
    first = _train(tmp_path, 'first', *options, epochs=1, capsys=capsys)
    code, out, err = run_main(['--model', 'vit_tiny_patch2_32_mimetic', *TINY, *FAST, *DIGITS, '--epochs', '2',
                               *options, '--resume', str(first / 'last.pth.tar')], capsys)
    assert code == 0, err
    a = torch.load(full / 'last.pth.tar', weights_only=False)
    b = torch.load(first / 'last.pth.tar', weights_only=False)
    assert a['epoch'] == b['epoch'] == 1
    assert _equal(a['state_dict'], b['state_dict']) and _equal(a['state_dict_ema'], b['state_dict_ema'])


def test_device_loader_same_seed_same_run_other_seed_other_run(tmp_path, capsys):
    options = ['--loader', 'device', '--workers', '0', *AUGMENTED]
    a = _weights(_train(tmp_path, 'a', *options, capsys=capsys))
    b = _weights(_train(tmp_path, 'b', *options, capsys=capsys))
    c = _weights(_train(tmp_path, 'c', *options, '--seed', '5', capsys=capsys))
    assert _equal(a, b) and not _equal(a, c)


@pytest.mark.parametrize('extra, words', [
    (['--aa', 'v0'], "--loader device cannot do --aa 'v0'"),
    (['--aa', 'rand-m9-t3a'], 'Desaturate'),
    (['--train-crop-mode', 'rkrc'], '--loader device cannot do --train-crop-mode rkrc'),
    (['--train-interpolation', 'nearest'], '--loader device cannot do --train-interpolation nearest'),
])
def test_device_loader_refuses_what_it_cannot_do_in_one_line(tmp_path, capsys, extra, words):
    code, out, err = run_main(['--model', 'vit_tiny_patch2_32_mimetic', *TINY, *FAST, *DIGITS, '--loader', 'device',
                               *extra, '--output', str(tmp_path)], capsys)
    line = one_line(err)
    assert code == 2 and words in line and 'use --loader timm' in line, line
    assert not any(tmp_path.iterdir())


def _folder(root: Path, sizes) -> Path:
    for split in ('train', 'test'):
        for c, name in enumerate(('a', 'b')):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i, size in enumerate(sizes):
                pixels = np.full((size, size, 3), 40 + 100 * c + i, dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f'{i}.png')
    return root


def test_device_loader_refuses_images_of_different_sizes(tmp_path, capsys):
    data = _folder(tmp_path / 'data', (32, 32, 40, 32))
    code, out, err = run_main(['--model', 'vit_tiny_patch2_32_mimetic', *TINY, *FAST, '--data-dir', str(data),
                               '--val-split', 'test', '--batch-size', '2', '--loader', 'device',
                               '--output', str(tmp_path / 'out')], capsys)
    line = one_line(err)
    assert code == 2 and 'different sizes' in line and '2.png' in line and 'use --loader timm' in line, line


def test_device_loader_refuses_more_than_its_memory_share(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(device_loader, 'free_memory', lambda device: 100_000)  # 64 digits of 3 x 32 x 32 > 25 kB
    code, out, err = run_main(['--model', 'vit_tiny_patch2_32_mimetic', *TINY, *FAST, *DIGITS, '--loader', 'device',
                               '--output', str(tmp_path / 'out')], capsys)
    line = one_line(err)
    assert code == 2 and 'more than 25% of the' in line and 'use --loader timm' in line, line
    assert not (tmp_path / 'out').exists()


@pytest.mark.slow
def test_device_loader_shards_a_distributed_run(tmp_path):
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2',
           '-m', 'timm_structinit.train', '--model', 'vit_tiny_patch2_32_mimetic', *TINY, *FAST,
           '--dataset', 'sklearn/digits', '--val-split', 'test', '--train-subset', '128', '--val-subset', '51',
           '--epochs', '1', '--loader', 'device', '--workers', '0', '--output', str(tmp_path), '--experiment', 'ddp']
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**__import__('os').environ, 'OMP_NUM_THREADS': '1'})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'on 51 test images' in proc.stdout  # each evaluation image once, over both processes
    state = torch.load(tmp_path / 'ddp' / 'last.pth.tar', weights_only=False)
    # 128 images / (16 per process x 2 processes) = 4 updates: the processes split the data
    assert state['optimizer']['state'][0]['step'].item() == 4


def test_device_loader_batches_follow_the_epoch_and_cover_the_data():
    images = torch.arange(10, dtype=torch.uint8).view(10, 1, 1, 1).expand(10, 3, 4, 4).contiguous()
    labels = torch.arange(10)
    loader = device_loader.DeviceLoader(images, labels, 3, lambda x, g: x.float(), shuffle=True, seed=0)
    loader.set_epoch(0)
    first = torch.cat([y for _, y in loader])
    loader.set_epoch(1)
    second = torch.cat([y for _, y in loader])
    assert len(loader) == 3 and len(first) == 9 and len(set(first.tolist())) == 9  # the last partial batch dropped
    assert not torch.equal(first, second)
    loader.set_epoch(0)
    assert torch.equal(first, torch.cat([y for _, y in loader]))
    evaluation = device_loader.DeviceLoader(images, labels, 4, lambda x, g: x.float(), shuffle=False, seed=0,
                                            rank=1, world_size=2)
    assert torch.cat([y for _, y in evaluation]).tolist() == [1, 3, 5, 7, 9]


@pytest.mark.parametrize('extra', [
    ['--color-jitter', '0.4', '--vflip', '0.5', '--hflip', '0.5'],
    ['--no-aug'],
    ['--input-size', '3', '48', '48', '--model-kwargs', 'img_size=48', '--crop-pct', '0.875',
     '--train-interpolation', 'bilinear', '--interpolation', 'bilinear'],
    ['--no-prefetcher', '--pin-mem', '--reprob', '0.5', '--remode', 'rand', '--recount', '2', '--resplit',
     '--mixup', '0.2', '--mixup-off-epoch', '1', '--smoothing', '0.2'],
    ['--aa', 'rand-m7-n3-mstd101-p0.7-tweights', '--validation-batch-size', '7'],
])
def test_device_loader_takes_the_options_of_timms_loader(tmp_path, capsys, extra):
    code, out, err = run_main(['--model', 'vit_tiny_patch2_32_mimetic', *TINY, *FAST, *DIGITS, '--epochs', '2',
                               '--loader', 'device', '--workers', '0', *extra, '--output', str(tmp_path),
                               '--experiment', 'x'], capsys)
    assert code == 0, err
    assert 'Done:' in out
