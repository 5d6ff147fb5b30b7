""" Impulse and mimetic on timm's Swin Transformer and MLP-Mixer: the structure at step 0, read from the model's own
forward pass, determinism, and what is left untouched. """
import csv
import pytest
import timm
import torch

import timm_structinit
from timm_structinit.diagnostics.family_maps import family_summary, mixer_mixing_maps, swin_window_maps
from timm_structinit.inits import model_family
from timm_structinit.inits.impulse import impulse_target
from timm_structinit.inits.mixer import shift_matrix
from timm_structinit.inits.swin import window_attentions

# CIFAR scale: 16 x 16 tokens, windows of 4, two stages (the second shifted every other block)
SWIN = dict(img_size=32, patch_size=2, window_size=4, embed_dim=24, depths=(2, 2), num_heads=(3, 6))
# 8 x 8 tokens; tokens_dim = mlp_ratio[0] x embed_dim: 128 = 2 x 64 tokens (exact shift), 64 (GELU in its linear
# range) or 32 (too few)
MIXER = dict(img_size=32, patch_size=4, num_blocks=3, embed_dim=32)


def swin(**kwargs):
    return timm.create_model('swin_tiny_patch4_window7_224', **{**SWIN, **kwargs})


def mixer(tokens_ratio=4.0):
    from timm.models.mlp_mixer import MlpMixer  # timm's mixer_* names fix the patch size
    return MlpMixer(num_classes=10, mlp_ratio=(tokens_ratio, 4.0), **MIXER)


def window_targets(window, offset):
    """ (N,) key index in the window for each query, -1 where the offset leaves the window. """
    return impulse_target(window, tuple(offset), 'zero')


@pytest.mark.parametrize('images', ['random', 'constant'])
@pytest.mark.parametrize('kernel_size', [3, 5])
def test_swin_heads_peak_at_their_offset_in_the_real_forward_pass(images, kernel_size):
    torch.manual_seed(0)
    model = swin()
    record = timm_structinit.apply_init(model, 'impulse', seed=0, kernel_size=kernel_size)
    batch = torch.randn(4, 3, 32, 32) if images == 'random' else torch.full((4, 3, 32, 32), 0.3)
    checked = 0
    for (maps, mask), offsets, window in zip(swin_window_maps(model, batch), record['offsets'],
                                            record['window_size']):
        for head, offset in enumerate(offsets):
            target = window_targets(window, offset)
            rows = torch.nonzero(target >= 0).flatten()
            head_maps = maps[:, :, head]  # (B, nW, N, N)
            visible = torch.ones(head_maps.shape[1], len(rows), dtype=torch.bool) if mask is None else \
                mask[:, rows, target[rows]] == 0  # a shifted window's other regions are masked out
            peaks = head_maps[:, :, rows].argmax(-1) == target[rows]
            assert peaks[:, visible].float().mean() >= 0.9
            mass = head_maps[:, :, rows].gather(-1, target[rows].view(1, 1, -1, 1).expand(
                *head_maps.shape[:2], -1, 1))[..., 0]
            if mask is None:  # target_mass in a full window; a shifted window's masked keys leave it more
                assert mass.mean() == pytest.approx(0.5, abs=0.02)
            else:
                assert mass[:, visible].mean() >= 0.5
            checked += int(visible.sum())
    assert checked > 0 and any(mask is not None for _, mask in swin_window_maps(model, batch[:1]))


def test_swin_impulse_writes_only_the_bias_tables_and_is_seeded():
    torch.manual_seed(0)
    model = swin()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    timm_structinit.apply_init(model, 'impulse', seed=3)
    changed = {k for k, v in model.state_dict().items() if not torch.equal(before[k], v)}
    assert changed == {k for k in before if k.endswith('relative_position_bias_table')}
    again = swin()
    timm_structinit.apply_init(again, 'impulse', seed=3)
    other = swin()
    timm_structinit.apply_init(other, 'impulse', seed=4)
    tables = [k for k in changed]
    assert all(torch.equal(model.state_dict()[k], again.state_dict()[k]) for k in tables)
    assert not all(torch.equal(model.state_dict()[k], other.state_dict()[k]) for k in tables)


