""" Every registered model builds through timm's factory, runs, saves and resizes its fixed sin-cos table exactly. """
import pytest
import timm
import timm.optim
import torch

import timm_structinit
from timm_structinit.layers.pos_embed import sincos_pos_embed
from timm_structinit.models.vision_transformer import default_cfgs

REGISTERED = sorted(default_cfgs)
SMALL = dict(depth=2)  # the registered width and heads, fewer blocks: fast but the real per-block shapes


def test_registered_names():
    for size in ('tiny', 'small'):
        for suffix in ('', '_sincos', '_gap_sincos', '_mimetic'):
            assert f'vit_{size}_patch2_32{suffix}' in timm.list_models()
    for size in ('tiny', 'small', 'base'):
        assert f'vit_{size}_patch16_224_mimetic' in timm.list_models()


@pytest.mark.parametrize('name', REGISTERED)
def test_pretrained_cfg(name):
    model = timm.create_model(name, **SMALL)
    cfg = model.pretrained_cfg
    if '_32' in name:
        assert cfg['input_size'] == (3, 32, 32) and cfg['crop_pct'] == 1.0 and cfg['num_classes'] == 10
        assert cfg['mean'] == timm_structinit.CIFAR10_MEAN and cfg['std'] == timm_structinit.CIFAR10_STD
        assert model.num_classes == 10
    else:
        assert cfg['input_size'] == (3, 224, 224) and cfg['num_classes'] == 1000
    assert cfg['architecture'] == name and cfg['first_conv'] == 'patch_embed.proj'


@pytest.mark.slow
@pytest.mark.parametrize('name', REGISTERED)
def test_forward_backward_features_roundtrip(name):
    torch.manual_seed(0)
    model = timm.create_model(name, num_classes=7, **SMALL)
    size = model.pretrained_cfg['input_size'][1:]
    x = torch.randn(2, 3, *size)
    out = model(x)
    assert out.shape == (2, 7)
    out.logsumexp(-1).sum().backward()
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in trainable)
    if model.sincos_pos_embed:
        assert not model.pos_embed.requires_grad and model.pos_embed.grad is None

    tokens = model.patch_embed.num_patches + model.num_prefix_tokens
    assert model.forward_features(x).shape == (2, tokens, model.embed_dim)
    features = timm.create_model(name, num_classes=0, **SMALL)
    assert features(x).shape == (2, features.num_features)

    clone = timm.create_model(name, num_classes=7, **SMALL)
    state = model.state_dict()
    assert 'pos_embed' in state
    clone.load_state_dict(state)
    model.eval(), clone.eval()
    for key, value in clone.state_dict().items():
        assert torch.equal(value, state[key]), key
    with torch.no_grad():
        assert torch.equal(model(x), clone(x))


@pytest.mark.parametrize('name', [n for n in REGISTERED if '_32' in n and n.split('_')[-1] != '32'])
def test_sincos_regenerated_on_resize(name):
    model = timm.create_model(name, **SMALL)
    prefix = model.num_prefix_tokens
    assert torch.equal(model.pos_embed, sincos_pos_embed((16, 16), model.embed_dim, num_prefix_tokens=prefix))
    if prefix:
        assert torch.count_nonzero(model.pos_embed[0, :prefix]) == 0  # class token carries no position
    model.set_input_size(img_size=(48, 40))
    fresh = timm.create_model(name, img_size=(48, 40), **SMALL)
    assert model.pos_embed.shape == fresh.pos_embed.shape == (1, prefix + 24 * 20, model.embed_dim)
    assert torch.equal(model.pos_embed, fresh.pos_embed)
    assert not model.pos_embed.requires_grad
    assert model(torch.randn(1, 3, 48, 40)).shape == (1, 10)


def test_dynamic_img_size_uses_exact_table():
    model = timm.create_model('vit_tiny_patch2_32_gap_sincos', dynamic_img_size=True, **SMALL).eval()
    fixed = timm.create_model('vit_tiny_patch2_32_gap_sincos', img_size=(40, 24), **SMALL).eval()
    fixed.load_state_dict({k: v for k, v in model.state_dict().items() if k != 'pos_embed'}, strict=False)
    x = torch.randn(2, 3, 40, 24)
    with torch.no_grad():
        torch.testing.assert_close(model.forward_features(x), fixed.forward_features(x))


