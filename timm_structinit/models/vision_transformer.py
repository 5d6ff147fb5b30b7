""" Vision Transformer with a fixed sin-cos position embedding and structured attention inits.

A thin subclass of timm's `VisionTransformer` (Dosovitskiy et al. 2020, https://arxiv.org/abs/2010.11929) adding:

* `pos_embed='sincos'`: a fixed 2D sin-cos absolute position embedding. It is a buffer, as timm keeps its own fixed
  tables: in the state dict under timm's key `pos_embed` (so the weights load strictly into timm's
  `VisionTransformer`, whose learned table has that key and shape), out of `parameters()` (no optimizer, no
  gradient), regenerated exactly, never interpolated, when the grid changes through `set_input_size` or per batch
  with `dynamic_img_size=True`. Class and register tokens get a zero row (no position),
  as in MAE; with `no_embed_class=True` there is no such row.
* `struct_init=NAME` (+ `struct_init_kwargs`, `struct_init_seed`): a structured attention init from
  `timm_structinit.list_inits()`, applied inside `init_weights` after the rest of the network is initialized, so
  `model.init_weights()` re-applies it and `weight_init='skip'` skips it. Every weight the init does not own keeps
  timm's init, or with timm's `weight_init='reset'` PyTorch's default init (the structured-init authors' setting).

Registered variants reproduce the setups of
* Mimetic init: Trockman & Kolter, "Mimetic Initialization of Self-Attention Layers", ICML 2023,
  https://arxiv.org/abs/2305.09828 (class token, sin-cos, ViT-T/2 on 32x32),
* Impulse (structured) init: Zheng, Li, Saratchandran & Lucey, "Structured Initialization for Attention in Vision
  Transformers", https://arxiv.org/abs/2404.01139 (average pooling, sin-cos), and "Structured Initialization for
  Vision Transformers", NeurIPS 2025, https://arxiv.org/abs/2505.19985.
"""
from typing import Any, Dict, List, Optional, Set

import torch
from timm.models import VisionTransformer, build_model_with_cfg, generate_default_cfgs, register_model
from timm.models.vision_transformer import checkpoint_filter_fn

from ..layers.pos_embed import sincos_pos_embed
from .model_args import check_vit_args
from .struct_init_args import StructInitArgs
from .variant_config import CIFAR10_MEAN, CIFAR10_STD, cfg224, cfg32, merge_args

__all__ = ['StructVisionTransformer', 'CIFAR10_MEAN', 'CIFAR10_STD']


