""" The images a run trains and evaluates on, held to what follows from each part's definition rather than to another
run of the same code: a built-in dataset's training and evaluation parts are disjoint and together complete, a
subset holds the number of images asked from its own split, the per-image augmentation seed changes with the epoch
and with the index, the training order is a new permutation each epoch, the shards of a distributed run cover every
image once per epoch (the device loader's, and timm's samplers as the command wires them), and an evaluation counts
each image once. """
import math
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.distributed as dist
from PIL import Image
from timm.data import create_transform
from timm.data.distributed_sampler import OrderedDistributedSampler
from torch.utils.data import DataLoader, Dataset

from timm_structinit.data import ClassBalancedSubset, DataError, DigitsDataset, build_dataset, item_file
from timm_structinit.data.device_loader import DeviceLoader
from timm_structinit.data.epoch_seeded import EpochSeededDataset, copy_seed, item_seed
from timm_structinit.data.splits import resolve_split_folder
from timm_structinit.train.build import build_datasets
from timm_structinit.train.config import parse_args
from timm_structinit.train.loaders import build_loaders
from timm_structinit.train.loop import validate

from test_torchvision_data import CASES

pytestmark = pytest.mark.usefixtures('one_torch_thread')

CONFIG = dict(input_size=(3, 32, 32), mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25), interpolation='bilinear',
              crop_pct=1.0)


class Pictures(Dataset):
    """ `count` different 32 x 32 images, labelled by their index, and the transform timm's loader factory sets. """

    def __init__(self, count: int = 12):
        self.count, self.transform = count, None

    def __len__(self):
        return self.count

    def __getitem__(self, index):
        pixels = np.zeros((32, 32, 3), dtype=np.uint8)
        pixels[..., 0] = np.arange(32, dtype=np.uint8)[None, :] * 8
        pixels[..., 1] = 10 * index
        image = Image.fromarray(pixels)
        return (self.transform(image) if self.transform else image), index


def loader_args(*extra, rank: int = 0, world_size: int = 1):
    args = parse_args(['--model', 'vit_tiny_patch2_32', '--dataset', 'sklearn/digits', '--workers', '0',
                       '--batch-size', '4', '--seed', '7', *extra])
    args.num_classes, args.rank, args.world_size, args.distributed = 12, rank, world_size, world_size > 1
    return args


# ------------------------------------------------------------------------------------------------------------------
# splits


