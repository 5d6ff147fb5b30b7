""" The impulse study's hyperparameters: content-blind Q/K, propagated layer inputs, the closed form on sin-cos
tables, and mimetic V/proj alone as a transmission control. """
import pytest
import timm
import torch

import timm_structinit  # noqa: F401
from timm_structinit.diagnostics import qk_products, vproj_product
from timm_structinit.inits.heads import find_attention, read_qk
from timm_structinit.inits.impulse import impulse_target
from timm_structinit.inits.impulse_solvers import attention_maps, map_metrics
from timm_structinit.layers.pos_embed import sincos_pos_embed

SMALL = dict(img_size=32, patch_size=4, embed_dim=64, depth=3, num_heads=4)


def content_directions(model):
    proj = model.patch_embed.proj
    cols = torch.cat([proj.weight.detach().flatten(1), proj.bias.detach()[:, None], torch.ones(64, 1)], 1)
    return torch.linalg.qr(cols.double())[0].float()  # (D, c)


@pytest.mark.parametrize('solver', ['fast', 'svd'])
def test_content_orthogonal_qk_cannot_see_patch_content(solver):
    blind = timm.create_model('vit_tiny_patch2_32_impulse3', **SMALL, struct_init_seed=0,
                              struct_init_kwargs=dict(solver=solver, content='orthogonal'))
    plain = timm.create_model('vit_tiny_patch2_32_impulse3', **SMALL, struct_init_seed=0,
                              struct_init_kwargs=dict(solver=solver))
    basis = content_directions(blind)
    for attn in find_attention(blind):
        for w in read_qk(attn):  # each (heads, D, k): no column may read a content direction
            assert (basis.T @ w).norm() <= 1e-4 * w.norm()
    leak = [(content_directions(plain).T @ w).norm() / w.norm() for w in read_qk(find_attention(plain)[0])]
    assert min(leak) > 0.1  # the papers' solve does read content: the knob is what removes it


def test_content_orthogonal_logits_ignore_what_the_image_shows():
    """ Two images differing only in content give layer-0 logits equal up to LayerNorm's per-token scale. """
    model = timm.create_model('vit_tiny_patch2_32_impulse3', **SMALL, struct_init_seed=1,
                              struct_init_kwargs=dict(solver='svd', content='orthogonal')).eval()
    attn = find_attention(model)[0]
    wq, wk = read_qk(attn)
    logits = []
    for seed in (0, 1):
        image = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(seed))
        tokens = model._pos_embed(model.patch_embed(image))
        x = model.blocks[0].norm1(tokens)[0].detach()
        sigma = (tokens[0] - tokens[0].mean(-1, keepdim=True)).pow(2).mean(-1).add(1e-6).sqrt().detach()
        logits.append(((x @ wq) @ (x @ wk).mT) * sigma[None, :, None] * sigma[None, None, :])
    assert torch.allclose(logits[0], logits[1], atol=1e-3 * logits[0].abs().max().item())


def test_propagated_layer_inputs_solve_each_layer_on_what_reaches_it():
    kwargs = dict(solver='svd', vproj='mimetic')
    same = timm.create_model('vit_tiny_patch2_32_impulse3', **SMALL, struct_init_seed=0, struct_init_kwargs=kwargs)
    prop = timm.create_model('vit_tiny_patch2_32_impulse3', **SMALL, struct_init_seed=0,
                             struct_init_kwargs=dict(kwargs, layer_inputs='propagated'))
    grid = (8, 8)
    # what reaches layer 2: the sin-cos table carried through blocks 0 and 1 of each model
    def mass_at_layer(model, layer):
        stream = sincos_pos_embed(grid, 64)
        with torch.no_grad():
            for block in model.blocks[:layer]:
                stream = block.eval()(stream)
            x = model.blocks[layer].norm1(stream)[0]
        wq, wk = read_qk(find_attention(model)[layer])
        targets = torch.stack([impulse_target(grid, tuple(o)) for o in model.struct_init_record['offsets'][layer]])
        return map_metrics(attention_maps(x, wq, wk), targets)['target_mass'].mean().item()
    assert mass_at_layer(prop, 2) > 0.5
    assert mass_at_layer(prop, 2) > mass_at_layer(same, 2) + 0.2


def test_propagated_refuses_shared_layers():
    with pytest.raises(ValueError, match="layer_inputs='propagated'.*share_layers=True"):
        timm.create_model('vit_tiny_patch2_32_impulse3', **SMALL,
                          struct_init_kwargs=dict(layer_inputs='propagated', share_layers=True))


def test_closed_form_on_a_sincos_table_is_not_uniform():
    """ The 2025 preset on a sin-cos model: the rank-cut pseudo-inverse keeps the maps on their targets (inverting
    the table's ~1e-3 tail left every map at 1/N). """
    model = timm.create_model('vit_tiny_patch2_32_gap_sincos', **SMALL, struct_init='impulse2025', struct_init_seed=0)
    masses = torch.tensor(model.struct_init_record['target_mass'])
    assert masses.min() > 0.5, masses
    with pytest.raises(ValueError, match='svd_rtol=2.0'):
        timm.create_model('vit_tiny_patch2_32_gap_sincos', **SMALL, struct_init='impulse2025',
                          struct_init_kwargs=dict(svd_rtol=2.0))


def test_mimetic_vproj_alone_keeps_timm_qk():
    torch.manual_seed(0)
    base = timm.create_model('vit_tiny_patch2_32_gap_sincos', **SMALL)
    torch.manual_seed(0)
    vproj_only = timm.create_model('vit_tiny_patch2_32_gap_sincos', **SMALL, struct_init='mimetic',
                                   struct_init_kwargs=dict(qk=False), struct_init_seed=0)
    for a, b in zip(find_attention(base), find_attention(vproj_only)):
        assert torch.equal(qk_products(a), qk_products(b))
        diag = torch.diagonal(vproj_product(b)).mean().item()
        assert diag == pytest.approx(-0.4, abs=0.05)
    with pytest.raises(ValueError, match='qk=False with vproj=False'):
        timm.create_model('vit_tiny_patch2_32_gap_sincos', **SMALL, struct_init='mimetic',
                          struct_init_kwargs=dict(qk=False, vproj=False))
