""" Impulse init: targets, offsets, the three solvers, the registered models' first-block attention maps. """
import pytest
import timm
import torch
import torch.nn.functional as F

import timm_structinit
from timm_structinit.inits.heads import find_attention, read_qk, read_vproj
from timm_structinit.inits.impulse import draw_offsets, fixed_order, impulse_target, window_offsets
from timm_structinit.inits.impulse_solvers import dense_target
from timm_structinit.inits.impulse_solvers import (
    attention_maps, impulse_objective, solve_adam, solve_fast, solve_svd)
from timm_structinit.inits.impulse import pseudo_input
from timm_structinit.models.vision_transformer import default_cfgs

IMPULSE_MODELS = sorted(n for n in default_cfgs if 'impulse' in n and not n.endswith('impulse2025'))
IMPULSE2025_MODELS = sorted(n for n in default_cfgs if n.endswith('impulse2025'))


def first_block_maps(model):
    attn = model.blocks[0].attn
    grid = tuple(model.patch_embed.grid_size)
    wq, wk = read_qk(attn)
    return attention_maps(pseudo_input(grid, attn.qkv.in_features), wq, wk), grid


@pytest.mark.parametrize('name', IMPULSE_MODELS)
def test_first_block_map_peaks_at_recorded_offset(name):
    model = timm.create_model(name, depth=2, struct_init_seed=0)
    record = model.struct_init_record
    assert record['method'] == 'impulse' and record['solver'] == 'fast'
    maps, grid = first_block_maps(model)
    for head, offset in enumerate(record['offsets'][0]):
        target = impulse_target(grid, tuple(offset))
        valid = target >= 0
        hits = (maps[head].argmax(-1) == target)[valid].float().mean().item()
        assert hits >= 0.9, (head, offset, hits)
    kernel = record['cfg']['kernel_size']
    assert kernel == (5 if name.endswith('impulse5') else 3)
    assert all(max(abs(dy), abs(dx)) <= kernel // 2 for layer in record['offsets'] for dy, dx in layer)
    assert len(record['offsets']) == 2 and len(record['objective'][1]) == model.blocks[0].attn.num_heads


@pytest.mark.parametrize('name', IMPULSE2025_MODELS)
def test_registered_2025_models_are_the_papers(name):
    """ The 2025 paper's model: timm's learned table (kept x18) and class token, the fixed offset order (head i:
    entry i mod 9 of 4, 1, 5, 3, 7, 0, 2, 6, 8), and each head's map on the model's own pseudo input peaking there. """
    model = timm.create_model(name, depth=1, struct_init_seed=0)
    record = model.struct_init_record
    assert record['method'] == 'impulse2025' and record['cfg']['pseudo_input'] == 'pos_embed'
    assert model.cls_token is not None and model.global_pool == 'token' and not model.sincos_pos_embed
    assert model.pos_embed_scale == 18.0
    order = [4, 1, 5, 3, 7, 0, 2, 6, 8]
    heads = model.blocks[0].attn.num_heads
    assert [tuple(o) for o in record['offsets'][0]] == [(order[i % 9] // 3 - 1, order[i % 9] % 3 - 1)
                                                        for i in range(heads)]
    attn, grid = model.blocks[0].attn, tuple(model.patch_embed.grid_size)
    x = torch.nn.functional.layer_norm(model.pos_embed[0, 1:].detach(), (attn.qkv.in_features,))
    maps = attention_maps(x, *read_qk(attn))
    for head, offset in enumerate(record['offsets'][0]):
        target = impulse_target(grid, tuple(offset))
        valid = target >= 0
        assert (maps[head].argmax(-1) == target)[valid].float().mean().item() >= 0.9, (head, offset)


def test_registered_impulse_models_are_average_pool_sincos():
    for name in IMPULSE_MODELS:
        assert name in timm.list_models()
    model = timm.create_model('vit_tiny_patch2_32_impulse3', depth=1)
    assert model.global_pool == 'avg' and model.cls_token is None and model.sincos_pos_embed


def test_distinct_offsets_per_layer_and_head_override():
    model = timm.create_model('vit_tiny_patch2_32_impulse3', num_heads=8, depth=4, struct_init_seed=1)
    offsets = model.struct_init_record['offsets']
    assert all(len({tuple(o) for o in layer}) == 8 for layer in offsets)
    assert len({tuple(map(tuple, layer)) for layer in offsets}) > 1  # fresh offsets per layer
    maps, grid = first_block_maps(model)
    target = impulse_target(grid, tuple(offsets[0][7]))
    assert (maps[7].argmax(-1) == target)[target >= 0].float().mean() >= 0.9


def test_random_policy_draws_with_replacement():
    g = torch.Generator().manual_seed(0)
    draws = [draw_offsets(9, 3, 'random', g) for _ in range(5)]
    assert any(len(set(d)) < 9 for d in draws)
    assert all(o in window_offsets(3) for d in draws for o in d)


def test_fixed_order():
    assert fixed_order(3) == [4, 1, 5, 3, 7, 0, 2, 6, 8]
    order5 = fixed_order(5)
    offsets = window_offsets(5)
    assert sorted(order5) == list(range(25))
    assert [offsets[i] for i in order5[:9]] == [(0, 0), (-1, 0), (0, 1), (0, -1), (1, 0), (-1, -1), (-1, 1), (1, -1), (1, 1)]
    assert [offsets[i] for i in order5[9:13]] == [(-2, 0), (0, 2), (0, -2), (2, 0)]
    assert draw_offsets(11, 3, 'fixed', torch.Generator())[9:] == [(0, 0), (-1, 0)]  # head i takes i mod 9


def test_targets_and_borders():
    zero = impulse_target((4, 5), (1, -1), 'zero')
    assert zero.tolist()[:5] == [-1, 5, 6, 7, 8]  # query (0, 0) would attend off-grid; (0, 1) -> (1, 0)
    assert (zero == -1).sum() == 4 + 5 - 1  # left column and bottom row are empty
    circular = impulse_target((4, 5), (1, -1), 'circular')
    assert circular[0] == 9 and circular[19] == 3 and sorted(circular.tolist()) == list(range(20))
    dense = dense_target(zero.unsqueeze(0))[0]
    assert dense.sum() == 12 and dense[1, 5] == 1 and dense[0].sum() == 0


def test_objective_is_mse_against_dense_target():
    x = pseudo_input((6, 6), 32)
    targets = torch.stack([impulse_target((6, 6), (0, 1)), impulse_target((6, 6), (1, 1), 'circular')])
    wq, wk = torch.randn(2, 32, 16), torch.randn(2, 32, 16)
    attn = attention_maps(x, wq, wk)
    expected = ((attn - dense_target(targets)) ** 2).mean((-1, -2))
    torch.testing.assert_close(impulse_objective(x, wq, wk, targets), expected)


def test_fast_matches_reference_under_the_cap_on_a_small_problem():
    grid, dim, heads = (8, 8), 64, 2
    x = pseudo_input(grid, dim)
    targets = torch.stack([impulse_target(grid, o) for o in [(0, 1), (-1, -1)]])
    ref_q, ref_k, ref = solve_adam(x, targets, 32, heads, torch.Generator().manual_seed(0), iters=3000)
    q, k, fast = solve_fast(x, targets, 32, heads, torch.Generator().manual_seed(0), reuse_solutions=False)
    nq = ref['nq'][0]
    assert nq == pytest.approx((dim / (3 * 32 * heads)) ** 0.5, rel=0.05)  # uniform +-sqrt(1/(k h)) start
    # the same start: the fast solver's nq is the reference's
    assert fast['nq'][0] == pytest.approx(nq, rel=1e-6)
    torch.testing.assert_close(q.norm(dim=-2), torch.full((2, 32), nq), rtol=1e-5, atol=0)
    torch.testing.assert_close(k.norm(dim=-1), torch.full((2, dim), nq), rtol=1e-5, atol=0)
    assert fast['objective'].mean() <= ref['objective'].mean()
    assert fast['hit_rate'].mean() >= ref['hit_rate'].mean()


def test_reuse_solutions_keeps_products_and_cap():
    grid, dim = (8, 8), 64
    x = pseudo_input(grid, dim)
    same = impulse_target(grid, (0, 1))
    q, k, info = solve_fast(x, torch.stack([same, same]), 32, 2, torch.Generator().manual_seed(0))
    assert info['solves'] == 1
    assert not torch.equal(q[0], q[1])
    torch.testing.assert_close(q[0] @ k[0].T, q[1] @ k[1].T, atol=1e-6, rtol=0)


def test_svd_solver_2025_closed_form():
    model = timm.create_model('vit_tiny_patch2_32', depth=2)
    pos_before = model.pos_embed.detach().clone()
    record = timm_structinit.apply_init(model, 'impulse2025', seed=0)
    assert record['solver'] == 'svd' and record['cfg']['offsets'] == 'fixed'
    assert record['offsets'][0] == [[0, 0], [-1, 0], [0, 1]]
    torch.testing.assert_close(model.pos_embed, pos_before * 18)
    for attn in find_attention(model):
        wq, wk = read_qk(attn)
        torch.testing.assert_close(wq.norm(dim=(-2, -1)), torch.full((3,), 7.0), rtol=1e-5, atol=0)
        torch.testing.assert_close(wk.norm(dim=(-2, -1)), torch.full((3,), 7.0), rtol=1e-5, atol=0)
        wv, wproj = read_vproj(attn)
        product = (wv @ wproj).double()
        assert product.diagonal().mean() == pytest.approx(-0.4, abs=0.03)
        off = product + 0.4 * torch.eye(192, dtype=torch.float64)
        assert off.std().item() == pytest.approx(0.4 / 192 ** 0.5, rel=0.1)
    # on its own pseudo input (LayerNorm of the x18 embedding), each head's argmax is its impulse
    table = F.layer_norm(model.pos_embed[0, 1:].detach(), (192,), eps=1e-5)
    wq, wk = read_qk(model.blocks[1].attn)
    maps = attention_maps(table, wq, wk)
    for head, offset in enumerate(record['offsets'][1]):
        target = impulse_target((16, 16), tuple(offset))
        assert (maps[head].argmax(-1) == target)[target >= 0].float().mean() > 0.9


def test_svd_solver_matches_full_size_pseudo_inverse():
    x = F.layer_norm(torch.randn(36, 48), (48,))
    targets = torch.stack([impulse_target((6, 6), (1, 0))])
    g = torch.Generator().manual_seed(3)
    wq, wk, _ = solve_svd(x, targets, 16, 3, g, factor_norm=1.0)
    dense = dense_target(targets, torch.float64)
    torch.manual_seed(3)  # timm's trunc_normal_ (the authors' noise) draws from the global generator
    noise = timm.layers.trunc_normal_(torch.empty(dense.shape), std=0.6, a=-2.0, b=2.0).double()
    t = (1000 * dense + 3 * noise * (dense == 0))[0]
    ptp = x.double().T @ x.double()
    u, s, vh = torch.linalg.svd(ptp)
    inv = vh[:16].T @ torch.diag(1 / s[:16]) @ u[:, :16].T
    pinv = inv @ x.double().T
    a = pinv @ t @ pinv.T
    au, as_, avh = torch.linalg.svd(a)
    ref_q = au[:, :16] * as_[:16].sqrt()
    ref_k = avh[:16].T * as_[:16].sqrt()
    product = (wq[0] @ wk[0].T).double()
    expected = (ref_q @ ref_k.T) / (ref_q.norm() * ref_k.norm())
    torch.testing.assert_close(product, expected, atol=1e-5, rtol=1e-4)


def test_svd_solver_records_the_statistics_of_the_maps_it_writes():
    """ The closed form computes its maps' statistics in the pseudo input's rank-k coordinates; they are those of
    softmax(s X W_q W_k^T X^T) of the weights it returns, restated from the 2024 objective's definition. """
    x = F.layer_norm(torch.randn(64, 96, generator=torch.Generator().manual_seed(5)), (96,))
    targets = torch.stack([impulse_target((8, 8), o) for o in ((0, 0), (1, 0), (-1, 1), (0, -1))])
    wq, wk, info = solve_svd(x, targets, 24, 4, torch.Generator().manual_seed(6), factor_norm=3.0)
    maps = torch.softmax((x.double() @ wq.double()) @ (x.double() @ wk.double()).mT / 24 ** 0.5, -1)
    valid = targets >= 0
    on_target = maps.gather(-1, targets.clamp_min(0)[..., None])[..., 0] * valid
    dense = torch.zeros_like(maps)
    dense[valid.nonzero(as_tuple=True) + (targets[valid],)] = 1.0
    torch.testing.assert_close(info['objective'].double(), ((maps - dense) ** 2).mean((-1, -2)), rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(info['target_mass'].double(), on_target.sum(-1) / valid.sum(-1), rtol=1e-4, atol=1e-6)
    hits = ((maps.argmax(-1) == targets) & valid).sum(-1) / valid.sum(-1)
    torch.testing.assert_close(info['hit_rate'].double(), hits.double())


def test_share_layers_and_determinism():
    torch.manual_seed(0)
    a = timm.create_model('vit_tiny_patch2_32_impulse3', depth=3, struct_init_seed=4,
                          struct_init_kwargs=dict(share_layers=True))
    assert a.struct_init_record['offsets'][0] == a.struct_init_record['offsets'][2]
    assert torch.equal(a.blocks[0].attn.qkv.weight[:384], a.blocks[2].attn.qkv.weight[:384])
    torch.manual_seed(0)
    b = timm.create_model('vit_tiny_patch2_32_impulse3', depth=3, struct_init_seed=4,
                          struct_init_kwargs=dict(share_layers=True))
    for key, value in a.state_dict().items():
        assert torch.equal(value, b.state_dict()[key]), key
    c = timm.create_model('vit_tiny_patch2_32_impulse5', depth=2, struct_init_seed=4)
    assert c.struct_init_record['cfg']['kernel_size'] == 5  # preset kept when kwargs are overridden
    d = timm.create_model('vit_tiny_patch2_32_impulse5', depth=2, struct_init_seed=4,
                          struct_init_kwargs=dict(border='circular'))
    assert d.struct_init_record['cfg']['kernel_size'] == 5 and d.struct_init_record['cfg']['border'] == 'circular'


def test_only_attention_qk_changes():
    torch.manual_seed(2)
    impulse = timm.create_model('vit_tiny_patch2_32_impulse3', depth=2)
    torch.manual_seed(2)
    base = timm.create_model('vit_tiny_patch2_32_gap_sincos', depth=2)
    for key, value in base.state_dict().items():
        if key.endswith('attn.qkv.weight'):
            assert torch.equal(value[384:], impulse.state_dict()[key][384:])  # V rows untouched
            assert not torch.equal(value[:384], impulse.state_dict()[key][:384])
        elif not key.endswith('attn.qkv.bias'):
            assert torch.equal(value, impulse.state_dict()[key]), key


def test_class_token_model_solves_patch_tokens():
    model = timm.create_model('vit_tiny_patch2_32_sincos', depth=1)
    record = timm_structinit.apply_init(model, 'impulse', seed=0)
    maps, grid = first_block_maps(model)  # patch tokens only: the class row and column are not part of the target
    for head, offset in enumerate(record['offsets'][0]):
        target = impulse_target(grid, tuple(offset))
        assert (maps[head].argmax(-1) == target)[target >= 0].float().mean() >= 0.9


@pytest.mark.parametrize('kwargs, words', [
    (dict(kernel_size=4), ['kernel_size=4', 'odd']),
    (dict(kernel_size=17), ['kernel_size=17', '(16, 16)']),
    (dict(solver='lbfgs'), ["'lbfgs'", "'fast'", "'adam'", "'svd'"]),
    (dict(offsets='sorted'), ["'sorted'", "'distinct'", "'random'", "'fixed'"]),
    (dict(border='reflect'), ["'reflect'", "'zero'", "'circular'"]),
    (dict(fast_iters=-1), ['fast_iters=-1', '0 <= fast_iters']),
])
def test_bad_impulse_args(kwargs, words):
    with pytest.raises(ValueError) as err:
        timm.create_model('vit_tiny_patch2_32_impulse3', depth=1, struct_init_kwargs=kwargs)
    for word in words:
        assert word in str(err.value)


def test_too_many_heads_for_distinct():
    with pytest.raises(ValueError, match='num_heads=12 with kernel_size=3'):
        timm.create_model('vit_tiny_patch2_32_impulse3', depth=1, num_heads=12)
    model = timm.create_model('vit_tiny_patch2_32_impulse3', depth=1, num_heads=12,
                              struct_init_kwargs=dict(offsets='random'))
    assert len(model.struct_init_record['offsets'][0]) == 12


@pytest.mark.parametrize('kernel_size', [3, 5])
def test_distinct_offsets_build_up_to_the_window_and_refuse_past_it(kernel_size):
    """ offsets='distinct' draws each layer's heads without replacement from the f x f window: every head count up to
    f**2 builds (f**2 heads use every offset once), one more is refused before any work. """
    window = set(window_offsets(kernel_size))
    full = kernel_size ** 2
    for heads in (full - 1, full):
        model = timm.create_model('vit_tiny_patch2_32_impulse3', depth=1, num_heads=heads, embed_dim=16 * heads,
                                  struct_init_kwargs=dict(kernel_size=kernel_size))
        layer = {tuple(o) for o in model.struct_init_record['offsets'][0]}
        assert len(layer) == heads and layer <= window
        if heads == full:
            assert layer == window
    with pytest.raises(ValueError, match=f'num_heads={full + 1} with kernel_size={kernel_size}'):
        timm.create_model('vit_tiny_patch2_32_impulse3', depth=1, num_heads=full + 1, embed_dim=16 * (full + 1),
                          struct_init_kwargs=dict(kernel_size=kernel_size))


@pytest.mark.parametrize('name, kwargs', [
    ('vit_tiny_patch2_32_gap_sincos', {}),  # the package's fixed sin-cos table: a buffer
    ('vit_tiny_patch16_224', dict(img_size=32, patch_size=2)),  # timm's learned table and class token: a parameter
])
@pytest.mark.parametrize('init_kwargs', [dict(pos_embed_scale=18.0), {}])
def test_an_init_that_fails_after_writing_leaves_every_tensor_as_it_was(name, kwargs, init_kwargs):
    """ Heads of 4 channels cannot hold 9 impulse maps, which the init finds only after it has written them (the
    position table too, scaled or replaced): the model comes back bit for bit, whatever kind of tensor its table is. """
    model = timm.create_model(name, depth=1, num_heads=9, embed_dim=36, **kwargs)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    scale, record = getattr(model, 'pos_embed_scale', None), getattr(model, 'struct_init_record', None)
    with pytest.raises(ValueError, match='does not hold'):
        timm_structinit.apply_init(model, 'impulse', seed=0, **init_kwargs)
    assert [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])] == []
    assert getattr(model, 'pos_embed_scale', None) == scale and getattr(model, 'struct_init_record', None) == record
