""" Mixing and erasing in timm's order on both data paths: timm's prefetcher (its default) mixes in the collate and
erases the mixed batch, so a quarter of the inputs carry an erased box at `--reprob 0.25`; with `--no-prefetcher`
timm erases each image first and the training loop mixes after, so more inputs carry one (both images of a mix may
bring theirs). The share of the model's inputs with erased pixels is measured on timm's own loader and on the device
loader, built as the command builds them, with the 2025 recipes' settings. """
import pytest
import torch
from PIL import Image

from timm_structinit.train.config import parse_args
from timm_structinit.train.loaders import build_loaders

pytestmark = pytest.mark.usefixtures('one_torch_thread')

IMAGES, EPOCHS = 256, 8
CONFIG = dict(input_size=(3, 32, 32), mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25), interpolation='bilinear',
              crop_pct=1.0)


class Plain(torch.utils.data.Dataset):
    """ Images of one colour each: cropped, resized, flipped, mixed or cut and pasted they stay piecewise constant, so
    the pixels of an erased box (noise, `--remode pixel`) are the only rough ones. """

    def __init__(self):
        self.transform = None
        self.levels = torch.randint(0, 256, (IMAGES,), generator=torch.Generator().manual_seed(0)).tolist()

    def __len__(self):
        return IMAGES

    def __getitem__(self, index):
        image = Image.new('RGB', (36, 36), (self.levels[index],) * 3)
        return (self.transform(image) if self.transform else image), index % 2


def erased(batch: torch.Tensor) -> torch.Tensor:
    """ Per image of a normalised batch: whether it holds a patch of noise (pixels rough in both directions). """
    dx = (batch[..., 1:, 1:] - batch[..., 1:, :-1]).abs()
    dy = (batch[..., 1:, 1:] - batch[..., :-1, 1:]).abs()
    return ((dx > 0.05) & (dy > 0.05)).flatten(1).sum(1) >= 8


def erased_share(loader_kind: str, *extra: str) -> float:
    args = parse_args(['--model', 'vit_tiny_patch2_32', '--dataset', 'sklearn/digits', '--loader', loader_kind,
                       '--workers', '0', '--batch-size', '64', '--scale', '0.5', '1.0', '--color-jitter', '0',
                       '--mixup', '0.8', '--cutmix', '1.0', '--reprob', '0.25', '--smoothing', '0.1', '--seed', '1',
                       *extra])
    args.num_classes, args.distributed, args.rank, args.world_size = 2, False, 0, 1
    loader, _, _, mixup, _ = build_loaders(args, CONFIG, Plain(), Plain(), torch.device('cpu'))
    # the training loop mixes timm's loader's batches itself with --no-prefetcher, as the command does
    mix_in_loop = mixup if args.no_prefetcher and loader_kind == 'timm' else None
    flags = []
    for epoch in range(EPOCHS):
        for part in (loader, getattr(loader, 'loader', None)):
            for holder in (part, getattr(part, 'dataset', None), getattr(part, 'sampler', None)):
                if hasattr(holder, 'set_epoch'):
                    holder.set_epoch(epoch)
        for images, targets in loader:
            if mix_in_loop is not None:
                images, targets = mix_in_loop(images, targets)
            flags.append(erased(images.float()))
    return float(torch.cat(flags).float().mean())


def test_the_detector_sees_erased_boxes_and_nothing_else():
    timm_plain = erased_share('timm', '--reprob', '0')
    assert timm_plain == 0.0
    assert 0.15 < erased_share('timm') < 0.35  # timm's prefetcher: one input in four


@pytest.mark.parametrize('order', [[], ['--no-prefetcher']], ids=['prefetcher', 'no-prefetcher'])
def test_the_device_loader_erases_as_many_inputs_as_timms(order):
    timm_share, device_share = erased_share('timm', *order), erased_share('device', *order)
    # 2,048 inputs each: a share's standard error is about 1 point at 0.25; the other order differs by ~10 points
    assert abs(device_share - timm_share) < 0.05, (timm_share, device_share)
