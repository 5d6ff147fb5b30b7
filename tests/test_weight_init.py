""" The rest of the network: timm's init (the default) or PyTorch's default init (`weight_init='reset'`, the setting of
the structured-init authors' runs), for every family, the base models and `apply_init` on timm's own models. """
import json
import math
import warnings

import pytest
import timm
import torch
from timm.models.mlp_mixer import MlpMixer
from torch import nn

import timm_structinit
from timm_structinit.hub import export_model, registered_exports

VIT = dict(embed_dim=64, depth=2, num_heads=4, patch_size=4)
SWIN = dict(embed_dim=24, depths=(2, 2), num_heads=(3, 6))
MIXER = dict(num_blocks=2, embed_dim=64, mlp_ratio=(2.0, 4.0))  # 128 token units: an exact shift

# (model, kwargs, names of the weights the init writes: left out of the PyTorch-default check)
CASES = [
    ('vit_tiny_patch2_32_gap_sincos', VIT, ()),
    ('vit_tiny_patch2_32_mimetic', VIT, ('attn.qkv', 'attn.proj')),
    ('vit_tiny_patch2_32_impulse3', VIT, ('attn.qkv:qk',)),  # V/proj are the init's to keep
    ('vit_tiny_patch2_32_gap_sincos', dict(VIT, struct_init='impulse2025'), ('attn.qkv', 'attn.proj')),
    ('swin_tiny_patch2_window4_32', SWIN, ()),
    ('swin_tiny_patch2_window4_32_impulse3', SWIN, ()),  # the bias tables only
    ('swin_tiny_patch2_window4_32_mimetic', SWIN, ('attn.qkv', 'attn.proj')),
    ('mixer_s4_32', MIXER, ()),
    ('mixer_s4_32_impulse3', MIXER, ('mlp_tokens',)),
]


def _layers(model: nn.Module, written=()):
    """ (name, weight or bias tensor, fan_in) of every Linear and Conv, without what the init writes ('x:qk': the
    q and k rows of a fused qkv). """
    for name, module in model.named_modules():
        if not isinstance(module, (nn.Linear, nn.Conv2d)):
            continue
        rows = slice(None)
        skip = [w for w in written if w.split(':')[0] in name]
        if any(':' not in w for w in skip):
            continue
        if skip:  # only q and k are written: the v rows keep the rest's init
            dim = module.weight.shape[1]
            rows = slice(2 * dim, 3 * dim)
        fan_in = module.weight[0].numel()
        yield f'{name}.weight', module.weight[rows], fan_in
        if module.bias is not None:
            yield f'{name}.bias', module.bias[rows], fan_in


def _assert_pytorch_default(model: nn.Module, written=()) -> int:
    """ Every layer's weights within +-1/sqrt(fan_in) with the spread of a uniform there (std bound/sqrt(3)). """
    checked = 0
    for name, tensor, fan_in in _layers(model, written):
        bound = 1 / math.sqrt(fan_in)
        assert tensor.abs().max() <= bound * (1 + 1e-6), (name, tensor.abs().max().item(), bound)
        if tensor.numel() >= 500:  # the spread of a uniform on [-bound, bound], within sampling error
            assert tensor.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.1), name
        checked += 1
    return checked


@pytest.mark.parametrize('name,kwargs,written', CASES, ids=[f'{c[0]}{"+" + c[1]["struct_init"] if "struct_init" in c[1] else ""}'
                                                            for c in CASES])
def test_reset_keeps_pytorch_defaults_where_the_init_does_not_write(name, kwargs, written):
    torch.manual_seed(0)
    model = timm.create_model(name, weight_init='reset', **kwargs)
    assert _assert_pytorch_default(model, written) >= 4
    record = model.struct_init_record
    assert record is None if 'struct_init' not in kwargs and not name.endswith(('mimetic', 'impulse3')) \
        else record['weight_init'] == 'reset'
    # timm's init, the default, is not PyTorch's: the check above tells them apart
    torch.manual_seed(0)
    with pytest.raises(AssertionError):
        _assert_pytorch_default(timm.create_model(name, **kwargs), written)
    # init_weights() puts the rest back at PyTorch's defaults, redrawn, and re-applies the init
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.init_weights()
    _assert_pytorch_default(model, written)
    fc1 = next(k for k in before if k.endswith('fc1.weight') and not any(w.split(':')[0] in k for w in written))
    assert not torch.equal(before[fc1], model.state_dict()[fc1])


def test_reset_writes_the_same_init():
    """ The init's own weights do not depend on the rest: the same struct_init_seed writes the same Q/K. """
    qk = []
    for weight_init in ('', 'reset'):
        model = timm.create_model('vit_tiny_patch2_32_impulse3', weight_init=weight_init, struct_init_seed=3, **VIT)
        qk.append(model.blocks[1].attn.qkv.weight[:2 * 64].clone())
    assert torch.equal(*qk)


