""" The training command on a machine without an accelerator: the recipes' loader workers and pinned memory make no
warning from torch, and `--amp` autocasts to bfloat16 (what CPU autocast supports well) unless `--amp-dtype` names
another dtype. """
import logging
import os
import warnings

import pytest
import torch
from torch import nn

from timm_structinit import train as train_mod
from timm_structinit.train.build import build_optimizer

TINY_DIGITS = ['--model', 'vit_tiny_patch2_32_mimetic', '--model-kwargs', 'embed_dim=16', 'depth=1', 'num_heads=2',
               'patch_size=8', '--dataset', 'sklearn/digits', '--val-split', 'test', '--train-subset', '64',
               '--val-subset', '40', '--batch-size', '32', '--epochs', '1', '--warmup-epochs', '0', '--opt', 'adamw',
               '--lr', '1e-3', '--log-interval', '1000']
# torch's DataLoader warnings: more workers than cores, and pinned memory without an accelerator
TORCH_WARNINGS = ('worker processes in total', "'pin_memory' argument is set as true")


@pytest.mark.skipif(torch.accelerator.is_available(), reason='the machine has an accelerator')
def test_workers_beyond_the_cores_and_pinned_memory_make_no_warning(tmp_path, monkeypatch, caplog):
    # one core, as torch counts them for its worker-count warning: the 3 workers asked for are 2 too many
    monkeypatch.setattr(os, 'sched_getaffinity', lambda pid: {0}, raising=False)
    caplog.set_level(logging.INFO)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        code = train_mod.main([*TINY_DIGITS, '--workers', '3', '--pin-mem', '--output', str(tmp_path),
                               '--experiment', 'x'])
    assert code == 0
    said = [str(w.message) for w in caught if any(text in str(w.message) for text in TORCH_WARNINGS)]
    assert not said, said
    assert 'Loader: 1 worker process per training process (3 asked for; 1 core here)' in caplog.text
    assert 'workers: 3' in (tmp_path / 'x' / 'args.yaml').read_text()  # the run records what was asked for


def _autocast_dtype(argv):
    args = train_mod.parse_args(argv)
    _, amp_autocast, loss_scaler = build_optimizer(args, nn.Linear(4, 4), torch.device('cpu'))
    with amp_autocast():
        product = torch.ones(4, 4) @ torch.ones(4, 4)  # a matmul runs in the autocast dtype
    return product.dtype, loss_scaler


def test_amp_on_cpu_autocasts_to_bfloat16_unless_a_dtype_is_named():
    assert _autocast_dtype([*TINY_DIGITS, '--amp']) == (torch.bfloat16, None)
    assert _autocast_dtype([*TINY_DIGITS, '--amp', '--amp-dtype', 'float16']) == (torch.float16, None)
    assert _autocast_dtype(TINY_DIGITS) == (torch.float32, None)  # no --amp: no autocast
    # the 2025 recipes ask for AMP without a dtype, as the authors' GPU command does
    assert _autocast_dtype(['-c', 'impulse2025_vit_tiny_patch16_224_cifar100', '--data-dir', 'data'])[0] == \
        torch.bfloat16