def test_digits_parts_are_disjoint_complete_stratified_and_sklearns_images():
    """ 1,347 training and 450 test images (the counts the docs give), no image in both, all 1,797 in one of them,
    each class in the test part in its share of the whole, and each item sklearn's image and label at its index. """
    from sklearn.datasets import load_digits
    digits = load_digits()
    train, test = DigitsDataset('train'), DigitsDataset('test')
    assert (len(train), len(test)) == (1347, 450)
    assert not set(train.indices) & set(test.indices)
    assert set(train.indices) | set(test.indices) == set(range(1797))
    share = np.bincount(digits.target, minlength=10) * 450 / 1797
    assert np.abs(np.bincount(test.targets, minlength=10) - share).max() <= 1
    for part in (train, test):
        part.set_img_size(8)  # sklearn's own size: no resampling
        for k in (0, 1, len(part) // 2, len(part) - 1):
            image, label = part[k]
            index = part.indices[k]
            assert label == digits.target[index]
            expected = np.round(digits.images[index] * 255 / 16)
            assert np.array_equal(np.asarray(image)[..., 0], expected)


def test_a_split_folder_is_found_by_its_synonyms_and_never_by_the_other_kinds(tmp_path):
    for name in ('training', 'test'):
        (tmp_path / name).mkdir()
    assert resolve_split_folder(str(tmp_path), 'train', '--train-split') == str(tmp_path / 'training')
    assert resolve_split_folder(str(tmp_path), 'test', '--val-split') == str(tmp_path / 'test')
    for split in ('validation', 'val', 'eval'):  # an evaluation name never resolves to the training folder
        with pytest.raises(DataError, match=f"--val-split '{split}'"):
            resolve_split_folder(str(tmp_path), split, '--val-split')
    (tmp_path / 'val').mkdir()
    assert resolve_split_folder(str(tmp_path), 'validation', '--val-split') == str(tmp_path / 'val')
    # 'test' is no synonym of the evaluation names (timm's _EVAL_SYNONYM): without a test/ folder it is refused
    (tmp_path / 'test').rmdir()
    with pytest.raises(DataError, match="--val-split 'test'"):
        resolve_split_folder(str(tmp_path), 'test', '--val-split')


@pytest.mark.parametrize('name, parts', [
    ('torch/food101', ('train', 'validation')),
    ('torch/flowers102', ('train', 'validation', 'test')),
    ('torch/oxford_iiit_pet', ('train', 'test')),
])
def test_torchvision_parts_read_disjoint_files_that_together_are_every_image(name, parts, tmp_path):
    CASES[name][0](tmp_path)
    files = {}
    for part in parts:
        dataset = build_dataset(name, str(tmp_path), part, '--val-split')
        files[part] = [item_file(dataset, i) for i in range(len(dataset))]
    written = sorted(str(p.resolve()) for p in tmp_path.rglob('*.jpg'))
    assert sorted(f for part in parts for f in files[part]) == written  # each image in exactly one part


# ------------------------------------------------------------------------------------------------------------------
# subsets


def test_a_subset_holds_the_number_asked_balanced_and_drawn_by_its_seed():
    digits = DigitsDataset('train')
    for count in (10, 47, 105):
        subset = ClassBalancedSubset(digits, count, seed=0)
        per_class = np.bincount(subset.targets, minlength=10)
        assert len(subset) == count and len(set(subset.indices.tolist())) == count
        assert per_class.max() - per_class.min() <= 1  # the remainder one each to some classes
        assert [subset[k][1] for k in range(3)] == [digits.targets[i] for i in subset.indices[:3]]
    draws = {tuple(ClassBalancedSubset(digits, 47, seed=s).indices.tolist()) for s in range(4)}
    assert len(draws) == 4  # each seed its own draw


class _ShadesByClass(Dataset):
    """ 8x8 images of one grey level per class (20 per step of the label), `counts[c]` images of class c. """

    def __init__(self, counts):
        self.targets = [label for label, n in enumerate(counts) for _ in range(n)]
        self.transform = None

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, index):
        image = Image.new('RGB', (8, 8), (20 * self.targets[index],) * 3)
        return (self.transform(image) if self.transform else image), self.targets[index]


@pytest.mark.parametrize('counts, batch', [([1] + [10] * 9, [1] + [7] * 9), ([2] * 10, [2] * 10)])
def test_the_target_mass_batch_takes_all_a_small_class_holds_and_the_others_make_up_64(tmp_path, counts, batch):
    """ An evaluation split of 10 classes, class 0 with 1 image and the others with 10 (91 in all): a strict subset
    of 64 asks class 0 for 7 and is refused; the target-mass batch takes its 1 and 7 of each other class (63 / 9),
    read back from the images' grey levels. A split of 20 images, fewer than 64: all of them. """
    from timm_structinit.diagnostics.mass_tracking import TargetMassTracker
    split = _ShadesByClass(counts)
    if counts[0] == 1:
        with pytest.raises(DataError, match='class 0 has only 1 samples, 7 needed'):
            ClassBalancedSubset(split, 64, seed=0)
    options = dict(input_size=(3, 8, 8), mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), num_workers=0, distributed=False,
                   pin_memory=False, device=torch.device('cpu'), use_prefetcher=False, interpolation='bilinear',
                   crop_pct=1.0)
    tracker = TargetMassTracker(split, options, str(tmp_path))
    labels = (tracker.images.mean(dim=(1, 2, 3)) * 255 / 20).round().long()
    assert torch.bincount(labels, minlength=10).tolist() == batch


