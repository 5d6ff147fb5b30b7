import os
from pathlib import Path

import pytest
import torch

# tests are small; one thread avoids oversubscription when two pytest processes share the machine
torch.set_num_threads(min(2, os.cpu_count() or 1))

SHARED_CIFAR10 = Path(__file__).resolve().parents[1].parent / 'shared' / 'data' / 'cifar10'


@pytest.fixture(scope='session')
def cifar10_dir() -> Path:
    if not (SHARED_CIFAR10 / 'train').is_dir():
        pytest.skip(f'shared CIFAR-10 not found at {SHARED_CIFAR10}')
    return SHARED_CIFAR10
