""" Mimetic init writes the products the paper prescribes: W_q W_k^T = rank-k(a1 Z + b1 I), W_v W_proj = a2 Z' - b2 I. """
import math

import pytest
import timm
import torch

import timm_structinit
from timm_structinit.inits.heads import find_attention, read_qk, read_vproj
from timm_structinit.inits.mimetic import MimeticCfg, draw_mimetic_targets

SMALL = dict(depth=3)


def rank_k(a: torch.Tensor, k: int) -> torch.Tensor:
    u, s, vh = torch.linalg.svd(a.double())
    return (u[:, :k] * s[:k]) @ vh[:k]


def targets_of(model, **cfg):
    record = model.struct_init_record
    attn = find_attention(model)[0]
    return draw_mimetic_targets(
        attn.qkv.in_features, attn.num_heads, len(model.blocks), MimeticCfg(**cfg),
        torch.Generator().manual_seed(record['seed']))


# weight_init='reset' (the papers' setting) gives every Linear a nonzero bias first: timm's own init already zeroes
# them, so only there does the bias check see what the init did
@pytest.mark.parametrize('kwargs', [dict(), dict(num_heads=8), dict(qkv_bias=False), dict(embed_dim=96, num_heads=2),
                                    dict(weight_init='reset')])
def test_products_are_the_prescribed_matrices(kwargs):
    model = timm.create_model('vit_tiny_patch2_32_mimetic', struct_init_seed=11, **SMALL, **kwargs)
    targets = targets_of(model)
    for layer, attn in enumerate(find_attention(model)):
        k = attn.qkv.in_features // attn.num_heads
        wq, wk = read_qk(attn)
        for head in range(attn.num_heads):
            product = wq[head].double() @ wk[head].double().T
            expected = rank_k(targets['qk'][layer, head], k)
            torch.testing.assert_close(product, expected, atol=2e-5, rtol=0)
            assert torch.linalg.matrix_rank(product.float()) <= k
        wv, wproj = read_vproj(attn)
        torch.testing.assert_close(wv.double() @ wproj.double(), targets['vproj'][layer].double(), atol=2e-5, rtol=0)
        if attn.qkv.bias is not None:
            assert torch.count_nonzero(attn.qkv.bias) == 0 and torch.count_nonzero(attn.proj.bias) == 0
    if kwargs.get('weight_init') == 'reset':
        assert all(torch.count_nonzero(block.mlp.fc1.bias) > 0 for block in model.blocks)  # the reset gave biases


def test_qk_diagonal_matches_truncation_prediction():
    model = timm.create_model('vit_tiny_patch2_32_mimetic', struct_init_seed=5, **SMALL)
    targets = targets_of(model)
    wq, wk = read_qk(model.blocks[0].attn)
    for head in range(3):
        product = (wq[head] @ wk[head].T).double()
        predicted = rank_k(targets['qk'][0, head], 64).diagonal().mean()
        diag = product.diagonal().mean()
        off = product[~torch.eye(192, dtype=torch.bool)]
        assert abs(diag - predicted) < 1e-4
        assert 0.3 < diag < 0.5  # rank 64 of 192 keeps about 0.4 of the 0.7 identity
        assert diag > 5 * off.std()
    wv, wproj = read_vproj(model.blocks[0].attn)
    vp = (wv @ wproj).double()
    assert vp.diagonal().mean() == pytest.approx(-0.4, abs=0.02)


def test_signs_language_pattern():
    model = timm.create_model(
        'vit_tiny_patch2_32_mimetic', **SMALL, struct_init_kwargs=dict(qk_sign=-1, vproj_sign=1))
    wq, wk = read_qk(model.blocks[0].attn)
    wv, wproj = read_vproj(model.blocks[0].attn)
    assert (wq[0] @ wk[0].T).diagonal().mean() < -0.3
    assert (wv @ wproj).diagonal().mean() > 0.35