# what each override must change in the built model
OVERRIDE_READERS = {
    'num_heads': lambda m: m.blocks[0].attn.num_heads,
    'num_classes': lambda m: m.head.out_features,
    'depth': lambda m: len(m.blocks),
    'img_size': lambda m: m.patch_embed.img_size[0],
    'drop_path_rate': lambda m: m.blocks[-1].drop_path1.drop_prob,
    'global_pool': lambda m: m.global_pool,
    'qkv_bias': lambda m: m.blocks[0].attn.qkv.bias is not None,
}


@pytest.mark.parametrize('overrides', [
    dict(num_heads=8), dict(num_classes=100), dict(depth=3), dict(img_size=48), dict(drop_path_rate=0.1),
    dict(global_pool='avg'), dict(qkv_bias=False),
])
def test_overrides(overrides):
    """ A timm kwarg reaches the model, and the init is solved for the geometry it produces. """
    model = timm.create_model('vit_tiny_patch2_32_mimetic', **{**SMALL, **overrides})
    (key, value), = overrides.items()
    assert OVERRIDE_READERS[key](model) == (pytest.approx(value) if isinstance(value, float) else value)
    record = model.struct_init_record
    assert (record['num_layers'], record['num_heads']) == (len(model.blocks), model.blocks[0].attn.num_heads)
    dim, heads = model.embed_dim, model.blocks[0].attn.num_heads
    for block in model.blocks:  # every head's W_q W_k^T leans on +identity, whatever the geometry
        w_q, w_k = block.attn.qkv.weight[:dim], block.attn.qkv.weight[dim:2 * dim]
        for h in range(heads):
            rows = slice(h * dim // heads, (h + 1) * dim // heads)
            product = w_q[rows].T @ w_k[rows]
            assert product.diagonal().mean() > 20 * product.abs().mean() / dim ** 0.5  # ~75 mimetic, |.| < 4 timm
    size = model.patch_embed.img_size
    model(torch.randn(1, 3, *size)).sum().backward()


def test_sincos_frozen_in_optimizer():
    model = timm.create_model('vit_tiny_patch2_32_sincos', **SMALL)
    optimizer = timm.optim.create_optimizer_v2(model, 'adamw', lr=1e-3)
    params = {id(p) for group in optimizer.param_groups for p in group['params']}
    assert id(model.pos_embed) not in params


@pytest.mark.parametrize('kwargs, words', [
    (dict(embed_dim=190, num_heads=3), ['embed_dim=190', 'num_heads=3']),
    (dict(pos_embed='fourier'), ["'fourier'", 'sincos']),
    (dict(embed_dim=66, num_heads=3, pos_embed='sincos'), ['embed_dim=66', 'divisible by 4']),
    (dict(class_token=False, global_pool='token'), ['token', 'avg']),
])
def test_bad_model_args(kwargs, words):
    with pytest.raises(ValueError) as err:
        timm.create_model('vit_tiny_patch2_32', **kwargs)
    for word in words:
        assert word in str(err.value)


@pytest.mark.slow
@pytest.mark.parametrize('name', REGISTERED)
def test_torchscript(name, tmp_path):
    """ As timm's own model tests do: every registered model scripts and gives the eager outputs, and survives
    `torch.jit.save` / `load`; a sin-cos model with dynamic_img_size builds its exact table for a new size inside
    the scripted forward (such a model cannot be saved: the README says why). """
    model = timm.create_model(name, depth=1).eval()
    x = torch.randn(2, 3, *model.patch_embed.img_size)
    scripted = torch.jit.script(model)
    torch.jit.save(scripted, str(tmp_path / 'model.pt'))
    with torch.no_grad():
        torch.testing.assert_close(torch.jit.load(str(tmp_path / 'model.pt'))(x), model(x), rtol=0, atol=1e-5)
    if '_32' in name:
        dynamic = timm.create_model(name, depth=1, dynamic_img_size=True).eval()
        x = torch.randn(2, 3, 40, 24)
        with torch.no_grad():
            torch.testing.assert_close(torch.jit.script(dynamic)(x), dynamic(x), rtol=0, atol=1e-5)
