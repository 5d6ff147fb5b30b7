""" The device loader's augmentation against timm's own: each batch op against the Pillow op timm's transform calls,
on real CIFAR-10 images at several magnitudes; RandAugment's op choices and magnitudes against timm's policy over
many draws; randomness per image; the same seed, the same batches.

Tolerance of the op comparisons: Pillow computes resampling in 22-bit fixed point, blends in double precision and
truncates; the batch ops compute in float32 (float64 for coordinates and tables). A value that lands within float32's
rounding error of a rounding step can round the other way: one level (two after a crop's two resampling passes) on a
small share of pixels. Each comparison allows at most 0.2% of the values to differ, by at most 2 levels; the ops that
are whole-number arithmetic (tables) or computed in double as Pillow does (geometry) must match exactly.
"""
import math
import random

import numpy as np
import pytest
import torch
from PIL import Image
from scipy import stats
from timm.data import auto_augment as timm_aa
from timm.data.transforms import RandomResizedCropAndInterpolation
from torchvision.transforms import functional as TF

from timm_structinit.data import batch_ops as ops
from timm_structinit.data.batch_rand_augment import BatchRandAugment
from timm_structinit.data.device_transforms import DeviceEvalTransform, DeviceTrainTransform, rrc_boxes

# about a minute on 2 CPU cores: 144 comparisons on real images
pytestmark = pytest.mark.slow

FILL = (125, 123, 114)  # timm's RandAugment fill for the CIFAR-10 mean
MAGNITUDES = (0.0, 3.0, 6.5, 9.0, 10.0)
PIL_FILTER = {False: Image.BILINEAR, True: Image.BICUBIC}


@pytest.fixture(scope='module')
def images(cifar10_dir):
    files = sorted((cifar10_dir / 'test').glob('*/*.jpg'))[::40][:200]
    pil = [Image.open(f).convert('RGB') for f in files]
    batch = torch.stack([torch.from_numpy(np.asarray(im).copy()).permute(2, 0, 1) for im in pil]).float()
    return pil, batch


def _as_batch(pil_images):
    return torch.stack([torch.from_numpy(np.asarray(im).copy()).permute(2, 0, 1) for im in pil_images]).float()


def _agree(expected, got, exact=False):
    diff = (expected - got).abs()
    share = float((diff > 0).float().mean())
    if exact:
        assert share == 0, f'{share:.4%} of the values differ, by up to {float(diff.max())}'
    else:
        assert share <= 0.002 and float(diff.max()) <= 2, f'{share:.4%} differ, by up to {float(diff.max())}'


@pytest.mark.parametrize('size', [(32, 32), (224, 224)])
def test_resized_crop_is_timms_random_resized_crop(images, size):
    pil, batch = images
    rng = random.Random(0)
    boxes, bicubic, expected = [], [], []
    for im in pil:
        i, j, h, w = RandomResizedCropAndInterpolation.get_params(im, (0.08, 1.0), (3 / 4, 4 / 3))
        cubic = rng.random() < 0.5
        boxes.append((i, j, h, w))
        bicubic.append(cubic)
        expected.append(TF.resized_crop(im, i, j, h, w, list(size), TF.InterpolationMode.BICUBIC if cubic else
                                        TF.InterpolationMode.BILINEAR))
    got = ops.resized_crop(batch, torch.tensor(boxes), size, torch.tensor(bicubic))
    _agree(_as_batch(expected), got)


@pytest.mark.parametrize('size', [(32, 32), (24, 40)])
def test_flips_in_the_resize_are_the_resized_images_mirrored(images, size):
    """ The flips folded into the resize give, bit for bit, the resized images mirrored afterwards (as timm's
    transform flips after its crop), and leave the other images as they are. """
    _, batch = images
    generator = torch.Generator().manual_seed(7)
    boxes = rrc_boxes(len(batch), 32, 32, (0.08, 1.0), (3 / 4, 4 / 3), generator, torch.device('cpu'))
    bicubic = torch.rand(len(batch), generator=generator) < 0.5
    hflip, vflip = (torch.rand(len(batch), 2, generator=generator) < 0.5).unbind(1)
    plain = ops.resized_crop(batch, boxes, size, bicubic)
    expected = torch.where(hflip[:, None, None, None], plain.flip(-1), plain)
    expected = torch.where(vflip[:, None, None, None], expected.flip(-2), expected)
    assert torch.equal(ops.resized_crop(batch, boxes, size, bicubic, hflip=hflip, vflip=vflip), expected)


