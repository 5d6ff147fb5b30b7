""" Every timm model family, every init: it holds in the model's own step-0 forward, or it is refused in one line with
the model bit for bit as it was; never applied without holding, never a traceback (tests/zoo.py has the builds and
the checks, written apart from the package). The docs' table (docs/zoo.md) is what these checks give. """
import ast
from pathlib import Path

import pytest
import timm
import torch

import timm_structinit

from timm_structinit.inits.heads import NoAttentionError, attention_refusals, model_layouts
from timm_structinit.inits.timm_attention import NOT_TOKEN_ATTENTION, POOLING_HEADS, READERS, REFUSED
from zoo import NO_ATTENTION, ZOO, model_cell, outcome, outcomes, parse_table, timm_families

DOCS = Path(__file__).resolve().parents[1] / 'docs' / 'zoo.md'

# classes of timm that compute a softmax for something other than attention between tokens, or whose softmax is
# inside a class the tables name (the layers or blocks around it)
SOFTMAX_ELSEWHERE = {
    'timm.layers.split_attn.RadixSoftmax',              # inside SplitAttn: a softmax over branches
    'timm.models.efficientvim.EfficientViM',            # the model class of HSMSSD (a state-space mixer)
    'timm.models.efficientvim.EfficientViMDistilled',
}


def test_every_timm_family_is_in_the_zoo():
    """ A family a new timm release adds shows up here: add it to tests/zoo.py, then regenerate docs/zoo.md. """
    families = set(timm_families())
    listed = set(ZOO) | set(NO_ATTENTION)
    assert families - listed == set(), f'timm families not in tests/zoo.py: {sorted(families - listed)}'
    gone = sorted(listed - families)
    assert not gone, f'families tests/zoo.py lists that timm no longer has: {gone}'


def _softmax_classes():
    """ Qualified names of timm's classes whose source calls softmax or scaled_dot_product_attention. """
    root = Path(timm.__file__).parent
    for path in sorted([*root.glob('models/*.py'), *root.glob('layers/*.py')]):
        text = path.read_text()
        if 'softmax' not in text and 'scaled_dot_product_attention' not in text:
            continue
        lines = text.splitlines()
        for node in ast.parse(text).body:
            if isinstance(node, ast.ClassDef):
                source = '\n'.join(lines[node.lineno - 1:node.end_lineno])
                if 'softmax' in source or 'scaled_dot_product_attention' in source:
                    yield f'timm.{path.parent.name}.{path.stem}.{node.name}'


def test_every_attention_class_of_timm_is_read_or_refused():
    """ Each class of timm computing a softmax is read (READERS), refused with what it computes (REFUSED), or known
    not to be attention between tokens: a new class shows up here rather than being passed over in silence. """
    known = set(READERS) | set(REFUSED) | POOLING_HEADS | set(NOT_TOKEN_ATTENTION) | SOFTMAX_ELSEWHERE
    unknown = sorted(set(_softmax_classes()) - known)
    assert not unknown, f'timm classes with a softmax that inits.timm_attention does not know: {unknown}'


@pytest.mark.slow  # 42 builds, 0.2-1.6 s each; a family timm adds fails test_every_timm_family_is_in_the_zoo
@pytest.mark.parametrize('family', NO_ATTENTION)
def test_families_without_attention_have_none(family):
    """ The first model of each family listed without attention, built on the meta device (no weights), has no
    attention an init could write or would refuse. """
    name = timm_families()[family][0]
    model = timm.create_model(name, pretrained=False, device='meta')
    assert attention_refusals(model) == []
    with pytest.raises(NoAttentionError, match='has no attention layer'):
        model_layouts(model)


def _builds():
    for family, builds in ZOO.items():
        for name, kwargs, slow in builds:
            marks = [pytest.mark.slow] if slow else []
            yield pytest.param(family, name, kwargs, id=f'{family}-{name}' + ('-bias' if 'rel_pos_type' in kwargs else
                                                                             '-rope' if 'eva02' in name else ''),
                               marks=marks)


@pytest.mark.parametrize('family,name,kwargs', list(_builds()))
def test_each_init_holds_or_is_refused_untouched(family, name, kwargs):
    """ One small build of the family, each init from a fresh build: it holds (mimetic: every written product is
    the paper's; impulse: the model's own forward on position alone peaks on each head's offset) or is refused in
    one line with the model as it was (`zoo.outcome` asserts both); and the outcome is the one docs/zoo.md gives. """
    torch.set_num_threads(1)
    documented = parse_table(DOCS.read_text())
    for init, result in outcomes(name, kwargs).items():
        row = documented.get((family, model_cell(name, kwargs), init))
        assert row is not None, f'docs/zoo.md has no row for {family} {name}: python tests/zoo.py --write docs/zoo.md'
        assert row['outcome'] == result['outcome'], (init, result)
        if result['outcome'] == 'refused':
            assert row['detail'] == result['detail'].replace('|', '/'), init


def test_the_table_names_the_timm_it_was_made_with():
    assert f'timm {timm.__version__}' in DOCS.read_text()