@pytest.mark.parametrize('sizes', [[1, 10, 10], [2, 3, 50, 50], [5, 5, 5, 5], [1, 1, 1, 100], [30, 2, 30, 2, 30]])
def test_a_filled_subset_gives_a_short_class_all_it_holds_and_shares_the_rest_evenly(sizes):
    """ Over every count up to the whole dataset: the count taken, no class more than it holds, and the classes
    that hold more than they give within one of each other, each giving at least what a short class gives; where no
    class is short, the same draw as without `fill`. """
    split = _ShadesByClass(sizes)
    for count in range(1, sum(sizes) + 1):
        subset = ClassBalancedSubset(split, count, seed=1, fill=True)
        given = np.bincount(subset.targets, minlength=len(sizes))
        assert given.sum() == count and len(set(subset.indices.tolist())) == count
        assert all(given <= sizes)
        room = given[given < sizes]  # the classes that could have given more
        if len(room):
            assert room.max() - room.min() <= 1 and room.min() >= given.max() - 1
        if count <= len(sizes) * min(sizes):
            assert subset.indices.tolist() == ClassBalancedSubset(split, count, seed=1).indices.tolist()


@pytest.mark.parametrize('classes', [1, 2, 10])
def test_a_label_file_is_refused_exactly_where_a_label_names_no_class(classes):
    """ Labels 0..classes-1 name the classes; the class count itself and -1 name none (a damaged label file), and
    the refusal comes before any training, not in the first step's loss. """
    from timm_structinit.data.dataset_factory import _check_labels
    for labels, refused in (([0, classes - 1], False), ([0, classes], True), ([-1, 0], True)):
        dataset = SimpleNamespace(targets=labels, classes=[f'c{i}' for i in range(classes)])
        if refused:
            with pytest.raises(DataError, match=f'labels {min(labels)}..{max(labels)} lie outside the classes'):
                _check_labels(dataset, 'labels')
        else:
            _check_labels(dataset, 'labels')


def test_each_subset_comes_from_its_own_split():
    """ --val-subset draws from the evaluation split, --train-subset from the training split (digits: sklearn's
    indices of each part are disjoint, so any image from the other part shows). """
    args = parse_args(['--model', 'vit_tiny_patch2_32', '--dataset', 'sklearn/digits', '--val-split', 'test',
                       '--train-subset', '100', '--val-subset', '50'])
    train, evaluation = build_datasets(args)
    assert (len(train), len(evaluation)) == (100, 50)
    test_part, train_part = set(DigitsDataset('test').indices), set(DigitsDataset('train').indices)
    assert set(evaluation.dataset.indices[evaluation.indices]) <= test_part
    assert set(train.dataset.indices[train.indices]) <= train_part


# ------------------------------------------------------------------------------------------------------------------
# the per-image augmentation seed


def test_the_per_image_seed_changes_with_the_epoch_the_index_and_the_copy():
    seeds = [item_seed(s, e, i) for s in (0, 1, 42) for e in range(4) for i in range(300)]
    assert len(set(seeds)) == len(seeds)
    copies = [copy_seed(42, 1, i, c) for i in range(50) for c in range(4)]
    assert len(set(copies)) == len(copies)
    assert all(copy_seed(42, 3, i, 0) == item_seed(42, 3, i) for i in range(10))  # the first copy: the image's seed


class Same(Dataset):
    """ One image under every index: what differs between items is the augmentation alone. """
    transform = None

    def __len__(self):
        return 6

    def __getitem__(self, index):
        ramp = np.linspace(0, 255, 40, dtype=np.float32)
        pixels = np.stack([ramp[None, :].repeat(40, 0), ramp[:, None].repeat(40, 1), np.full((40, 40), 90.)], -1)
        return self.transform(Image.fromarray(pixels.astype(np.uint8))), 0


