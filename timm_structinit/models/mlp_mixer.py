""" MLP-Mixer at CIFAR scale, plain and with the impulse (token shift) init.

timm's `MlpMixer` (Tolstikhin et al. 2021, "MLP-Mixer: An all-MLP Architecture for Vision",
https://arxiv.org/abs/2105.01601) with the `struct_init` arguments of `StructInitArgs`: the impulse init makes each
block's token mixing a random shift of the patch grid (`timm_structinit.inits.mixer`). The weights load strictly
into timm's own `MlpMixer` of the same geometry.
"""
from typing import Any, Dict, Optional

from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from timm.models.mlp_mixer import MlpMixer, checkpoint_filter_fn

from ..inits import reset_parameters_
from .model_args import check_patch_fits, check_sizes
from .struct_init_args import StructInitArgs
from .variant_config import cfg32, merge_args

__all__ = ['StructMlpMixer']


class StructMlpMixer(StructInitArgs, MlpMixer):
    """ timm MlpMixer + structured init (`struct_init`, `struct_init_kwargs`, `struct_init_seed`).

    Also takes `weight_init` as timm's ViT and Swin do (timm's Mixer has no such argument): '' timm's Mixer init,
    'reset' PyTorch's default init for every layer, 'skip' no init (neither timm's nor the structured one).
    """

    def __init__(self, *args, weight_init: str = '', struct_init: Optional[str] = None,
                 struct_init_kwargs: Optional[Dict[str, Any]] = None, struct_init_seed: Optional[int] = None,
                 **kwargs) -> None:
        name = 'StructMlpMixer'
        check_sizes(name, embed_dim=kwargs.get('embed_dim', 512), num_blocks=kwargs.get('num_blocks', 8),
                    in_chans=kwargs.get('in_chans', 3), img_size=kwargs.get('img_size', 224),
                    patch_size=kwargs.get('patch_size', 16))
        check_patch_fits(name, kwargs.get('img_size', 224), kwargs.get('patch_size', 16))
        self._set_struct_init('mixer', struct_init, struct_init_kwargs, struct_init_seed, 'mixer_s4_32_impulse3',
                              weight_init, weight_init_modes=('', 'reset', 'skip'))
        # as in timm's ViT: 'skip' builds without init and leaves later init_weights() calls at 'reset'
        self.weight_init_mode = 'reset' if weight_init == 'skip' else weight_init
        self._building = weight_init  # MlpMixer.__init__ calls init_weights once, at the end
        super().__init__(*args, **kwargs)
        self._building = None
        self._struct_init_built()

    def init_weights(self, nlhb: bool = False) -> None:
        building, self._building = getattr(self, '_building', None), None
        if building == 'skip':
            return
        if self.weight_init_mode == 'reset':
            if building is None:  # the layers were just built at PyTorch's defaults: no second draw then
                reset_parameters_(self)
        else:
            super().init_weights(nlhb=nlhb)
        self._apply_struct_init()


def _create(variant: str, pretrained: bool = False, **kwargs) -> StructMlpMixer:
    out_indices = kwargs.pop('out_indices', 3)
    return build_model_with_cfg(
        StructMlpMixer, variant, pretrained,
        pretrained_filter_fn=checkpoint_filter_fn,
        feature_cfg=dict(out_indices=out_indices, feature_cls='getter'),
        **kwargs)


default_cfgs = generate_default_cfgs({
    'mixer_s4_32': cfg32(
        description="Mixer-S/4 on 32x32, timm's init: the plain baseline", first_conv='stem.proj',
        paper_ids=('arXiv:2105.01601',)),
    'mixer_s4_32_impulse3': cfg32(
        description='token mixing of each block a random 3x3 impulse (a shift of the patch grid)',
        first_conv='stem.proj', paper_ids=('arXiv:2404.01139',)),
})

# Mixer-S on 32x32 with 4x4 patches: an 8x8 grid of 64 tokens, 256 token-mixing units (2 x 64: an exact shift)
_SMALL32 = dict(img_size=32, patch_size=4, num_blocks=8, embed_dim=512, mlp_ratio=(0.5, 4.0))


@register_model
def mixer_s4_32(pretrained: bool = False, **kwargs) -> StructMlpMixer:
    """ Mixer-S/4 on 32x32, timm's init: the plain baseline. """
    return _create('mixer_s4_32', pretrained=pretrained, **merge_args(_SMALL32, kwargs))


@register_model
def mixer_s4_32_impulse3(pretrained: bool = False, **kwargs) -> StructMlpMixer:
    """ Mixer-S/4 on 32x32, each block's token mixing a random 3x3 impulse: a shift of the patch grid. """
    model_args = dict(_SMALL32, struct_init='impulse', struct_init_kwargs=dict(kernel_size=3))
    return _create('mixer_s4_32_impulse3', pretrained=pretrained, **merge_args(model_args, kwargs))
