""" How each of timm's attention classes lays out its projections: one small reader per layout, returning the
`AttentionLayout` of one module (which rows of which weight are each head's q, k and v, which columns of the output
projection take each head's output, what the model applies between them, its position bias), written from timm
1.0.31's forward code. `timm_attention` keys them by class.
"""
from typing import List, Optional, Tuple

import torch
from torch import nn

from .layouts import (AttentionLayout, OutputProjection, PositionBias, Projection, fused_rows, head_rows,
                      projection_of)

__all__ = ['fused_qkv_layout', 'Refusal', 'NO_READER']

NO_READER = 'an attention this package has no reader for yet'


class Refusal(ValueError):
    """ A class an init can write in some settings, refused in this one (the words say why). """


def _is_norm(module: Optional[nn.Module]) -> bool:
    return isinstance(module, nn.Module) and not isinstance(module, nn.Identity)


def _blocks(attn: nn.Module, qkv: nn.Module, proj: nn.Module, heads: int, qk_dim: int, v_dim: int,
            per_head: bool = False, out_order: str = 'head', **kwargs) -> AttentionLayout:
    """ A fused q/k/v weight ([q | k | v] blocks, or per head [q_j k_j v_j] with `per_head`) and an output projection
    taking the heads' outputs head-major (h d_v + j) or, `out_order='channel'`, channel-major (j h + h). """
    q_rows, k_rows, v_rows = fused_rows(heads, qk_dim, v_dim, per_head)
    linear, norm = projection_of(qkv)
    proj_linear, proj_norm = projection_of(proj)
    cols = head_rows(heads, v_dim) if out_order == 'head' else \
        torch.arange(heads)[:, None] + heads * torch.arange(v_dim)[None, :]
    return AttentionLayout(
        attn, heads, Projection(linear, q_rows, norm), Projection(linear, k_rows, norm), Projection(linear, v_rows, norm),
        OutputProjection(proj_linear, cols, proj_norm), **kwargs)


def _separate(attn: nn.Module, q: nn.Module, k: nn.Module, v: nn.Module, proj: nn.Module, heads: int,
              qk_dim: int, v_dim: int, k_start: int = 0, v_start: int = 0, **kwargs) -> AttentionLayout:
    """ q, k, v in their own weights (k and v may share one: `k_start`, `v_start` where each begins). """
    parts = [projection_of(m) for m in (q, k, v, proj)]
    return AttentionLayout(
        attn, heads, Projection(parts[0][0], head_rows(heads, qk_dim), parts[0][1]),
        Projection(parts[1][0], head_rows(heads, qk_dim, k_start), parts[1][1]),
        Projection(parts[2][0], head_rows(heads, v_dim, v_start), parts[2][1]),
        OutputProjection(parts[3][0], head_rows(heads, v_dim), parts[3][1]), **kwargs)


def _qk_norm_words(attn: nn.Module, what: str = 'q and k') -> Tuple[Tuple[str, ...], bool]:
    norms = [type(getattr(attn, n)).__name__ for n in ('q_norm', 'k_norm') if _is_norm(getattr(attn, n, None))]
    if norms:
        return (f'{norms[0]} on each head\'s {what}',), True
    return (), False


def _inner_words(attn: nn.Module) -> Tuple[str, ...]:
    words = []
    if _is_norm(getattr(attn, 'norm', None)):
        words.append(f"{type(attn.norm).__name__} on the heads' output before proj")
    if getattr(attn, 'gate', None) is not None:
        words.append("a sigmoid gate on the heads' output")
    return tuple(words)


def _split_biases(attn: nn.Module) -> List[Tuple[torch.Tensor, str]]:
    # biases kept beside a bias-free fused qkv (BEiT, EVA, Swin V2: q_bias, v_bias and a zero k_bias buffer)
    out = []
    for name, part in (('q_bias', 'qk'), ('k_bias', 'qk'), ('v_bias', 'vproj')):
        tensor = getattr(attn, name, None)
        if isinstance(tensor, torch.Tensor):
            out.append((tensor, part))
    return out


