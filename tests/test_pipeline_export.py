""" An export of a trained run carries what the run trained with: the data config it evaluated with (input size,
mean, std, crop_pct, interpolation, as the options gave them), its number of classes, and the weights asked for,
the EMA's or the model's. The run is a tiny model on a few of scikit-learn's digits; the export is loaded back by
timm alone. """
from pathlib import Path

import pytest
import timm
import torch
from timm.data import resolve_data_config

from timm_structinit import hub
from timm_structinit import train as train_mod

pytestmark = pytest.mark.usefixtures('one_torch_thread')

MODEL = 'vit_tiny_patch2_32_mimetic'
# what the run evaluates with, each away from the model's default
DATA = dict(input_size=(3, 40, 40), mean=(0.3, 0.4, 0.5), std=(0.2, 0.25, 0.3), crop_pct=0.8,
            interpolation='bilinear')


@pytest.fixture(scope='module')
def trained(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp('trained')
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        code = train_mod.main([
            '--model', MODEL, '--model-kwargs', 'embed_dim=16', 'depth=1', 'num_heads=2', 'patch_size=8',
            'img_size=40', '--img-size', '40', '--mean', *map(str, DATA['mean']), '--std', *map(str, DATA['std']),
            '--crop-pct', '0.8', '--interpolation', 'bilinear', '--dataset', 'sklearn/digits', '--val-split', 'test',
            '--train-subset', '32', '--val-subset', '10', '--batch-size', '16', '--epochs', '1', '--workers', '0',
            '--opt', 'adamw', '--lr', '1e-2', '--warmup-epochs', '0', '--log-interval', '1000', '--model-ema',
            '--model-ema-decay', '0.5', '--output', str(out), '--experiment', 'run'])
    finally:
        torch.set_num_threads(threads)
    assert code == 0
    return out / 'run' / 'last.pth.tar'


def _load(folder: Path) -> torch.nn.Module:
    return timm.create_model(f'local-dir:{folder}', pretrained=True)


def test_an_export_carries_the_data_config_and_classes_of_its_run(trained, tmp_path):
    model = _load(hub.export_model(MODEL, tmp_path / 'export', checkpoint=trained))
    config = resolve_data_config({}, model=model)
    assert tuple(config['input_size']) == DATA['input_size'] and config['interpolation'] == DATA['interpolation']
    assert config['crop_pct'] == pytest.approx(DATA['crop_pct'])
    assert tuple(config['mean']) == pytest.approx(DATA['mean']) and tuple(config['std']) == pytest.approx(DATA['std'])
    assert model.num_classes == 10  # the digits' classes


@pytest.mark.parametrize('use_ema, key', [(False, 'state_dict'), (True, 'state_dict_ema')])
def test_an_export_holds_the_weights_asked_for(trained, tmp_path, use_ema, key):
    state = torch.load(trained, map_location='cpu', weights_only=False)
    other = 'state_dict' if use_ema else 'state_dict_ema'
    assert not torch.equal(state[key]['head.weight'], state[other]['head.weight'])  # the two tell apart
    exported = _load(hub.export_model(MODEL, tmp_path / 'export', checkpoint=trained, use_ema=use_ema)).state_dict()
    assert exported.keys() == state[key].keys()
    assert all(torch.equal(exported[k], v) for k, v in state[key].items())


def test_an_exports_card_names_the_init_seed_its_run_drew(trained, tmp_path):
    """ The run fixed no struct_init_seed: its init drew one from torch's generator, seeded with its --seed (42, the
    default). The same draws again, the model built as the run built it, give that seed: the card names it, and the
    export's record is of that init, the one training started from. """
    import json
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(42)
        replayed = timm.create_model(MODEL, num_classes=10, in_chans=3, drop_rate=0.0, embed_dim=16, depth=1,
                                     num_heads=2, patch_size=8, img_size=40)
    seed = replayed.struct_init_record['seed']
    folder = hub.export_model(MODEL, tmp_path / 'export', checkpoint=trained)
    assert (f"| init seed | struct_init_seed {seed}, drawn from torch's generator seeded with the run's --seed 42"
            in (folder / 'README.md').read_text())
    record = json.loads((folder / 'config.json').read_text())['timm_structinit']['struct_init']
    assert record == json.loads(json.dumps(replayed.struct_init_record)) and record['seed'] == seed
