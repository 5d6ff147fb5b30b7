""" What an earlier release wrote still works, and the registered models build the weights this release recorded.

The fixtures in tests/fixtures (`make_fixtures.py`; `provenance.json` names the commit and release of each part):
the state dicts' fingerprints of this release, which any machine's build must match to the suite's tolerance
(`kernel_path_builds.TOLERANCE`, whatever its CPU kernels), and a training checkpoint and an export written by
release 0.1.0, which must resume, start a new run, and load in plain timm and as the registered model with the weights
they hold. A resumed run reads its checkpoint once and builds its model twice (on the meta device for the checks,
then for real). """
import json
import shutil
import sys
from pathlib import Path

import pytest
import safetensors.torch
import timm
import torch

import timm_structinit
from timm_structinit.hub import registered_exports
from timm_structinit.inits.canonical import FACTOR_RULE
from timm_structinit.train import inputs as inputs_mod

from kernel_path_builds import TOLERANCE
from train_command import one_line, run_main

FIXTURES = Path(__file__).resolve().parent / 'fixtures'
sys.path.insert(0, str(FIXTURES))
from make_fixtures import RUN_KWARGS, RUN_MODEL, fingerprint, fingerprint_differences, small_args  # noqa: E402

PROVENANCE = json.loads((FIXTURES / 'provenance.json').read_text())
RECORDS = json.loads((FIXTURES / 'state_dicts.json').read_text())


def test_every_registered_model_is_recorded_by_this_release_under_its_rule():
    assert sorted(RECORDS) == sorted(timm_structinit.list_models())
    assert PROVENANCE['state_dicts']['version'] == timm_structinit.__version__
    assert PROVENANCE['state_dicts']['factor_rule'] == FACTOR_RULE


@pytest.mark.parametrize('name', sorted(RECORDS))
def test_seed_0_builds_the_recorded_weights(name):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = timm.create_model(name, **small_args(name))
    assert fingerprint_differences(RECORDS[name], fingerprint(model), TOLERANCE) == []
    if model.struct_init_record is not None:
        assert model.struct_init_record['factor_rule'] == FACTOR_RULE


def test_the_fingerprint_sees_a_sign_and_tolerates_the_last_bits():
    """ The check is not blind: one flipped row of a qkv weight (a factor's sign) fails it, and every value moved by
    half the tolerance passes. """
    name = 'vit_tiny_patch2_32_mimetic'
    torch.manual_seed(0)
    model = timm.create_model(name, **small_args(name))
    recorded = RECORDS[name]
    with torch.no_grad():
        weight = model.blocks[0].attn.qkv.weight
        weight.add_(0.5 * TOLERANCE * weight.abs().max() * torch.sign(torch.randn_like(weight)))
        assert fingerprint_differences(recorded, fingerprint(model), TOLERANCE) == []
        weight[3].neg_()
        assert [key for key, _ in fingerprint_differences(recorded, fingerprint(model), TOLERANCE)] == [
            'blocks.0.attn.qkv.weight']


def _copy_run(tmp_path: Path) -> Path:
    run = tmp_path / 'run'
    shutil.copytree(FIXTURES / 'run', run)
    return run


# the fixture run's options (make_fixtures.py), one epoch more
RESUMED = ['--model', RUN_MODEL, '--model-kwargs', *RUN_KWARGS, '--dataset', 'sklearn/digits', '--val-split', 'test',
           '--train-subset', '32', '--val-subset', '16', '--opt', 'adamw', '--lr', '1e-3', '--warmup-epochs', '0',
           '--workers', '0', '--batch-size', '8', '--epochs', '2', '--checkpoint-hist', '1']


class _Counts:
    """ Counts the reads of one file through torch.load and the models built by the package's model classes. """

    def __init__(self, monkeypatch, path: Path):
        self.reads, self.builds, self.path = 0, [], path.resolve()
        load = torch.load

        def counting_load(f, *args, **kwargs):
            if isinstance(f, (str, Path)) and Path(f).resolve() == self.path:
                self.reads += 1
            return load(f, *args, **kwargs)
        monkeypatch.setattr(torch, 'load', counting_load)
        cls = timm_structinit.StructVisionTransformer
        init = cls.__init__

        def counting_init(model, *args, **kwargs):
            init(model, *args, **kwargs)
            self.builds.append(model.cls_token.device.type if model.cls_token is not None else
                               model.patch_embed.proj.weight.device.type)
        monkeypatch.setattr(cls, '__init__', counting_init)


