""" Which models an init can write, checked before it writes anything: the kinds of attention the ViT path supports,
weights that belong to more than one place of the model, and weights computed from others.

The ViT path (`heads`) reads and writes any module with a fused qkv `Linear(D, 3D)`, a `proj` `Linear(D, D)` and
`num_heads`. Several timm families have such a module that does not compute a head's map as softmax(q k^T / sqrt(d))
over the tokens, or leave other attention layers beside it, so the init's record would claim a structure the model
does not have. timm's attention classes are therefore taken by name: those below are supported (docs/inits.md lists
their families), every other one of timm's is refused with what it computes instead. A class defined outside timm (a
user's own) is taken at its word: the fused-qkv layout and per-head softmax attention over all tokens.
"""
from typing import Dict, Iterable, List, Optional

import torch
from torch import nn

__all__ = ['ATTENTION_KINDS', 'attention_kind', 'check_attention_kinds', 'inner_norm', 'refuse_shared_weights',
           'refuse_derived_weights']

# timm's attention classes the ViT path supports, with the families that use them: each computes, per head,
# softmax(q k^T / sqrt(d) [+ a relative position bias]) v over all tokens, then proj
ATTENTION_KINDS: Dict[str, str] = {
    'timm.layers.attention.Attention': 'VisionTransformer (vit_*, deit_*, deit3_*, flexivit_*, ViT hybrids)',
    'timm.models.vision_transformer.Attention': 'VisionTransformer (vit_*, deit_*, flexivit_*)',
    'timm.models.beit.Attention': 'BEiT (beit_*, beitv2_*)',
    'timm.models.eva.EvaAttention': 'EVA (eva_*, eva02_*)',
    'timm.layers.attention.AttentionRope': 'rotary ViTs (vit_*_rope_*)',
    'timm.models.vision_transformer_relpos.RelPosAttention': 'ViT with relative position (vit_relpos_*, vit_srelpos_*)',
    'timm.models.vision_transformer_sam.Attention': 'SAM ViT (samvit_*)',
}
# what timm's other fused-qkv attention classes compute instead
_REFUSED: Dict[str, str] = {
    'timm.models.xcit.XCA': "cross-covariance attention, whose maps are between channels, not tokens",
    'timm.models.edgenext.CrossCovarianceAttn': "cross-covariance attention, whose maps are between channels, not "
                                                "tokens",
    'timm.models.davit.ChannelAttention': "channel attention, whose maps are between channels, not tokens",
    'timm.models.cait.TalkingHeadAttn': "talking-heads attention, which mixes the heads' logits and maps, so no "
                                        "head's map is its own q k^T",
    'timm.models.coat.FactorAttnConvRelPosEnc': "factorized attention (softmax over the keys alone, no q k^T map)",
    'timm.models.convit.MHSA': "in the later blocks only: the first ones are gated positional self-attention "
                               "(GPSA), which an init cannot write",
    'timm.models.volo.Attention': "in the later blocks only: the first stage is outlook attention, which an init "
                                  "cannot write",
}


def attention_kind(module: nn.Module) -> str:
    """ The qualified name of the module's class, as `ATTENTION_KINDS` keys it. """
    cls = type(module)
    return f'{cls.__module__}.{cls.__qualname__}'


def check_attention_kinds(model: nn.Module, attns: List[nn.Module], init: str) -> None:
    """ ValueError, before any work, when an attention module of `model` is one of timm's that the ViT path does not
    support. """
    for attn in attns:
        kind = attention_kind(attn)
        if kind.startswith('timm.') and kind not in ATTENTION_KINDS:
            why = _REFUSED.get(kind, 'not an attention whose per-head maps an init can write')
            supported = '; '.join(sorted(set(ATTENTION_KINDS.values())))
            raise ValueError(f'struct_init {init!r} does not fit {type(model).__name__}: its attention ({kind}) '
                             f'is {why}; supported through the ViT path: {supported}; Swin (swin_*) and MLP-Mixer '
                             f'(mixer_*) have their own')


def inner_norm(attns: List[nn.Module]) -> Optional[str]:
    """ The class of a norm some attention applies to the heads' output before proj (timm's scale_attn_norm, EVA's
    scale_attn_inner), which a written V/proj product does not survive; None without one. """
    norms = [getattr(a, 'norm', None) for a in attns]
    return next((type(n).__name__ for n in norms if isinstance(n, nn.Module) and not isinstance(n, nn.Identity)), None)


def _key(tensor: torch.Tensor):
    # one tensor under two names (tied modules or parameters), or two tensors on one memory
    if tensor.is_meta or not tensor.numel():
        return 'id', id(tensor)
    return 'ptr', tensor.data_ptr()


def refuse_shared_weights(model: nn.Module, written: Dict[str, Iterable[torch.Tensor]]) -> None:
    """ ValueError, before any work, when a tensor an init writes (`written`: the tensors of each written module, by
    the module's name) belongs to more than one place of the model: the init writes each layer as its own, so the
    later layer's values would overwrite the earlier one's while the record still lists both. """
    names: Dict[tuple, List[str]] = {}
    for name, tensor in [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]:
        names.setdefault(_key(tensor), []).append(name)
    for module_name, tensors in written.items():
        for tensor in tensors:
            places = names.get(_key(tensor), [])
            if len(places) > 1:
                raise ValueError(
                    f'{places[0]} and {places[1]} of {type(model).__name__} are one tensor (weights shared between '
                    f'modules, read by {module_name}): an init writes each layer\'s weights as its own, so one layer '
                    f'would overwrite the other\'s; untie them first (give each module its own copy), or apply the '
                    f'init before tying them')


def refuse_derived_weights(model: nn.Module, scopes: List[nn.Module]) -> None:
    """ An init writes weights in place; a weight computed from others (torch.nn.utils.parametrize, e.g.
    `parametrizations.weight_norm`, or the older `weight_norm` / `spectral_norm` hooks) would be written and then
    recomputed from its sources, leaving a record that says the init is there when it is not. """
    from torch.nn.utils import parametrize
    names = {id(m): n for n, m in model.named_modules()}
    for scope in scopes:
        for module in scope.modules():
            hooks = [type(h).__name__ for h in module._forward_pre_hooks.values()
                     if type(h).__name__ in ('WeightNorm', 'SpectralNorm')]
            if parametrize.is_parametrized(module) or hooks:
                how = hooks[0] if hooks else 'a parametrization (torch.nn.utils.parametrize)'
                raise ValueError(f'{names.get(id(module)) or type(module).__name__} of {type(model).__name__} has its '
                                 f'weight computed by {how}: an init cannot write it; apply the init before adding the '
                                 f'parametrization, or remove it first (parametrize.remove_parametrizations)')