def test_a_learned_table_vit_holds_on_a_blank_image():
    """ timm's DeiT (a learned position table) under the 2024 preset: on an all-zero image, through timm's own
    attention (its unfused path, the maps read at attn_drop), every head of the first block puts its largest attention
    on the key at its offset for every query whose key is on the 6 x 6 grid; the record says what the model computes
    on position alone, the same here (the patch embedding's bias is small against the sin-cos table). """
    torch.manual_seed(0)
    model = timm.create_model('deit_tiny_patch16_224', depth=3, img_size=96).eval()
    record = timm_structinit.apply_init(model, 'impulse', seed=0)
    attn = model.blocks[0].attn
    attn.fused_attn = False
    seen = {}
    handle = attn.attn_drop.register_forward_hook(lambda module, args, out: seen.update(maps=out))
    with torch.no_grad():
        model(torch.zeros(1, 3, 96, 96))
    handle.remove()
    for head, (dy, dx) in enumerate(record['offsets'][0]):
        argmax = seen['maps'][0, head, 1:].argmax(-1) - 1  # patch queries; the class token is key 0
        on_grid = [(r, c) for r in range(6) for c in range(6) if 0 <= r + dy < 6 and 0 <= c + dx < 6]
        assert all(int(argmax[r * 6 + c]) == (r + dy) * 6 + c + dx for r, c in on_grid), head
    assert record['hit_rate'][0] == [1.0] * 3 and 'position alone' in record['measured_on']


# every hyperparameter of the impulse inits away from its preset, on timm's own models: a learned-table ViT with a
# class token (DeiT, patch 16: its patch values span the width), one whose width leaves room beside the patch values
# (content='orthogonal' has something to solve on), BEiT's bias tables and Swin's
DEIT = ('deit_tiny_patch16_224', dict(depth=2, img_size=64))
ROOMY = ('vit_tiny_patch16_224', dict(depth=2, img_size=32, patch_size=4, embed_dim=64, num_heads=2))
SOLVED_QK_SETTINGS = [
    dict(kernel_size=5), dict(offsets='random'), dict(offsets='fixed'), dict(border='circular'),
    dict(share_layers=True),
    dict(solver='svd'), dict(solver='adam', adam_iters=1), dict(solver='adam', adam_iters=60, adam_lr=1e-2),
    dict(pseudo_input='pos_embed'), dict(pos_embed_scale=0.01), dict(pos_embed_scale=20.0), dict(vproj='mimetic'),
    dict(content='orthogonal'), dict(layer_inputs='propagated'), dict(svd_rtol=0.9), dict(noise_std=0.0),
    dict(target_scale=1.0), dict(fast_iters=1), dict(reuse_solutions=False), dict(warm_start=0.0),
    dict(factor_norm=0.1)]
BIAS_TABLE_SETTINGS = [dict(kernel_size=5), dict(offsets='random'), dict(offsets='fixed'), dict(vproj='mimetic')]
FAST_SETTINGS = [(*ROOMY, 'impulse', dict(content='orthogonal')), (*DEIT, 'impulse2025', dict(noise_std=0.0))]


def _settings():
    for init in ('impulse', 'impulse2025'):
        for build in (DEIT, ROOMY):
            for setting in SOLVED_QK_SETTINGS:
                yield (*build, init, setting)
        for build in (ZOO['beit'][0][:2], ZOO['swin_transformer'][0][:2]):
            for setting in BIAS_TABLE_SETTINGS:
                yield (*build, init, setting)


@pytest.mark.parametrize('name,kwargs,init,setting', [
    pytest.param(*case, marks=[] if case in FAST_SETTINGS else [pytest.mark.slow],
                 id=f"{case[0].split('_')[0]}-{case[2]}-" + '-'.join(f'{k}={v}' for k, v in case[3].items()))
    for case in _settings()])
def test_every_impulse_setting_holds_or_is_refused_untouched(name, kwargs, init, setting):
    """ An impulse init away from its preset either holds in the model's own forward pass (the test's own reading of
    the maps on position alone) or is refused in one line with the model as it was: never applied without holding,
    never a traceback (noise_std=0 divided by zero in the 2025 closed form's noise draw). """
    torch.set_num_threads(1)
    assert outcome(name, kwargs, init, init_kwargs=setting)['outcome'] in ('holds', 'refused')


def test_content_orthogonal_with_nothing_left_is_refused_before_any_work():
    """ A patch-16 ViT's patch embedding (768 values per patch) spans every direction of a 192-wide token: nothing of
    the position table is free of content, so content='orthogonal' has nothing to solve on. """
    model = timm.create_model('vit_tiny_patch16_224', depth=1, img_size=64)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"content='orthogonal' leaves nothing to solve on: .* span 192 of the 192 "):
        timm_structinit.apply_init(model, 'impulse', seed=0, content='orthogonal')
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize('name,kwargs,init,printed', [
    pytest.param('pit_ti_224', ['depth=(1,1,1)'], 'mimetic', '-0.40',  # W_v W_proj's diagonal: -b2, every stage
                 marks=pytest.mark.slow),
    ('beit_base_patch16_224', ['depth=2', 'embed_dim=64', 'num_heads=2', 'img_size=64'], 'impulse2025', '0.516'),
])
def test_show_draws_a_timm_model_the_init_reached(name, kwargs, init, printed, tmp_path, capsys):
    """ `show` on models of the families the inits newly reach: a hierarchical one (its products per head) and one
    with bias tables (each head's mass on its offset, target_mass 0.5 in the model's own forward pass). """
    from timm_structinit import cli
    out = tmp_path / 'layer.png'
    argv = ['show', name, '--init', init, '--out', str(out)] + (['--model-kwargs', *kwargs] if kwargs else [])
    assert cli.main(argv) == 0
    assert printed in capsys.readouterr().out and out.stat().st_size > 5_000
