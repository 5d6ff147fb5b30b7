""" timm's RandAugment (Cubuk et al. 2020, https://arxiv.org/abs/1909.13719, as timm implements it) on a batch of
images: every image draws its own ops, whether each applies, its magnitude and its sign, by timm's policy.

The policy is timm's own: `rand_augment_transform` parses the config string (`rand-m9-mstd0.5-inc1`, any of its
sections: m, n, p, mstd, mmax, inc, t) and builds its ops; this module reads each op's name, probability, magnitude
law and hyperparameters from them and draws, per image, what timm's `RandAugment.__call__` and `AugmentOp.__call__`
draw per image: `n` ops chosen uniformly with replacement (without replacement by the weights of `tweights`), each
applied with its probability, its magnitude from N(m, mstd) (uniform on [0, m] for mstd > 100) clipped to [0, mmax or
10], its sign +/- with probability 1/2 where timm's level function negates, and its resampling filter (bilinear or
bicubic at random, unless the interpolation is fixed). The ops themselves are `batch_ops`, Pillow's arithmetic.
"""
import itertools
import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from PIL import Image
from timm.data.auto_augment import rand_augment_transform

from . import batch_ops as ops

__all__ = ['BatchRandAugment', 'SUPPORTED_OPS', 'GEOMETRIC_OPS']

_LEVEL_DENOM = 10.0  # timm's magnitude scale: level / 10 is the op's fraction of its range
# the ops of timm's rand sets (`_RAND_TRANSFORMS`, `_RAND_INCREASING_TRANSFORMS`, the `tweights` set) and the two
# absolute translations; timm's 3-Augment ops (Desaturate, GaussianBlur) are not here
SUPPORTED_OPS = ('AutoContrast', 'Equalize', 'Invert', 'Rotate', 'Posterize', 'PosterizeIncreasing',
                 'PosterizeOriginal', 'Solarize', 'SolarizeIncreasing', 'SolarizeAdd', 'Color', 'ColorIncreasing',
                 'Contrast', 'ContrastIncreasing', 'Brightness', 'BrightnessIncreasing', 'Sharpness',
                 'SharpnessIncreasing', 'ShearX', 'ShearY', 'TranslateX', 'TranslateY', 'TranslateXRel',
                 'TranslateYRel')


@dataclass(frozen=True)
class _Op:
    name: str
    prob: float
    magnitude: float
    magnitude_std: float
    magnitude_max: float
    hparams: Dict
    fill: Tuple[float, ...]
    bicubic: Optional[bool]  # None: bilinear or bicubic at random, per application


def _resample_choice(resample) -> Optional[bool]:
    if isinstance(resample, (list, tuple)):
        return None
    if resample in (Image.BICUBIC, Image.BILINEAR):
        return resample == Image.BICUBIC
    raise ValueError(f'RandAugment resampling {resample!r} is not bilinear, bicubic or random')