def test_one_image_under_other_indices_or_epochs_is_augmented_differently():
    dataset = EpochSeededDataset(Same(), seed=7)
    dataset.transform = create_transform(32, is_training=True, scale=(0.08, 1.0), hflip=0.5, color_jitter=None)
    reads = {}
    for epoch in (0, 1, 2):
        dataset.set_epoch(epoch)
        for index in range(len(dataset)):
            reads[epoch, index] = dataset[index][0]
    keys = list(reads)
    for i, a in enumerate(keys):
        for b in keys[:i]:
            assert not torch.equal(reads[a], reads[b]), f'{a} and {b} augmented alike'
    dataset.set_epoch(1)
    assert torch.equal(dataset[4][0], reads[1, 4])  # the same epoch and index: the same draw


def test_a_batchs_collate_draws_from_its_first_index_whatever_its_labels():
    """ The collate (where timm's FastCollateMixup draws its mix) draws from (seed, epoch, the batch's first index):
    batches that begin at other indices draw apart though every label is the same, and one that begins at the same
    index draws the same whatever its labels. """
    from timm_structinit.data.epoch_seeded import EpochSeededCollate
    collate = EpochSeededCollate(lambda items: torch.rand(1).item(), EpochSeededDataset(Same(), seed=7))
    draws = {first: collate([(None, 0, first), (None, 0, first + 1)]) for first in range(4)}
    assert len(set(draws.values())) == 4
    assert collate([(None, 5, 2), (None, 3, 3)]) == draws[2]


def test_reading_in_the_main_process_leaves_its_generators_where_they_were():
    """ --workers 0: each image is augmented under its own seed, and the run's own draws (its dropout, drop path,
    the next epoch's order) go on as though no image had been read: torch's, numpy's and Python's generators give
    after the reads what they give after the same seeds alone. """
    import random
    from timm_structinit.data.epoch_seeded import EpochSeededCollate
    dataset = EpochSeededDataset(Same(), seed=7)
    dataset.transform = create_transform(32, is_training=True, scale=(0.08, 1.0), hflip=0.5, color_jitter=None)
    collate = EpochSeededCollate(lambda items: torch.rand(1), dataset)

    def draws_after(read):
        torch.manual_seed(3), np.random.seed(3), random.seed(3)
        read()
        return torch.rand(3).tolist(), np.random.rand(3).tolist(), random.random()

    assert draws_after(lambda: collate([dataset[0], dataset[1]])) == draws_after(lambda: None)


# ------------------------------------------------------------------------------------------------------------------
# order and shards


def test_timms_training_order_is_a_new_permutation_each_epoch_and_repeats_with_it():
    def order(epoch):
        loader = build_loaders(loader_args(), CONFIG, Pictures(), Pictures(), torch.device('cpu'))[0]
        sampler = getattr(loader, 'loader', loader).sampler
        sampler.set_epoch(epoch)
        return list(sampler)

    orders = [order(e) for e in range(4)]
    assert all(sorted(o) == list(range(12)) for o in orders)
    assert len({tuple(o) for o in orders}) == 4
    assert order(2) == orders[2]  # a new loader (a resumed run) in the same epoch


@pytest.mark.parametrize('count', [12, 13])
def test_timms_samplers_as_wired_give_each_process_its_own_share(monkeypatch, count):
    """ Two processes: in each epoch the training shares together hold every image once (with an odd count, the one
    image of padding that evens the shares repeats); the evaluation shares, less the padding the evaluation drops,
    hold every image once. """
    monkeypatch.setattr(dist, 'get_world_size', lambda *a, **k: 2)
    loaders = []
    for rank in (0, 1):
        monkeypatch.setattr(dist, 'get_rank', lambda *a, r=rank, **k: r)
        loaders.append(build_loaders(loader_args(rank=rank, world_size=2), CONFIG, Pictures(count), Pictures(count),
                                     torch.device('cpu'))[:2])
    for epoch in (0, 1, 5):
        shares = []
        for train, _ in loaders:
            sampler = getattr(train, 'loader', train).sampler
            sampler.set_epoch(epoch)
            shares.append(list(sampler))
        assert len(shares[0]) == len(shares[1]) == math.ceil(count / 2)
        seen = Counter(shares[0] + shares[1])
        assert set(seen) == set(range(count)) and sum(seen.values()) == 2 * math.ceil(count / 2)
    kept = []
    for _, evaluation in loaders:
        sampler = getattr(evaluation, 'loader', evaluation).sampler
        kept += list(sampler)[:sampler.num_valid_samples]
    assert sorted(kept) == list(range(count))


