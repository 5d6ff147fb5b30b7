""" timm's zoo, one small build per family, and what each init does to it: holds in the model's own step-0 forward, or
is refused in one line with the model untouched. Shared by tests/test_zoo.py and the docs' table:

    python tests/zoo.py --write docs/zoo.md

The families are timm's model modules (`timm.list_models()`, grouped by the module that registers each model), so a
new timm release's families show up: `test_zoo.py` fails on a family this table does not list. Everything here reads
the models with its own code, written from timm's source, not the package's: the per-head products W_q W_k^T and
W_v W_proj from the weights (`attention_weights`), and the attention maps from the model's forward pass (timm's
`attn_drop` input with `fused_attn` off, on position alone: the patch embedding's output replaced by zeros).
"""
import argparse
import sys
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch
from torch import nn

# ------------------------------------------------------------------------------------------------------------------
# one small build per family with attention: (model, kwargs, slow). The fast ones cover each kind of outcome (mimetic
# on a ViT and on a hierarchical model, impulse on a learned table, on a bias table, on Swin and on a Mixer, refusals
# of rotary Q/K and of channel attention); every build runs in the whole suite.

SWIN = dict(img_size=32, patch_size=2, window_size=4, embed_dim=24, depths=(2, 2), num_heads=(3, 6))
VIT = dict(depth=2, img_size=64)
ZOO: Dict[str, Optional[List[Tuple[str, dict, bool]]]] = {
    'beit': [('beit_base_patch16_224', dict(depth=2, embed_dim=64, num_heads=2, img_size=64), False)],
    'byoanet': [('botnet26t_256', dict(img_size=64), True)],
    'byobnet': [('bat_resnext26ts', dict(), True)],
    'cait': [('cait_xxs24_224', dict(depth=1, depth_token_only=1, img_size=32), True)],
    'coat': [('coat_lite_tiny', dict(), True)],
    'convit': [('convit_tiny', dict(depth=2, local_up_to_layer=1, img_size=32), True)],
    'cpubone': [('cpubone_b0_bfrobust', dict(), True)],
    'crossvit': [('crossvit_tiny_240', dict(depth=[[1, 1, 0]]), True)],
    'csatv2': [('csatv2', dict(), True)],
    'davit': [('davit_tiny', dict(depths=(1, 1, 1, 1)), True)],
    'deepseek_vit': [('deepseek_vit_412m', dict(depth=1, embed_dim=64, num_heads=2, img_size=64), True)],
    'deit': [('deit_tiny_patch16_224', VIT, False)],
    'edgenext': [('edgenext_xx_small', dict(), True)],
    'efficientformer': [('efficientformer_l1', dict(depths=(1, 1, 1, 1)), True)],
    'efficientformer_v2': [('efficientformerv2_s0', dict(), True)],
    'efficientvim': [('efficientvim_m1', dict(), True)],
    'efficientvit_mit': [('efficientvit_b0', dict(), True)],
    'efficientvit_msra': [('efficientvit_m0', dict(), True)],
    'eva': [('eva02_tiny_patch14_224', dict(depth=2, img_size=56), False),
            ('eva_giant_patch14_224', dict(depth=2, embed_dim=64, num_heads=2, img_size=56), True)],
    'fastvit': [('fastvit_sa12', dict(layers=(1, 1, 1, 1), embed_dims=(16, 32, 64, 128)), True)],
    'gcvit': [('gcvit_xxtiny', dict(), True)],
    'gemma4_vit': [('gemma4_vit_167m', dict(depth=1), True)],
    'hiera': [('hiera_tiny_224', dict(stages=(1, 1, 1, 1), embed_dim=32, img_size=64), True)],
    'hieradet_sam2': [('sam2_hiera_tiny', dict(stages=(1, 1, 1, 1), global_att_blocks=(2,), embed_dim=32), True)],
    'iformer': [('iformer_t', dict(), True)],
    'levit': [('levit_128s', dict(img_size=64, depth=(1, 1, 1)), True)],
    'lowformer': [('lowformer_b0', dict(), True)],
    'maxxvit': [('maxvit_pico_rw_256', dict(img_size=64), True)],
    'metaformer': [('caformer_s18', dict(), True)],
    'mlp_mixer': [('mixer_s16_224', dict(img_size=64), False)],
    'mobilenetv3': [('mobilenetv4_hybrid_medium', dict(), True)],
    'mobilenetv5': [('mobilenetv5_base', dict(), True)],
    'mobilevit': [('mobilevit_xxs', dict(), True)],
    'mvitv2': [('mvitv2_tiny', dict(), True)],
    'naflexvit': [('naflexvit_base_patch16_gap', dict(depth=1, embed_dim=64, num_heads=2), True)],
    'nest': [('nest_tiny', dict(img_size=64), True)],
    'nextvit': [('nextvit_small', dict(depths=(1, 1, 5, 1)), True)],
    'pit': [('pit_ti_224', dict(depth=(1, 1, 1)), False)],
    'pvt_v2': [('pvt_v2_b0', dict(depths=(1, 1, 1, 1)), True)],
    'qwen3_vit': [('qwen3_vit_88m', dict(depth=1, embed_dim=64, num_heads=2, img_size=64), True)],
    'shvit': [('shvit_s1', dict(), True)],
    'swiftformer': [('swiftformer_xs', dict(), True)],
    'swin_transformer': [('swin_tiny_patch4_window7_224', SWIN, False)],
    'swin_transformer_v2': [('swinv2_tiny_window8_256', dict(SWIN, img_size=64, patch_size=4), True)],
    'swin_transformer_v2_cr': [('swinv2_cr_tiny_224', dict(img_size=64, window_size=4, embed_dim=24,
                                                           depths=(2, 2), num_heads=(3, 6)), True)],
    'tiny_vit': [('tiny_vit_5m_224', dict(depths=(1, 1, 1, 1)), True)],
    'tnt': [('tnt_s_patch16_224', dict(depth=1, img_size=64), True)],
    'twins': [('twins_svt_small', dict(depths=(1, 1, 1, 1), img_size=64, embed_dims=(32, 64, 96, 128),
                                    num_heads=(1, 2, 3, 4)), False)],
    'visformer': [('visformer_tiny', dict(depth=(1, 1, 1)), True)],
    'vision_transformer': [('vit_tiny_patch16_224', VIT, False)],
    'vision_transformer_hybrid': [('vit_tiny_r_s16_p8_224', dict(depth=2, img_size=128), True)],
    'vision_transformer_relpos': [
        ('vit_relpos_small_patch16_224', dict(depth=2, embed_dim=64, num_heads=2, img_size=64), True),
        ('vit_relpos_small_patch16_224', dict(depth=2, embed_dim=64, num_heads=2, img_size=64,
                                              rel_pos_type='bias'), False)],
    'vision_transformer_sam': [('samvit_base_patch16', dict(depth=2, embed_dim=64, num_heads=2, img_size=64,
                                                            window_size=2, global_attn_indexes=(1,)), True)],
    'vitamin': [('vitamin_small_224', dict(depth=2, img_size=64), True)],
    'volo': [('volo_d1_224', dict(img_size=64), True)],
    'xcit': [('xcit_nano_12_p16_224', dict(depth=1, img_size=32), False)],
}
# families whose models have no token attention (convolutional, MLP or state-space networks): their first model,
# built on the meta device, must have none
NO_ATTENTION = [
    'convmixer', 'convnext', 'cspnet', 'cspnext', 'densenet', 'dla', 'dpn', 'efficientnet', 'fasternet', 'focalnet',
    'ghostnet', 'hardcorenas', 'hgnet', 'hrnet', 'inception_next', 'inception_resnet_v2', 'inception_v3',
    'inception_v4', 'lcnetv2', 'mambaout', 'nasnet', 'nfnet', 'pnasnet', 'rdnet', 'regnet', 'repghost', 'repvit',
    'res2net', 'resnest', 'resnet', 'resnetv2', 'rexnet', 'selecsls', 'senet', 'sequencer', 'sknet', 'starnet',
    'tresnet', 'vgg', 'vovnet', 'xception', 'xception_aligned',
]
INITS = ('mimetic', 'impulse', 'impulse2025')