def _index_bias(owner: nn.Module, table: str, index: str, grid, prefix: int = 0, heads_first: bool = False,
                shared: bool = False) -> PositionBias:
    """ The bias table `owner.<table>` indexed by `owner.<index>` (its entry for each query-key pair). """
    size = prefix + grid[0] * grid[1]
    return PositionBias(getattr(owner, table), getattr(owner, index).reshape(size, size), tuple(grid), prefix,
                        heads_first, shared, owner, index)


def _rel_pos_module(rel_pos: Optional[nn.Module]) -> Tuple[Optional[PositionBias], Tuple[str, ...]]:
    """ The position bias of one of timm.layers' relative position modules: a table (RelPosBias) an impulse can be
    written into, or words for what computes it otherwise. """
    if rel_pos is None:
        return None, ()
    name = type(rel_pos).__name__
    if name == 'RelPosBias':
        return _index_bias(rel_pos, 'relative_position_bias_table', 'relative_position_index', rel_pos.window_size,
                           rel_pos.prefix_tokens), ('a relative position bias table (RelPosBias)',)
    if name == 'RelPosMlp':
        return None, ('a relative position bias computed by an MLP of log coordinates (RelPosMlp)',)
    return None, (f'a relative position bias ({name})',)


# --------------------------------------------------------------------------------------------------------------
# readers, one per layout

def _vit_attention(attn):  # timm.layers.attention.Attention: vit_*, deit_*, PiT, CrossViT, MobileViT, NaFlexViT, ...
    between, normalized = _qk_norm_words(attn)
    return _blocks(attn, attn.qkv, attn.proj, attn.num_heads, attn.head_dim, attn.head_dim,
                   between=between + _inner_words(attn), qk_normalized=normalized, whole_grid=True)


def _rope_attention(attn):  # timm.layers.attention.AttentionRope
    if attn.num_kv_heads != attn.num_heads:
        raise Refusal(f'grouped-query attention ({attn.num_heads} query heads share {attn.num_kv_heads} key '
                       f'projections), so no head has a W_q W_k^T of its own')
    between, normalized = _qk_norm_words(attn)
    between += ('a rotary embedding turning q and k by position',) + _inner_words(attn)
    hd = attn.head_dim
    if attn.qkv is not None:
        return _blocks(attn, attn.qkv, attn.proj, attn.num_heads, hd, hd, between=between, qk_normalized=normalized)
    return _separate(attn, attn.q_proj, attn.k_proj, attn.v_proj, attn.proj, attn.num_heads, hd, hd,
                     between=between, qk_normalized=normalized)


def _beit_attention(attn):
    heads = attn.num_heads
    head_dim = attn.qkv.out_features // (3 * heads)
    position = None
    if attn.relative_position_bias_table is not None:
        position = _index_bias(attn, 'relative_position_bias_table', 'relative_position_index', attn.window_size,
                               prefix=1)
    return _blocks(attn, attn.qkv, attn.proj, heads, head_dim, head_dim, split_biases=_split_biases(attn),
                   whole_grid=True, position=position)


def _eva_attention(attn):
    between, normalized = _qk_norm_words(attn)
    between += _inner_words(attn)
    hd = attn.head_dim
    if attn.qkv is not None:
        return _blocks(attn, attn.qkv, attn.proj, attn.num_heads, hd, hd, split_biases=_split_biases(attn),
                       between=between, qk_normalized=normalized, whole_grid=True)
    return _separate(attn, attn.q_proj, attn.k_proj, attn.v_proj, attn.proj, attn.num_heads, hd, hd,
                     between=between, qk_normalized=normalized, whole_grid=True)


def _relpos_attention(attn):  # vision_transformer_relpos.RelPosAttention
    between, normalized = _qk_norm_words(attn)
    position, words = _rel_pos_module(attn.rel_pos)
    return _blocks(attn, attn.qkv, attn.proj, attn.num_heads, attn.head_dim, attn.head_dim,
                   between=between + words, qk_normalized=normalized, whole_grid=True, position=position)


