""" Pillow's image operations, as timm's training transform calls them, on a batch of images at once, each image
with its own parameters.

A batch is a float tensor (B, C, H, W) holding 8-bit values (integers 0..255), on any device. Each operation returns
8-bit values again, rounded as Pillow rounds: resampling in Pillow's 22-bit fixed point (`resized_crop`), affine
sampling truncated (`affine`), blends truncated (`blend`), the smoothing filter rounded (`smooth`), lookup tables
computed exactly (`autocontrast`, `equalize`, `posterize`, `solarize`, `solarize_add`, `invert`). Compared with
Pillow on real images the results agree exactly, but where float32 arithmetic lands on the other side of a rounding
step than Pillow's integer or double arithmetic (tests/test_batch_ops.py measures how often).

The formulas restate Pillow's C code (Resample.c, Geometry.c, Blend.c, Filter.c, ImageOps, ImageEnhance); no
library applies them per image on a batch: torchvision's v2 transforms draw one parameter per batch and resample
with other filters.
"""
import functools
import math
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

__all__ = ['rows_by_group', 'resized_crop', 'affine', 'rotation_matrices', 'grayscale', 'grey', 'mean_grey', 'blend',
           'smooth',
           'brightness', 'contrast', 'color', 'sharpness', 'apply_lut', 'autocontrast', 'equalize', 'posterize',
           'solarize', 'solarize_add', 'invert', 'autocontrast_table', 'equalize_table', 'posterize_table',
           'solarize_table', 'solarize_add_table', 'invert_table']

_PRECISION_BITS = 22  # Resample.c: 32 - 8 - 2 bits for the weights of an 8-bit image


def rows_by_group(groups: torch.Tensor, count: int) -> List[torch.Tensor]:
    """ For each group 0 .. count - 1, the indices of the `groups` ((B,) integers in that range) that are in it, in
    ascending order: from one stable sort and one count, so with one wait for the device's results (a `nonzero` per
    group waits once each, and on a GPU every wait stops the host from queueing work ahead). """
    order = torch.sort(groups, stable=True).indices
    sizes = (groups == torch.arange(count, device=groups.device)[:, None]).sum(1).tolist()
    return list(order.split(sizes))


def _resample_weights(in_size: int, start: torch.Tensor, length: torch.Tensor, out_size: int,
                      bicubic: torch.Tensor) -> torch.Tensor:
    """ (B, out_size, in_size) weights that resample the span [start, start + length) of an axis of `in_size` pixels
    to `out_size` pixels, as Pillow's `precompute_coeffs` does for the cropped image, quantized to its fixed point.
    `start`, `length`: (B,) integers; `bicubic`: (B,) bools (else bilinear). """
    device = start.device
    # tensor by tensor: torch divides by a Python number through its reciprocal, which can differ from Pillow's
    # division in the last bit, and a truncation below can then fall the other way
    length = length.to(torch.float64)
    scale = length / torch.full_like(length, out_size)  # (B,)
    filterscale = scale.clamp(min=1.0)
    support = torch.where(bicubic, 2.0, 1.0).to(torch.float64) * filterscale
    center = (torch.arange(out_size, dtype=torch.float64, device=device)[None] + 0.5) * scale[:, None]  # (B, out)
    xmin = torch.trunc(center - support[:, None] + 0.5).clamp(min=0)
    xmax = torch.minimum(torch.trunc(center + support[:, None] + 0.5), length[:, None])
    # in double, as Pillow: weights computed in float32 were off by a few units of the fixed point, which moved
    # sums near a rounding step to its other side (on 0.2% of the values of a bilinear upscale)
    x = (torch.arange(in_size, dtype=torch.float64, device=device)[None] - start.double()[:, None])[:, None]
    t = ((x - center[..., None] + 0.5) * (torch.ones_like(filterscale) / filterscale)[:, None, None]).abs_()
    # Keys' cubic, a = -0.5: (1.5 t - 2.5) t^2 + 1 on [0, 1), ((-0.5 t + 2.5) t - 4) t + 2 on [1, 2); the triangle
    near = (1.5 * t - 2.5) * t * t + 1
    far = ((-0.5 * t + 2.5) * t - 4) * t + 2
    w = torch.where(bicubic[:, None, None], torch.where(t < 1, near, far * (t < 2)),
                    (1 - t).clamp_(min=0))
    w.mul_((x >= xmin[..., None]) & (x < xmax[..., None]))
    w.div_(w.sum(-1, keepdim=True))
    one = float(1 << _PRECISION_BITS)
    # Pillow's (int)(0.5 + w * one), and (int)(-0.5 + w * one) for a negative w: half away from zero
    fixed = torch.floor_(w.abs().mul_(one).add_(0.5)).mul_(w.sign())
    return fixed.div_(one).float()  # k / 2^22 with |k| < 2^23: exact in float32