class StructVisionTransformer(StructInitArgs, VisionTransformer):
    """ timm VisionTransformer + fixed sin-cos position embedding + structured attention init.

    Accepts every `VisionTransformer` argument. Additional / extended arguments:
        pos_embed: 'learn' (timm), 'none', or 'sincos' (fixed 2D sin-cos, prefix tokens get a zero row).
        struct_init: name of a structured init (`timm_structinit.list_inits()`), or None for timm's init alone.
        struct_init_kwargs: hyperparameters of that init (validated before the model is built, once).
        struct_init_seed: seed of the init's own generator; None draws one from torch's global generator,
            so `torch.manual_seed` before `create_model` fixes every weight. The seed used is in
            `model.struct_init_record`.
    """

    def __init__(
            self,
            *args,
            pos_embed: str = 'learn',
            struct_init: Optional[str] = None,
            struct_init_kwargs: Optional[Dict[str, Any]] = None,
            struct_init_seed: Optional[int] = None,
            **kwargs,
    ) -> None:
        check_vit_args(pos_embed, struct_init, kwargs)
        # attributes read by init_weights(), which VisionTransformer.__init__ calls: set them first
        self.sincos_pos_embed = pos_embed == 'sincos'
        self.pos_embed_scale = 1.0  # an init may scale the position table; the model keeps the scale
        self._set_struct_init('vit', struct_init, struct_init_kwargs, struct_init_seed, 'vit_tiny_patch2_32_mimetic',
                              kwargs.get('weight_init', ''))
        # built with timm's learned table, then holding the fixed one: the random draws, and so every other weight
        # for a given seed, are those of a learned-table model
        super().__init__(*args, pos_embed='learn' if self.sincos_pos_embed else pos_embed, **kwargs)
        self._struct_init_built()
        if self.sincos_pos_embed:
            self._keep_fixed_table(self.pos_embed.detach())
            self._reset_sincos()  # also when weight_init='skip' left it uninitialized

    @torch.jit.ignore  # timm's table builder is not scriptable; a scripted dynamic-size model calls it in Python
    def _sincos_table(self, grid_size: List[int]) -> torch.Tensor:
        return _fixed_table(self, grid_size, self.pos_embed.device)

    @torch.no_grad()
    def _reset_sincos(self) -> None:
        # built on the CPU, then copied: a GPU's sin and cos differ in the last bits, and a model built on a GPU
        # (device='cuda') keeps the table, and the impulse Q/K solved on it, of a model built on the CPU
        self.pos_embed.copy_(_fixed_table(self, list(self.patch_embed.grid_size), torch.device('cpu')))

    def _keep_fixed_table(self, table: torch.Tensor) -> None:
        """ Hold `table` as the `pos_embed` buffer, in place of the parameter timm's code assigns. """
        if 'pos_embed' in self._parameters:
            del self.pos_embed
        self.register_buffer('pos_embed', table)

    @torch.jit.ignore
    def no_weight_decay(self) -> Set[str]:
        # a fixed table is no parameter: timm's optimizer factory matches these names against parameters only
        names = super().no_weight_decay()
        return names - {'pos_embed'} if self.sincos_pos_embed else names

    def init_weights(self, mode: str = '', needs_reset: bool = True) -> None:
        super().init_weights(mode, needs_reset=needs_reset)
        self.pos_embed_scale = 1.0  # timm redrew a learned table; a fixed one is rebuilt unscaled, then the init
        if self.sincos_pos_embed:
            self._reset_sincos()
        self._apply_struct_init()

    def set_input_size(self, img_size=None, patch_size=None) -> None:
        super().set_input_size(img_size=img_size, patch_size=patch_size)
        if self.sincos_pos_embed:
            # timm resampled the table by interpolation (into a parameter); a fixed one is rebuilt exactly
            self._keep_fixed_table(self._sincos_table(list(self.patch_embed.grid_size)))


def _fixed_table(model: StructVisionTransformer, grid_size: List[int], device: torch.device) -> torch.Tensor:
    """ The model's fixed sin-cos table for `grid_size`, at its scale, on `device` (outside the class: a scripted
    model calls its ignored `_sincos_table` in Python and has no other Python method). """
    prefix = 0 if model.no_embed_class else model.num_prefix_tokens
    table = sincos_pos_embed(
        grid_size, model.embed_dim, num_prefix_tokens=prefix, dtype=model.pos_embed.dtype, device=device)
    return table if model.pos_embed_scale == 1.0 else table * model.pos_embed_scale


class DynamicSincosVisionTransformer(StructVisionTransformer):
    """ A fixed sin-cos model with `dynamic_img_size=True`: each input size gets its exact sin-cos table.

    timm's `_pos_embed` interpolates the stored table for another grid, which for a fixed embedding is an
    approximation of the table it stands for. Kept out of `StructVisionTransformer` so that the common case
    keeps timm's own `_pos_embed`: TorchScript cannot compile a `super()` call, and models stay scriptable.
    """

    def _pos_embed(self, x: torch.Tensor) -> torch.Tensor:
        B, H, W, C = x.shape
        grid_size = self.patch_embed.grid_size
        pos_embed = self.pos_embed if (H == grid_size[0] and W == grid_size[1]) else self._sincos_table([H, W])
        x = x.view(B, -1, C)
        prefix = []
        if self.cls_token is not None:
            prefix.append(self.cls_token.expand(B, -1, -1))
        if self.reg_token is not None:
            prefix.append(self.reg_token.expand(B, -1, -1))
        if self.no_embed_class:
            x = torch.cat(prefix + [x + pos_embed], dim=1)
        else:
            x = torch.cat(prefix + [x], dim=1) + pos_embed
        return self.pos_drop(x)