def _device_labels(count, batch_size, shuffle, rank, world_size, epoch):
    images = torch.zeros(count, 3, 2, 2, dtype=torch.uint8)
    loader = DeviceLoader(images, torch.arange(count), batch_size, lambda x, g: x.float(), shuffle=shuffle, seed=5,
                          rank=rank, world_size=world_size)
    loader.set_epoch(epoch)
    return [int(y) for _, labels in loader for y in labels]


@pytest.mark.parametrize('count, world_size', [(12, 3), (10, 3), (10, 2), (7, 4), (9, 1)])
def test_device_loader_shards_cover_every_image_once_per_epoch(count, world_size):
    """ As torch's DistributedSampler: every process as many images, ceil(count / processes), every image in some
    share, and only the padding that evens the shares repeated; the evaluation shares hold every image exactly once,
    whatever the batch size. """
    share = math.ceil(count / world_size)
    orders = []
    for epoch in (0, 1):
        seen = Counter()
        for rank in range(world_size):
            got = _device_labels(count, 1, True, rank, world_size, epoch)
            assert len(got) == share
            seen.update(got)
        assert set(seen) == set(range(count)) and sum(seen.values()) == share * world_size
        orders.append(_device_labels(count, 1, True, 0, world_size, epoch))
    assert count < 8 or orders[0] != orders[1]
    for batch_size in (1, 2, 3, 4):
        evaluated = [y for rank in range(world_size) for y in _device_labels(count, batch_size, False, rank,
                                                                             world_size, 0)]
        assert sorted(evaluated) == list(range(count))


class Logits(Dataset):
    """ Five items whose 'image' is the logits the model (the identity) outputs, with their labels. """
    logits = torch.tensor([[2., 0., 0.], [0., 1., 0.], [0., 0., 3.], [1., 2., 0.], [0., 0., 0.5]])
    labels = [0, 2, 2, 1, 0]

    def __len__(self):
        return 5

    def __getitem__(self, index):
        return self.logits[index], self.labels[index]


def _cross_entropy(row, label):
    return math.log(sum(math.exp(v) for v in row.tolist())) - float(row[label])


def test_an_evaluation_counts_each_image_of_its_share_once():
    """ timm's evaluation sampler pads the shares of two processes to three images each; the padding is not
    counted: each process reports its own images' loss and accuracy, worked out here by hand. """
    dataset = Logits()
    args = SimpleNamespace(no_prefetcher=True, distributed=False)
    for rank, own in ((0, [0, 2, 4]), (1, [1, 3])):
        sampler = OrderedDistributedSampler(dataset, num_replicas=2, rank=rank)
        metrics = validate(torch.nn.Identity(), DataLoader(dataset, batch_size=2, sampler=sampler), args,
                           torch.device('cpu'), num_classes=3)
        correct = sum(int(dataset.logits[i].argmax()) == dataset.labels[i] for i in own)
        loss = sum(_cross_entropy(dataset.logits[i], dataset.labels[i]) for i in own) / len(own)
        assert metrics['count'] == len(own)
        assert metrics['top1'] == pytest.approx(100 * correct / len(own))
        assert metrics['loss'] == pytest.approx(loss, rel=1e-6)