def test_a_checkpoint_of_the_earlier_release_resumes_reading_it_once(tmp_path, capsys, monkeypatch):
    run = _copy_run(tmp_path)
    counts = _Counts(monkeypatch, run / 'last.pth.tar')
    code, out, err = run_main([*RESUMED, '--resume', str(run / 'last.pth.tar')], capsys)
    assert code == 0, err
    assert 'epoch   2/2' in out and 'epoch   1/2' not in out and 'Done:' in out
    assert counts.reads == 1
    assert counts.builds == ['meta', 'cpu']  # the checks' model, then the run's
    resumed = torch.load(run / 'last.pth.tar', weights_only=False)
    assert resumed['epoch'] == 1 and resumed['arch'] == RUN_MODEL


def test_a_checkpoint_of_the_earlier_release_starts_a_new_run(tmp_path, capsys, monkeypatch):
    run = _copy_run(tmp_path)
    counts = _Counts(monkeypatch, run / 'last.pth.tar')
    code, out, err = run_main([*RESUMED, '--initial-checkpoint', str(run / 'last.pth.tar'), '--epochs', '1',
                               '--output', str(tmp_path / 'new'), '--experiment', 'from-fixture'], capsys)
    assert code == 0, err
    assert counts.reads == 1 and counts.builds == ['meta', 'cpu']
    started = torch.load(tmp_path / 'new' / 'from-fixture' / 'last.pth.tar', weights_only=False)['state_dict']
    fixture = torch.load(run / 'last.pth.tar', weights_only=False)['state_dict']
    assert started.keys() == fixture.keys()


def test_a_checkpoint_of_another_model_is_refused_before_reading_it_again(tmp_path, capsys, monkeypatch):
    run = _copy_run(tmp_path)
    counts = _Counts(monkeypatch, run / 'last.pth.tar')
    argv = [*RESUMED, '--resume', str(run / 'last.pth.tar')]
    argv[argv.index('embed_dim=16')] = 'embed_dim=32'
    code, out, err = run_main(argv, capsys)
    assert code == 2 and 'does not fit' in one_line(err)
    assert counts.reads == 1 and counts.builds == ['meta']


def test_an_export_of_the_earlier_release_loads_in_plain_timm_and_as_registered(tmp_path):
    export = tmp_path / 'export'
    shutil.copytree(FIXTURES / 'export', export)
    weights = safetensors.torch.load_file(export / 'model.safetensors')
    x = torch.randn(2, 3, 32, 32)
    plain = timm.create_model(f'local-dir:{export}', pretrained=True).eval()
    with registered_exports():
        registered = timm.create_model(f'local-dir:{export}', pretrained=True).eval()
    assert type(plain) is timm.models.VisionTransformer
    assert type(registered).__name__ == 'StructVisionTransformer' and registered.struct_init == 'impulse'
    for model in (plain, registered):
        state = model.state_dict()
        assert all(torch.equal(state[k], v) for k, v in weights.items())
    with torch.no_grad():
        assert torch.allclose(plain(x), registered(x), atol=1e-6)


def test_an_export_of_the_earlier_release_is_what_export_writes_now(tmp_path):
    """ The same checkpoint, exported by this release: the same weights and the same config, but for the release
    that wrote it. """
    from timm_structinit.hub import export_model
    kwargs = dict(item.split('=') for item in RUN_KWARGS)
    folder = export_model(RUN_MODEL, tmp_path / 'again', model_kwargs={k: int(v) for k, v in kwargs.items()},
                          checkpoint=FIXTURES / 'run' / 'last.pth.tar')
    before = safetensors.torch.load_file(FIXTURES / 'export' / 'model.safetensors')
    now = safetensors.torch.load_file(folder / 'model.safetensors')
    assert before.keys() == now.keys() and all(torch.equal(before[k], now[k]) for k in before)
    config_before = json.loads((FIXTURES / 'export' / 'config.json').read_text())
    config_now = json.loads((folder / 'config.json').read_text())
    assert config_before['timm_structinit'].pop('version') == PROVENANCE['run_and_export']['version']
    assert config_now['timm_structinit'].pop('version') == timm_structinit.__version__
    assert config_now == config_before


def test_the_inputs_module_reads_through_torch_load():
    """ The counts above see the reads: the checkpoint reader is torch.load, through timm. """
    assert inputs_mod.load_checkpoint_metadata.__module__.startswith('timm.')
