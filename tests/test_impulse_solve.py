""" The fast impulse solver's machinery: the batched L-BFGS, solves shared by transposed targets, pieces of the maps
on large grids, and the budget that refuses a grid whose solve would not fit, before any work. """
import pytest
import timm
import torch

import timm_structinit
import timm_structinit.inits.impulse as impulse
import timm_structinit.inits.impulse_maps as impulse_maps
import timm_structinit.inits.impulse_solvers as solvers
from timm_structinit.inits import make_init_cfg, model_geometry
from timm_structinit.inits.heads import find_attention
from timm_structinit.inits.impulse import impulse_target, pseudo_input, window_offsets
from timm_structinit.inits.impulse_solvers import attention_maps, impulse_objective, solve_fast
from timm_structinit.inits.lbfgs import minimize
from timm_structinit.models.vision_transformer import default_cfgs


@pytest.fixture
def threads():
    saved = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(saved)


def test_lbfgs_minimizes_each_row_on_its_own():
    """ Ill-conditioned quadratics, one per row: every row reaches its minimum, and a row's result does not depend on
    the rows it shares the batch with. """
    g = torch.Generator().manual_seed(0)
    curvature = torch.logspace(0, 2, 40).expand(3, 40) * torch.tensor([[1.0], [0.1], [10.0]])
    center = torch.randn(3, 40, generator=g, dtype=torch.float64)
    curvature = curvature.double()

    def value_and_grad(z):
        d = z - center[:z.shape[0]] if z.shape[0] == 3 else z - center[1:2]
        c = curvature[:z.shape[0]] if z.shape[0] == 3 else curvature[1:2]
        return 0.5 * (c * d * d).sum(-1), c * d
    start = torch.zeros(3, 40, dtype=torch.float64)
    z, f = minimize(value_and_grad, start, 100)
    torch.testing.assert_close(z, center, atol=1e-6, rtol=0)
    assert (f < 1e-10).all()
    alone, _ = minimize(value_and_grad, start[1:2], 100)
    assert torch.equal(alone, z[1:2])


def test_transposed_targets_share_a_solve_and_their_maps_transpose():
    grid = (8, 8)
    x = pseudo_input(grid, 64)
    offsets = window_offsets(3)
    targets = torch.stack([impulse_target(grid, o) for o in offsets])
    wq, wk, info = solve_fast(x, targets, 16, 4, torch.Generator().manual_seed(0), iters=15)
    assert info['solves'] == 6  # (dy, dx) and (dx, dy) share: 3 symmetric offsets + 3 pairs
    torch.testing.assert_close(info['objective'], impulse_objective(x, wq, wk, targets), rtol=1e-4, atol=0)
    maps = attention_maps(x, wq, wk).view(9, 8, 8, 8, 8)  # (head, query h, query w, key h, key w)
    for head, (dy, dx) in enumerate(offsets):
        partner = offsets.index((dx, dy))
        if partner != head:  # (a symmetric target's own solution need not be symmetric)
            # float32 rounding of logits up to ~3.4 leaves ~1e-6 in the maps; a wrong swap would leave ~0.1
            torch.testing.assert_close(maps[partner], maps[head].permute(1, 0, 3, 2), atol=3e-6, rtol=0)
    # the cap holds exactly for every head, copies included
    torch.testing.assert_close(wq.norm(dim=-2), torch.full((9, 16), info['nq'][0]), rtol=1e-5, atol=0)
    torch.testing.assert_close(wk.norm(dim=-1), torch.full((9, 64), info['nq'][0]), rtol=1e-5, atol=0)


def test_a_pseudo_input_that_does_not_transpose_solves_every_target():
    grid = (8, 8)
    x = pseudo_input(grid, 64)[torch.randperm(64, generator=torch.Generator().manual_seed(0))]
    targets = torch.stack([impulse_target(grid, o) for o in [(0, 1), (1, 0)]])
    assert solve_fast(x, targets, 16, 4, torch.Generator().manual_seed(0), iters=3)[2]['solves'] == 2


