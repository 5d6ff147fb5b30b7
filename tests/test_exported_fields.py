""" Every field an export or a registered model states, against what it was trained with or what its data is:

* an export of a run trained with a non-square --input-size, its own --mean and --std and an image folder of named
  classes: config.json's pretrained_cfg and label names, the card's input size, normalisation and class names,
  and the model timm builds from the export (its input grid, its data config) are the run's; the card claims the
  run's evaluation only for the weights it measured (the EMA's, when an EMA was evaluated);
* every registered model's pretrained_cfg: its input size is the model's, its classes its head's, its normalisation
  that of the data it is for (the 32 px models: CIFAR-10's training pixels, measured here from the images; the 224
  px ones: ImageNet's, as timm states it), and its evaluation of a 32 px image keeps every pixel. """
import json
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from PIL import Image
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, create_transform, resolve_data_config

import timm_structinit
from timm_structinit import hub
from train_command import FAST, run_main, two_class_folder

pytestmark = pytest.mark.usefixtures('one_torch_thread')

MODEL = 'vit_tiny_patch2_32_mimetic'
MEAN, STD = (0.3, 0.4, 0.5), (0.2, 0.25, 0.3)


@pytest.fixture(scope='module')
def run(tmp_path_factory):
    """ One epoch of a tiny ViT on 24 x 40 inputs over an image folder of cats and dogs, with an EMA. """
    root = tmp_path_factory.mktemp('run')
    data = two_class_folder(root / 'data', per_class=8, size=32)
    import io
    from contextlib import redirect_stderr, redirect_stdout
    from timm_structinit import train as train_mod
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        code = train_mod.main([str(a) for a in [
            '--model', MODEL, '--model-kwargs', 'embed_dim=16', 'depth=1', 'num_heads=2', 'patch_size=8',
            'img_size=(24,40)', *FAST, '--input-size', 3, 24, 40, '--mean', *MEAN, '--std', *STD,
            '--data-dir', data, '--val-split', 'test', '--epochs', 1, '--model-ema', '--model-ema-decay', 0.5,
            '--output', root / 'out', '--experiment', 'run']])
    assert code == 0
    return root / 'out' / 'run' / 'last.pth.tar'


def _card_rows(readme: str) -> dict:
    return {line.split('|')[1].strip(): line.split('|')[2].strip() for line in readme.splitlines()
            if line.startswith('| ') and line.count('|') >= 3}


def test_an_export_states_the_runs_input_normalisation_and_classes(run, tmp_path):
    folder = hub.export_model(MODEL, tmp_path / 'export', checkpoint=run, use_ema=True)
    config = json.loads((folder / 'config.json').read_text())
    cfg = config['pretrained_cfg']
    assert cfg['input_size'] == [3, 24, 40] and cfg['mean'] == pytest.approx(MEAN) and cfg['std'] == pytest.approx(STD)
    assert config['label_names'] == ['cat', 'dog'] and config['num_classes'] == 2
    rows = _card_rows((folder / 'README.md').read_text())
    assert rows['input size'] == '3x24x40'
    assert rows['normalization'] == 'mean `[0.3, 0.4, 0.5]`, std `[0.2, 0.25, 0.3]`'
    assert 'cat' in rows['class names'] and 'dog' in rows['class names']
    model = timm.create_model(f'local-dir:{folder}', pretrained=True)
    assert tuple(model.patch_embed.img_size) == (24, 40)
    data_config = resolve_data_config({}, model=model)
    assert tuple(data_config['input_size']) == (3, 24, 40)
    assert tuple(data_config['mean']) == pytest.approx(MEAN) and tuple(data_config['std']) == pytest.approx(STD)


def test_the_card_claims_the_runs_evaluation_only_for_the_weights_it_measured(run, tmp_path):
    """ The run evaluated its EMA (and ranked its checkpoints by it): the export of the EMA's weights states that
    top-1 as its result, the export of the model's own weights states none. """
    metric = torch.load(run, map_location='cpu', weights_only=False)['metric']
    ema = (hub.export_model(MODEL, tmp_path / 'ema', checkpoint=run, use_ema=True) / 'README.md').read_text()
    own = (hub.export_model(MODEL, tmp_path / 'own', checkpoint=run, use_ema=False) / 'README.md').read_text()
    front = ema.split('---')[1]
    assert 'model-index' in front and f'value: {round(metric, 4)}' in front, front
    assert 'model-index' not in own.split('---')[1]


REGISTERED = timm_structinit.list_models()


@pytest.mark.parametrize('name', REGISTERED)
def test_a_registered_models_pretrained_cfg_is_the_model_it_builds(name):
    """ The input size the cfg states is the model's input, its classes the head's outputs; 32 px models evaluate
    with every pixel of a 32 px image (the evaluation transform the cfg gives leaves it whole). """
    with torch.device('meta'):
        model = timm.create_model(name)
    cfg = model.pretrained_cfg
    stem = getattr(model, 'patch_embed', None) or getattr(model, 'stem', None)
    assert tuple(cfg['input_size']) == (stem.proj.in_channels, *stem.img_size), name
    assert cfg['num_classes'] == model.num_classes
    if cfg['input_size'][1:] == (32, 32):
        transform = create_transform(**resolve_data_config({}, model=model), is_training=False)
        image = Image.fromarray(np.arange(32 * 32 * 3, dtype=np.uint8).reshape(32, 32, 3))
        mean, std = torch.tensor(cfg['mean'])[:, None, None], torch.tensor(cfg['std'])[:, None, None]
        whole = (torch.from_numpy(np.asarray(image).copy()).permute(2, 0, 1) / 255 - mean) / std
        torch.testing.assert_close(transform(image), whole, rtol=0, atol=1e-5)
    else:
        assert (tuple(cfg['mean']), tuple(cfg['std'])) == (IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD), name


def test_the_32_px_models_normalise_with_cifar10s_pixel_statistics(cifar10_dir):
    """ The mean and standard deviation of CIFAR-10's training pixels per channel, measured on every 25th image
    (2,000): the 32 px models' cfg within 0.004 (the sampling error is about 0.002; the often-quoted batch std,
    0.202, is 0.045 away). """
    files = sorted(Path(cifar10_dir, 'train').glob('*/*.jpg'))[::25]
    pixels = np.stack([np.asarray(Image.open(f).convert('RGB'), dtype=np.float64) / 255 for f in files])
    mean, std = pixels.mean(axis=(0, 1, 2)), pixels.std(axis=(0, 1, 2))
    names = [n for n in REGISTERED if '_32' in n]
    assert names
    for name in names:
        cfg = timm.get_pretrained_cfg(name).to_dict()
        assert np.allclose(cfg['mean'], mean, atol=0.004) and np.allclose(cfg['std'], std, atol=0.004), (name, mean,
                                                                                                          std)