def test_uniform_noise_has_variance_one_over_d():
    cfg = MimeticCfg(noise_dist='uniform', qk_identity=0.0, qk_noise=1.0)
    z = draw_mimetic_targets(192, 3, 2, cfg, torch.Generator().manual_seed(0))['qk']
    assert z.var().item() == pytest.approx(1 / 192, rel=0.02)
    assert z.abs().max() <= math.sqrt(3 / 192)


def test_same_seed_same_weights_bit_for_bit():
    a = timm.create_model('vit_tiny_patch2_32_mimetic', struct_init_seed=3, **SMALL)
    b = timm.create_model('vit_tiny_patch2_32_mimetic', struct_init_seed=3, **SMALL)
    c = timm.create_model('vit_tiny_patch2_32_mimetic', struct_init_seed=4, **SMALL)
    qkv = 'blocks.0.attn.qkv.weight'
    assert torch.equal(a.state_dict()[qkv], b.state_dict()[qkv])
    assert not torch.equal(a.state_dict()[qkv], c.state_dict()[qkv])
    torch.manual_seed(9)
    d = timm.create_model('vit_tiny_patch2_32_mimetic', **SMALL)
    torch.manual_seed(9)
    e = timm.create_model('vit_tiny_patch2_32_mimetic', **SMALL)
    assert d.struct_init_record['seed'] == e.struct_init_record['seed']
    for key, value in d.state_dict().items():
        assert torch.equal(value, e.state_dict()[key]), key


def test_only_attention_weights_change():
    torch.manual_seed(1)
    mimetic = timm.create_model('vit_tiny_patch2_32_mimetic', **SMALL)
    torch.manual_seed(1)
    base = timm.create_model('vit_tiny_patch2_32_sincos', **SMALL)
    owned = ('attn.qkv.weight', 'attn.qkv.bias', 'attn.proj.weight', 'attn.proj.bias')
    changed = []
    for key, value in base.state_dict().items():
        if key.endswith(owned):
            if not torch.equal(value, mimetic.state_dict()[key]):
                changed.append(key)
        else:
            assert torch.equal(value, mimetic.state_dict()[key]), key
    assert {k for k in changed if 'weight' in k} == {
        f'blocks.{i}.attn.{n}.weight' for i in range(3) for n in ('qkv', 'proj')}


def test_init_weights_reapplies_and_skip_skips():
    model = timm.create_model('vit_tiny_patch2_32_mimetic', struct_init_seed=2, **SMALL)
    reference = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    model.init_weights()
    for key in ('blocks.1.attn.qkv.weight', 'blocks.1.attn.proj.weight', 'pos_embed'):
        assert torch.equal(model.state_dict()[key], reference[key]), key

    skipped = timm.create_model('vit_tiny_patch2_32_mimetic', weight_init='skip', **SMALL)
    assert skipped.struct_init_record is None
    wq, wk = read_qk(skipped.blocks[0].attn)
    assert abs((wq[0] @ wk[0].T).diagonal().mean()) < 0.05
    assert torch.equal(skipped.pos_embed, reference['pos_embed'])  # the fixed table is not an init: always there


def test_apply_init_to_a_plain_timm_model():
    model = timm.create_model('deit_small_patch16_224', depth=2)
    record = timm_structinit.apply_init(model, 'mimetic', seed=0)
    assert model.struct_init_record is record and record['method'] == 'mimetic' and record['seed'] == 0
    wq, wk = read_qk(model.blocks[1].attn)
    wv, wproj = read_vproj(model.blocks[1].attn)
    targets = draw_mimetic_targets(384, 6, 2, MimeticCfg(), torch.Generator().manual_seed(0))
    torch.testing.assert_close((wq[5] @ wk[5].T).double(), rank_k(targets['qk'][1, 5], 64), atol=2e-5, rtol=0)
    torch.testing.assert_close((wv @ wproj).double(), targets['vproj'][1].double(), atol=2e-5, rtol=0)