def test_large_grid_in_pieces_is_the_same_whatever_the_thread_count(threads, monkeypatch):
    """ On a grid whose maps exceed one piece the solve works on bands of query rows; the bands are fixed, so the
    weights do not depend on the threads that run them. """
    monkeypatch.setattr(impulse_maps, 'TASK_ELEMENTS', 2 ** 12)  # 144 x 144 maps: bands of 28 query rows
    grid = (12, 12)
    x = pseudo_input(grid, 32)
    targets = torch.stack([impulse_target(grid, o) for o in [(0, 1), (1, 1)]])
    assert len(solvers._tasks(2, 64)) == 2 and len(solvers._tasks(2, 144)) == 12  # whole maps, then bands
    results = []
    for num_threads in (1, 2):
        threads(num_threads)
        results.append(solve_fast(x, targets, 16, 2, torch.Generator().manual_seed(0), iters=6))
    for a, b in zip(results[0][:2], results[1][:2]):
        assert torch.equal(a, b)
    monkeypatch.setattr(impulse_maps, 'TASK_ELEMENTS', 2 ** 18)  # one piece: the same problem, summed in another order
    whole = solve_fast(x, targets, 16, 2, torch.Generator().manual_seed(0), iters=6)
    torch.testing.assert_close(whole[2]['objective'], results[0][2]['objective'], rtol=1e-4, atol=0)


def _refuse_any_work(monkeypatch):
    def no_work(*args, **kwargs):
        raise AssertionError('the solve started')
    for name in ('fast', 'adam', 'svd'):
        monkeypatch.setitem(solvers.SOLVERS, name, no_work)
    monkeypatch.setattr(impulse, 'impulse_pseudo_input', no_work)


def test_huge_grid_is_refused_before_any_work(monkeypatch):
    _refuse_any_work(monkeypatch)
    with pytest.raises(ValueError) as err:
        timm.create_model('vit_tiny_patch2_32_impulse3', img_size=1024, embed_dim=32, depth=1, num_heads=2)
    message = str(err.value)
    for words in ['patch grid 512 x 512', 'img_size=1024 / patch_size=2', '262144 tokens', "solver='fast'",
                  'multiply-adds', 'GiB', 'above the budget of 2e+12 multiply-adds and 4 GiB', 'fit (img_size=']:
        assert words in message, (words, message)
    # the suggestion fits, and the grid above it does not
    side = int(message.split('grids up to ')[1].split(' x ')[0])
    geometry = dict(grid_size=(side, side), embed_dim=32, num_heads=2, num_layers=1)
    cfg = make_init_cfg('impulse', kernel_size=3)
    memory, work = impulse.impulse_solve_cost(cfg, geometry)
    assert memory <= impulse.SOLVE_MEMORY_BUDGET and work <= impulse.SOLVE_WORK_BUDGET
    assert impulse.impulse_solve_cost(cfg, geometry, (side + 1, side + 1))[1] > impulse.SOLVE_WORK_BUDGET


@pytest.mark.parametrize('solver', ['svd', 'adam'])
def test_dense_solvers_are_refused_on_grids_they_cannot_hold(solver, monkeypatch):
    """ 10,000 tokens: the fast solver's pieces fit, the N x N noise of svd (4.5 GiB for 6 heads) and adam's
    10,000 steps over the maps do not. """
    _refuse_any_work(monkeypatch)
    model = timm.create_model('vit_tiny_patch2_32_gap_sincos', img_size=200, embed_dim=32, depth=3, num_heads=2)
    before = model.blocks[0].attn.qkv.weight.clone()
    with pytest.raises(ValueError, match=rf"patch grid 100 x 100 \(img_size=200 / patch_size=2\).*solver='{solver}'"):
        timm_structinit.apply_init(model, 'impulse', seed=0, solver=solver)
    assert torch.equal(model.blocks[0].attn.qkv.weight, before)
    cfg = make_init_cfg('impulse')
    assert impulse.impulse_solve_cost(cfg, model_geometry(model, find_attention(model)))[1] < \
        impulse.SOLVE_WORK_BUDGET


@pytest.mark.filterwarnings('ignore:weight_init=')
@pytest.mark.parametrize('name', sorted(n for n in default_cfgs if 'impulse' in n))
def test_registered_impulse_models_are_within_the_budget(name):
    """ Every registered impulse model, the 224 px ones and the 32 px patch-2 ones, passes the budget it is checked
    against (the weights are not built here: test_impulse builds them). """
    model = timm.create_model(name, weight_init='skip')
    cfg = model.struct_init_cfg
    geometry = model_geometry(model, find_attention(model))
    impulse.check_impulse_model(cfg, geometry)
    memory, work = impulse.impulse_solve_cost(cfg, geometry)
    assert work < impulse.SOLVE_WORK_BUDGET / 10 and memory < impulse.SOLVE_MEMORY_BUDGET / 10