@pytest.mark.parametrize('name', ['Rotate', 'ShearX', 'ShearY', 'TranslateXRel', 'TranslateYRel'])
@pytest.mark.parametrize('magnitude', MAGNITUDES)
@pytest.mark.parametrize('cubic', [False, True])
def test_geometric_ops_are_timms(images, name, magnitude, cubic):
    pil, batch = images
    hparams = dict(translate_const=14, img_mean=FILL)
    level_fn, op_fn = timm_aa.LEVEL_TO_ARG[name], timm_aa.NAME_TO_OP[name]
    random.seed(1)
    args = [level_fn(magnitude, hparams)[0] for _ in pil]
    expected = [op_fn(im, a, fillcolor=FILL, resample=PIL_FILTER[cubic]) for im, a in zip(pil, args)]
    value = torch.tensor([abs(a) for a in args], dtype=torch.float64)
    negate = torch.tensor([a < 0 for a in args])
    augment = BatchRandAugment('rand-m9-n1', dict(hparams))
    op = next(o for o in augment.ops if o.name == name)
    from timm_structinit.data.batch_rand_augment import _apply
    got = _apply(op, batch.clone(), torch.full((len(pil),), magnitude, dtype=torch.float64), negate,
                 torch.full((len(pil),), cubic))
    assert value.max() >= 0  # the levels timm drew carry their sign in `negate`
    _agree(_as_batch(expected), got, exact=True)


@pytest.mark.parametrize('name', ['AutoContrast', 'Equalize', 'Invert', 'Posterize', 'PosterizeIncreasing',
                                  'PosterizeOriginal', 'Solarize', 'SolarizeIncreasing', 'SolarizeAdd'])
@pytest.mark.parametrize('magnitude', MAGNITUDES)
def test_table_ops_are_timms(images, name, magnitude):
    pil, batch = images
    from timm_structinit.data.batch_rand_augment import _Op, _apply
    from timm_structinit.data.pillow_compat import posterize_zero_bits_safe_ops
    level_fn, op_fn = timm_aa.LEVEL_TO_ARG[name], timm_aa.NAME_TO_OP[name]
    args = level_fn(magnitude, {}) if level_fn else ()
    with posterize_zero_bits_safe_ops():  # timm's 0-bit posterize on Pillow >= 13, as the training command runs it
        op_fn = timm_aa.NAME_TO_OP[name]
        expected = [op_fn(im, *args) for im in pil]
    op = _Op(name, 1.0, magnitude, 0.0, 10.0, {}, FILL, None)
    n = len(pil)
    got = _apply(op, batch.clone(), torch.full((n,), magnitude, dtype=torch.float64), torch.zeros(n, dtype=torch.bool),
                 torch.zeros(n, dtype=torch.bool))
    _agree(_as_batch(expected), got, exact=True)


@pytest.mark.parametrize('name', ['Color', 'ColorIncreasing', 'Contrast', 'ContrastIncreasing', 'Brightness',
                                  'BrightnessIncreasing', 'Sharpness', 'SharpnessIncreasing'])
@pytest.mark.parametrize('magnitude', MAGNITUDES)
def test_enhance_ops_are_timms(images, name, magnitude):
    pil, batch = images
    from timm_structinit.data.batch_rand_augment import _Op, _apply
    level_fn, op_fn = timm_aa.LEVEL_TO_ARG[name], timm_aa.NAME_TO_OP[name]
    random.seed(2)
    factors = [level_fn(magnitude, {})[0] for _ in pil]
    expected = [op_fn(im, f) for im, f in zip(pil, factors)]
    # the increasing ops' sign: factor 1 - x where timm negated (factors below 1), 1 + x otherwise
    negate = torch.tensor([f < 1.0 for f in factors])
    op = _Op(name, 1.0, magnitude, 0.0, 10.0, {}, FILL, None)
    n = len(pil)
    got = _apply(op, batch.clone(), torch.full((n,), magnitude, dtype=torch.float64), negate,
                 torch.zeros(n, dtype=torch.bool))
    _agree(_as_batch(expected), got)