def _create(variant: str, pretrained: bool = False, **kwargs) -> StructVisionTransformer:
    out_indices = kwargs.pop('out_indices', 3)
    dynamic_sincos = kwargs.get('dynamic_img_size', False) and kwargs.get('pos_embed', 'learn') == 'sincos'
    return build_model_with_cfg(
        DynamicSincosVisionTransformer if dynamic_sincos else StructVisionTransformer,
        variant,
        pretrained,
        pretrained_filter_fn=checkpoint_filter_fn,
        feature_cfg=dict(out_indices=out_indices, feature_cls='getter'),
        **kwargs,
    )


_MIMETIC_PAPER = ('arXiv:2305.09828',)
_IMPULSE_PAPER = ('arXiv:2404.01139', 'arXiv:2505.19985')
_IMPULSE2025_PAPER = ('arXiv:2505.19985',)


# bases: fixed sin-cos PE with a class token (mimetic paper) or with average pooling and no class token (impulse paper)
_TOKEN_SINCOS = dict(pos_embed='sincos', class_token=True, global_pool='token')
_GAP_SINCOS = dict(pos_embed='sincos', class_token=False, global_pool='avg')
_TINY = dict(embed_dim=192, depth=12, num_heads=3)
_SMALL = dict(embed_dim=384, depth=12, num_heads=6)
_BASE = dict(embed_dim=768, depth=12, num_heads=12)

default_cfgs = generate_default_cfgs({
    'vit_tiny_patch2_32': cfg32(description='timm defaults (learned PE, class token): the plain baseline'),
    'vit_tiny_patch2_32_sincos': cfg32(description='class token + fixed sin-cos PE', paper_ids=_MIMETIC_PAPER),
    'vit_tiny_patch2_32_gap_sincos': cfg32(
        description='average pooling + fixed sin-cos PE', paper_ids=_IMPULSE_PAPER),
    'vit_tiny_patch2_32_mimetic': cfg32(description='mimetic init, class token + sin-cos', paper_ids=_MIMETIC_PAPER),
    'vit_small_patch2_32': cfg32(description='timm defaults (learned PE, class token): the plain baseline'),
    'vit_small_patch2_32_sincos': cfg32(description='class token + fixed sin-cos PE', paper_ids=_MIMETIC_PAPER),
    'vit_small_patch2_32_gap_sincos': cfg32(
        description='average pooling + fixed sin-cos PE', paper_ids=_IMPULSE_PAPER),
    'vit_small_patch2_32_mimetic': cfg32(description='mimetic init, class token + sin-cos', paper_ids=_MIMETIC_PAPER),
    'vit_tiny_patch16_224_mimetic': cfg224(
        description='mimetic init, class token + sin-cos', paper_ids=_MIMETIC_PAPER),
    'vit_small_patch16_224_mimetic': cfg224(
        description='mimetic init, class token + sin-cos', paper_ids=_MIMETIC_PAPER),
    'vit_base_patch16_224_mimetic': cfg224(
        description='mimetic init, class token + sin-cos', paper_ids=_MIMETIC_PAPER),
    'vit_tiny_patch2_32_impulse3': cfg32(description='3x3 impulse init, average pool + sin-cos', paper_ids=_IMPULSE_PAPER),
    'vit_tiny_patch2_32_impulse5': cfg32(description='5x5 impulse init, average pool + sin-cos', paper_ids=_IMPULSE_PAPER),
    'vit_small_patch2_32_impulse3': cfg32(
        description='3x3 impulse init, average pool + sin-cos', paper_ids=_IMPULSE_PAPER),
    'vit_small_patch2_32_impulse5': cfg32(
        description='5x5 impulse init, average pool + sin-cos', paper_ids=_IMPULSE_PAPER),
    'vit_tiny_patch16_224_impulse3': cfg224(
        description='3x3 impulse init, average pool + sin-cos', paper_ids=_IMPULSE_PAPER),
    'vit_small_patch16_224_impulse3': cfg224(
        description='3x3 impulse init, average pool + sin-cos', paper_ids=_IMPULSE_PAPER),
    'vit_base_patch16_224_impulse3': cfg224(
        description='3x3 impulse init (random offsets: 12 heads > 9), average pool + sin-cos',
        paper_ids=_IMPULSE_PAPER),
    'vit_tiny_patch16_224_impulse2025': cfg224(
        description='2025 closed-form impulse init, class token + learned PE (x18)', paper_ids=_IMPULSE2025_PAPER),
    'vit_small_patch16_224_impulse2025': cfg224(
        description='2025 closed-form impulse init, class token + learned PE (x18)', paper_ids=_IMPULSE2025_PAPER),
    'vit_base_patch16_224_impulse2025': cfg224(
        description='2025 closed-form impulse init, class token + learned PE (x18)', paper_ids=_IMPULSE2025_PAPER),
})