@functools.lru_cache(maxsize=16)
def _weight_table(in_size: int, out_size: int, device: str) -> torch.Tensor:
    """ (2, in_size + 1, out_size, in_size): the weights of every crop length starting at pixel 0, bilinear then
    bicubic. A crop's weights are those of its length shifted to its start, so a batch's weights are gathered from
    here instead of computed per image. """
    lengths = torch.arange(in_size + 1, device=device).clamp(min=1)
    start = torch.zeros_like(lengths)
    return torch.stack([_resample_weights(in_size, start, lengths, out_size, torch.full_like(lengths, cubic).bool())
                        for cubic in (0, 1)])


def _crop_weights(in_size: int, start: torch.Tensor, length: torch.Tensor, out_size: int,
                  bicubic: torch.Tensor) -> torch.Tensor:
    """ `_resample_weights` for a batch, from the table: each crop's weights shifted to its start. """
    table = _weight_table(in_size, out_size, str(start.device))
    weights = table[bicubic.long(), length]  # (B, out, in), the crop at pixel 0
    source = torch.arange(in_size, device=start.device)[None] - start[:, None]  # (B, in): the crop's pixel
    shifted = weights.gather(2, source.clamp(min=0)[:, None, :].expand_as(weights))
    return shifted * (source >= 0)[:, None, :]


def _round8(x: torch.Tensor) -> torch.Tensor:
    return torch.floor_(x.add_(0.5)).clamp_(0, 255)


def resized_crop(images: torch.Tensor, boxes: torch.Tensor, size: Tuple[int, int], bicubic: torch.Tensor,
                 hflip: Optional[torch.Tensor] = None, vflip: Optional[torch.Tensor] = None) -> torch.Tensor:
    """ Crop each image to its box (top, left, height, width: (B, 4) integers) and resize it to `size` (H, W), as
    torchvision's `resized_crop` does with Pillow (`crop`, then `resize`): a horizontal pass, 8-bit rounding, a
    vertical pass. Where a crop keeps its length Pillow skips that pass; the weights are then a shifted identity,
    which gives the plain crop exactly. `hflip` / `vflip` ((B,) bools) then mirror those images, at no cost: a pass's
    output pixels are taken in reverse order (the same sums, so the same values as flipping after). """
    B, C, H, W = images.shape
    top, left, height, width = boxes.unbind(1)
    out_h, out_w = size
    wx = _mirrored(_crop_weights(W, left, width, out_w, bicubic), hflip).to(images.dtype)  # (B, out_w, W)
    x = _round8(torch.bmm(images.reshape(B, C * H, W), wx.transpose(1, 2)))  # (B, C * H, out_w)
    wy = _mirrored(_crop_weights(H, top, height, out_h, bicubic), vflip).to(images.dtype)  # (B, out_h, H)
    x = x.reshape(B, C, H, out_w).transpose(1, 2).reshape(B, H, C * out_w)
    x = _round8(torch.bmm(wy, x))  # (B, out_h, C * out_w)
    return x.reshape(B, out_h, C, out_w).transpose(1, 2).contiguous()


def _mirrored(weights: torch.Tensor, flipped: Optional[torch.Tensor]) -> torch.Tensor:
    """ (B, out, in) resampling weights with the output pixels of the `flipped` images in reverse order. """
    if flipped is None:
        return weights
    return torch.where(flipped[:, None, None], weights.flip(1), weights)