def test_eval_transform_is_timms(images):
    from timm.data import create_transform
    pil, batch = images
    for size, crop_pct in ((32, 1.0), (224, 0.875), (28, 0.9)):
        timm_eval = create_transform(size, is_training=False, crop_pct=crop_pct, interpolation='bicubic',
                                     mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
        expected = torch.stack([timm_eval(im) for im in pil])
        got = DeviceEvalTransform((3, size, size), crop_pct, 'bicubic', (0.5, 0.5, 0.5), (0.25, 0.25, 0.25))(batch)
        diff = (expected - got).abs() * 0.25 * 255  # in 8-bit levels
        assert float((diff > 0.01).float().mean()) <= 0.002 and float(diff.max()) <= 2.01


def _timm_draws(config: str, count: int, seed: int = 0):
    """ What timm's RandAugment draws per image: (op name, level args) of each op it applies, per layer. """
    policy = timm_aa.rand_augment_transform(config, dict(translate_const=14, img_mean=FILL))
    applied = []
    for op in policy.ops:
        op.aug_fn = (lambda name: lambda img, *args, **kwargs: applied.append((name, args)) or img)(op.name)
    random.seed(seed)
    np.random.seed(seed)
    image = Image.new('RGB', (4, 4))
    for _ in range(count):
        policy(image)
    return applied, len(policy.ops), policy.num_layers


@pytest.mark.parametrize('config', ['rand-m9-mstd0.5-inc1', 'rand-m7-n3-mstd1-p0.7', 'rand-m9-mstd101',
                                    'rand-m9-mstd0.5-inc1-tweights'])
def test_rand_augment_draws_follow_timms_policy(config):
    """ Over 6,000 images, how often each op is applied and the law of its argument, against timm's policy drawing
    as many: a chi-square test of the op counts and a Kolmogorov-Smirnov test of each op's arguments (the level
    function applied to the drawn magnitudes and signs), each at a false-alarm rate of 0.1% (fixed seeds, so the
    outcome is the same on every run). """
    count, alpha = 6000, 0.001
    timm_applied, n_ops, layers = _timm_draws(config, count)
    augment = BatchRandAugment(config, dict(translate_const=14, img_mean=FILL))
    generator = torch.Generator().manual_seed(0)
    ours = []
    for layer in augment.draw(count, generator, torch.device('cpu')):
        for i in layer['applied'].nonzero().squeeze(1).tolist():
            op = augment.ops[int(layer['op'][i])]
            level = float(layer['level'][i])
            fn = timm_aa.LEVEL_TO_ARG[op.name]
            # timm's level function, with the sign this image drew (its `_randomly_negate` negates when
            # random() > 0.5)
            original, random.random = random.random, (lambda neg: (lambda: 0.9 if neg else 0.1))(
                bool(layer['negate'][i]))
            try:
                args = fn(level, dict(translate_const=14)) if fn else ()
            finally:
                random.random = original
            ours.append((op.name, args))
    names = [op.name for op in augment.ops]
    timm_counts = np.array([sum(1 for n, _ in timm_applied if n == name) for name in names])
    our_counts = np.array([sum(1 for n, _ in ours if n == name) for name in names])
    assert abs(our_counts.sum() - timm_counts.sum()) < 6 * math.sqrt(count * layers), (our_counts.sum(),
                                                                                       timm_counts.sum())
    table = np.stack([timm_counts, our_counts])
    table = table[:, table.sum(0) > 0]
    assert stats.chi2_contingency(table).pvalue > alpha
    for name in set(names):
        timm_args = [a[0] for n, a in timm_applied if n == name and a]
        our_args = [a[0] for n, a in ours if n == name and a]
        if len(timm_args) > 30 and len(our_args) > 30:
            assert stats.ks_2samp(timm_args, our_args).pvalue > alpha, name


def test_randomness_is_per_image_and_the_seed_repeats_it(images):
    _, batch = images
    same = batch[:1].expand(64, -1, -1, -1).clone()
    transform = DeviceTrainTransform((3, 32, 32), (0.08, 1.0), (3 / 4, 4 / 3), 0.5, 0.0, 0.4,
                                     'rand-m9-mstd0.5-inc1', 'random', (0.5, 0.5, 0.5), (0.25, 0.25, 0.25))
    first = transform(same.clone(), torch.Generator().manual_seed(3))
    distinct = {tuple(x.flatten().tolist()) for x in first}
    assert len(distinct) >= 60  # one image, 64 augmentations (a crop, flip and two ops can repeat by chance)
    again = transform(same.clone(), torch.Generator().manual_seed(3))
    assert torch.equal(first, again)
    other = transform(same.clone(), torch.Generator().manual_seed(4))
    assert not torch.equal(first, other)


def test_crop_boxes_follow_timms_law():
    """ The crops' areas and aspect ratios, against timm's get_params over as many draws (KS at 0.1%). """
    image = Image.new('RGB', (32, 32))
    random.seed(0)
    theirs = np.array([RandomResizedCropAndInterpolation.get_params(image, (0.08, 1.0), (3 / 4, 4 / 3))
                       for _ in range(5000)])
    ours = rrc_boxes(5000, 32, 32, (0.08, 1.0), (3 / 4, 4 / 3), torch.Generator().manual_seed(0),
                     torch.device('cpu')).numpy()
    for column in range(4):
        assert stats.ks_2samp(theirs[:, column], ours[:, column]).pvalue > 0.001, column
    assert (ours[:, 0] + ours[:, 2] <= 32).all() and (ours[:, 1] + ours[:, 3] <= 32).all()


def _timm_op(name, pil, level, negate, cubic):
    """ timm's AugmentOp for one image at a given magnitude and sign: its level function (with `random` answering the
    sign), then its Pillow op with the fill and filter timm passes to every op. """
    fn = timm_aa.LEVEL_TO_ARG[name]
    original, random.random = random.random, (lambda: 0.9) if negate else (lambda: 0.1)
    try:
        args = fn(level, dict(translate_const=14)) if fn else ()
    finally:
        random.random = original
    return timm_aa.NAME_TO_OP[name](pil, *args, fillcolor=FILL, resample=PIL_FILTER[cubic])


def test_a_layer_of_mixed_ops_is_timms_op_for_each_image(images):
    """ One RandAugment layer over 200 images that drew all the policy's ops at once (the ops applied by kind, a
    pass per kind), against timm's op of each image with that image's magnitude, sign and filter. """
    pil, batch = images
    from timm_structinit.data.pillow_compat import posterize_zero_bits_safe_ops
    augment = BatchRandAugment('rand-n1-m9-mstd0.5-inc1', dict(translate_const=14, img_mean=FILL))
    layer = augment.draw(len(pil), torch.Generator().manual_seed(5), torch.device('cpu'))[0]
    assert len(layer['op'][layer['applied']].unique()) >= 10  # most kinds of op in one batch
    got = batch.clone()
    augment._apply_layer(got, layer)
    expected = []
    with posterize_zero_bits_safe_ops():
        for i, im in enumerate(pil):
            if not layer['applied'][i]:
                expected.append(im)
                continue
            op = augment.ops[int(layer['op'][i])]
            expected.append(_timm_op(op.name, im, float(layer['level'][i]), bool(layer['negate'][i]),
                                     bool(layer['bicubic'][i])))
    _agree(_as_batch(expected), got)


@pytest.mark.parametrize('config', ['rand-n3-m9-mstd0.5-inc1', 'rand-m9-mstd101'])
def test_a_layer_applies_each_op_as_the_op_alone_does(images, config):
    """ Applying a layer's ops by kind gives, bit for bit, what each op applied alone to its images gives. """
    _, batch = images
    from timm_structinit.data.batch_rand_augment import _apply
    augment = BatchRandAugment(config, dict(translate_const=14, img_mean=FILL))
    grouped, alone = batch.clone(), batch.clone()
    for layer in augment.draw(len(batch), torch.Generator().manual_seed(6), torch.device('cpu')):
        augment._apply_layer(grouped, layer)
        for index in layer['op'].unique().tolist():
            rows = ((layer['op'] == index) & layer['applied']).nonzero().squeeze(1)
            if rows.numel():
                alone[rows] = _apply(augment.ops[index], alone[rows], layer['level'][rows], layer['negate'][rows],
                                     layer['bicubic'][rows])
    assert torch.equal(grouped, alone)


def test_rows_by_group_are_each_groups_indices_in_order():
    groups = torch.randint(0, 5, (300,), generator=torch.Generator().manual_seed(2))
    groups[groups == 3] = 1  # an empty group
    rows = ops.rows_by_group(groups, 5)
    assert len(rows) == 5
    for group, got in enumerate(rows):
        assert torch.equal(got, (groups == group).nonzero().squeeze(1))