@register_model
def vit_tiny_patch2_32(pretrained: bool = False, **kwargs) -> StructVisionTransformer:
    """ ViT-Tiny/2 on 32x32 with timm's defaults (learned PE, class token): the plain baseline. """
    model_args = dict(img_size=32, patch_size=2, **_TINY)
    return _create('vit_tiny_patch2_32', pretrained=pretrained, **merge_args(model_args, kwargs))


@register_model
def vit_tiny_patch2_32_sincos(pretrained: bool = False, **kwargs) -> StructVisionTransformer:
    """ ViT-Tiny/2 on 32x32, class token + fixed sin-cos PE: the mimetic paper's base. """
    model_args = dict(img_size=32, patch_size=2, **_TINY, **_TOKEN_SINCOS)
    return _create('vit_tiny_patch2_32_sincos', pretrained=pretrained, **merge_args(model_args, kwargs))


@register_model
def vit_tiny_patch2_32_gap_sincos(pretrained: bool = False, **kwargs) -> StructVisionTransformer:
    """ ViT-Tiny/2 on 32x32, average pooling + fixed sin-cos PE, no class token: the structured-init paper's base. """
    model_args = dict(img_size=32, patch_size=2, **_TINY, **_GAP_SINCOS)
    return _create('vit_tiny_patch2_32_gap_sincos', pretrained=pretrained, **merge_args(model_args, kwargs))


@register_model
def vit_tiny_patch2_32_mimetic(pretrained: bool = False, **kwargs) -> StructVisionTransformer:
    """ ViT-Tiny/2 on 32x32 with mimetic init (Trockman & Kolter 2023), class token + sin-cos. """
    model_args = dict(img_size=32, patch_size=2, **_TINY, **_TOKEN_SINCOS, struct_init='mimetic')
    return _create('vit_tiny_patch2_32_mimetic', pretrained=pretrained, **merge_args(model_args, kwargs))


@register_model
def vit_small_patch2_32(pretrained: bool = False, **kwargs) -> StructVisionTransformer:
    """ ViT-Small/2 on 32x32 with timm's defaults (learned PE, class token): the plain baseline. """
    model_args = dict(img_size=32, patch_size=2, **_SMALL)
    return _create('vit_small_patch2_32', pretrained=pretrained, **merge_args(model_args, kwargs))


@register_model
def vit_small_patch2_32_sincos(pretrained: bool = False, **kwargs) -> StructVisionTransformer:
    """ ViT-Small/2 on 32x32, class token + fixed sin-cos PE: the mimetic paper's base. """
    model_args = dict(img_size=32, patch_size=2, **_SMALL, **_TOKEN_SINCOS)
    return _create('vit_small_patch2_32_sincos', pretrained=pretrained, **merge_args(model_args, kwargs))


