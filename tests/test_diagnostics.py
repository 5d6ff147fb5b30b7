""" Diagnostics report the structures the inits write, and the figure is drawn. """
import pytest
import timm
import torch

import timm_structinit
from timm_structinit.diagnostics import format_summary, image_attention_maps, plot_layer, summarize

TINY = dict(embed_dim=64, depth=2, num_heads=2)


def test_mimetic_summary_signs():
    model = timm.create_model('vit_tiny_patch2_32_mimetic', struct_init_seed=0, **TINY)
    rows = summarize(model)
    assert len(rows) == 4
    for row in rows:
        assert row['qk_diag_mean'] > 5 * row['qk_offdiag_std']
        assert row['vproj_diag_mean'] < -5 * row['vproj_offdiag_std']
    assert 'offset' not in rows[0]


def test_impulse_summary_reports_offsets():
    model = timm.create_model('vit_tiny_patch2_32_impulse3', struct_init_seed=0, depth=2)
    rows = summarize(model)
    for row in rows:
        assert tuple(model.struct_init_record['offsets'][row['layer']][row['head']]) == row['offset']
        assert row['hit_rate'] >= 0.9 and row['target_mass'] > 0.05
    text = format_summary(rows)
    assert str(rows[0]['offset']) in text and 'hit' in text.splitlines()[0]


def test_impulse_mass_on_images_matches_the_image_maps():
    torch.manual_seed(0)  # the weights outside the init shape the attention on images too
    model = timm.create_model('vit_tiny_patch2_32_impulse3', struct_init_seed=0, depth=2)
    images = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    rows = summarize(model, images)
    n = 256
    for row in rows:
        # patch content dilutes the position signal: below the pseudo-input mass, far above chance (1 / N)
        assert 5 / n < row['image_mass'] < row['target_mass']
    maps = image_attention_maps(model, 1, images)
    dy, dx = rows[3]['offset']  # layer 1, head 0
    expected = torch.stack([maps[0, r * 16 + c, (r + dy) * 16 + c + dx]
                            for r in range(16) for c in range(16) if 0 <= r + dy < 16 and 0 <= c + dx < 16]).mean()
    assert abs(rows[3]['image_mass'] - expected.item()) < 1e-6
    assert 'img mass' in format_summary(rows).splitlines()[0]


def test_image_mass_skips_prefix_tokens():
    # class and register tokens lead the sequence; the mass is read on the patch-to-patch block
    model = timm.create_model('vit_tiny_patch2_32', struct_init='impulse', struct_init_seed=0, depth=1, reg_tokens=2)
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    rows = summarize(model, images)
    maps = image_attention_maps(model, 0, images)
    assert maps.shape[-1] == 3 + 256
    dy, dx = rows[0]['offset']
    expected = torch.stack([maps[0, 3 + r * 16 + c, 3 + (r + dy) * 16 + c + dx]
                            for r in range(16) for c in range(16) if 0 <= r + dy < 16 and 0 <= c + dx < 16]).mean()
    assert abs(rows[0]['image_mass'] - expected.item()) < 1e-6
    with pytest.raises(ValueError, match='images gave'):
        summarize(timm.create_model('vit_tiny_patch2_32', struct_init='impulse', struct_init_seed=0, depth=1,
                                    dynamic_img_size=True), torch.randn(1, 3, 16, 16))


def test_impulse2025_maps_use_its_own_pseudo_input():
    # the 2025 init solves on LayerNorm of the model's (x18) position embedding, not on the sin-cos table
    model = timm.create_model('vit_tiny_patch2_32', struct_init='impulse2025', struct_init_seed=0, depth=1)
    rows = summarize(model)
    assert all(row['hit_rate'] > 0.9 and row['target_mass'] > 0.4 for row in rows)


def test_baseline_has_no_structure():
    rows = summarize(timm.create_model('vit_tiny_patch2_32', **TINY))
    assert all(abs(r['qk_diag_mean']) < 0.01 for r in rows)


def test_image_maps_match_manual_attention():
    model = timm.create_model('vit_tiny_patch2_32_mimetic', struct_init_seed=0, **TINY).eval()
    images = torch.randn(3, 3, 32, 32)
    maps = image_attention_maps(model, 0, images)
    assert maps.shape == (2, 257, 257)
    torch.testing.assert_close(maps.sum(-1), torch.ones(2, 257))
    # the hooked recomputation agrees with timm's attention output
    block = model.blocks[0]
    x = block.norm1(model._pos_embed(model.patch_embed(images)))
    v = block.attn.qkv(x)[..., 128:].reshape(3, 257, 2, 32).transpose(1, 2)
    with torch.no_grad():
        per_image = []
        for i in range(3):
            q = block.attn.qkv(x[i:i + 1])[..., :64].reshape(1, 257, 2, 32).transpose(1, 2)
            k = block.attn.qkv(x[i:i + 1])[..., 64:128].reshape(1, 257, 2, 32).transpose(1, 2)
            per_image.append((q @ k.transpose(-1, -2) * 32 ** -0.5).softmax(-1))
        expected = torch.cat(per_image).mean(0)
        out = block.attn(x)
        manual = block.attn.proj((torch.cat(per_image) @ v).transpose(1, 2).reshape(3, 257, 64))
    torch.testing.assert_close(maps, expected, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out, manual, atol=1e-5, rtol=1e-4)


def test_plot_layer_writes_png(tmp_path):
    model = timm.create_model('vit_tiny_patch2_32_impulse3', struct_init_seed=0, **TINY)
    out = plot_layer(model, 1, tmp_path / 'fig.png', images=torch.randn(2, 3, 32, 32))
    assert out.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n' and out.stat().st_size > 10_000
    assert [p.name for p in tmp_path.iterdir()] == ['fig.png']  # no temporary file left


def test_timm_model_through_apply_init():
    model = timm.create_model('deit_tiny_patch16_224', depth=1)
    timm_structinit.apply_init(model, 'mimetic', seed=0)
    rows = summarize(model)
    assert rows[0]['qk_diag_mean'] > 0.3


def test_show_command(tmp_path, capsys, cifar10_dir):
    from timm_structinit.cli import main
    out = tmp_path / 'show.png'
    code = main(['show', 'vit_tiny_patch2_32_impulse3', '--model-kwargs', 'depth=2', '--layer', '1',
                 '--images', str(cifar10_dir / 'test'), '--num-images', '8', '--out', str(out)])
    printed = capsys.readouterr().out
    assert code == 0 and out.stat().st_size > 10_000
    assert 'solver fast' in printed and 'img mass' in printed and len(printed.splitlines()) >= 2 + 6


def test_show_applies_init_to_timm_model_and_refuses_bad_input(tmp_path, capsys):
    from timm_structinit.cli import main
    out = tmp_path / 'deit.png'
    assert main(['show', 'deit_tiny_patch16_224', '--init', 'mimetic', '--model-kwargs', 'depth=1',
                 '--out', str(out)]) == 0
    assert 'init: mimetic' in capsys.readouterr().out and out.exists()
    assert main(['show', 'vit_tiny_patch2_32', '--init', 'nope']) == 2
    assert "unknown struct_init 'nope'" in capsys.readouterr().err
    # the first layer out of range: the depth itself (layers count from 0)
    assert main(['show', 'vit_tiny_patch2_32', '--model-kwargs', 'depth=1', '--layer', '1',
                 '--out', str(tmp_path / 'x.png')]) == 2
    assert '--layer=1 is out of range' in capsys.readouterr().err