def _sam_attention(attn):  # vision_transformer_sam.Attention; the blocks window it (Block.window_size)
    between, normalized = _qk_norm_words(attn)
    if attn.use_rel_pos:
        between += ('a decomposed relative position term q . R (it depends on q)',)
    return _blocks(attn, attn.qkv, attn.proj, attn.num_heads, attn.head_dim, attn.head_dim,
                   between=between, qk_normalized=normalized)


def _swin_attention(attn):  # swin_transformer.WindowAttention
    heads = attn.num_heads
    head_dim = attn.qkv.out_features // (3 * heads)
    position = _index_bias(attn, 'relative_position_bias_table', 'relative_position_index', attn.window_size)
    return _blocks(attn, attn.qkv, attn.proj, heads, head_dim, head_dim, between=('windows',), position=position)


def _swinv2_attention(attn):  # swin_transformer_v2.WindowAttention and swin_transformer_v2_cr's
    heads = attn.num_heads
    head_dim = attn.qkv.out_features // (3 * heads)
    return _blocks(attn, attn.qkv, attn.proj, heads, head_dim, head_dim, split_biases=_split_biases(attn),
                   between=('cosine attention: q and k scaled to unit length, times a learned temperature',
                            'a relative position bias computed by an MLP', 'windows'), qk_normalized=True)


def _local_grouped(attn):  # twins.LocallyGroupedAttn
    hd = attn.dim // attn.num_heads
    return _blocks(attn, attn.qkv, attn.proj, attn.num_heads, hd, hd, between=('windows',))


def _q_kv(attn):  # twins.GlobalSubSampleAttn, pvt_v2.Attention: keys and values from reduced tokens
    hd = attn.dim // attn.num_heads
    words = ()
    if getattr(attn, 'sr', None) is not None:
        words = ('keys and values from a strided convolution of the map (spatial reduction)',)
    return _separate(attn, attn.q, attn.kv, attn.kv, attn.proj, attn.num_heads, hd, hd, k_start=0,
                     v_start=attn.num_heads * hd, between=words)


def _maxxvit_attention(attn):  # maxxvit.Attention2d (1x1 convs), AttentionCl (Linear)
    hd = attn.dim_head
    _, words = _rel_pos_module(attn.rel_pos)
    # the grid partitions gather tokens spread over the map, where an offset of the table is not a local filter:
    # the table is not offered to the impulse init
    words = tuple(f'{w} within block and grid partitions (a grid partition\'s neighbours lie H / G tokens apart on '
                  f'the map)' for w in words)
    return _blocks(attn, attn.qkv, attn.proj, attn.num_heads, hd, hd, per_head=attn.head_first,
                   between=('windows (block or grid partitions)',) + words)


def _mvitv2_attention(attn):  # mvitv2.MultiScaleAttention
    words = []
    if attn.pool_q is not None or attn.pool_k is not None:
        words.append('pooled q, k, v (a convolution or pooling per head)')
    if attn.norm_q is not None or attn.norm_k is not None:
        words.append(f'{type(attn.norm_k or attn.norm_q).__name__} on each head\'s pooled q, k and v')
    if attn.rel_pos_type == 'spatial':
        words.append('a decomposed relative position term q . R (it depends on q)')
    if attn.residual_pooling:
        words.append('the pooled q added to the heads\' output (residual pooling)')
    return _blocks(attn, attn.qkv, attn.proj, attn.num_heads, attn.head_dim, attn.head_dim, between=tuple(words),
                   qk_normalized=attn.norm_q is not None or attn.norm_k is not None)


def _mvitv2_pool_first(attn):  # mvitv2.MultiScaleAttentionPoolFirst
    hd = attn.head_dim
    return _separate(attn, attn.q, attn.k, attn.v, attn.proj, attn.num_heads, hd, hd,
                     between=('q, k, v projected from pooled tokens',))