@register_model
def vit_small_patch2_32_gap_sincos(pretrained: bool = False, **kwargs) -> StructVisionTransformer:
    """ ViT-Small/2 on 32x32, average pooling + fixed sin-cos PE, no class token: the structured-init paper's base. """
    model_args = dict(img_size=32, patch_size=2, **_SMALL, **_GAP_SINCOS)
    return _create('vit_small_patch2_32_gap_sincos', pretrained=pretrained, **merge_args(model_args, kwargs))


@register_model
def vit_small_patch2_32_mimetic(pretrained: bool = False, **kwargs) -> StructVisionTransformer:
    """ ViT-Small/2 on 32x32 with mimetic init (Trockman & Kolter 2023), class token + sin-cos. """
    model_args = dict(img_size=32, patch_size=2, **_SMALL, **_TOKEN_SINCOS, struct_init='mimetic')
    return _create('vit_small_patch2_32_mimetic', pretrained=pretrained, **merge_args(model_args, kwargs))


@register_model
def vit_tiny_patch16_224_mimetic(pretrained: bool = False, **kwargs) -> StructVisionTransformer:
    """ ViT-Tiny/16 on 224x224 with mimetic init (Trockman & Kolter 2023), class token + sin-cos. """
    model_args = dict(patch_size=16, **_TINY, **_TOKEN_SINCOS, struct_init='mimetic')
    return _create('vit_tiny_patch16_224_mimetic', pretrained=pretrained, **merge_args(model_args, kwargs))


@register_model
def vit_small_patch16_224_mimetic(pretrained: bool = False, **kwargs) -> StructVisionTransformer:
    """ ViT-Small/16 on 224x224 with mimetic init (Trockman & Kolter 2023), class token + sin-cos. """
    model_args = dict(patch_size=16, **_SMALL, **_TOKEN_SINCOS, struct_init='mimetic')
    return _create('vit_small_patch16_224_mimetic', pretrained=pretrained, **merge_args(model_args, kwargs))


@register_model
def vit_base_patch16_224_mimetic(pretrained: bool = False, **kwargs) -> StructVisionTransformer:
    """ ViT-Base/16 on 224x224 with mimetic init (Trockman & Kolter 2023), class token + sin-cos. """
    model_args = dict(patch_size=16, **_BASE, **_TOKEN_SINCOS, struct_init='mimetic')
    return _create('vit_base_patch16_224_mimetic', pretrained=pretrained, **merge_args(model_args, kwargs))


def _impulse(kernel_size: int, **kwargs) -> Dict[str, Any]:
    return dict(struct_init='impulse', struct_init_kwargs=dict(kernel_size=kernel_size, **kwargs))


@register_model
def vit_tiny_patch2_32_impulse3(pretrained: bool = False, **kwargs) -> StructVisionTransformer:
    """ ViT-Tiny/2 on 32x32 with 3x3 impulse init (Zheng et al. 2024), average pooling + sin-cos. """
    model_args = dict(img_size=32, patch_size=2, **_TINY, **_GAP_SINCOS, **_impulse(3))
    return _create('vit_tiny_patch2_32_impulse3', pretrained=pretrained, **merge_args(model_args, kwargs))


@register_model
def vit_tiny_patch2_32_impulse5(pretrained: bool = False, **kwargs) -> StructVisionTransformer:
    """ ViT-Tiny/2 on 32x32 with 5x5 impulse init (Zheng et al. 2024), average pooling + sin-cos. """
    model_args = dict(img_size=32, patch_size=2, **_TINY, **_GAP_SINCOS, **_impulse(5))
    return _create('vit_tiny_patch2_32_impulse5', pretrained=pretrained, **merge_args(model_args, kwargs))


@register_model
def vit_small_patch2_32_impulse3(pretrained: bool = False, **kwargs) -> StructVisionTransformer:
    """ ViT-Small/2 on 32x32 with 3x3 impulse init (Zheng et al. 2024), average pooling + sin-cos. """
    model_args = dict(img_size=32, patch_size=2, **_SMALL, **_GAP_SINCOS, **_impulse(3))
    return _create('vit_small_patch2_32_impulse3', pretrained=pretrained, **merge_args(model_args, kwargs))


