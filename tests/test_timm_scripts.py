""" timm's own scripts (train.py, validate.py, benchmark.py, inference.py, as published in timm's repository) run
this package's models: train.py through `--device-modules timm_structinit.patched`, the others through
`python -m timm_structinit.run SCRIPT ...`. The scripts are read from ../shared/timm-scripts beside the repository
(timm's wheel does not ship them); these tests skip when that folder is absent.

Also here: RandAugment at full magnitude, whose 0-bit posterize Pillow >= 13 rejects.
"""
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image
from timm.data import rand_augment_transform

import timm_structinit
from timm_structinit.pillow_compat import posterize_zero_bits_safe_ops
from timm_structinit.run import main as run_main

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO.parent / 'shared' / 'timm-scripts'
CLASSES = ('cat', 'dog', 'ship')
DEVICE = ['--device', 'cpu']
MODEL_ARGS = [*DEVICE, '--model-kwargs', 'embed_dim=32', 'depth=1', 'num_heads=2', 'patch_size=8']
needs_scripts = pytest.mark.skipif(not (SCRIPTS / 'train.py').is_file(), reason=f'timm scripts not found at {SCRIPTS}')


def _env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS='1', PYTHONPATH=os.pathsep.join(filter(None, [
        str(REPO), os.environ.get('PYTHONPATH')])))


def _run(args, cwd) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, *map(str, args)], cwd=cwd, env=_env(), capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, f'{args}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}'
    return result


@pytest.fixture(scope='module')
def image_folder(tmp_path_factory) -> Path:
    """ train/ and val/ ImageFolder splits, 6 and 2 colour-coded 32x32 images per class. """
    root = tmp_path_factory.mktemp('images')
    g = torch.Generator().manual_seed(0)
    for split, count in (('train', 6), ('val', 2)):
        for c, name in enumerate(CLASSES):
            (root / split / name).mkdir(parents=True)
            for i in range(count):
                pixels = torch.rand(32, 32, 3, generator=g) * 80
                pixels[..., c] += 160  # each class leans on one colour channel
                Image.fromarray(pixels.byte().numpy()).save(root / split / name / f'{i}.png')
    return root


@pytest.fixture(scope='module')
def trained(image_folder, tmp_path_factory) -> Path:
    """ One epoch of timm's train.py on an impulse model, with RandAugment at its most common recipe. """
    out = tmp_path_factory.mktemp('train')
    _run([SCRIPTS / 'train.py', '--device-modules', 'timm_structinit.patched', '--model', 'vit_tiny_patch2_32_impulse3',
          *MODEL_ARGS, '--data-dir', image_folder, '--train-split', 'train', '--val-split', 'val',
          '--num-classes', 3, '--input-size', 3, 32, 32, '--epochs', 1, '-b', 6, '--workers', 1,
          '--aa', 'rand-m9-mstd0.5-inc1', '--opt', 'adamw', '--lr', '1e-3', '--warmup-epochs', 0,
          '--output', out, '--experiment', 'run', '--seed', 0], cwd=out)
    return out / 'run'


@needs_scripts
def test_train_script(trained):
    with open(trained / 'summary.csv') as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1 and float(rows[0]['train_loss']) > 0
    checkpoint = torch.load(trained / 'last.pth.tar', map_location='cpu', weights_only=False)
    assert checkpoint['arch'] == 'vit_tiny_patch2_32_impulse3'
    assert checkpoint['state_dict']['head.weight'].shape == (3, 32)


@needs_scripts
def test_validate_script(trained, image_folder, tmp_path):
    results = tmp_path / 'results.csv'
    _run(['-m', 'timm_structinit.run', SCRIPTS / 'validate.py', '--model', 'vit_tiny_patch2_32_impulse3',
          *MODEL_ARGS, '--num-classes', 3, '--checkpoint', trained / 'last.pth.tar', '--data-dir', image_folder,
          '--split', 'val', '-b', 6, '--workers', 1, '--results-file', results], cwd=tmp_path)
    with open(results) as f:
        row, = csv.DictReader(f)
    assert row['model'] == 'vit_tiny_patch2_32_impulse3' and 0 <= float(row['top1']) <= 100


