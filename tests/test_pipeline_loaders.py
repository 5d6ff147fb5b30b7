""" Each training option reaches the loader that applies it, with its value: timm's transforms and prefetcher as
`create_loader` builds them, and the device transform; with the randomness switched off by the options themselves
(the whole image cropped, always mirrored) both loaders give the mirrored image normalised by the run's mean and
std, worked out here by hand; the device transform flips as often as its probabilities say, and its evaluation loader
gives what timm's gives. """
import numpy as np
import pytest
import torch
from PIL import Image
from timm.data.transforms import str_to_interp_mode
from torch.utils.data import Dataset

from timm_structinit.data.device_transforms import DeviceTrainTransform
from timm_structinit.train.config import parse_args
from timm_structinit.train.loaders import build_loaders

pytestmark = pytest.mark.usefixtures('one_torch_thread')

MEAN, STD = (0.2, 0.4, 0.6), (0.3, 0.2, 0.1)


def config(size=32, crop_pct=1.0, interpolation='bilinear'):
    return dict(input_size=(3, size, size), mean=MEAN, std=STD, interpolation=interpolation, crop_pct=crop_pct)


class Pictures(Dataset):
    """ Eight different images (no symmetry), labelled by their index, and the transform timm's loader sets. """

    def __init__(self, size=32):
        self.size, self.transform = size, None

    def __len__(self):
        return 8

    def pixels(self, index) -> np.ndarray:
        rows, cols = np.mgrid[0:self.size, 0:self.size]
        return np.stack([cols * 7 % 256, rows * 5 % 256, (rows * cols + 31 * index) % 256], -1).astype(np.uint8)

    def __getitem__(self, index):
        image = Image.fromarray(self.pixels(index))
        return (self.transform(image) if self.transform else image), index


def build(loader, *extra, cfg=None, size=32):
    args = parse_args(['--model', 'vit_tiny_patch2_32', '--dataset', 'sklearn/digits', '--workers', '0',
                       '--batch-size', '4', '--seed', '3', '--loader', loader, *extra])
    args.num_classes, args.rank, args.world_size, args.distributed = 8, 0, 1, False
    return build_loaders(args, cfg or config(size), Pictures(size), Pictures(size), torch.device('cpu'))


# ------------------------------------------------------------------------------------------------------------------
# each option with its value


OPTIONS = ['--scale', '0.5', '0.9', '--ratio', '0.8', '1.25', '--hflip', '0.3', '--vflip', '0.2', '--color-jitter',
           '0.25', '--train-interpolation', 'bilinear', '--reprob', '0.4', '--remode', 'pixel', '--recount', '2']


def _by_type(transform):
    return {type(t).__name__: t for t in transform.transforms}


@pytest.mark.parametrize('order', [[], ['--no-prefetcher']], ids=['prefetcher', 'no-prefetcher'])
def test_each_training_option_reaches_timms_loader(order):
    loader = build('timm', *OPTIONS, *order)[0]
    steps = _by_type(getattr(loader, 'loader', loader).dataset.transform)
    crop = steps['RandomResizedCropAndInterpolation']
    assert (crop.size, crop.scale, crop.ratio) == ((32, 32), (0.5, 0.9), (0.8, 1.25))
    assert crop.interpolation == str_to_interp_mode('bilinear')
    assert steps['RandomHorizontalFlip'].p == 0.3 and steps['RandomVerticalFlip'].p == 0.2
    assert steps['ColorJitter'].brightness == pytest.approx((0.75, 1.25))
    if order:  # the transform normalises and erases
        erasing, normalize = steps['RandomErasing'], steps['Normalize']
        assert tuple(normalize.mean) == pytest.approx(MEAN) and tuple(normalize.std) == pytest.approx(STD)
    else:  # the prefetcher does, on 8-bit values
        erasing = loader.random_erasing
        assert loader.mean.flatten().tolist() == pytest.approx([255 * m for m in MEAN])
        assert loader.std.flatten().tolist() == pytest.approx([255 * s for s in STD])
    assert (erasing.probability, erasing.mode, erasing.max_count) == (0.4, 'pixel', 2)


def test_each_training_option_reaches_the_device_transform():
    loader = build('device', *OPTIONS)[0]
    transform = loader.transform
    assert (transform.size, transform.scale, transform.ratio) == ((32, 32), (0.5, 0.9), (0.8, 1.25))
    assert (transform.hflip, transform.vflip, transform.color_jitter) == (0.3, 0.2, 0.25)
    assert transform.interpolation == 'bilinear' and transform.rand_augment is None
    assert transform.mean.flatten().tolist() == pytest.approx(MEAN)
    assert transform.std.flatten().tolist() == pytest.approx(STD)
    erasing = transform.random_erasing
    assert (erasing.probability, erasing.mode, erasing.max_count) == (0.4, 'pixel', 2)
    # with mixing, the loader erases the mixed batch with the same settings
    mixed = build('device', *OPTIONS, '--mixup', '0.8')[0]
    assert mixed.transform.random_erasing is None
    assert (mixed.erasing.probability, mixed.erasing.mode, mixed.erasing.max_count) == (0.4, 'pixel', 2)


# ------------------------------------------------------------------------------------------------------------------
# the options' values at work