def _bias_table(attn) -> Optional[PositionBias]:
    # LeViT's, TinyViT's and EfficientFormer's attention biases: (heads, offsets), indexed by |dy|, |dx|
    idx = getattr(attn, 'attention_bias_idxs', None)
    if idx is None or idx.dim() != 2 or idx.shape[0] != idx.shape[1]:
        return None
    resolution = getattr(attn, 'resolution', None)  # EfficientFormer keeps none: its grid is square
    if resolution is None:
        side = int(round(idx.shape[0] ** 0.5))
        resolution = (side, side)
    grid = tuple(resolution) if isinstance(resolution, (tuple, list)) else (resolution,) * 2
    if grid[0] * grid[1] != idx.shape[0]:
        return None
    return PositionBias(attn.attention_biases, idx, grid, 0, heads_first=True, owner=attn,
                        index_name='attention_bias_idxs')


def _per_head_interleaved(attn):  # tiny_vit.Attention, efficientformer.Attention: [q_j k_j v_j] per head
    words = ('attention biases per |dy|, |dx|',)
    if _is_norm(getattr(attn, 'norm', None)):
        words = ('a LayerNorm before qkv (inside the attention)',) + words
    return _blocks(attn, attn.qkv, attn.proj, attn.num_heads, attn.key_dim, attn.val_dim, per_head=True,
                   between=words, position=_bias_table(attn))


def _levit_attention(attn):  # levit.Attention: LinearNorm / ConvNorm projections, activation before proj
    act = type(attn.proj.act).__name__
    return _blocks(attn, attn.qkv, attn.proj.ln, attn.num_heads, attn.key_dim, attn.val_dim, per_head=True,
                   between=('BatchNorm after each projection (read folded, as in eval mode)',
                            f'{act} on the heads\' output before proj', 'attention biases per |dy|, |dx|'),
                   position=_bias_table(attn))


def _levit_downsample(attn):  # levit.AttentionDownsample: q from subsampled tokens, [k_j v_j] per head
    heads, kd, vd = attn.num_heads, attn.key_dim, attn.val_dim
    kv_linear, kv_norm = projection_of(attn.kv)
    q_linear, q_norm = projection_of(attn.q.ln)
    proj_linear, proj_norm = projection_of(attn.proj.ln)
    act = type(attn.proj.act).__name__
    return AttentionLayout(
        attn, heads, Projection(q_linear, head_rows(heads, kd), q_norm),
        Projection(kv_linear, head_rows(heads, kd, 0, kd + vd), kv_norm),
        Projection(kv_linear, head_rows(heads, vd, kd, kd + vd), kv_norm),
        OutputProjection(proj_linear, head_rows(heads, vd), proj_norm),
        between=('queries from subsampled tokens', 'BatchNorm after each projection (read folded, as in eval mode)',
                 f'{act} on the heads\' output before proj', 'attention biases per |dy|, |dx|'))


def _nest_attention(attn):  # nest.Attention: attention within blocks; heads' outputs channel-major
    hd = attn.qkv.in_features // attn.num_heads
    return _blocks(attn, attn.qkv, attn.proj, attn.num_heads, hd, hd, out_order='channel',
                   between=('attention within each image block',))


def _metaformer_attention(attn):  # metaformer.Attention (CAFormer)
    return _blocks(attn, attn.qkv, attn.proj, attn.num_heads, attn.head_dim, attn.head_dim, whole_grid=True)


def _fastvit_attention(attn):
    return _blocks(attn, attn.qkv, attn.proj, attn.num_heads, attn.head_dim, attn.head_dim, whole_grid=True)


def _hiera_attention(attn):  # hiera.MaskUnitAttention
    words = ('windows (mask units)',) if attn.use_mask_unit_attn else ()
    if attn.q_stride > 1:
        words += ('max-pooled queries',)
    return _blocks(attn, attn.qkv, attn.proj, attn.heads, attn.head_dim, attn.head_dim, between=words)


def _sam2_attention(attn):  # hieradet_sam2.MultiScaleAttention
    hd = attn.dim_out // attn.num_heads
    words = ('max-pooled queries',) if attn.q_pool is not None else ()
    return _blocks(attn, attn.qkv, attn.proj, attn.num_heads, hd, hd, between=words)