def test_swin_mimetic_and_impulse2025_write_each_stage():
    from timm_structinit.diagnostics import qk_products, vproj_product

    def traces(model):  # per window attention: mean trace of the per-head W_q W_k^T and of W_v W_proj, over D
        return [(qk_products(a).diagonal(0, -2, -1).sum(-1).mean() / a.qkv.in_features,
                 vproj_product(a).trace() / a.qkv.in_features) for a in window_attentions(model)]
    model = swin()
    assert all(abs(qk) < 0.05 and abs(vp) < 0.05 for qk, vp in traces(model))  # timm's init: no identity
    timm_structinit.apply_init(model, 'mimetic', seed=0)
    # both stages (width 24 with 3 heads, 48 with 6): W_q W_k^T ~ +I (rank k of D per head), W_v W_proj ~ -0.4 I
    assert all(qk > 0.15 and vp < -0.3 for qk, vp in traces(model))
    record = timm_structinit.apply_init(model, 'impulse2025', seed=0)
    assert record['cfg'] == dict(kernel_size=3, offsets='fixed', target_mass=0.5, vproj='mimetic')
    assert record['offsets'][0] == [[0, 0], [-1, 0], [0, 1]]  # the 2025 paper's order


def test_swin_structure_after_a_new_input_size():
    """ A new image size with the windows kept keeps the tables as written; a new window size makes timm
    interpolate the tables, and applying the init again writes the impulses for the new windows. """
    def peak_share(model, record, size):
        (maps, _), offsets = swin_window_maps(model, torch.randn(2, 3, size, size))[0], record['offsets'][0]
        shares = []
        for head, offset in enumerate(offsets):
            target = window_targets(record['window_size'][0], offset)
            rows = torch.nonzero(target >= 0).flatten()
            shares.append((maps[:, :, head][:, :, rows].argmax(-1) == target[rows]).float().mean())
        return min(shares)
    model = swin()
    record = timm_structinit.apply_init(model, 'impulse', seed=0)
    model.set_input_size(img_size=(48, 48), window_size=4)  # 24 x 24 tokens, windows of 4 as before
    assert peak_share(model, record, 48) >= 0.9
    model.set_input_size(img_size=(48, 48), window_size=6)  # new windows: timm interpolates the tables
    record = timm_structinit.apply_init(model, 'impulse', seed=0)
    assert record['window_size'][0] == [6, 6] and peak_share(model, record, 48) >= 0.9


def test_swin_refuses_settings_that_do_not_apply():
    with pytest.raises(ValueError, match=r"unknown hyperparameter \['solver'\] for struct_init 'impulse' on "
                                         r"Swin Transformer models; valid: \['kernel_size', 'offsets'"):
        timm_structinit.apply_init(swin(), 'impulse', solver='svd')
    with pytest.raises(ValueError, match='target_mass=1.0 is out of range'):
        timm_structinit.apply_init(swin(), 'impulse', target_mass=1.0)


@pytest.mark.parametrize('tokens_ratio,exact', [(4.0, True), (2.0, False)])
def test_mixer_token_mixing_is_a_shift(tokens_ratio, exact):
    torch.manual_seed(0)
    model = mixer(tokens_ratio)
    record = timm_structinit.apply_init(model, 'impulse', seed=0)
    assert model_family(model) == 'mixer' and record['exact'] == [exact] * 3
    grid = tuple(model.stem.grid_size)
    u = torch.randn(16, 32, grid[0] * grid[1])  # (batch, channels, tokens), as a LayerNormed input
    for block, (offset,) in zip(model.blocks, record['offsets']):
        shift = shift_matrix(grid, tuple(offset))
        with torch.no_grad():
            mixed = block.mlp_tokens(u)
        error = (mixed - u @ shift.T).abs().mean() / (u @ shift.T).abs().mean()
        assert error < (1e-6 if exact else 0.05)
        # the token mixing's sensitivity lies on the filter's support: the Jacobian row of each token
        jac = torch.autograd.functional.jacobian(block.mlp_tokens, u[0, 0])
        support = (jac * shift).abs().sum() / jac.abs().sum()
        assert support > (0.999 if exact else 0.97)


