""" Seeds: one valid range for every entry point (training, export, show, `apply_init`, `struct_init_seed`), and
seeding every generator a run uses from one of them.

torch takes any seed below 2**64 and numpy's legacy generator only seeds below 2**32; the range here is what a
signed 64-bit integer holds, [0, 2**63 - 1], and numpy gets the seed reduced modulo 2**32 (the same value for every
seed below 2**32, as before).
"""
import numbers
import random
from typing import Any

import numpy as np
import torch
from timm_structinit_cli.arg_types import SEED_MAX  # the command lines check --seed against it

__all__ = ['SEED_MAX', 'check_seed', 'seed_everything']


def check_seed(value: Any, name: str = 'seed') -> int:
    """ `value` as an int in [0, SEED_MAX]; ValueError naming `name` and the range otherwise. """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value <= SEED_MAX:
        raise ValueError(f'{name}={value!r} is not a valid seed; valid: an integer from 0 to 2**63 - 1')
    return int(value)


def seed_everything(seed: int, rank: int = 0) -> None:
    """ Seed python, numpy and torch with seed + rank, as timm's `random_seed`, for any seed in range. """
    value = seed + rank
    random.seed(value)
    np.random.seed(value % 2 ** 32)
    torch.manual_seed(value)