@pytest.mark.parametrize('call, words', [
    (lambda: timm.create_model('vit_tiny_patch2_32', struct_init='mimetc'), ["'mimetc'", 'mimetic']),
    (lambda: timm.create_model('vit_tiny_patch2_32_mimetic', struct_init_kwargs=dict(qk_noise=float('nan'))),
     ['qk_noise=nan', 'finite']),
    (lambda: timm.create_model('vit_tiny_patch2_32_mimetic', struct_init_kwargs=dict(vproj_identity=-0.4)),
     ['vproj_identity=-0.4', '0.0 <= vproj_identity']),
    (lambda: timm.create_model('vit_tiny_patch2_32_mimetic', struct_init_kwargs=dict(qk_sign=2)),
     ['qk_sign=2', '[1, -1]']),
    (lambda: timm.create_model('vit_tiny_patch2_32_mimetic', struct_init_kwargs=dict(alpha=1.0)),
     ["'alpha'", 'qk_noise']),
    (lambda: timm.create_model('vit_tiny_patch2_32_mimetic', num_heads=5), ['embed_dim=192', 'num_heads=5']),
    (lambda: timm_structinit.apply_init(timm.create_model('resnet10t'), 'mimetic'), ['ResNet', 'no attention layer']),
    (lambda: timm_structinit.apply_init(timm.create_model('vit_tiny_patch16_224', depth=1), 'mimetic', seed=-1),
     ['seed=-1']),
])
def test_bad_input(call, words):
    with pytest.raises(ValueError) as err:
        call()
    for word in words:
        assert word in str(err.value)


def test_qk_norm_takes_mimetic_and_refuses_impulse():
    """ Mimetic writes the products W_q W_k^T of the projections, whatever normalizes q and k after them; an impulse
    solve writes the logits q k^T themselves, which a norm of q and k does not keep. """
    model = timm.create_model('vit_tiny_patch16_224', depth=1, qk_norm=True, img_size=64)
    targets = draw_mimetic_targets(192, 3, 1, MimeticCfg(), torch.Generator().manual_seed(0))
    timm_structinit.apply_init(model, 'mimetic', seed=0)
    generator = torch.Generator().manual_seed(0)
    torch.testing.assert_close(draw_mimetic_targets(192, 3, 1, MimeticCfg(), generator)['qk'], targets['qk'])
    w = model.blocks[0].attn.qkv.weight.detach().double()
    torch.testing.assert_close(w[:64].T @ w[192:256], rank_k(targets['qk'][0, 0], 64), atol=2e-5, rtol=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match='normalizes them first .*LayerNorm.*qk_norm=False'):
        timm_structinit.apply_init(model, 'impulse', seed=0)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize('head_dim', [8, 32])  # heads x head_dim = 16 (below the width 32) or 64 (above it)
def test_value_space_narrower_or_wider_than_the_width(head_dim):
    """ W_v W_proj of an attention whose heads' value width h d_v differs from its width D: the best rank-h d_v
    approximation of a2 Z' - b2 I below D, all of it above D, where every value channel is in use (a zero column of
    W_v, with its zero row of W_proj, would never train: both get zero gradients). """
    from timm.layers import Attention
    model = torch.nn.Sequential(Attention(32, num_heads=2, attn_head_dim=head_dim, qkv_bias=True))
    timm_structinit.apply_init(model, 'mimetic', seed=3)
    attn = model[0]
    targets = draw_mimetic_targets(32, 2, 1, MimeticCfg(), torch.Generator().manual_seed(3))
    inner = 2 * head_dim
    wv = attn.qkv.weight.detach()[2 * inner:].double().T      # (D, h d_v), read here from timm's layout
    wproj = attn.proj.weight.detach().double().T               # (h d_v, D)
    torch.testing.assert_close(wv @ wproj, rank_k(targets['vproj'][0], min(32, inner)), atol=2e-5, rtol=0)
    assert (wv.norm(dim=0) > 1e-3).all() and (wproj.norm(dim=1) > 1e-3).all()
    q, k = attn.qkv.weight.detach()[:inner].double(), attn.qkv.weight.detach()[inner:2 * inner].double()
    torch.testing.assert_close(q[:head_dim].T @ k[:head_dim], rank_k(targets['qk'][0, 0], min(32, head_dim)),
                               atol=2e-5, rtol=0)