def rotation_matrices(degrees: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """ (B, 6) affine matrices of Pillow's `rotate` (about the image's center, no expansion), float64: output pixel
    (x, y) reads input (a x + b y + c, d x + e y + f). Computed in Python as Pillow computes them (its cosine and sine
    rounded to 15 decimals by Python's `round`, which torch's rounding does not match in the last bit). """
    cx, cy = width / 2.0, height / 2.0
    rows = []
    for value in degrees.tolist():
        angle = -math.radians(value % 360.0)  # Pillow takes the angle modulo 360 first
        a, b, d, e = (round(math.cos(angle), 15), round(math.sin(angle), 15), round(-math.sin(angle), 15),
                      round(math.cos(angle), 15))
        rows.append((a, b, a * -cx + b * -cy + 0.0 + cx, d, e, d * -cx + e * -cy + 0.0 + cy))
    return torch.tensor(rows, dtype=torch.float64, device=degrees.device).reshape(-1, 6)


def affine(images: torch.Tensor, matrices: torch.Tensor, bicubic: torch.Tensor, fill: Sequence[float],
           axis: Optional[str] = None) -> torch.Tensor:
    """ Pillow's `transform(size, AFFINE, matrix, resample, fillcolor)` for each image: output pixel center (x + 0.5,
    y + 0.5) reads the input at the matrix's point, with Pillow's bilinear or bicubic sampling (edge pixels
    repeated, values truncated to 8 bits); a point outside the image takes `fill`. `matrices`: (B, 6) float64.
    `axis` 'x' (or 'y') says every point lies on a pixel row (column) center, as for a shear or translation along
    that axis: the other axis's weights are then exactly (0, 1, 0, 0), and those taps are skipped. """
    B, C, H, W = images.shape
    if B == 0:
        return images
    device = images.device
    ys, xs = torch.meshgrid(torch.arange(H, dtype=torch.float64, device=device) + 0.5,
                            torch.arange(W, dtype=torch.float64, device=device) + 0.5, indexing='ij')
    a, b, c, d, e, f = (m[:, None, None] for m in matrices.to(torch.float64).unbind(1))
    xin, yin = a * xs + b * ys + c, d * xs + e * ys + f  # (B, H, W), in double as Pillow
    inside = (xin >= 0) & (xin < W) & (yin >= 0) & (yin < H)
    # interpolated in double, as Pillow: a weight rounded to float32 moves values that Pillow's arithmetic leaves
    # just below a whole number onto it, and the truncation then differs by one
    x0, y0 = torch.floor(xin - 0.5), torch.floor(yin - 0.5)
    dx, dy = (xin - 0.5 - x0)[:, None], (yin - 0.5 - y0)[:, None]
    # the image padded by two pixels of its own edge (Pillow clamps every tap to the image), so that each tap is
    # the pixel center's index plus a constant; points outside take `fill` below, whatever they read
    padded = F.pad(images.to(torch.float64), (2, 2, 2, 2), mode='replicate').reshape(B, C, -1)
    stride = W + 4
    center = ((y0.clamp(-1, H - 1) + 2) * stride + x0.clamp(-1, W - 1) + 2).long().reshape(B, 1, H * W)

    values = torch.empty(B, C, H, W, dtype=torch.float64, device=device)
    # each image sampled with its own filter only
    for cubic, rows in zip((False, True), rows_by_group(bicubic.long(), 2)):
        if rows.numel() == B:
            values = _sample(padded, center, stride, dx, dy, axis, cubic, (H, W))
        elif rows.numel():
            values[rows] = _sample(padded[rows], center[rows], stride, dx[rows], dy[rows], axis, cubic, (H, W))
    values = torch.floor_(values.clamp_(0, 255)).to(images.dtype)
    fill = torch.tensor(list(fill), dtype=images.dtype, device=device)[None, :, None, None]
    return torch.where(inside[:, None], values, fill)


def _sample(padded: torch.Tensor, center: torch.Tensor, stride: int, dx: torch.Tensor, dy: torch.Tensor,
            axis: Optional[str], cubic: bool, size: Tuple[int, int]) -> torch.Tensor:
    """ The padded images' values at the points (`center` the tap of each point's pixel, `dx`, `dy` its offsets in
    it), bicubic or bilinear. """
    B, C = padded.shape[:2]
    H, W = size

    def pixels(k: int, j: int) -> torch.Tensor:
        return padded.gather(2, (center + (k * stride + j)).expand(B, C, H * W)).reshape(B, C, H, W)

    return (_bicubic if cubic else _bilinear)(pixels, dx, dy, axis)


def _bilinear(pixels, dx, dy, axis: Optional[str]) -> torch.Tensor:
    """ Geometry.c's bilinear sampling: a + (b - a) d along x, then along y; the row below repeats the edge (which is
    what Pillow does where it lies outside). """
    if axis == 'y':  # dx = 0: the pixel's own column
        top, below = pixels(0, 0), pixels(1, 0)
    else:
        top = pixels(0, 0) + (pixels(0, 1) - pixels(0, 0)) * dx
        if axis == 'x':  # dy = 0
            return top
        below = pixels(1, 0) + (pixels(1, 1) - pixels(1, 0)) * dx
    return top + (below - top) * dy


def _cubic(v1, v2, v3, v4, d):
    # Geometry.c's BICUBIC: p1 + d (p2 + d (p3 + d p4)), Keys' cubic with a = -1
    return v2 + d * ((v3 - v1) + d * ((2 * (v1 - v2) + v3 - v4) + d * (v2 - v1 - v3 + v4)))


def _bicubic(pixels, dx, dy, axis: Optional[str]) -> torch.Tensor:
    if axis == 'x':  # dy = 0: the row's own values
        return _cubic(*(pixels(0, j) for j in (-1, 0, 1, 2)), dx)
    if axis == 'y':
        return _cubic(*(pixels(k, 0) for k in (-1, 0, 1, 2)), dy)
    rows = [_cubic(*(pixels(k, j) for j in (-1, 0, 1, 2)), dx) for k in (-1, 0, 1, 2)]
    return _cubic(*rows, dy)


def grayscale(images: torch.Tensor) -> torch.Tensor:
    """ Pillow's `convert('L')` of RGB images, (B, 1, H, W): ITU-R 601-2 luma in 16-bit fixed point. """
    if images.shape[1] == 1:
        return images
    r, g, b = images[:, 0:1], images[:, 1:2], images[:, 2:3]
    # exact in float32: at most 255 * 65536 < 2 ** 24
    return torch.floor((r * 19595 + g * 38470 + b * 7471 + 32768) / 65536)


def blend(degenerate: torch.Tensor, images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """ Pillow's `Image.blend(degenerate, image, factor)`, each image its own factor ((B,)): truncated to 8 bits,
    clipped where the factor lies outside [0, 1] (ImageEnhance's `enhance`). """
    factor = factor.to(images.dtype)[:, None, None, None]
    value = degenerate + factor * (images - degenerate)
    # a small margin: Pillow computes in double, so a whole number it reaches exactly may land just below here
    return torch.floor(value + 1e-4).clamp_(0, 255)


def brightness(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    return blend(torch.zeros_like(images), images, factor)


def grey(images: torch.Tensor) -> torch.Tensor:
    """ ImageEnhance.Color's degenerate image: the luma in every channel. """
    return grayscale(images).expand_as(images)


def mean_grey(images: torch.Tensor) -> torch.Tensor:
    """ ImageEnhance.Contrast's degenerate image: the image's mean luma, rounded to an integer. """
    return torch.floor(grayscale(images).mean(dim=(1, 2, 3), keepdim=True) + 0.5).expand_as(images)


def color(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    return blend(grey(images), images, factor)


def contrast(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    return blend(mean_grey(images), images, factor)


def smooth(images: torch.Tensor) -> torch.Tensor:
    """ Pillow's ImageFilter.SMOOTH (3 x 3, centre 5, the rest 1, over 13), rounded; the border pixels kept. """
    C = images.shape[1]
    kernel = images.new_tensor([[1., 1., 1.], [1., 5., 1.], [1., 1., 1.]]) / 13
    inner = F.conv2d(images, kernel.expand(C, 1, 3, 3), groups=C)
    out = images.clone()
    out[:, :, 1:-1, 1:-1] = torch.floor(inner + 0.5).clamp_(0, 255)
    return out


def sharpness(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    return blend(smooth(images), images, factor)


def apply_lut(images: torch.Tensor, lut: torch.Tensor) -> torch.Tensor:
    """ Each image's channels through their own table: `lut` (B, C, 256) or (B, 1, 256), 8-bit values. """
    B, C, H, W = images.shape
    lut = lut.to(images.dtype).expand(B, C, 256)
    return lut.gather(2, images.reshape(B, C, H * W).long()).reshape(B, C, H, W)


def _histograms(images: torch.Tensor) -> torch.Tensor:
    """ (B, C, 256) counts of each image's channels. """
    B, C, H, W = images.shape
    offsets = torch.arange(B * C, device=images.device).mul_(256).reshape(B, C, 1)
    index = images.reshape(B, C, H * W).long().add_(offsets)
    return torch.bincount(index.flatten(), minlength=B * C * 256).reshape(B, C, 256).to(torch.float64)


def _levels(batch: int, channels: int, device) -> torch.Tensor:
    return torch.arange(256, dtype=torch.float64, device=device).expand(batch, channels, 256)


def autocontrast_table(images: torch.Tensor) -> torch.Tensor:
    """ ImageOps.autocontrast's (no cutoff) table of each channel: its range stretched to 0..255, truncated. """
    B, C = images.shape[:2]
    low = images.amin(dim=(2, 3)).to(torch.float64)[..., None]
    high = images.amax(dim=(2, 3)).to(torch.float64)[..., None]
    levels = _levels(B, C, images.device)
    span = (high - low).clamp(min=1)
    scale = torch.full_like(span, 255.0) / span  # tensor by tensor, as Pillow's double division (see above)
    stretched = torch.trunc(levels * scale - low * scale).clamp(0, 255)
    return torch.where(high > low, stretched, levels)


def equalize_table(images: torch.Tensor) -> torch.Tensor:
    """ ImageOps.equalize's table of each channel: its histogram's cumulative counts. """
    histogram = _histograms(images)  # (B, C, 256)
    levels = _levels(*histogram.shape[:2], images.device)
    used = histogram > 0
    last = torch.where(used, levels, torch.full_like(levels, -1)).amax(-1, keepdim=True)
    last_count = histogram.gather(-1, last.clamp(min=0).long())
    total = histogram.sum(-1, keepdim=True)
    step = torch.floor((total - last_count) / torch.full_like(total, 255))
    before = histogram.cumsum(-1) - histogram  # counts below each level
    table = torch.floor((torch.floor(step / 2) + before) / step.clamp(min=1)).clamp(0, 255)  # whole numbers: exact
    flat = (used.sum(-1, keepdim=True) <= 1) | (step == 0)
    return torch.where(flat, levels, table)


def posterize_table(bits: torch.Tensor) -> torch.Tensor:
    """ ImageOps.posterize keeping `bits` ((B,)) of each value's 8 (0 bits: black, as timm's Pillow >= 13 fix; 8 or
    more: unchanged), as (B, 1, 256) tables. """
    step = (2.0 ** (8 - bits.clamp(0, 8))).to(torch.float64)[:, None, None]
    return torch.floor(_levels(len(bits), 1, bits.device) / step) * step  # powers of two: exact


def solarize_table(threshold: torch.Tensor) -> torch.Tensor:
    """ ImageOps.solarize: values at or above the image's threshold ((B,)) inverted. """
    levels = _levels(len(threshold), 1, threshold.device)
    return torch.where(levels >= threshold.to(torch.float64)[:, None, None], 255 - levels, levels)


def solarize_add_table(add: torch.Tensor, threshold: float = 128) -> torch.Tensor:
    """ timm's solarize_add: values below the threshold raised by `add` ((B,)), at most 255. """
    levels = _levels(len(add), 1, add.device)
    return torch.where(levels < threshold, (levels + add.to(torch.float64)[:, None, None]).clamp(max=255), levels)


def invert_table(batch: int, device) -> torch.Tensor:
    return 255 - _levels(batch, 1, device)


def autocontrast(images: torch.Tensor) -> torch.Tensor:
    return apply_lut(images, autocontrast_table(images))


def equalize(images: torch.Tensor) -> torch.Tensor:
    return apply_lut(images, equalize_table(images))


def posterize(images: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    return apply_lut(images, posterize_table(bits))


def solarize(images: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    return apply_lut(images, solarize_table(threshold))


def solarize_add(images: torch.Tensor, add: torch.Tensor, threshold: float = 128) -> torch.Tensor:
    return apply_lut(images, solarize_add_table(add, threshold))


def invert(images: torch.Tensor) -> torch.Tensor:
    return apply_lut(images, invert_table(images.shape[0], images.device))