def _tnt_attention(attn):  # tnt.Attention: a fused qk weight and its own v
    heads = attn.num_heads
    qk_linear = projection_of(attn.qk)[0]
    v_dim = attn.v.out_features // heads
    return AttentionLayout(
        attn, heads, Projection(qk_linear, head_rows(heads, attn.head_dim)),
        Projection(qk_linear, head_rows(heads, attn.head_dim, heads * attn.head_dim)),
        Projection(projection_of(attn.v)[0], head_rows(heads, v_dim)),
        OutputProjection(projection_of(attn.proj)[0], head_rows(heads, v_dim)), whole_grid=True)


def _visformer_attention(attn):  # visformer.Attention: 1x1 convolutions
    return _blocks(attn, attn.qkv, attn.proj, attn.num_heads, attn.head_dim, attn.head_dim)


def _cross_attention(attn):  # crossvit.CrossAttention: the class token's query against every token
    hd = attn.wq.out_features // attn.num_heads
    return _separate(attn, attn.wq, attn.wk, attn.wv, attn.proj, attn.num_heads, hd, hd,
                     between=("the class token's query only (cross-attention between branches)",))


def _class_attention(attn):  # cait.ClassAttn (also in XCiT)
    hd = attn.q.out_features // attn.num_heads
    return _separate(attn, attn.q, attn.k, attn.v, attn.proj, attn.num_heads, hd, hd,
                     between=("the class token's query only",))


def _volo_class_attention(attn):
    hd = attn.head_dim
    return _separate(attn, attn.q, attn.kv, attn.kv, attn.proj, attn.num_heads, hd, hd,
                     v_start=attn.num_heads * hd, between=("the class token's query only",))


def _plain_fused(attn):  # volo.Attention, convit.MHSA, davit.WindowAttention: qkv Linear(D, 3 D), proj
    hd = attn.qkv.out_features // (3 * attn.num_heads)
    return _blocks(attn, attn.qkv, attn.proj, attn.num_heads, hd, hd)


def _nextvit_attention(attn):  # nextvit.EfficientAttention
    words = ('keys and values from average-pooled, BatchNormed tokens',) if attn.sr is not None else ()
    return _separate(attn, attn.q, attn.k, attn.v, attn.proj, attn.num_heads, attn.head_dim, attn.head_dim,
                     between=words)


def _gcvit_attention(attn):  # gcvit.WindowAttentionGlobal
    if attn.use_global:
        raise Refusal("global query attention: the queries of every other block are generated from the whole "
                       "feature map by a convolution stack, not projected from the token")
    hd = attn.head_dim
    position, _ = _rel_pos_module(attn.rel_pos)
    return _blocks(attn, attn.qkv, attn.proj, attn.num_heads, hd, hd, between=('windows',), position=position)


def _attention2d(attn):  # timm.layers.attention2d.Attention2d (MobileNetV4 hybrids): 1x1 convolutions
    hd = attn.dim_head
    return _blocks(attn, attn.qkv, attn.proj, attn.num_heads, hd, hd, per_head=attn.head_first)


def fused_qkv_layout(module: nn.Module) -> Optional[AttentionLayout]:
    """ The layout of a module of timm's fused form (a `qkv` Linear(D, 3 A), a `proj` Linear(A, D_out) and
    `num_heads` dividing A), or None. """
    qkv, proj, heads = getattr(module, 'qkv', None), getattr(module, 'proj', None), getattr(module, 'num_heads', None)
    if not (isinstance(qkv, nn.Linear) and isinstance(proj, nn.Linear) and isinstance(heads, int) and heads > 0):
        return None
    if qkv.out_features % 3 or proj.in_features != qkv.out_features // 3 or proj.in_features % heads:
        return None
    hd = proj.in_features // heads
    between, normalized = _qk_norm_words(module)
    return _blocks(module, qkv, proj, heads, hd, hd, split_biases=_split_biases(module),
                   between=between + _inner_words(module), qk_normalized=normalized, whole_grid=True)
