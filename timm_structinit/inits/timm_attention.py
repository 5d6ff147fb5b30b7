""" timm's attention classes, each either read as an `AttentionLayout` or refused with what it computes instead.

Every class of timm 1.0.31 whose forward computes a softmax (or calls scaled_dot_product_attention), and the ones
named as attention that do not, is in one of the two tables below, by its qualified name: `READERS` builds the layout
of one module (its q, k, v rows, output columns, what sits between them, its position bias), `REFUSED` says in words
what the class computes that an init cannot write. A class defined outside timm (a user's own) is read when it has
the fused layout of timm's `Attention` (a `qkv` Linear(D, 3 A), a `proj` Linear(A, D_out) and `num_heads`), and taken
at its word: per-head softmax(q k^T / sqrt(d)) over all its tokens. The readers themselves are `timm_layouts`.

Attention-pooling heads (`AttentionPoolLatent`, `AttentionPool2d`, ...) are not token mixing: an init leaves them as
timm made them, and they are listed in `POOLING_HEADS` so that they neither count as attention nor refuse a model.
"""
from typing import Callable, Dict, Optional, Tuple

from torch import nn

from . import timm_layouts as read
from .layouts import AttentionLayout
from .timm_layouts import Refusal, fused_qkv_layout

__all__ = ['READERS', 'REFUSED', 'POOLING_HEADS', 'NOT_TOKEN_ATTENTION', 'kind_of', 'read_layout', 'is_timm_kind',
           'fused_qkv_layout']


def kind_of(module: nn.Module) -> str:
    """ The qualified name of the module's class, as the tables key it. """
    cls = type(module)
    return f'{cls.__module__}.{cls.__qualname__}'


def is_timm_kind(kind: str) -> bool:
    return kind.startswith('timm.')


READERS: Dict[str, Callable[[nn.Module], AttentionLayout]] = {
    'timm.layers.attention.Attention': read._vit_attention,
    'timm.layers.attention.AttentionRope': read._rope_attention,
    'timm.models.beit.Attention': read._beit_attention,
    'timm.models.eva.EvaAttention': read._eva_attention,
    'timm.models.vision_transformer_relpos.RelPosAttention': read._relpos_attention,
    'timm.models.vision_transformer_sam.Attention': read._sam_attention,
    'timm.models.swin_transformer.WindowAttention': read._swin_attention,
    'timm.models.swin_transformer_v2.WindowAttention': read._swinv2_attention,
    'timm.models.swin_transformer_v2_cr.WindowMultiHeadAttention': read._swinv2_attention,
    'timm.models.twins.LocallyGroupedAttn': read._local_grouped,
    'timm.models.twins.GlobalSubSampleAttn': read._q_kv,
    'timm.models.pvt_v2.Attention': read._q_kv,
    'timm.models.maxxvit.Attention2d': read._maxxvit_attention,
    'timm.models.maxxvit.AttentionCl': read._maxxvit_attention,
    'timm.models.mvitv2.MultiScaleAttention': read._mvitv2_attention,
    'timm.models.mvitv2.MultiScaleAttentionPoolFirst': read._mvitv2_pool_first,
    'timm.models.tiny_vit.Attention': read._per_head_interleaved,
    'timm.models.efficientformer.Attention': read._per_head_interleaved,
    'timm.models.levit.Attention': read._levit_attention,
    'timm.models.levit.AttentionDownsample': read._levit_downsample,
    'timm.models.nest.Attention': read._nest_attention,
    'timm.models.metaformer.Attention': read._metaformer_attention,
    'timm.models.fastvit.Attention': read._fastvit_attention,
    'timm.models.hiera.MaskUnitAttention': read._hiera_attention,
    'timm.models.hieradet_sam2.MultiScaleAttention': read._sam2_attention,
    'timm.models.tnt.Attention': read._tnt_attention,
    'timm.models.visformer.Attention': read._visformer_attention,
    'timm.models.crossvit.CrossAttention': read._cross_attention,
    'timm.models.cait.ClassAttn': read._class_attention,
    'timm.models.volo.ClassAttention': read._volo_class_attention,
    'timm.models.volo.Attention': read._plain_fused,
    'timm.models.convit.MHSA': read._plain_fused,
    'timm.models.davit.WindowAttention': read._plain_fused,
    'timm.models.nextvit.EfficientAttention': read._nextvit_attention,
    'timm.models.gcvit.WindowAttentionGlobal': read._gcvit_attention,
    'timm.layers.attention2d.Attention2d': read._attention2d,
}