def test_mixer_impulse_is_seeded_and_refuses_what_cannot_be_a_shift():
    a, b, c = [torch.manual_seed(0) and mixer() for _ in range(3)]  # equal before the init
    ra = timm_structinit.apply_init(a, 'impulse', seed=1)
    timm_structinit.apply_init(b, 'impulse', seed=1)
    rc = timm_structinit.apply_init(c, 'impulse', seed=2)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert ra['offsets'] != rc['offsets'] and len({tuple(o[0]) for o in ra['offsets']}) == 3  # distinct per block
    with pytest.raises(ValueError, match=r"struct_init 'mimetic' has no version for MLP-Mixer models; valid there: "
                                         r"impulse, impulse2025"):
        timm_structinit.apply_init(mixer(), 'mimetic')
    narrow = mixer(1.0)  # 32 hidden units for 64 tokens
    before = {k: v.clone() for k, v in narrow.state_dict().items()}
    with pytest.raises(ValueError, match=r'block 0: token mixing of 64 tokens with 32 hidden units .* raise '
                                         r'mlp_ratio\[0\]'):
        timm_structinit.apply_init(narrow, 'impulse', seed=0)
    assert all(torch.equal(before[k], v) for k, v in narrow.state_dict().items())


@pytest.mark.parametrize('name', ['swin_tiny_patch4_window7_224', 'mixer_s16_224'])
def test_timm_models_take_the_impulse_init(name):
    model = timm.create_model(name)
    record = timm_structinit.apply_init(model, 'impulse', seed=0)
    assert record['family'] == model_family(model) and record['method'] == 'impulse'
    assert model.struct_init_record is record
    assert torch.isfinite(model(torch.randn(1, 3, 224, 224))).all()


# ------------------------------------------------------------------------------------------------------------------
# the registered CIFAR-scale models, through every entry point

SMALL_SWIN = dict(embed_dim=24, depths=(2, 2), num_heads=(3, 6))
SMALL_MIXER = dict(embed_dim=128, num_blocks=2)  # 64 token-mixing units for 64 tokens: GELU's linear range


@pytest.mark.parametrize('name,family,method', [
    ('swin_tiny_patch2_window4_32', 'swin', None),
    ('swin_tiny_patch2_window4_32_impulse3', 'swin', 'impulse'),
    ('swin_tiny_patch2_window4_32_mimetic', 'swin', 'mimetic'),
    ('mixer_s4_32', 'mixer', None),
    ('mixer_s4_32_impulse3', 'mixer', 'impulse'),
])
def test_registered_models_build_with_their_init_and_are_seeded(name, family, method):
    kwargs = SMALL_SWIN if family == 'swin' else SMALL_MIXER
    torch.manual_seed(0)
    model = timm.create_model(name, **kwargs)
    assert model_family(model) == family and model.pretrained_cfg['num_classes'] == 10
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    record = model.struct_init_record
    assert (record or {}).get('method') == method
    torch.manual_seed(0)
    again = timm.create_model(name, **kwargs)
    assert all(torch.equal(x, y) for x, y in zip(model.state_dict().values(), again.state_dict().values()))
    if method is not None:
        # init_weights re-applies the init after timm's; weight_init='skip' leaves it out
        other = timm.create_model(name, **kwargs, struct_init_seed=record['seed'])
        assert other.struct_init_record == record
        if family == 'swin':  # timm's Mixer has no weight_init argument
            assert timm.create_model(name, **kwargs, weight_init='skip').struct_init_record is None