@register_model
def vit_small_patch2_32_impulse5(pretrained: bool = False, **kwargs) -> StructVisionTransformer:
    """ ViT-Small/2 on 32x32 with 5x5 impulse init (Zheng et al. 2024), average pooling + sin-cos. """
    model_args = dict(img_size=32, patch_size=2, **_SMALL, **_GAP_SINCOS, **_impulse(5))
    return _create('vit_small_patch2_32_impulse5', pretrained=pretrained, **merge_args(model_args, kwargs))


@register_model
def vit_tiny_patch16_224_impulse3(pretrained: bool = False, **kwargs) -> StructVisionTransformer:
    """ ViT-Tiny/16 on 224x224 with 3x3 impulse init (Zheng et al. 2024), average pooling + sin-cos. """
    model_args = dict(patch_size=16, **_TINY, **_GAP_SINCOS, **_impulse(3))
    return _create('vit_tiny_patch16_224_impulse3', pretrained=pretrained, **merge_args(model_args, kwargs))


@register_model
def vit_small_patch16_224_impulse3(pretrained: bool = False, **kwargs) -> StructVisionTransformer:
    """ ViT-Small/16 on 224x224 with 3x3 impulse init (Zheng et al. 2024), average pooling + sin-cos. """
    model_args = dict(patch_size=16, **_SMALL, **_GAP_SINCOS, **_impulse(3))
    return _create('vit_small_patch16_224_impulse3', pretrained=pretrained, **merge_args(model_args, kwargs))


@register_model
def vit_base_patch16_224_impulse3(pretrained: bool = False, **kwargs) -> StructVisionTransformer:
    """ ViT-Base/16 on 224x224 with 3x3 impulse init (Zheng et al. 2024), average pooling + sin-cos.

    Its 12 heads outnumber the 9 offsets of a 3x3 window, so offsets are drawn with replacement ('random', the
    authors' own policy) instead of the 'distinct' default.
    """
    model_args = dict(patch_size=16, **_BASE, **_GAP_SINCOS, **_impulse(3, offsets='random'))
    return _create('vit_base_patch16_224_impulse3', pretrained=pretrained, **merge_args(model_args, kwargs))


@register_model
def vit_tiny_patch16_224_impulse2025(pretrained: bool = False, **kwargs) -> StructVisionTransformer:
    """ ViT-Tiny/16 on 224x224 as the 2025 structured-init paper trains it (Zheng et al., NeurIPS 2025): timm's
    learned position embedding (scaled by 18, kept by the model) and class token, closed-form impulse Q/K in the
    fixed offset order, mimetic V/proj. The paper's runs also keep PyTorch's default init for every other weight:
    `weight_init='reset'`. """
    model_args = dict(patch_size=16, **_TINY, struct_init='impulse2025')
    return _create('vit_tiny_patch16_224_impulse2025', pretrained=pretrained, **merge_args(model_args, kwargs))


@register_model
def vit_small_patch16_224_impulse2025(pretrained: bool = False, **kwargs) -> StructVisionTransformer:
    """ ViT-Small/16 on 224x224 with the 2025 closed-form impulse init (see vit_tiny_patch16_224_impulse2025). """
    model_args = dict(patch_size=16, **_SMALL, struct_init='impulse2025')
    return _create('vit_small_patch16_224_impulse2025', pretrained=pretrained, **merge_args(model_args, kwargs))


@register_model
def vit_base_patch16_224_impulse2025(pretrained: bool = False, **kwargs) -> StructVisionTransformer:
    """ ViT-Base/16 on 224x224 with the 2025 closed-form impulse init (see vit_tiny_patch16_224_impulse2025); the
    paper's ImageNet-1k model. Its 12 heads take the fixed 3x3 offset order cyclically (head i: entry i mod 9). """
    model_args = dict(patch_size=16, **_BASE, struct_init='impulse2025')
    return _create('vit_base_patch16_224_impulse2025', pretrained=pretrained, **merge_args(model_args, kwargs))
