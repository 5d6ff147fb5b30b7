""" timm's image transforms on batches that live on the training device, each image with its own random parameters.

`DeviceTrainTransform` is timm's `transforms_imagenet_train` for the options the training command takes:
RandomResizedCrop (`--scale`, `--ratio`, to any input size, bilinear / bicubic / random interpolation), horizontal and
vertical flips, then RandAugment (`--aa rand-...`) or, without it, color jitter (brightness, contrast, saturation in
a random order, as torchvision's `ColorJitter`), then normalisation and timm's own `RandomErasing` on the batch (when
the batch is mixed, the loader erases after mixing instead, as timm's prefetcher does: `DeviceLoader`). `DeviceEvalTransform` is timm's `transforms_imagenet_eval`: resize to input / crop_pct, centre
crop, normalise. Every random parameter comes from one `torch.Generator` on the batch's device; the arithmetic is
Pillow's (`batch_ops`). An option these transforms cannot honour is refused by `unsupported_options`, in one line.
"""
import math
from typing import Optional, Sequence, Tuple

import torch
from timm.data.random_erasing import RandomErasing

from . import batch_ops as ops
from .batch_rand_augment import BatchRandAugment, fill_colour

__all__ = ['DeviceTrainTransform', 'DeviceEvalTransform', 'rrc_boxes', 'unsupported_options', 'INTERPOLATIONS']

# the interpolations the batch ops resample with: Pillow's bilinear and bicubic, or one of the two at random
INTERPOLATIONS = ('bilinear', 'bicubic', 'random')


def unsupported_options(args) -> Optional[str]:
    """ What of the training options the device loader cannot do as timm does ('' or None: everything). """
    if args.aa and not args.aa.startswith('rand'):
        return f'--aa {args.aa!r} (the device loader implements RandAugment, rand-...; not AutoAugment or AugMix)'
    if args.aa:
        try:
            BatchRandAugment(args.aa, dict(translate_const=14, img_mean=(128, 128, 128)))
        except ValueError as e:
            return str(e)
    if args.train_crop_mode not in (None, 'rrc'):
        return f'--train-crop-mode {args.train_crop_mode} (the device loader crops as rrc, RandomResizedCrop)'
    for name in ('train_interpolation', 'interpolation'):
        value = getattr(args, name)
        if value and value not in INTERPOLATIONS:
            return f'--{name.replace("_", "-")} {value} (the device loader resamples bilinear or bicubic)'
    if args.aug_repeats:
        return f'--aug-repeats {args.aug_repeats} (repeated augmentation samples through timm\'s loader)'
    return None


def _uniform(generator: torch.Generator, shape, low, high, device) -> torch.Tensor:
    return low + (high - low) * torch.rand(shape, generator=generator, device=device, dtype=torch.float64)