def timm_families() -> Dict[str, List[str]]:
    """ timm's model names by the module that registers them. """
    import timm
    from timm.models._registry import _model_to_module
    out = defaultdict(list)
    for name in timm.list_models():
        out[_model_to_module[name]].append(name)
    return dict(out)


# ------------------------------------------------------------------------------------------------------------------
# the test's own reading of each attention's weights (from timm's forward code)

def _kind(m: nn.Module) -> str:
    return f'{type(m).__module__}.{type(m).__qualname__}'


def _w(m: nn.Module) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """ (out, in) float64 weight of a Linear / 1x1 conv, or a linear + BatchNorm pair folded as in eval mode. """
    if hasattr(m, 'linear') and hasattr(m, 'bn'):
        bn = m.bn
        scale = bn.weight.double() / (bn.running_var.double() + bn.eps).sqrt()
        return m.linear.weight.detach().double().flatten(1) * scale[:, None].detach(), None
    return m.weight.detach().double().flatten(1), None


def _heads_of(w: torch.Tensor, heads: int, width: int, start: int = 0, stride: Optional[int] = None):
    stride = width if stride is None else stride
    return torch.stack([w[start + h * stride: start + h * stride + width] for h in range(heads)]).transpose(1, 2)


def attention_weights(m: nn.Module):
    """ (W_q, W_k (heads, D, k), W_v (D, heads d_v), W_proj (heads d_v, D_out)) in math form, float64, read from
    the module's weights as its forward uses them; None for a module this reading does not know. """
    kind = _kind(m).split('.', 1)[-1]
    heads = getattr(m, 'num_heads', getattr(m, 'heads', None))

    def blocks(qkv, proj, hd, vd=None, per_head=False, channel_major=False):
        w, vd = _w(qkv)[0], vd or hd
        if per_head:
            step = 2 * hd + vd
            q, k, v = (_heads_of(w, heads, hd, 0, step), _heads_of(w, heads, hd, hd, step),
                       _heads_of(w, heads, vd, 2 * hd, step))
        else:
            q, k = _heads_of(w, heads, hd), _heads_of(w, heads, hd, heads * hd)
            v = _heads_of(w, heads, vd, 2 * heads * hd)
        p = _w(proj)[0].T  # (inner, out)
        if channel_major:  # input column j * heads + h takes head h's output j
            p = p.view(vd, heads, -1).transpose(0, 1).reshape(heads * vd, -1)
        return q, k, v.transpose(0, 1).reshape(v.shape[1], -1), p

    def separate(q, k, v, proj, hd, k_start=0, v_start=0):
        wq, wk, wv = _w(q)[0], _w(k)[0], _w(v)[0]
        vv = _heads_of(wv, heads, hd, v_start)
        return (_heads_of(wq, heads, hd), _heads_of(wk, heads, hd, k_start),
                vv.transpose(0, 1).reshape(vv.shape[1], -1),
                _w(proj)[0].T)

    if kind in ('layers.attention.Attention', 'models.vision_transformer_relpos.RelPosAttention',
                'models.vision_transformer_sam.Attention', 'models.metaformer.Attention', 'models.fastvit.Attention',
                'models.mvitv2.MultiScaleAttention'):
        return blocks(m.qkv, m.proj, m.head_dim)
    if kind == 'layers.attention.AttentionRope':
        if m.qkv is not None:
            return blocks(m.qkv, m.proj, m.head_dim)
        return separate(m.q_proj, m.k_proj, m.v_proj, m.proj, m.head_dim)
    if kind in ('models.beit.Attention', 'models.swin_transformer.WindowAttention',
                'models.swin_transformer_v2.WindowAttention', 'models.swin_transformer_v2_cr.WindowMultiHeadAttention',
                'models.visformer.Attention', 'models.twins.LocallyGroupedAttn',
                'models.hieradet_sam2.MultiScaleAttention', 'models.hiera.MaskUnitAttention'):
        return blocks(m.qkv, m.proj, _w(m.qkv)[0].shape[0] // (3 * heads))
    if kind == 'models.eva.EvaAttention':
        if m.qkv is not None:
            return blocks(m.qkv, m.proj, m.head_dim)
        return separate(m.q_proj, m.k_proj, m.v_proj, m.proj, m.head_dim)
    if kind == 'models.nest.Attention':
        return blocks(m.qkv, m.proj, m.qkv.in_features // heads, channel_major=True)
    if kind in ('models.maxxvit.Attention2d', 'models.maxxvit.AttentionCl'):
        return blocks(m.qkv, m.proj, m.dim_head, per_head=m.head_first)
    if kind in ('models.tiny_vit.Attention', 'models.efficientformer.Attention'):
        return blocks(m.qkv, m.proj, m.key_dim, m.val_dim, per_head=True)
    if kind == 'models.levit.Attention':
        return blocks(m.qkv, m.proj.ln, m.key_dim, m.val_dim, per_head=True)
    if kind == 'models.levit.AttentionDownsample':
        kv, kd, vd = _w(m.kv)[0], m.key_dim, m.val_dim
        v = _heads_of(kv, heads, vd, kd, kd + vd)
        return (_heads_of(_w(m.q.ln)[0], heads, kd), _heads_of(kv, heads, kd, 0, kd + vd),
                v.transpose(0, 1).reshape(v.shape[1], -1), _w(m.proj.ln)[0].T)
    if kind in ('models.twins.GlobalSubSampleAttn', 'models.pvt_v2.Attention'):
        hd = m.dim // heads
        return separate(m.q, m.kv, m.kv, m.proj, hd, 0, heads * hd)
    if kind == 'models.tnt.Attention':
        qk, v = _w(m.qk)[0], _w(m.v)[0]
        vd = v.shape[0] // heads
        vv = _heads_of(v, heads, vd)
        return (_heads_of(qk, heads, m.head_dim), _heads_of(qk, heads, m.head_dim, heads * m.head_dim),
                vv.transpose(0, 1).reshape(vv.shape[1], -1), _w(m.proj)[0].T)
    if kind == 'models.crossvit.CrossAttention':
        return separate(m.wq, m.wk, m.wv, m.proj, m.wq.out_features // heads)
    if kind == 'models.nextvit.EfficientAttention':
        return separate(m.q, m.k, m.v, m.proj, m.head_dim)
    if kind == 'models.mvitv2.MultiScaleAttentionPoolFirst':
        return separate(m.q, m.k, m.v, m.proj, m.head_dim)
    return None


# ------------------------------------------------------------------------------------------------------------------
# what holds

def _truncated(a: torch.Tensor, rank: int) -> torch.Tensor:
    """ The best rank-`rank` approximation of each matrix of `a` (Eckart-Young: its top singular triplets). """
    if rank >= min(a.shape[-2:]):
        return a.double()
    u, s, vh = torch.linalg.svd(a.double())
    return (u[..., :rank] * s[..., None, :rank]) @ vh[..., :rank, :]


def _qk_error(wq: torch.Tensor, wk: torch.Tensor, target: torch.Tensor) -> float:
    """ How far each head's W_q W_k^T (heads, D, D) is from the best rank-k approximation of its target, relative to
    it. Every head: the residual target - W_q W_k^T is orthogonal to the column spaces of W_q and W_k (so the product
    is a sum of singular triplets of the target); the first and last heads: the product is the top-k truncation
    itself (an SVD of a D x D matrix per head costs seconds at D = 1024, so not every head). """
    target = target.double()
    got = wq @ wk.transpose(1, 2)
    size = target.norm(dim=(1, 2))
    residual = target - got
    qa, qb = torch.linalg.qr(wq).Q, torch.linalg.qr(wk).Q
    orthogonal = torch.maximum((qa.transpose(1, 2) @ residual).norm(dim=(1, 2)),
                               (residual @ qb).norm(dim=(1, 2))) / size
    ends = [0, len(target) - 1] if len(target) > 1 else [0]
    want = _truncated(target[ends], min(wq.shape[1:]))
    top = (got[ends] - want).norm(dim=(1, 2)) / want.norm(dim=(1, 2))
    return float(torch.cat([orthogonal, top]).max())


def read_all(model: nn.Module):
    """ [(name, module, attention_weights)] of every attention the test can read, in forward order. """
    read = [(name, m, attention_weights(m)) for name, m in model.named_modules()]
    return [(name, m, w) for name, m, w in read if w is not None]


def mimetic_error(model: nn.Module, before: Dict[str, tuple], seed: int) -> Tuple[float, int, int]:
    """ (largest error of a written product against the paper's, relative to that product's size; attentions read;
    attentions that change width, whose V/proj must be as before). Every attention the test can read, in forward
    order, each run of one shape drawing its Q/K targets then its V/proj ones from the seed, as mimetic defines. """
    from timm_structinit.inits.mimetic import MimeticCfg, draw_mimetic_targets
    read = read_all(model)
    generator = torch.Generator().manual_seed(seed)
    worst, kept, i = 0.0, 0, 0

    def shape(w):
        wq, wk, wv, wp = w
        return (wq.shape[1], wq.shape[0], wq.shape[2], wv.shape[1] // wq.shape[0], wp.shape[1], wv.shape[0])
    while i < len(read):
        j = i
        while j < len(read) and shape(read[j][2]) == shape(read[i][2]):
            j += 1
        dim, heads, k, vd, out, v_in = shape(read[i][2])
        square = v_in == out
        targets = draw_mimetic_targets(dim, heads, j - i, MimeticCfg(vproj=square), generator)
        for layer, (name, m, (wq, wk, wv, wp)) in enumerate(read[i:j]):
            worst = max(worst, _qk_error(wq, wk, targets['qk'][layer]))
            if square:
                want = _truncated(targets['vproj'][layer].double(), min(dim, heads * vd))
                worst = max(worst, float((wv @ wp - want).norm() / want.norm()))
            else:
                kept += 1
                old_v, old_p = before[name][2], before[name][3]
                assert torch.equal(wv, old_v) and torch.equal(wp, old_p), f'{name}: V/proj of a width change written'
        i = j
    return worst, len(read), kept


def _grid_target(grid: Tuple[int, int], offset) -> torch.Tensor:
    """ (N,) key index of each query of a row-major grid under offset (dy, dx); -1 off the grid. """
    height, width = grid
    out = torch.full((height * width,), -1)
    for r in range(height):
        for c in range(width):
            if 0 <= r + offset[0] < height and 0 <= c + offset[1] < width:
                out[r * width + c] = (r + offset[0]) * width + c + offset[1]
    return out


@torch.no_grad()
def forward_maps(model: nn.Module, images: torch.Tensor, position_only: bool) -> Dict[str, torch.Tensor]:
    """ The maps each attention module computes in the model's forward pass (eval mode, fused kernels off): the
    input of its `attn_drop`, by module name (the first call). """
    maps, handles, fused = {}, [], []
    for name, m in model.named_modules():
        if isinstance(getattr(m, 'attn_drop', None), nn.Dropout):
            if hasattr(m, 'fused_attn'):
                fused.append((m, m.fused_attn))
                m.fused_attn = False
            handles.append(m.attn_drop.register_forward_hook(
                lambda mod, args, out, name=name: maps.setdefault(name, args[0].detach().clone())))
    if position_only:
        handles.append(model.patch_embed.register_forward_hook(lambda mod, args, out: torch.zeros_like(out)))
    try:
        model.eval()(images)
    finally:
        for handle in handles:
            handle.remove()
        for m, value in fused:
            m.fused_attn = value
    return maps


def impulse_hits(model: nn.Module, record: dict, images: torch.Tensor, position_only: bool) -> List[float]:
    """ Per head of the first attention: the share of its queries whose largest attention is the key at its offset
    (queries whose key is off the grid, or masked out in a shifted window, left out). """
    maps = forward_maps(model, images, position_only)
    first = next(iter(maps.values()))
    grid = tuple(record['window_size'][0]) if 'window_size' in record else tuple(record['grid_size'])
    n = grid[0] * grid[1]
    prefix = first.shape[-1] - n
    shares = []
    for head, offset in enumerate(record['offsets'][0]):
        target = _grid_target(grid, offset)
        rows = torch.nonzero(target >= 0).flatten()
        head_maps = first[:, head, prefix + rows]                      # (B, rows, keys)
        on_target = head_maps[..., prefix:].gather(-1, target[rows].view(1, -1, 1).expand(len(head_maps), -1, 1))
        seen = on_target[..., 0] > 1e-30                               # not masked out
        peaks = head_maps.argmax(-1) == prefix + target[rows]
        shares.append(float((peaks & seen).sum() / seen.sum().clamp_min(1)))
    return shares


def _images(model: nn.Module, batch: int = 2, seed: int = 0) -> torch.Tensor:
    size = model.pretrained_cfg.get('input_size', (3, 224, 224))
    patch_embed = getattr(model, 'patch_embed', None)
    img = getattr(patch_embed, 'img_size', None)
    if img is not None:
        size = (size[0], *tuple(img))
    return torch.randn(batch, *size, generator=torch.Generator().manual_seed(seed))


def outcome(name: str, kwargs: dict, init: str, seed: int = 0, model: Optional[nn.Module] = None,
            init_kwargs: Optional[dict] = None) -> Dict[str, str]:
    """ Build `name` (timm's init, torch seed 0), apply `init` (with `init_kwargs`, its hyperparameters), and say what
    happened: {'outcome': 'holds' or 'refused', 'detail': the measure or the message}. Raises AssertionError where
    the init applied without holding or a refusal touched the model, and lets any other error through. """
    import timm
    import timm_structinit
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, **kwargs) if model is None else model
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    before_read = {name: tuple(t.clone() for t in w) for name, _, w in read_all(model)}
    try:
        record = timm_structinit.apply_init(model, init, seed=seed, **(init_kwargs or {}))
    except ValueError as error:
        text = str(error)
        assert '\n' not in text and text, text
        after = model.state_dict()
        assert all(torch.equal(before[k], after[k]) for k in before), f'{name}: a refusal changed the model'
        assert getattr(model, 'struct_init_record', None) is None
        return {'outcome': 'refused', 'detail': text}
    if init == 'mimetic':
        error, count, kept = mimetic_error(model, before_read, seed)
        assert count and error < 1e-4, (name, count, error)
        detail = (f'{count} attention{"s" if count != 1 else ""}: every W_q W_k^T and W_v W_proj is the paper\'s '
                  f'(to 1e-4)')
        if kept:
            detail += f' ({kept} that change width keep V/proj)'
        return {'outcome': 'holds', 'detail': detail}
    if record.get('family') == 'mixer':  # block 0's token mixing moves each channel's tokens by its offset
        block, (offset,) = model.blocks[0], record['offsets'][0]
        grid = tuple(model.stem.grid_size)
        u = torch.randn(2, 8, grid[0] * grid[1], generator=torch.Generator().manual_seed(0))
        target = _grid_target(grid, offset)
        shifted = torch.where(target >= 0, u[..., target.clamp_min(0)], torch.zeros(()))
        with torch.no_grad():
            error = float((block.mlp_tokens(u) - shifted).abs().mean() / shifted.abs().mean())
        assert error < 0.05, (name, error)
        return {'outcome': 'holds', 'detail': f'token mixing of the first block is the shift by its offset (to '
                                              f'{max(error, 1e-6):.0e})'.replace('(to 1e-06)', '(exact)')}
    images = _images(model)
    position = impulse_hits(model, record, images[:1], position_only=True)
    real = impulse_hits(model, record, images, position_only=False)
    least = 0.25
    assert sum(position) / len(position) >= least, (name, init, position)
    return {'outcome': 'holds', 'detail': f'first attention: {_pct(position)} of queries on target on position '
                                          f'alone, {_pct(real)} on random images'}


def outcomes(name: str, kwargs: dict) -> Dict[str, Dict[str, str]]:
    """ `outcome` of every init, each on a fresh build: a refused init leaves the model bit for bit as built (which
    `outcome` asserts), so the next init takes that model rather than building it again. """
    import timm
    results, model = {}, None
    for init in INITS:
        if model is None:
            torch.manual_seed(0)
            model = timm.create_model(name, pretrained=False, **kwargs)
        results[init] = outcome(name, kwargs, init, model=model)
        if results[init]['outcome'] == 'holds':
            model = None
    return results


def _pct(values: List[float]) -> str:
    return f'{100 * sum(values) / len(values):.0f}%'


# ------------------------------------------------------------------------------------------------------------------
# the docs' table

def table(rows: List[Tuple[str, str, dict, Dict[str, Dict[str, str]]]]) -> str:
    import timm
    lines = [
        '# Every timm family, every init',
        '',
        f'What `apply_init(model, name, seed=0)` does on one small build of each timm {timm.__version__} model family '
        f'(`pretrained=False`), generated by `python tests/zoo.py --write docs/zoo.md` from the checks of '
        f'`tests/test_zoo.py`, which runs them in the suite: each init either holds in the model\'s own step-0 '
        f'forward or is refused in one line with the model left bit for bit as it was. Mimetic holds when every '
        f'written W_q W_k^T and W_v W_proj is the paper\'s product (read from the weights by the test\'s own code); '
        f'an impulse init holds when its first attention, in the model\'s own forward pass with the patch content '
        f'set to zero (position alone), puts the largest attention on each head\'s offset for at least a quarter of '
        f'the queries (chance is about 1 / tokens); the share on random images is given beside it. The families '
        f'timm registers without token attention (CNNs, MLPs, state-space models) are listed at the end.',
        '',
        '| family | model built | ' + ' | '.join(INITS) + ' |',
        '|---|---|' + '---|' * len(INITS),
    ]
    for family, name, kwargs, results in rows:
        args = ', '.join(f'{k}={v!r}' for k, v in kwargs.items())
        cells = []
        for init in INITS:
            r = results[init]
            detail = r['detail'].replace('|', '/')
            cells.append(f"**holds**: {detail}" if r['outcome'] == 'holds' else f'refused: {detail}')
        lines.append(f'| {family} | `{name}`' + (f' ({args})' if args else '') + ' | ' + ' | '.join(cells) + ' |')
    lines += ['', 'Without token attention (no init applies; `apply_init` says so in one line): ' +
              ', '.join(NO_ATTENTION) + '.', '']
    return '\n'.join(lines)


def parse_table(text: str) -> Dict[Tuple[str, str, str], Dict[str, str]]:
    """ {(family, model cell, init): {'outcome', 'detail'}} from docs/zoo.md. """
    out = {}
    for line in text.splitlines():
        if not line.startswith('| ') or line.startswith('| family') or line.startswith('|---'):
            continue
        cells = [c.strip() for c in line.strip('|').split(' | ')]
        for init, cell in zip(INITS, cells[2:]):
            held = cell.startswith('**holds**: ')
            out[(cells[0], cells[1], init)] = {'outcome': 'holds' if held else 'refused',
                                               'detail': cell.split(': ', 1)[1]}
    return out


def model_cell(name: str, kwargs: dict) -> str:
    args = ', '.join(f'{k}={v!r}' for k, v in kwargs.items())
    return f'`{name}`' + (f' ({args})' if args else '')


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--write', help='write the table here (docs/zoo.md)')
    parser.add_argument('--family', action='append', help='only these families (printed, not written)')
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for family, builds in ZOO.items():
        if args.family and family not in args.family:
            continue
        for name, kwargs, _ in builds:
            results = outcomes(name, kwargs)
            rows.append((family, name, kwargs, results))
            print(family, name, {k: v['outcome'] for k, v in results.items()}, flush=True)
    text = table(rows)
    if args.write and not args.family:
        Path(args.write).write_text(text)
    else:
        print(text)
    return 0


if __name__ == '__main__':
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
