""" Repeated augmentation (`--aug-repeats N`, the 2025 ImageNet recipes' 3) reads each image it takes in an epoch N
times, the copies spread over the processes (two may land on one); timm's workers augment each copy with a draw of
its own.
Here the training loader is built as the command builds it, for each process of a two-process run, and read the way
its sampler hands the images out: every copy of an image differs from the others, while the same seed and epoch read
again (a resumed run) give the same copies, in timm's order. """
import argparse
from collections import defaultdict

import pytest
import torch
import torch.distributed as dist
from PIL import Image
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.data.distributed_sampler import RepeatAugSampler

from timm_structinit.data.epoch_seeded import CopyNumberedRepeatAugSampler
from timm_structinit.train.config import parse_args
from timm_structinit.train.loaders import build_loaders

pytestmark = pytest.mark.usefixtures('one_torch_thread')

IMAGES = 12
CONFIG = dict(input_size=(3, 32, 32), mean=IMAGENET_DEFAULT_MEAN, std=IMAGENET_DEFAULT_STD,
              interpolation='bicubic', crop_pct=0.9)


class Pictures(torch.utils.data.Dataset):
    """ IMAGES different 40 x 40 images, each a gradient, and the transform timm's loader factory sets. """

    def __init__(self):
        self.transform = None

    def __len__(self):
        return IMAGES

    def __getitem__(self, index):
        ramp = torch.linspace(0, 255, 40)
        pixels = torch.stack([ramp[None, :].expand(40, 40), ramp[:, None].expand(40, 40),
                              torch.full((40, 40), 20.0 * index)], -1).to(torch.uint8).numpy()
        image = Image.fromarray(pixels)
        return (self.transform(image) if self.transform else image), index % 2


def args_of(*extra) -> argparse.Namespace:
    args = parse_args(['--model', 'vit_tiny_patch2_32', '--dataset', 'sklearn/digits', '--workers', '0',
                       '--batch-size', '4', '--aug-repeats', '3', '--scale', '0.3', '1.0', '--aa',
                       'rand-m9-mstd0.5-inc1', '--seed', '7', *extra])
    args.distributed, args.world_size, args.num_classes = True, 2, 2
    return args


def copies_read(monkeypatch, rank: int, epoch: int):
    """ [(index, copy, augmented tensor)] in the order process `rank` of two reads them in `epoch`. """
    monkeypatch.setattr(dist, 'get_world_size', lambda *a, **k: 2)
    monkeypatch.setattr(dist, 'get_rank', lambda *a, **k: rank)
    args = args_of()
    args.rank = rank
    loader = build_loaders(args, CONFIG, Pictures(), Pictures(), torch.device('cpu'))[0]
    inner = getattr(loader, 'loader', loader)
    inner.sampler.set_epoch(epoch)
    inner.dataset.set_epoch(epoch)
    read = []
    for key in inner.sampler:
        image, _, index = inner.dataset[key]
        read.append((index, key[1] if isinstance(key, tuple) else 0, torch.as_tensor(image).clone()))
    return read


def test_each_copy_of_an_image_gets_its_own_draw_on_any_process(monkeypatch):
    read = copies_read(monkeypatch, 0, 1) + copies_read(monkeypatch, 1, 1)
    by_image = defaultdict(list)
    for index, copy, image in read:
        by_image[index].append((copy, image))
    # timm's sampler reads as many images an epoch as the dataset holds (DeiT's): a third of them, 3 copies each
    assert len(read) == IMAGES and max(len(copies) for copies in by_image.values()) == 3
    for index, copies in by_image.items():
        for i in range(len(copies)):
            for j in range(i):
                assert not torch.equal(copies[i][1], copies[j][1]), f'image {index}: two copies augmented alike'
        assert sorted(c for c, _ in copies) == list(range(len(copies)))  # each copy its own number
    on_one_process = [(i, c) for i, c, _ in copies_read(monkeypatch, 0, 1)]
    assert len({i for i, _ in on_one_process}) < len(on_one_process)  # two copies of an image on one process


def test_the_copies_are_the_same_when_read_again_and_in_timms_order(monkeypatch):
    first = copies_read(monkeypatch, 1, 2)
    again = copies_read(monkeypatch, 1, 2)  # a new loader, as a resumed run builds one
    assert [(i, c) for i, c, _ in first] == [(i, c) for i, c, _ in again]
    assert all(torch.equal(a, b) for (_, _, a), (_, _, b) in zip(first, again))
    other_epoch = copies_read(monkeypatch, 1, 3)
    assert not all(torch.equal(a, b) for (_, _, a), (_, _, b) in zip(first, other_epoch))
    timm_order = RepeatAugSampler(Pictures(), num_replicas=2, rank=1, num_repeats=3)
    timm_order.set_epoch(7 + 2)  # the run's seed plus the epoch, as torch's DistributedSampler orders
    assert [i for i, _, _ in first] == list(timm_order)


# fractional counts whose order the padding wraps (its first images read again at the end of the epoch): 7 x 1.5 =
# 10.5 -> 11 positions padded to 12, 5 x 2.2 -> 11 to 12, 4 x 1.25 -> 5 to 6, 3 x 2.7 -> 9 to 10, 2 x 3.5 -> 7 to 9
@pytest.mark.parametrize('count, repeats, replicas', [(10, 3, 2), (7, 3, 4), (9, 2.5, 2), (5, 3, 3), (300, 3, 8),
                                                      (7, 1.5, 4), (5, 2.2, 3), (4, 1.25, 3), (3, 2.7, 5),
                                                      (2, 3.5, 3)])
def test_copy_numbers_count_the_earlier_copies_of_the_whole_order(count, repeats, replicas):
    """ The copy numbers against a count over the epoch's whole order, put together from timm's own sampler on every
    process (the order's position p is process p % replicas's item p // replicas). """
    dataset = list(range(count))
    per_process = [list(RepeatAugSampler(dataset, num_replicas=replicas, rank=r, num_repeats=repeats, shuffle=True))
                   for r in range(replicas)]
    whole = [per_process[p % replicas][p // replicas] for p in range(sum(map(len, per_process)))]
    seen, expected = defaultdict(int), []
    for index in whole:
        expected.append((index, seen[index]))
        seen[index] += 1
    for rank in range(replicas):
        sampler = RepeatAugSampler(dataset, num_replicas=replicas, rank=rank, num_repeats=repeats, shuffle=True)
        sampler.__class__ = CopyNumberedRepeatAugSampler
        assert list(sampler) == expected[rank::replicas]