def rrc_boxes(batch: int, height: int, width: int, scale: Sequence[float], ratio: Sequence[float],
              generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """ (batch, 4) crops (top, left, height, width) drawn as timm's `RandomResizedCropAndInterpolation.get_params`:
    ten attempts of a random area and log-uniform aspect ratio, the first that fits, else the central crop of the
    ratio range. """
    area = height * width
    target_area = _uniform(generator, (batch, 10), scale[0], scale[1], device) * area
    aspect = torch.exp(_uniform(generator, (batch, 10), math.log(ratio[0]), math.log(ratio[1]), device))
    w = torch.round(torch.sqrt(target_area * aspect))  # round half to even, as Python's round
    h = torch.round(torch.sqrt(target_area / aspect))
    fits = (w <= width) & (h <= height)
    first = torch.where(fits.any(1), fits.float().argmax(1), torch.full((batch,), -1, device=device))
    pick = first.clamp(min=0)[:, None]
    h, w = h.gather(1, pick)[:, 0], w.gather(1, pick)[:, 0]
    offsets = torch.rand(batch, 2, generator=generator, device=device, dtype=torch.float64)
    top = torch.floor(offsets[:, 0] * (height - h + 1)).clamp(max=height - h)
    left = torch.floor(offsets[:, 1] * (width - w + 1)).clamp(max=width - w)
    # the fallback: the whole image, cut to the ratio range
    in_ratio = width / height
    if in_ratio < min(ratio):
        fb_w, fb_h = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        fb_w, fb_h = int(round(height * max(ratio))), height
    else:
        fb_w, fb_h = width, height
    fallback = torch.tensor([(height - fb_h) // 2, (width - fb_w) // 2, fb_h, fb_w], dtype=torch.float64,
                            device=device)
    boxes = torch.stack([top, left, h, w], 1)
    return torch.where((first < 0)[:, None], fallback, boxes).long()


def _normalize(images: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """ (images / 255 - mean) / std, in place, as one scale and one shift. """
    return images.mul_(1.0 / (255.0 * std)).sub_(mean / std)


class DeviceTrainTransform:
    """ timm's training transform on a batch: uint8 images (B, C, h, w) in, normalised float images out. """

    def __init__(self, input_size: Tuple[int, int, int], scale: Sequence[float], ratio: Sequence[float],
                 hflip: float, vflip: float, color_jitter: Optional[float], auto_augment: Optional[str],
                 interpolation: str, mean: Sequence[float], std: Sequence[float], re_prob: float = 0.,
                 re_mode: str = 'const', re_count: int = 1, re_num_splits: int = 0,
                 device: torch.device = torch.device('cpu')):
        self.size = tuple(input_size[1:])
        self.scale, self.ratio, self.hflip, self.vflip = tuple(scale), tuple(ratio), hflip, vflip
        self.interpolation = interpolation or 'random'
        self.rand_augment = None
        if auto_augment:
            hparams = dict(translate_const=int(min(self.size) * 0.45), img_mean=fill_colour(mean))
            if self.interpolation != 'random':
                from timm.data.transforms import str_to_pil_interp
                hparams['interpolation'] = str_to_pil_interp(self.interpolation)
            self.rand_augment = BatchRandAugment(auto_augment, hparams)
        # as timm: color jitter only without RandAugment
        self.color_jitter = float(color_jitter) if color_jitter and not auto_augment else 0.0
        self.mean = torch.tensor(mean, device=device).view(1, -1, 1, 1)
        self.std = torch.tensor(std, device=device).view(1, -1, 1, 1)
        self.random_erasing = RandomErasing(re_prob, mode=re_mode, max_count=re_count, num_splits=re_num_splits,
                                            device=device) if re_prob > 0 else None

    def _bicubic(self, batch: int, generator: torch.Generator, device) -> torch.Tensor:
        if self.interpolation == 'random':
            return torch.rand(batch, generator=generator, device=device) < 0.5
        return torch.full((batch,), self.interpolation == 'bicubic', device=device)

    def __call__(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        B, device = images.shape[0], images.device
        x = images.float()
        boxes = rrc_boxes(B, x.shape[-2], x.shape[-1], self.scale, self.ratio, generator, device)
        bicubic = self._bicubic(B, generator, device)
        flips = torch.rand(B, 2, generator=generator, device=device)
        # the flips that follow the crop in timm's transform, done by the resize itself
        x = ops.resized_crop(x, boxes, self.size, bicubic, hflip=flips[:, 0] < self.hflip if self.hflip > 0 else None,
                             vflip=flips[:, 1] < self.vflip if self.vflip > 0 else None)
        if self.rand_augment is not None:
            x = self.rand_augment(x, generator)
        elif self.color_jitter > 0:
            x = self._jitter(x, generator)
        x = _normalize(x, self.mean, self.std)
        if self.random_erasing is not None:
            x = self.random_erasing(x)
        return x

    def _jitter(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """ torchvision's ColorJitter(b, c, s) with Pillow: the three factors from [max(0, 1 - j), 1 + j], applied in
        an order of each image's own. """
        B, device, j = x.shape[0], x.device, self.color_jitter
        factors = _uniform(generator, (B, 3), max(0.0, 1 - j), 1 + j, device)
        order = torch.rand(B, 3, generator=generator, device=device).argsort(1)
        for step in range(3):
            for which, (enhance, rows) in enumerate(zip((ops.brightness, ops.contrast, ops.color),
                                                        ops.rows_by_group(order[:, step], 3))):
                if rows.numel():
                    x[rows] = enhance(x[rows], factors[rows, which])
        return x


class DeviceEvalTransform:
    """ timm's evaluation transform on a batch: resize to input / crop_pct keeping the image's aspect ratio, crop the
    centre, normalise; with `squash`, timm's training transform without augmentation (`--no-aug`): resize to the
    input size itself, whatever the image's aspect ratio. """

    def __init__(self, input_size: Tuple[int, int, int], crop_pct: float, interpolation: str,
                 mean: Sequence[float], std: Sequence[float], device: torch.device = torch.device('cpu'),
                 squash: bool = False):
        self.size = tuple(input_size[1:])
        self.crop_pct, self.bicubic, self.squash = crop_pct, interpolation == 'bicubic', squash
        self.mean = torch.tensor(mean, device=device).view(1, -1, 1, 1)
        self.std = torch.tensor(std, device=device).view(1, -1, 1, 1)

    def resized_size(self, height: int, width: int) -> Tuple[int, int]:
        """ The size timm's transform resizes an image of `height` x `width` to before its centre crop:
        `transforms_noaug_train`'s Resize((H, W)) with `squash`; else `transforms_imagenet_eval`'s, to the scale size
        floor(size / crop_pct): for a square input torchvision's Resize(int) (the shorter side to it, the longer
        truncated), for another timm's ResizeKeepRatio (the side that reaches its scale size last to it, both sides
        rounded). """
        if self.squash:
            return self.size
        scale = tuple(math.floor(s / self.crop_pct) for s in self.size)
        if scale[0] != scale[1]:
            ratio = min(height / scale[0], width / scale[1])
            return round(height / ratio), round(width / ratio)
        short = scale[0]
        if width <= height:
            return int(short * height / width), short
        return short, int(short * width / height)

    def __call__(self, images: torch.Tensor, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        B, C, H, W = images.shape
        rh, rw = self.resized_size(H, W)
        full = torch.tensor([[0, 0, H, W]], device=images.device).expand(B, 4)
        x = ops.resized_crop(images.float(), full, (rh, rw), torch.full((B,), self.bicubic, device=images.device))
        top, left = int(round((rh - self.size[0]) / 2.0)), int(round((rw - self.size[1]) / 2.0))
        x = x[:, :, top:top + self.size[0], left:left + self.size[1]]
        return _normalize(x, self.mean, self.std)