def _epoch_batches(loader_train, mixup, epochs):
    """ The (inputs, targets) of each epoch of `epochs`, each told its epoch and mixup turned off from epoch 1 as the
    training loop does (`train.epochs`). """
    inner = getattr(loader_train, 'loader', loader_train)
    batches = []
    for epoch in epochs:
        for follower in (inner.sampler, inner.dataset, loader_train):
            if hasattr(follower, 'set_epoch'):
                follower.set_epoch(epoch)
        if epoch >= 1:
            mixup.mixup_enabled = False
        inputs, targets = zip(*loader_train)
        batches.append((torch.cat(inputs), torch.cat(targets)))
    return batches


def test_mixing_stops_at_the_mixup_off_epoch_in_the_loaders_kept_worker():
    """ timm's loader with its prefetcher and a worker kept through the run (which mixes in its own copy of the
    collate): with --mixup-prob 1, epoch 0's targets are mixed (no row one-hot) and from --mixup-off-epoch 1 each row
    is one of the 8 images' one-hot labels; a run resumed at epoch 1 gets the same batches. """
    options = ['--mixup', '1', '--mixup-off-epoch', '1', '--smoothing', '0', '--workers', '1']
    loader_train, _, _, mixup, _ = build('timm', *options)
    (_, mixed), (inputs, targets) = _epoch_batches(loader_train, mixup, (0, 1))
    assert (mixed.max(dim=1).values < 1).all()
    assert targets.max(dim=1).values.tolist() == [1.0] * 8 and sorted(targets.argmax(1).tolist()) == list(range(8))
    resumed_loader, _, _, resumed_mixup, _ = build('timm', *options)
    [(resumed_inputs, resumed_targets)] = _epoch_batches(resumed_loader, resumed_mixup, (1,))
    assert torch.equal(resumed_inputs, inputs) and torch.equal(resumed_targets, targets)


@pytest.mark.parametrize('loader, order', [('timm', []), ('timm', ['--no-prefetcher']), ('device', [])])
def test_an_always_mirrored_whole_image_is_the_mirror_normalised_by_the_runs_mean_and_std(loader, order):
    """ --scale 1 1 --ratio 1 1 crops the whole image (resized to its own size: unchanged), --hflip 1 mirrors every
    image, --vflip 0 never flips it upside down: each input is (mirrored pixels / 255 - mean) / std. """
    train = build(loader, '--scale', '1', '1', '--ratio', '1', '1', '--hflip', '1', '--vflip', '0',
                  '--color-jitter', '0', *order)[0]
    for part in (train, getattr(train, 'loader', None), getattr(getattr(train, 'loader', None), 'dataset', None)):
        if hasattr(part, 'set_epoch'):
            part.set_epoch(0)
    mean, std = torch.tensor(MEAN).view(3, 1, 1), torch.tensor(STD).view(3, 1, 1)
    seen = []
    for images, labels in train:
        for image, label in zip(images, labels.tolist()):
            pixels = torch.from_numpy(Pictures().pixels(label)[:, ::-1].copy()).permute(2, 0, 1).float()
            torch.testing.assert_close(image.float(), (pixels / 255 - mean) / std, atol=1e-4, rtol=0)
            seen.append(label)
    assert sorted(seen) == list(range(8))


def test_the_device_transform_flips_as_often_as_its_probabilities_say():
    """ --hflip 0.2 and --vflip 0.3, drawn apart for each image: of 4,000 images, 14% mirrored only, 24% upside
    down only, 6% both (binomial: within 4 standard deviations). """
    size, count = 8, 4000
    image = torch.arange(3 * size * size, dtype=torch.float32).view(1, 3, size, size) % 256
    batch = image.to(torch.uint8).expand(count, 3, size, size).contiguous()
    transform = DeviceTrainTransform((3, size, size), (1.0, 1.0), (1.0, 1.0), 0.2, 0.3, None, None, 'bilinear',
                                     (0., 0., 0.), (1 / 255,) * 3)
    out = transform(batch, torch.Generator().manual_seed(0))
    kinds = {'none': image, 'h': image.flip(-1), 'v': image.flip(-2), 'hv': image.flip(-1).flip(-2)}
    counts = {k: int((out - v).abs().flatten(1).amax(1).lt(1e-3).sum()) for k, v in kinds.items()}
    assert sum(counts.values()) == count
    for kind, p in (('h', 0.2 * 0.7), ('v', 0.8 * 0.3), ('hv', 0.2 * 0.3), ('none', 0.8 * 0.7)):
        assert abs(counts[kind] - p * count) < 4 * (count * p * (1 - p)) ** 0.5, (kind, counts)


def test_the_device_evaluation_loader_gives_what_timms_gives():
    """ 40 px images evaluated at 32 px with --crop-pct 0.8: resized to 40 (32 / 0.8), the centre cropped. """
    cfg = config(32, crop_pct=0.8, interpolation='bicubic')
    timm_eval = build('timm', cfg=cfg, size=40)[1]
    device_eval = build('device', cfg=cfg, size=40)[1]
    expected = torch.cat([images for images, _ in timm_eval])
    got = torch.cat([images for images, _ in device_eval])
    diff = (expected - got).abs() * torch.tensor(STD).view(1, 3, 1, 1) * 255  # in 8-bit levels
    assert expected.shape == got.shape == (8, 3, 32, 32)
    assert float((diff > 0.01).float().mean()) <= 0.002 and float(diff.max()) <= 2.01
