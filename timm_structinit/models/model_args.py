""" A model's own arguments checked before timm builds anything: sizes that are positive integers, a patch that divides the
image, and the arguments of a `StructVisionTransformer` (Swin and Mixer check theirs in their constructors with the
same helpers). Each failure is a ValueError naming the value and what is valid. """
from typing import Any, List, Mapping, Optional

from ..layers.pos_embed import check_sincos_dim

__all__ = ['check_sizes', 'check_patch_fits', 'check_vit_args']


def _as_sizes(value: Any) -> List[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def check_sizes(model: str, minimum: int = 1, **sizes: Any) -> None:
    """ Each of `sizes` (a name and an int, or a tuple of ints) is an integer >= `minimum`; ValueError naming it. """
    for name, value in sizes.items():
        for v in _as_sizes(value):
            if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
                raise ValueError(f'{name}={value!r} is not valid for {model}; valid: integers >= {minimum}')


def check_patch_fits(model: str, img_size: Any, patch_size: Any, padded: Optional[bool] = None) -> None:
    """ The patch size divides the image size (timm would silently drop the border pixels otherwise); `padded` is
    the model's dynamic_img_pad (None: the model has no such option). """
    sides, patches = _as_sizes(img_size), _as_sizes(patch_size)
    sides, patches = sides * (2 // len(sides)), patches * (2 // len(patches))
    if padded or all(s % p == 0 for s, p in zip(sides, patches)):
        return
    fits = [p for p in range(1, min(sides) + 1) if all(s % p == 0 for s in sides)]
    pad = ' (or dynamic_img_pad=True to pad the image)' if padded is not None else ''
    raise ValueError(f'patch_size={patch_size!r} does not divide img_size={img_size!r} for {model}: the pixels past '
                     f'the last whole patch would be dropped; valid patch sizes here: {fits}{pad}')


def check_vit_args(pos_embed: str, struct_init: Optional[str], kwargs: Mapping[str, Any]) -> None:
    """ The arguments of a `StructVisionTransformer` (its own, and timm's `VisionTransformer` ones in `kwargs`) can
    build a model: ValueError naming the first that cannot, before timm builds anything. """
    embed_dim, num_heads = kwargs.get('embed_dim', 768), kwargs.get('num_heads', 12)
    name = 'StructVisionTransformer'
    check_sizes(name, embed_dim=embed_dim, num_heads=num_heads, in_chans=kwargs.get('in_chans', 3),
                img_size=kwargs.get('img_size', 224), patch_size=kwargs.get('patch_size', 16))
    check_sizes(name, 0, depth=kwargs.get('depth', 12), num_classes=kwargs.get('num_classes', 1000))
    if struct_init is not None and kwargs.get('depth', 12) == 0:
        raise ValueError(f'depth=0 leaves no attention block for struct_init={struct_init!r} to write; valid: '
                         f'depth >= 1')
    check_patch_fits(name, kwargs.get('img_size', 224), kwargs.get('patch_size', 16),
                     padded=kwargs.get('dynamic_img_pad', False))
    if embed_dim % num_heads:
        raise ValueError(
            f'embed_dim={embed_dim} is not divisible by num_heads={num_heads}; '
            f'valid num_heads divide embed_dim (e.g. {[h for h in (1, 2, 3, 4, 6, 8, 12, 16) if embed_dim % h == 0]})')
    if pos_embed not in ('learn', 'none', '', 'sincos'):
        raise ValueError(f"pos_embed={pos_embed!r} is not valid; choose 'learn', 'sincos' or 'none'")
    if kwargs.get('global_pool', 'token') == 'token' and not kwargs.get('class_token', True):
        raise ValueError("global_pool='token' needs a class token; use global_pool='avg' with class_token=False")
    if pos_embed == 'sincos':
        check_sincos_dim(embed_dim)