def test_default_is_timms_init():
    """ Without weight_init, every weight the init does not write is timm's: equal, seed for seed, to the same
    architecture built by timm itself. """
    torch.manual_seed(0)
    ours = timm.create_model('vit_tiny_patch2_32_mimetic', **VIT)
    torch.manual_seed(0)
    plain = timm.create_model('vit_tiny_patch16_224', img_size=32, num_classes=10, **VIT)
    theirs = plain.state_dict()
    compared = 0
    for key, value in ours.state_dict().items():
        if 'attn.qkv' in key or 'attn.proj' in key or key == 'pos_embed':
            continue
        assert torch.equal(value, theirs[key]), key
        compared += 1
    assert compared > 10


def test_apply_init_reset_on_timm_models():
    torch.manual_seed(0)
    deit = timm.create_model('deit_tiny_patch16_224', img_size=32, patch_size=4, depth=2)
    record = timm_structinit.apply_init(deit, 'mimetic', seed=0, weight_init='reset')
    assert record['weight_init'] == 'reset' and deit.weight_init_mode == 'reset'
    _assert_pytorch_default(deit, ('attn.qkv', 'attn.proj'))
    # timm's Mixer has no weight_init argument: apply_init does it
    mixer = MlpMixer(img_size=32, patch_size=4, num_blocks=2, embed_dim=64, mlp_ratio=(1.0, 4.0))
    timm_structinit.apply_init(mixer, 'impulse', seed=0, weight_init='reset')
    _assert_pytorch_default(mixer, ('mlp_tokens',))
    # without it, the model's other weights stay as they were, and the record says whose init they are
    deit = timm.create_model('deit_tiny_patch16_224', img_size=32, patch_size=4, depth=2)
    fc1 = deit.blocks[0].mlp.fc1.weight.clone()
    assert timm_structinit.apply_init(deit, 'mimetic', seed=0)['weight_init'] == ''
    assert torch.equal(fc1, deit.blocks[0].mlp.fc1.weight)


def test_failed_init_leaves_a_reset_model_as_it_was():
    model = timm.create_model('vit_tiny_patch2_32_gap_sincos', **VIT)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match='kernel_size'):  # 9 x 9 does not fit the 8 x 8 grid
        timm_structinit.apply_init(model, 'impulse', seed=0, weight_init='reset', kernel_size=9)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert model.weight_init_mode == ''


@pytest.mark.parametrize('call', [
    lambda: timm.create_model('vit_tiny_patch2_32_mimetic', weight_init='torch', **VIT),
    lambda: timm.create_model('mixer_s4_32', weight_init='jax', **MIXER),
    lambda: timm_structinit.apply_init(timm.create_model('vit_tiny_patch2_32', **VIT), 'mimetic', weight_init='skip'),
])
def test_bad_weight_init_names_the_valid_ones(call):
    with pytest.raises(ValueError, match=r"weight_init='(torch|jax|skip)' is not valid.*'reset'"):
        call()


def test_skip_with_a_struct_init_warns_that_both_are_skipped():
    with pytest.warns(UserWarning, match="weight_init='reset'"):
        model = timm.create_model('vit_tiny_patch2_32_impulse3', weight_init='skip', **VIT)
    assert model.struct_init_record is None
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        timm.create_model('vit_tiny_patch2_32_gap_sincos', weight_init='skip', **VIT)  # nothing skipped silently


@pytest.mark.parametrize('name', ['vit_tiny_patch2_32_gap_sincos', 'vit_tiny_patch2_32_impulse3'])
def test_export_records_the_rest_of_network_init(name, tmp_path):
    out = export_model(name, tmp_path / 'export', seed=0, model_kwargs=dict(VIT, weight_init='reset'))
    config = json.loads((out / 'config.json').read_text())
    assert config['timm_structinit']['weight_init'] == 'reset'
    assert 'weight_init' not in config['model_args']  # plain timm loads the weights; the init does not matter there
    if name.endswith('impulse3'):
        assert config['timm_structinit']['struct_init']['weight_init'] == 'reset'
    card = (out / 'README.md').read_text()
    assert "PyTorch's default init (`weight_init='reset'`" in card
    default = export_model(name, tmp_path / 'default', seed=0, model_kwargs=VIT)
    assert "| other weights | timm's init |" in (default / 'README.md').read_text()
    with registered_exports():  # the registered model, which keeps the init it was built with
        reloaded = timm.create_model(f'local-dir:{out}', pretrained=True)
    assert reloaded.weight_init_mode == 'reset'
