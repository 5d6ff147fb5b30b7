""" Swin Transformer at CIFAR scale, plain and with a structured init.

timm's `SwinTransformer` (Liu et al. 2021, "Swin Transformer: Hierarchical Vision Transformer using Shifted Windows",
https://arxiv.org/abs/2103.14030) with the `struct_init` arguments of `StructInitArgs`: the impulse init lives in the
relative position bias tables (`timm_structinit.inits.swin`), mimetic in each stage's Q/K and V/proj. The weights
load strictly into timm's own `SwinTransformer` of the same geometry.

The 2025 structured-init paper (Zheng et al., NeurIPS 2025, https://arxiv.org/abs/2505.19985) reports that its impulse
init carries over to Swin; its code does not include it, so the construction here is this package's.
"""
from typing import Any, Dict, Optional

from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from timm.models.swin_transformer import SwinTransformer, checkpoint_filter_fn

from .model_args import check_patch_fits, check_sizes
from .struct_init_args import StructInitArgs
from .variant_config import cfg32, merge_args

__all__ = ['StructSwinTransformer']


class StructSwinTransformer(StructInitArgs, SwinTransformer):
    """ timm SwinTransformer + structured init (`struct_init`, `struct_init_kwargs`, `struct_init_seed`). """

    def __init__(self, *args, struct_init: Optional[str] = None, struct_init_kwargs: Optional[Dict[str, Any]] = None,
                 struct_init_seed: Optional[int] = None, **kwargs) -> None:
        name = 'StructSwinTransformer'
        check_sizes(name, embed_dim=kwargs.get('embed_dim', 96), depths=kwargs.get('depths', (2, 2, 6, 2)),
                    num_heads=kwargs.get('num_heads', (3, 6, 12, 24)), window_size=kwargs.get('window_size', 7),
                    in_chans=kwargs.get('in_chans', 3), img_size=kwargs.get('img_size', 224),
                    patch_size=kwargs.get('patch_size', 4))
        check_patch_fits(name, kwargs.get('img_size', 224), kwargs.get('patch_size', 4))
        self._set_struct_init('swin', struct_init, struct_init_kwargs, struct_init_seed,
                              'swin_tiny_patch2_window4_32_impulse3', kwargs.get('weight_init', ''))
        super().__init__(*args, **kwargs)
        self._struct_init_built()

    def init_weights(self, mode: str = '', needs_reset: bool = True) -> None:
        super().init_weights(mode, needs_reset=needs_reset)
        self._apply_struct_init()


def _create(variant: str, pretrained: bool = False, **kwargs) -> StructSwinTransformer:
    out_indices = kwargs.pop('out_indices', tuple(range(len(kwargs.get('depths', (1, 1, 3, 1))))))
    return build_model_with_cfg(
        StructSwinTransformer, variant, pretrained,
        pretrained_filter_fn=checkpoint_filter_fn,
        feature_cfg=dict(flatten_sequential=True, out_indices=out_indices),
        **kwargs)


_SWIN_PAPER = ('arXiv:2103.14030',)
_IMPULSE_PAPER = ('arXiv:2505.19985',)

# forward_features ends on a 2x2 map: a 16x16 patch grid merged three times (timm's cfg key for the unpooled size)
_POOL = dict(pool_size=(2, 2))

default_cfgs = generate_default_cfgs({
    'swin_tiny_patch2_window4_32': cfg32(
        description="Swin-T stages on 32x32, patch 2, window 4, timm's init: the plain baseline",
        first_conv='patch_embed.proj', classifier='head.fc', paper_ids=_SWIN_PAPER, **_POOL),
    'swin_tiny_patch2_window4_32_impulse3': cfg32(
        description='3x3 impulse init in the relative position bias tables', first_conv='patch_embed.proj',
        classifier='head.fc', paper_ids=_IMPULSE_PAPER, **_POOL),
    'swin_tiny_patch2_window4_32_mimetic': cfg32(
        description='mimetic Q/K and V/proj per stage', first_conv='patch_embed.proj', classifier='head.fc',
        paper_ids=('arXiv:2305.09828',), **_POOL),
})

# Swin-T's stages at 32x32: a 16x16 patch grid, windows of 4x4 (the last stage's 2x2 map is one window)
_TINY32 = dict(img_size=32, patch_size=2, window_size=4, embed_dim=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24))


@register_model
def swin_tiny_patch2_window4_32(pretrained: bool = False, **kwargs) -> StructSwinTransformer:
    """ Swin-T/2 with 4x4 windows on 32x32, timm's init: the plain baseline. """
    return _create('swin_tiny_patch2_window4_32', pretrained=pretrained, **merge_args(_TINY32, kwargs))


@register_model
def swin_tiny_patch2_window4_32_impulse3(pretrained: bool = False, **kwargs) -> StructSwinTransformer:
    """ Swin-T/2 with 4x4 windows on 32x32, each head's relative position bias a random 3x3 impulse. """
    model_args = dict(_TINY32, struct_init='impulse', struct_init_kwargs=dict(kernel_size=3))
    return _create('swin_tiny_patch2_window4_32_impulse3', pretrained=pretrained, **merge_args(model_args, kwargs))


@register_model
def swin_tiny_patch2_window4_32_mimetic(pretrained: bool = False, **kwargs) -> StructSwinTransformer:
    """ Swin-T/2 with 4x4 windows on 32x32, mimetic Q/K and V/proj (Trockman & Kolter 2023) per stage. """
    model_args = dict(_TINY32, struct_init='mimetic')
    return _create('swin_tiny_patch2_window4_32_mimetic', pretrained=pretrained, **merge_args(model_args, kwargs))