@needs_scripts
def test_inference_script(trained, image_folder, tmp_path):
    _run(['-m', 'timm_structinit.run', SCRIPTS / 'inference.py', '--model', 'vit_tiny_patch2_32_impulse3',
          *MODEL_ARGS, '--num-classes', 3, '--checkpoint', trained / 'last.pth.tar', '--data-dir',
          image_folder / 'val', '-b', 6, '--workers', 1, '--topk', 2, '--results-dir', tmp_path,
          '--results-file', 'topk', '--results-format', 'csv', '--no-console-results'], cwd=tmp_path)
    with open(tmp_path / 'topk.csv') as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * len(CLASSES)


@needs_scripts
def test_plain_validate_script_on_an_export(trained, image_folder, tmp_path):
    """ An export of the trained checkpoint is a plain timm model: timm's validate.py reads it as `local-dir:`
    (the offline twin of `hf-hub:`) without this package, and gives the plugin's accuracy. """
    export = tmp_path / 'export'
    _run(['-m', 'timm_structinit.cli', 'export', 'vit_tiny_patch2_32_impulse3', export, '--checkpoint',
          trained / 'last.pth.tar', '--model-kwargs', 'embed_dim=32', 'depth=1', 'num_heads=2', 'patch_size=8',
          'num_classes=3'], cwd=tmp_path)
    top1 = {}
    for how, prefix in (('plain', []), ('plugin', ['-m', 'timm_structinit.run'])):
        results = tmp_path / f'{how}.csv'
        _run([*prefix, SCRIPTS / 'validate.py', '--model', f'local-dir:{export}', '--pretrained', *DEVICE,
              '--data-dir', image_folder, '--split', 'val', '-b', 6, '--workers', 1, '--results-file', results],
             cwd=tmp_path)
        with open(results) as f:
            row, = csv.DictReader(f)
        top1[how] = float(row['top1'])
    with open(export / 'config.json') as f:
        assert not json.load(f)['architecture'].startswith(('vit_tiny_patch2_32', 'timm_structinit'))
    assert top1['plain'] == top1['plugin']


@needs_scripts
def test_benchmark_script(tmp_path):
    results = tmp_path / 'bench.json'
    _run(['-m', 'timm_structinit.run', SCRIPTS / 'benchmark.py', '--model', 'vit_tiny_patch2_32_mimetic',
          *MODEL_ARGS, '--bench', 'inference', '--num-warm-iter', 1, '--num-bench-iter', 5, '-b', 2,
          '--results-file', results, '--results-format', 'json'], cwd=tmp_path)
    assert 'infer_samples_per_sec' in results.read_text()


def test_run_refuses_missing_script(tmp_path, capsys):
    assert run_main([str(tmp_path / 'validate.py')]) == 2
    assert 'validate.py' in capsys.readouterr().err
    assert run_main([]) == 2


def test_run_passes_arguments_and_exit_status(tmp_path):
    script = tmp_path / 'tool.py'
    report = tmp_path / 'report.txt'
    script.write_text('import sys, timm\n'
                      f'open({str(report)!r}, "w").write(repr((timm.is_model("vit_tiny_patch2_32_mimetic"), '
                      'sys.argv[1:], __name__)))\n'
                      'sys.exit(3)\n')
    assert run_main([str(script), '--model', 'x', '-b', '2']) == 3
    assert report.read_text() == repr((True, ['--model', 'x', '-b', '2'], '__main__'))


@pytest.mark.parametrize('policy, posterize', [('rand-m10-mstd0-inc1', 'PosterizeIncreasing'),
                                               ('rand-m0-mstd0', 'Posterize')])
def test_rand_augment_zero_bit_posterize(policy, posterize):
    """ Every op of the policy runs, including the posterize that keeps 0 bits at that magnitude (Pillow >= 13
    rejects 0 bits): 'PosterizeIncreasing' at full magnitude, 'Posterize' at magnitude 0. """
    image = Image.new('RGB', (32, 32), (200, 120, 40))
    with posterize_zero_bits_safe_ops():  # as the package's commands build their transforms
        transform = rand_augment_transform(policy, dict(translate_const=10, img_mean=(124, 116, 104)))
    assert posterize in {op.name for op in transform.ops}
    for op in transform.ops:
        op.prob = 1.0
        assert op(image).size == image.size, op.name
    zero_bits, = [op for op in transform.ops if op.name == posterize]
    assert zero_bits(image).getextrema() == ((0, 0), (0, 0), (0, 0))  # 0 bits kept: black, as Pillow < 13 gave