class BatchRandAugment:
    """ timm's RandAugment for `config` (hparams as timm's `create_transform` gives them: the translation constant,
    the fill colour, a fixed interpolation), applied per image to a batch (`batch_ops`' layout). ValueError naming
    the op for a policy with an op not implemented here. """

    def __init__(self, config: str, hparams: Dict):
        policy = rand_augment_transform(config, dict(hparams))
        unsupported = sorted({op.name for op in policy.ops} - set(SUPPORTED_OPS))
        if unsupported:
            raise ValueError(f'--aa {config!r} (its ops {", ".join(unsupported)}; the device loader implements '
                             f"those of timm's rand, inc1 and weights sets)")
        self.ops: List[_Op] = [_Op(
            op.name, float(op.prob), float(op.magnitude), float(op.magnitude_std),
            float(op.magnitude_max or _LEVEL_DENOM), dict(op.hparams), tuple(float(v) for v in op.kwargs['fillcolor']),
            _resample_choice(op.kwargs['resample'])) for op in policy.ops]
        self.num_layers = int(policy.num_layers)
        self.choice_weights = None if policy.choice_weights is None else torch.as_tensor(
            policy.choice_weights, dtype=torch.float64)
        self._tables: Dict[str, Dict[str, torch.Tensor]] = {}

    def choose(self, batch: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
        """ (batch, num_layers) op indices: uniform with replacement, or by the weights without replacement. """
        if self.choice_weights is None:
            return torch.randint(len(self.ops), (batch, self.num_layers), generator=generator, device=device)
        weights = self.choice_weights.to(device).expand(batch, -1)
        return torch.multinomial(weights, self.num_layers, replacement=False, generator=generator)

    def _policy_table(self, device: torch.device) -> Dict[str, torch.Tensor]:
        """ Each op's probability, magnitude law and filter as tensors on `device` (indexed by op), made once per
        device: a layer's draws are then a few batch operations, whichever ops its images chose. """
        key = str(device)
        if key not in self._tables:
            def column(values, dtype=torch.float64):
                return torch.tensor(values, dtype=dtype, device=device)
            self._tables[key] = dict(
                prob=column([op.prob for op in self.ops]),
                magnitude=column([op.magnitude for op in self.ops]),
                std=column([op.magnitude_std for op in self.ops]),
                magnitude_max=column([op.magnitude_max for op in self.ops]),
                # -1: bilinear or bicubic at random; 0: bilinear; 1: bicubic
                filter=column([-1 if op.bicubic is None else int(op.bicubic) for op in self.ops], torch.long))
        return self._tables[key]

    def draw(self, batch: int, generator: torch.Generator, device: torch.device) -> List[Dict[str, torch.Tensor]]:
        """ Per layer, what each image drew: `op` (index into `ops`), `applied`, `level` (the clipped magnitude),
        `negate` (the level function's sign) and `bicubic` (the resampling filter). Every draw is made for every
        image, whichever op it chose, so that each image's randomness is its own. """
        chosen = self.choose(batch, generator, device)
        policy = self._policy_table(device)
        layers = []
        for layer in range(self.num_layers):
            draws = torch.rand(batch, 4, generator=generator, device=device, dtype=torch.float64)
            gauss = torch.randn(batch, generator=generator, device=device, dtype=torch.float64)
            op = chosen[:, layer]
            prob, magnitude, std = policy['prob'][op], policy['magnitude'][op], policy['std'][op]
            # AugmentOp's magnitude: N(m, std), or uniform on [0, m] for an infinite std, clipped to [0, mmax]
            level = torch.where(std == math.inf, draws[:, 1] * magnitude,
                                torch.where(std > 0, magnitude + std * gauss, magnitude))
            level = level.clamp(min=0.0).minimum(policy['magnitude_max'][op])
            fixed = policy['filter'][op]
            bicubic = torch.where(fixed >= 0, fixed == 1, draws[:, 3] < 0.5)
            # timm skips an op when random() > prob
            layers.append(dict(op=op, applied=~(draws[:, 0] > prob), level=level, negate=draws[:, 2] > 0.5,
                               bicubic=bicubic))
        return layers

    def __call__(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        for layer in self.draw(images.shape[0], generator, images.device):
            self._apply_layer(images, layer)
        return images

    def _apply_layer(self, images: torch.Tensor, layer: Dict[str, torch.Tensor]) -> None:
        """ One layer's ops, in place, by kind rather than by op: the ops of a kind differ only in their per-image
        parameters (an affine matrix, a table, a blend's degenerate image and factor), so each kind is one pass over
        the images that drew it, whichever ops they drew (fewer, larger batch operations: the cost on a GPU and on
        CPU cores alike is the count of small ones). """
        # the images that drew each op and apply it (the others a group of their own, left out), in ascending order
        skipped = len(self.ops)
        key = torch.where(layer['applied'], layer['op'], torch.full_like(layer['op'], skipped))
        kinds: Dict[tuple, List[Tuple[_Op, torch.Tensor]]] = {}
        for op, rows in zip(self.ops, ops.rows_by_group(key, skipped + 1)):
            if rows.numel():
                kinds.setdefault(_kind(op), []).append((op, rows))
        for kind, members in kinds.items():
            rows = torch.cat([r for _, r in members])
            level, negate = layer['level'][rows], layer['negate'][rows]
            bounds = list(itertools.accumulate((len(r) for _, r in members), initial=0))
            parts = [slice(start, end) for start, end in zip(bounds, bounds[1:])]  # each op's images in `rows`
            x = images[rows]
            if kind[0] == 'affine':
                matrices = torch.cat([_geometry(op, x, level[p], negate[p]) for (op, _), p in zip(members, parts)])
                images[rows] = ops.affine(x, matrices, layer['bicubic'][rows], kind[2], kind[1])
            elif kind[0] == 'table':
                tables = [_table(op, x[p], level[p]).expand(-1, x.shape[1], -1) for (op, _), p in zip(members, parts)]
                images[rows] = ops.apply_lut(x, torch.cat(tables))
            else:
                degenerate = torch.cat([_DEGENERATE[_enhance_name(op)](x[p]) for (op, _), p in zip(members, parts)])
                factors = torch.cat([_factor(op, level[p], negate[p]) for (op, _), p in zip(members, parts)])
                images[rows] = ops.blend(degenerate, x, factors)


def _signed(value: torch.Tensor, negate: torch.Tensor) -> torch.Tensor:
    return torch.where(negate, -value, value)


# a geometric op's sampling axis: a shear or translation along x reads every point on its own row (y: column)
_AXIS = {'Rotate': None, 'ShearX': 'x', 'TranslateX': 'x', 'TranslateXRel': 'x', 'ShearY': 'y', 'TranslateY': 'y',
         'TranslateYRel': 'y'}
# the ops that resample the image (an affine map), the rest change its values only
GEOMETRIC_OPS = tuple(_AXIS)
_TABLES = ('AutoContrast', 'Equalize', 'Invert', 'Posterize', 'PosterizeIncreasing', 'PosterizeOriginal', 'Solarize',
           'SolarizeIncreasing', 'SolarizeAdd')
# an enhance op's degenerate image (ImageEnhance), which its factor blends with the image
_DEGENERATE = {'Brightness': torch.zeros_like, 'Color': ops.grey, 'Contrast': ops.mean_grey, 'Sharpness': ops.smooth}


def _kind(op: _Op) -> tuple:
    """ The ops that one batch operation applies together: affine ops of one axis and fill, tables, blends. """
    if op.name in _AXIS:
        return ('affine', _AXIS[op.name], op.fill)
    return ('table',) if op.name in _TABLES else ('blend',)


def _enhance_name(op: _Op) -> str:
    return op.name.removesuffix('Increasing')


def _factor(op: _Op, level: torch.Tensor, negate: torch.Tensor) -> torch.Tensor:
    """ An enhance op's blend factor (timm's `_enhance_level_to_arg`, `_enhance_increasing_level_to_arg`). """
    fraction = level / _LEVEL_DENOM
    if op.name.endswith('Increasing'):
        return (1.0 + _signed(fraction * 0.9, negate)).clamp(min=0.1)
    return fraction * 1.8 + 0.1


def _table(op: _Op, images: torch.Tensor, level: torch.Tensor) -> torch.Tensor:
    """ A table op's (B, C or 1, 256) tables, from timm's level functions. """
    name, fraction = op.name, level / _LEVEL_DENOM
    if name == 'AutoContrast':
        return ops.autocontrast_table(images)
    if name == 'Equalize':
        return ops.equalize_table(images)
    if name == 'Invert':
        return ops.invert_table(images.shape[0], images.device)
    if name.startswith('Posterize'):
        bits = torch.trunc(fraction * 4)
        bits = {'Posterize': bits, 'PosterizeIncreasing': 4 - bits, 'PosterizeOriginal': bits + 4}[name]
        return ops.posterize_table(bits.long())
    if name in ('Solarize', 'SolarizeIncreasing'):
        threshold = torch.trunc(fraction * 256).clamp(max=256)
        return ops.solarize_table(threshold if name == 'Solarize' else 256 - threshold)
    return ops.solarize_add_table(torch.trunc(fraction * 110).clamp(max=128))


def _translate_matrix(pixels: torch.Tensor, axis: int) -> torch.Tensor:
    zero, one = torch.zeros_like(pixels), torch.ones_like(pixels)
    if axis == 0:
        return torch.stack([one, zero, pixels, zero, one, zero], 1)
    return torch.stack([one, zero, zero, zero, one, pixels], 1)


def _shear_matrix(factor: torch.Tensor, axis: int) -> torch.Tensor:
    zero, one = torch.zeros_like(factor), torch.ones_like(factor)
    if axis == 0:
        return torch.stack([one, factor, zero, zero, one, zero], 1)
    return torch.stack([one, zero, zero, factor, one, zero], 1)


def _geometry(op: _Op, images: torch.Tensor, level: torch.Tensor, negate: torch.Tensor) -> torch.Tensor:
    """ The affine matrix of a geometric op, from timm's level functions. """
    H, W = images.shape[-2:]
    fraction = level / _LEVEL_DENOM
    if op.name == 'Rotate':
        return ops.rotation_matrices(_signed(fraction * 30.0, negate), H, W)
    if op.name in ('ShearX', 'ShearY'):
        return _shear_matrix(_signed(fraction * 0.3, negate), 0 if op.name == 'ShearX' else 1)
    axis = 0 if op.name in ('TranslateX', 'TranslateXRel') else 1
    if op.name.endswith('Rel'):
        pixels = _signed(fraction * op.hparams.get('translate_pct', 0.45), negate) * (W if axis == 0 else H)
    else:
        pixels = _signed(fraction * float(op.hparams['translate_const']), negate)
    return _translate_matrix(pixels, axis)


def _apply(op: _Op, images: torch.Tensor, level: torch.Tensor, negate: torch.Tensor,
           bicubic: torch.Tensor) -> torch.Tensor:
    """ One op on the images that drew it, with their levels (timm's `LEVEL_TO_ARG`, then `NAME_TO_OP`). """
    kind = _kind(op)
    if kind[0] == 'affine':
        return ops.affine(images, _geometry(op, images, level, negate), bicubic, op.fill, kind[1])
    if kind[0] == 'table':
        return ops.apply_lut(images, _table(op, images, level))
    return ops.blend(_DEGENERATE[_enhance_name(op)](images), images, _factor(op, level, negate))


def fill_colour(mean: Sequence[float]) -> Tuple[int, ...]:
    """ timm's RandAugment fill: the normalisation mean in 8 bits. """
    return tuple(min(255, round(255 * m)) for m in mean)
