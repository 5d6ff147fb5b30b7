""" Importing the package registers its models and changes nothing else of timm's; its two changes to timm (the Pillow
13 RandAugment fix, the loader hook for exports) apply inside its own commands, or where asked; its models are listed
apart from timm's.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import timm
import timm.models._hub as timm_hub
import torch
from PIL import Image
from timm.data import auto_augment, rand_augment_transform

import timm_structinit
from timm_structinit import cli, hub
from timm_structinit.data import pillow_compat
from timm_structinit import train as train_mod
from timm_structinit.run import main as run_main

REPO = Path(__file__).resolve().parents[1]
TINY = dict(embed_dim=32, depth=1, num_heads=2, patch_size=8)

# Every attribute of every timm module, and every entry of every dict among them, by identity: taken after
# `import timm` (which loads every timm module the package uses), then again after `import timm_structinit`.
_SNAPSHOT = r'''
import json, sys
import timm
modules = sorted(m for m in sys.modules if m.split('.')[0] == 'timm')

def snapshot():
    ids = {}
    for name in modules:
        for attr, value in list(vars(sys.modules[name]).items()):
            ids[f'{name}.{attr}'] = id(value)
            if isinstance(value, dict):
                for key, item in list(value.items()):
                    ids[f'{name}.{attr}[{key!r}]'] = id(item)
    return ids

before = snapshot()
import timm_structinit
after = snapshot()
print(json.dumps(dict(changed=sorted(k for k in before if after.get(k) != before[k]),
                      added=sorted(k for k in after if k not in before),
                      loaded=sorted(m for m in sys.modules if m.split('.')[0] == 'timm' and m not in modules),
                      models=timm_structinit.list_models())))
'''


def _python(code: str, *args: str) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get('PYTHONPATH')])),
               HF_HUB_OFFLINE='1')
    proc = subprocess.run([sys.executable, '-c', code, *args], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_import_leaves_timms_objects_as_they_were():
    result = json.loads(_python(_SNAPSHOT))
    assert result['loaded'] == []  # so that the snapshot covers every timm module the package could touch
    assert result['changed'] == [], 'import timm_structinit replaced these objects of timm'
    # what registering adds: the package's names in timm's registry, nothing else anywhere
    models = result['models']
    assert len(models) == 26
    registry = 'timm.models._registry.'
    others = [k for k in result['added'] if not k.startswith(registry)
              or not any(k.endswith(f"['{m}']") or f"['{m}." in k for m in models)]
    assert others == []
    assert {k for k in result['added'] if k.startswith(registry + '_model_entrypoints[')} == {
        f"{registry}_model_entrypoints['{m}']" for m in models}


def test_the_two_changes_stay_out_of_an_importing_program():
    assert not getattr(timm_hub._parse_model_cfg, '_timm_structinit', False)
    assert auto_augment.NAME_TO_OP['PosterizeIncreasing'] is auto_augment.posterize
    assert auto_augment.NAME_TO_OP['Posterize'] is auto_augment.posterize


def test_registered_exports_is_the_hook_for_one_block(tmp_path):
    folder = hub.export_model('vit_tiny_patch2_32_impulse3', tmp_path / 'imp', seed=1, model_kwargs=TINY)
    source = f'local-dir:{folder}'
    assert type(timm.create_model(source)) is timm.models.VisionTransformer  # plain timm reads config.json
    parse = timm_hub._parse_model_cfg
    with hub.registered_exports() as hooked:
        with hub.registered_exports():  # nested: the inner block leaves the outer's hook in place
            pass
        assert hooked and type(timm.create_model(source)) is timm_structinit.StructVisionTransformer
    assert timm_hub._parse_model_cfg is parse
    assert type(timm.create_model(source)) is timm.models.VisionTransformer


@pytest.mark.slow
def test_patch_timm_applies_both_for_the_process(tmp_path):
    folder = hub.export_model('vit_tiny_patch2_32_impulse3', tmp_path / 'imp', seed=1, model_kwargs=TINY)
    code = ('import sys, timm\n'
            'import timm_structinit.patched  # what --device-modules timm_structinit.patched does\n'
            'from timm.data import auto_augment\n'
            'from timm_structinit.data.pillow_compat import posterize_zero_bits_safe\n'
            'model = timm.create_model(sys.argv[1], pretrained=True)\n'
            'print(type(model).__name__, auto_augment.NAME_TO_OP["PosterizeIncreasing"] is posterize_zero_bits_safe)')
    assert _python(code, f'local-dir:{folder}').split() == ['StructVisionTransformer', str(
        pillow_compat._pillow_rejects_zero_bits())]


def test_rand_augment_built_in_the_block_keeps_the_zero_bit_posterize():
    image = Image.new('RGB', (32, 32), (200, 120, 40))
    with pillow_compat.posterize_zero_bits_safe_ops() as needed:
        transform = rand_augment_transform('rand-m10-mstd0-inc1', dict(translate_const=10))
    assert needed == pillow_compat._pillow_rejects_zero_bits()
    assert auto_augment.NAME_TO_OP['PosterizeIncreasing'] is auto_augment.posterize  # timm's table is back
    zero_bits, = [op for op in transform.ops if op.name == 'PosterizeIncreasing']
    zero_bits.prob = 1.0
    assert zero_bits(image).getextrema() == ((0, 0), (0, 0), (0, 0))  # 0 bits kept: black, as Pillow < 13 gave


def _hooks_in_place() -> tuple:
    return (getattr(timm_hub._parse_model_cfg, '_timm_structinit', False),
            auto_augment.NAME_TO_OP['PosterizeIncreasing'] is not auto_augment.posterize)


def test_the_training_command_trains_with_both(monkeypatch):
    seen = []
    monkeypatch.setattr(train_mod, '_train', lambda args, inputs, device: seen.append(_hooks_in_place()) or {})
    args = train_mod.parse_args(['--dataset', 'sklearn/digits', '--device', 'cpu'])
    train_mod.train(args)
    assert seen == [(True, pillow_compat._pillow_rejects_zero_bits())]
    assert _hooks_in_place() == (False, False)


def test_run_runs_timms_scripts_with_both(tmp_path):
    script, report = tmp_path / 'tool.py', tmp_path / 'report.json'
    script.write_text('import json, timm.models._hub as h\n'
                      'from timm.data import auto_augment as a\n'
                      f'json.dump([getattr(h._parse_model_cfg, "_timm_structinit", False), '
                      f'a.NAME_TO_OP["PosterizeIncreasing"] is not a.posterize], open({str(report)!r}, "w"))\n')
    assert run_main([str(script)]) == 0
    assert json.loads(report.read_text()) == [True, pillow_compat._pillow_rejects_zero_bits()]
    assert _hooks_in_place() == (False, False)


def test_list_models_lists_the_package_alone():
    ours = timm_structinit.list_models()
    # timm lists them under its module names, among its own models
    in_timm_modules = timm.list_models(module=['vision_transformer', 'swin_transformer', 'mlp_mixer'])
    assert set(ours) < set(in_timm_modules)
    assert ours == [m for m in in_timm_modules if timm.models.model_entrypoint(m).__module__.startswith(
        'timm_structinit.')]
    assert len(ours) == 26 and 'vit_tiny_patch2_32_mimetic' in ours and 'vit_tiny_patch16_224' not in ours
    assert timm_structinit.list_models('*mimetic') == [m for m in ours if m.endswith('mimetic')]
    assert timm_structinit.list_models(['swin*', 'mixer*']) == [m for m in ours if m.startswith(('swin', 'mixer'))]


def test_models_command(capsys):
    assert cli.main(['models']) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[:-2]] == timm_structinit.list_models()
    assert lines[-1].startswith('26 models')
    assert 'mimetic init, class token + sin-cos' in lines[timm_structinit.list_models().index(
        'vit_tiny_patch2_32_mimetic')]
    assert cli.main(['models', '*impulse2025']) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith('3 models')
    assert cli.main(['models', 'resnet*']) == 2  # timm's own models are not the package's
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and "no model of this package matches 'resnet*'" in err
