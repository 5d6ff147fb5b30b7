""" timm's own scripts (train.py, validate.py, benchmark.py, inference.py, as published in timm's repository) run
this package's models: train.py through `--device-modules timm_structinit.patched`, the others through
`python -m timm_structinit.run SCRIPT ...`. The scripts are read from $TIMM_SCRIPTS_DIR (default ../shared/timm-scripts
beside the repository; timm's wheel does not ship them); these tests skip when that folder is absent.

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
from timm_structinit.data.pillow_compat import posterize_zero_bits_safe_ops
from timm_structinit.run import main as run_main
from colour_images import write_colour_coded_splits

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = Path(os.environ.get('TIMM_SCRIPTS_DIR') or REPO.parent / 'shared' / 'timm-scripts')
CLASSES = ('cat', 'dog', 'ship')
DEVICE = ['--device', 'cpu']
MODEL_ARGS = [*DEVICE, '--model-kwargs', 'embed_dim=32', 'depth=1', 'num_heads=2', 'patch_size=8']
needs_scripts = pytest.mark.skipif(
    not (SCRIPTS / 'train.py').is_file(),
    reason=f"needs timm's scripts at {SCRIPTS} (../shared beside the repository); not found")


def _env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS='1', PYTHONPATH=os.pathsep.join(filter(None, [
        str(REPO), os.environ.get('PYTHONPATH')])))


def _run(args, cwd) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, *map(str, args)], cwd=cwd, env=_env(), capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, f'{args}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}'
    return result


def _own_logits(checkpoint: Path, folder: Path) -> dict:
    """ {image path relative to `folder`: (its class, the logits)} from the checkpoint, computed here with timm's own
    model, checkpoint loader and eval transform: the figures the scripts report, restated without them. """
    import timm
    from timm.data import create_transform, resolve_data_config
    model = timm.create_model('vit_tiny_patch2_32_impulse3', embed_dim=32, depth=1, num_heads=2, patch_size=8,
                              num_classes=len(CLASSES))
    timm.models.load_checkpoint(model, str(checkpoint))
    transform = create_transform(**resolve_data_config({}, model=model))
    out = {}
    with torch.no_grad():
        for label, name in enumerate(CLASSES):
            for path in sorted((folder / name).iterdir()):
                image = transform(Image.open(path).convert('RGB'))[None]
                out[str(path.relative_to(folder))] = (label, model.eval()(image)[0])
    return out


def _top1_and_loss(logits: dict):
    labels = torch.tensor([label for label, _ in logits.values()])
    outputs = torch.stack([out for _, out in logits.values()])
    top1 = 100 * (outputs.argmax(-1) == labels).double().mean().item()
    return top1, torch.nn.functional.cross_entropy(outputs, labels).item()


@pytest.fixture(scope='module')
def image_folder(tmp_path_factory) -> Path:
    """ train/ and val/ ImageFolder splits, 6 and 2 colour-coded 32x32 images per class. """
    return write_colour_coded_splits(tmp_path_factory.mktemp('images'), CLASSES, {'train': 6, 'val': 2})


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


@pytest.mark.slow
@needs_scripts
def test_train_script(trained, image_folder):
    with open(trained / 'summary.csv') as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1 and float(rows[0]['train_loss']) > 0
    checkpoint = torch.load(trained / 'last.pth.tar', map_location='cpu', weights_only=False)
    assert checkpoint['arch'] == 'vit_tiny_patch2_32_impulse3'
    assert checkpoint['state_dict']['head.weight'].shape == (3, 32)
    # the epoch's evaluation is of the weights it saved, on the val split
    top1, loss = _top1_and_loss(_own_logits(trained / 'last.pth.tar', image_folder / 'val'))
    assert float(rows[0]['eval_top1']) == pytest.approx(top1, abs=1e-3)
    assert float(rows[0]['eval_loss']) == pytest.approx(loss, rel=1e-4, abs=1e-5)


@pytest.mark.slow
@needs_scripts
def test_validate_script(trained, image_folder, tmp_path):
    results = tmp_path / 'results.csv'
    _run(['-m', 'timm_structinit.run', SCRIPTS / 'validate.py', '--model', 'vit_tiny_patch2_32_impulse3',
          *MODEL_ARGS, '--num-classes', 3, '--checkpoint', trained / 'last.pth.tar', '--data-dir', image_folder,
          '--split', 'val', '-b', 6, '--workers', 1, '--results-file', results], cwd=tmp_path)
    with open(results) as f:
        row, = csv.DictReader(f)
    top1, _ = _top1_and_loss(_own_logits(trained / 'last.pth.tar', image_folder / 'val'))
    assert row['model'] == 'vit_tiny_patch2_32_impulse3' and float(row['top1']) == pytest.approx(top1, abs=1e-2)


@pytest.mark.slow
@needs_scripts
def test_inference_script(trained, image_folder, tmp_path):
    _run(['-m', 'timm_structinit.run', SCRIPTS / 'inference.py', '--model', 'vit_tiny_patch2_32_impulse3',
          *MODEL_ARGS, '--num-classes', 3, '--checkpoint', trained / 'last.pth.tar', '--data-dir',
          image_folder / 'val', '-b', 6, '--workers', 1, '--topk', 2, '--results-dir', tmp_path,
          '--results-file', 'topk', '--results-format', 'csv', '--no-console-results', '--fullname',
          '--results-separate-col', '--include-index', '--label-type', 'none'], cwd=tmp_path)
    with open(tmp_path / 'topk.csv') as f:
        rows = {row['filename']: row for row in csv.DictReader(f)}
    logits = _own_logits(trained / 'last.pth.tar', image_folder / 'val')
    assert len(rows) == len(logits) == 2 * len(CLASSES)
    for name, (_, output) in logits.items():
        row = rows[str(image_folder / 'val' / name)] if str(image_folder / 'val' / name) in rows else rows[name]
        top = output.topk(2)
        assert [int(row['index_0']), int(row['index_1'])] == top.indices.tolist(), name
        assert float(row['prob_0']) == pytest.approx(output.softmax(-1).max().item(), abs=1e-5), name


@pytest.mark.slow
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


@pytest.mark.slow
@needs_scripts
def test_benchmark_script(tmp_path):
    results = tmp_path / 'bench.json'
    _run(['-m', 'timm_structinit.run', SCRIPTS / 'benchmark.py', '--model', 'vit_tiny_patch2_32_mimetic',
          *MODEL_ARGS, '--bench', 'inference', '--num-warm-iter', 1, '--num-bench-iter', 5, '-b', 2,
          '--results-file', results, '--results-format', 'json'], cwd=tmp_path)
    result = json.loads(results.read_text())
    result = result[0] if isinstance(result, list) else result
    model = timm_structinit.models.vision_transformer.vit_tiny_patch2_32_mimetic(embed_dim=32, depth=1, num_heads=2,
                                                                          patch_size=8)
    assert result['model'] == 'vit_tiny_patch2_32_mimetic' and result['infer_batch_size'] == 2
    assert result['param_count'] == round(sum(p.numel() for p in model.parameters()) / 1e6, 2)
    assert result['infer_samples_per_sec'] > 0 and result['infer_img_size'] == 32


def test_run_refuses_missing_script(tmp_path, capsys):
    assert run_main([str(tmp_path / 'validate.py')]) == 2
    assert 'validate.py' in capsys.readouterr().err
    assert run_main([]) == 2


def test_a_script_stopped_by_an_unnamed_missing_file_is_one_line_naming_it(tmp_path, capsys, monkeypatch):
    """ timm's load_checkpoint logs the path and raises FileNotFoundError() with no message: the line names the
    option and the file, not an empty `error:`. """
    script = tmp_path / 'validate.py'
    script.write_text('raise FileNotFoundError()\n')
    monkeypatch.chdir(tmp_path)
    assert run_main([str(script), '--checkpoint', 'missing.pth.tar', '--device', 'cpu']) == 2
    assert capsys.readouterr().err == ("timm_structinit.run: error: validate.py: --checkpoint 'missing.pth.tar': "
                                       "no such file\n")
    (tmp_path / 'there.pth.tar').write_bytes(b'')  # no missing file among the arguments: said as such
    assert run_main([str(script), '--checkpoint=there.pth.tar', '--device', 'cpu']) == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and 'validate.py stopped on a missing file without naming it' in err


def test_run_passes_arguments_and_exit_status(tmp_path):
    script = tmp_path / 'tool.py'
    report = tmp_path / 'report.txt'
    script.write_text('import sys, timm\n'
                      f'open({str(report)!r}, "w").write(repr((timm.is_model("vit_tiny_patch2_32_mimetic"), '
                      'sys.argv[1:], __name__)))\n'
                      'sys.exit(3)\n')
    assert run_main([str(script), '--model', 'x', '-b', '2']) == 3
    assert report.read_text() == repr((True, ['--model', 'x', '-b', '2'], '__main__'))


@pytest.mark.skipif(torch.cuda.is_available() or torch.backends.mps.is_available(), reason='an accelerator is here')
def test_run_gives_a_script_that_defaults_to_cuda_the_cpu(tmp_path, capsys):
    # as timm's scripts declare it; on this machine the script would stop with "CUDA is not available"
    script = tmp_path / 'tool.py'
    script.write_text("import argparse, yaml\n"
                      "parser = argparse.ArgumentParser()\n"
                      "parser.add_argument('-c', '--config')\n"
                      "parser.add_argument('--device', default='cuda', type=str)\n"
                      "args, _ = parser.parse_known_args()\n"
                      "if args.config:\n"
                      "    parser.set_defaults(**yaml.safe_load(open(args.config)))\n"
                      "print('device', parser.parse_args().device)\n")
    assert run_main([str(script)]) == 0
    out, err = capsys.readouterr()
    assert out == 'device cpu\n'
    assert err == 'timm_structinit.run: no CUDA device here: running tool.py with --device cpu (--device chooses)\n'
    # a device the user names, on the command line or in the config, is left as it is
    assert run_main([str(script), '--device', 'meta']) == 0
    assert capsys.readouterr() == ('device meta\n', '')
    (tmp_path / 'cfg.yaml').write_text('device: meta\n')
    assert run_main([str(script), '-c', str(tmp_path / 'cfg.yaml')]) == 0
    assert capsys.readouterr() == ('device meta\n', '')
    # a script without a CUDA default gets nothing added
    script.write_text('import sys\nprint(sys.argv[1:])\n')
    assert run_main([str(script), '-b', '2']) == 0
    assert capsys.readouterr() == ("['-b', '2']\n", '')


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