def test_registered_swin_impulse_keeps_its_structure_in_the_default_geometry():
    """ Swin-T's four stages at 32x32: windows of 4 on the 16x16, 8x8 and 4x4 maps, the last stage's 2x2 map one
    window (3x3 offsets still fit its 3x3 table); more heads than offsets from stage 2 on. """
    model = timm.create_model('swin_tiny_patch2_window4_32_impulse3', struct_init_seed=0)
    record = model.struct_init_record
    assert record['window_size'] == [[4, 4]] * 10 + [[2, 2]] * 2
    # a fixed input: the masses move with it (over seeds 0-11 a full window's least is 0.474 to 0.5), and an input
    # drawn from the process's generator made the test pass or fail by the tests that ran before it
    rows = family_summary(model, torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0)))
    unshifted = {i for i, b in enumerate(b for s in model.layers for b in s.blocks) if b.attn_mask is None}
    by_layer = {}
    for r in rows:
        by_layer.setdefault(r['layer'], []).append(r['mass'])
    for layer, masses in by_layer.items():
        if layer in unshifted and layer < 10:
            assert min(masses) == pytest.approx(0.5, abs=0.02), layer  # target_mass in a full 4x4 window
        assert min(masses) > 0.3, layer


def test_mixer_mixing_maps_are_the_shift():
    model = timm.create_model('mixer_s4_32_impulse3', embed_dim=256, num_blocks=2, struct_init_seed=0)  # exact
    grid = tuple(model.stem.grid_size)
    for jac, (offset,) in zip(mixer_mixing_maps(model), model.struct_init_record['offsets']):
        assert torch.allclose(jac, shift_matrix(grid, tuple(offset)), atol=1e-6)
    assert [r['mass'] for r in family_summary(model)] == pytest.approx([1.0, 1.0])


@pytest.mark.slow
@pytest.mark.parametrize('name,model_kwargs,kwargs', [
    ('swin_tiny_patch2_window4_32_impulse3', dict(embed_dim=24, depths=(2,), num_heads=(3,)),
     ['embed_dim=24', 'depths=(2,)', 'num_heads=(3,)']),
    ('mixer_s4_32_impulse3', dict(embed_dim=128, num_blocks=2), ['embed_dim=128', 'num_blocks=2']),
])
def test_registered_models_train_export_and_show(name, model_kwargs, kwargs, tmp_path, capsys):
    from timm_structinit import cli, hub
    from timm_structinit import train as train_mod
    torch.set_num_threads(1)
    argv = ['--model', name, '--model-kwargs', *kwargs, '--dataset', 'sklearn/digits', '--val-split', 'test',
            '--hflip', '0', '--epochs', '2', '--train-subset', '256', '--batch-size', '32', '--workers', '0',
            '--warmup-epochs', '0', '--lr', '2e-3', '--log-interval', '1000', '--output', tmp_path,
            '--experiment', 'run']
    assert train_mod.main([str(a) for a in argv]) == 0, capsys.readouterr().err
    # the structure is followed through training: before it (epoch 0) and after each epoch, per layer
    with open(tmp_path / 'run' / 'target_mass.csv', newline='') as f:
        mass_rows = list(csv.DictReader(f))
    assert [int(r['epoch']) for r in mass_rows] == [0, 1, 2]
    assert [k for k in mass_rows[0] if k.startswith('layer')] == ['layer1', 'layer2']
    assert float(mass_rows[0]['mean']) > 0.45 and float(mass_rows[-1]['mean']) != float(mass_rows[0]['mean'])
    with open(tmp_path / 'run' / 'summary.csv', newline='') as f:
        assert [float(r['eval_target_mass']) for r in csv.DictReader(f)] == [float(r['mean']) for r in mass_rows[1:]]
    checkpoint = tmp_path / 'run' / 'last.pth.tar'
    folder = hub.export_model(name, tmp_path / 'export', checkpoint=checkpoint, model_kwargs=model_kwargs)
    loaded = timm.create_model(f'local-dir:{folder}', pretrained=True)
    trained = torch.load(checkpoint, map_location='cpu', weights_only=False)['state_dict']
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in trained.items())
    out = tmp_path / 'show.png'
    assert cli.main(['show', name, '--model-kwargs', *kwargs, '--out', str(out)]) == 0
    printed = capsys.readouterr().out
    assert 'init: impulse (seed 0)' in printed and out.stat().st_size > 5_000
    masses = [float(line.split()[-1]) for line in printed.splitlines() if line.strip()[:1].isdigit()]
    assert masses and min(masses) > 0.45  # each head's (block's) mass on its offset at step 0