_CHANNEL = "cross-covariance attention, whose maps are between channels, not tokens"
_NO_READER = read.NO_READER
REFUSED: Dict[str, str] = {
    'timm.models.xcit.XCA': _CHANNEL,
    'timm.models.edgenext.CrossCovarianceAttn': _CHANNEL,
    'timm.models.davit.ChannelAttention': "channel attention, whose maps are between channels, not tokens",
    'timm.models.davit.ChannelAttentionV2': "channel attention, whose maps are between channels, not tokens",
    'timm.models.cait.TalkingHeadAttn': "talking-heads attention, which mixes the heads' logits and maps, so no "
                                        "head's map is its own q k^T",
    'timm.models.efficientformer_v2.Attention2d': "talking-heads attention, which mixes the heads' logits and maps, "
                                                  "so no head's map is its own q k^T",
    'timm.models.efficientformer_v2.Attention2dDownsample': "attention whose queries come from a local convolution "
                                                            "plus pooling, not a per-token projection",
    'timm.models.coat.FactorAttnConvRelPosEnc': "factorized attention (softmax over the keys alone, no q k^T map)",
    'timm.models.convit.GPSA': "gated positional self-attention (GPSA), which mixes a learned positional map into "
                               "each head's map",
    'timm.models.volo.OutlookAttention': "outlook attention, whose maps are predicted from each token alone "
                                         "(no q k^T)",
    'timm.models.mobilevit.LinearSelfAttention': "separable linear attention (one context score per token, no "
                                                 "q k^T map)",
    'timm.models.swiftformer.EfficientAdditiveAttention': "additive attention (one global query, no q k^T map)",
    'timm.models.efficientvit_msra.CascadedGroupAttention': "cascaded group attention: each head's input adds the "
                                                            "previous head's output and its q passes a depthwise "
                                                            "convolution",
    'timm.models.efficientvit_mit.LiteMLA': "ReLU linear attention (no softmax map)",
    'timm.layers.attention2d.MultiQueryAttention2d': "multi-query attention: one key projection shared by every "
                                                     "head, so no head has a W_q W_k^T of its own",
    'timm.layers.attention2d.MultiQueryAttentionV2': "multi-query attention: one key projection shared by every "
                                                     "head, so no head has a W_q W_k^T of its own",
    'timm.layers.diff_attention.DiffAttention': "differential attention (the difference of two softmax maps)",
    'timm.layers.bottleneck_attn.BottleneckAttn': "bottleneck attention with no output projection (the heads' "
                                                  "output goes to the next convolution)",
    'timm.layers.halo_attn.HaloAttn': "halo attention with no output projection (the heads' output goes to the "
                                      "next convolution)",
    'timm.layers.lambda_layer.LambdaLayer': "a lambda layer (softmax over the keys alone, no q k^T map)",
    'timm.layers.non_local_attn.NonLocalAttn': "a non-local block (one map whose output passes a convolution and a "
                                               "BatchNorm)",
    'timm.layers.non_local_attn.BatNonLocalAttn': "a bilinear non-local block (no q k^T map per head)",
    'timm.models.lowformer.ConvAttention': "attention whose q, k, v come from a strided convolution of the map, not "
                                           "a per-token projection",
    'timm.models.cpubone.ConvAttention': "attention whose q, k, v come from a strided convolution of the map, not "
                                         "a per-token projection",
    'timm.models.csatv2.SpatialTransformerBlock': "a width-1 spatial attention (one scalar per token)",
    'timm.models.shvit.SHSA': f'{_NO_READER} (single-head attention over a split of the channels)',
    'timm.models.iformer.SHMA': f'{_NO_READER} (single-head attention with a sigmoid-gated value)',
    'timm.models.gemma4_vit.Gemma4Attention': f'{_NO_READER} (Gemma 4 attention: clippable projections, '
                                              f'normalized q, k, v, rotary embedding)',
    'timm.models.vision_transformer.ParallelScalingBlock': f'{_NO_READER} (q, k, v and the MLP in one input '
                                                           f'projection)',
    'timm.models.vision_transformer.DiffParallelScalingBlock': "differential attention (the difference of two "
                                                               "softmax maps)",
}

# modules named like attention, or computing a softmax, that are not attention between tokens: ignored (a model with
# only these has no attention), and named when `apply_init` says a model has none
NOT_TOKEN_ATTENTION: Dict[str, str] = {
    'timm.layers.global_context.GlobalContext': "global context pooling (one softmax over positions, no q k^T)",
    'timm.layers.selective_kernel.SelectiveKernelAttn': "selective-kernel attention (a softmax over branches, not "
                                                        "tokens)",
    'timm.layers.split_attn.SplitAttn': "split attention (a softmax over branches, not tokens)",
    'timm.models.nextvit.ConvAttention': "multi-head convolutional attention (a grouped convolution, no q k^T map)",
    'timm.models.csatv2.SpatialAttention': "a spatial gate (a sigmoid per position, no q k^T map)",
    'timm.models.efficientvim.HSMSSD': "a state-space token mixer (no q k^T map)",
}

# attention used as a pooling head (the classifier's input), which an init leaves as timm made it
POOLING_HEADS = {
    'timm.layers.attention_pool.AttentionPoolLatent', 'timm.layers.attention_pool.AttentionPoolPrr',
    'timm.layers.attention_pool2d.AttentionPool2d', 'timm.layers.attention_pool2d.RotAttentionPool2d',
    'timm.layers.other_pool.SimPool2d', 'timm.layers.other_pool.SimPool1d',
}


def read_layout(module: nn.Module) -> Tuple[Optional[AttentionLayout], Optional[str]]:
    """ (layout, None) for an attention an init can write, (None, why not) for one it cannot, (None, None) for a
    module that is not attention. """
    kind = kind_of(module)
    if kind in POOLING_HEADS or kind in NOT_TOKEN_ATTENTION:
        return None, None
    if kind in READERS:
        try:
            layout = READERS[kind](module)
        except Refusal as refusal:
            return None, str(refusal)
        layout.kind = kind
        return layout, None
    if kind in REFUSED:
        return None, REFUSED[kind]
    if is_timm_kind(kind):
        # a timm class of the fused form that the tables do not know (a newer timm): not taken at its word
        return None, (f'{_NO_READER} (a timm attention class newer than the tables of this package)'
                      if fused_qkv_layout(module) is not None else None)
    layout = fused_qkv_layout(module)
    if layout is not None:
        layout.kind = kind
    return layout, None
