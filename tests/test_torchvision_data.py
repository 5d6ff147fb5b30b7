""" The torchvision datasets timm's `torch/` names lack (SVHN, Food-101, STL-10, Flowers-102, Oxford-IIIT Pet): each
read from a tiny copy the test writes in the dataset's real on-disk layout and file formats, through torchvision's
own classes, with its own splits; a missing copy says which flag downloads it. """
import json
from pathlib import Path

import numpy as np
import pytest
import scipy.io
from PIL import Image

from timm_structinit import train as train_mod
from timm_structinit.data import DataError, build_dataset, dataset_classes, dataset_targets

COLORS = [(200, 30, 30), (30, 200, 30), (30, 30, 200)]


def _jpeg(path: Path, label: int, size: int = 40) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new('RGB', (size, size), COLORS[label % 3]).save(path, quality=95)


def make_svhn(root: Path) -> None:
    """ train_32x32.mat / test_32x32.mat: X (32, 32, 3, N) uint8, y (N, 1) with digit 0 stored as 10. """
    for split, n in (('train', 6), ('test', 3)):
        x = np.zeros((32, 32, 3, n), dtype=np.uint8)
        for i in range(n):
            x[..., i] = COLORS[i % 3]
        y = np.array([[10 if i % 3 == 0 else i % 3] for i in range(n)], dtype=np.uint8)
        scipy.io.savemat(root / f'{split}_32x32.mat', {'X': x, 'y': y})


def make_food101(root: Path) -> None:
    """ food-101/meta/{train,test}.json ({class: ["class/id", ...]}) and food-101/images/<class>/<id>.jpg. """
    base = root / 'food-101'
    classes = ['apple_pie', 'baby_back_ribs', 'baklava']
    for split, ids in (('train', range(2)), ('test', range(2, 3))):
        meta = {c: [f'{c}/{100 + i}' for i in ids] for c in classes}
        (base / 'meta').mkdir(parents=True, exist_ok=True)
        (base / 'meta' / f'{split}.json').write_text(json.dumps(meta))
        for label, c in enumerate(classes):
            for i in ids:
                _jpeg(base / 'images' / c / f'{100 + i}.jpg', label)


def make_stl10(root: Path) -> None:
    """ stl10_binary/{split}_X.bin (N x 3 x 96 x 96 uint8, column-major images) and {split}_y.bin (1-based labels). """
    base = root / 'stl10_binary'
    base.mkdir(parents=True)
    for split, n in (('train', 6), ('test', 3)):
        x = np.zeros((n, 3, 96, 96), dtype=np.uint8)
        for i in range(n):
            x[i] = np.array(COLORS[i % 3], dtype=np.uint8)[:, None, None]
        x.tofile(base / f'{split}_X.bin')
        np.array([i % 3 + 1 for i in range(n)], dtype=np.uint8).tofile(base / f'{split}_y.bin')
    (base / 'class_names.txt').write_text('\n'.join(['airplane', 'bird', 'car', 'cat', 'deer', 'dog', 'horse',
                                                     'monkey', 'ship', 'truck']) + '\n')


def make_flowers102(root: Path) -> None:
    """ flowers-102/jpg/image_NNNNN.jpg, imagelabels.mat ('labels', 1-based) and setid.mat (trnid, valid, tstid). """
    base = root / 'flowers-102'
    labels = [1, 2, 3] * 4
    for image_id, label in enumerate(labels, start=1):
        _jpeg(base / 'jpg' / f'image_{image_id:05d}.jpg', label - 1)
    scipy.io.savemat(base / 'imagelabels.mat', {'labels': np.array(labels)})
    scipy.io.savemat(base / 'setid.mat', {'trnid': np.arange(1, 7), 'valid': np.arange(7, 10),
                                          'tstid': np.arange(10, 13)})


def make_pets(root: Path) -> None:
    """ oxford-iiit-pet/images/<Breed>_<n>.jpg and annotations/{trainval,test}.txt ("id class species breed"). """
    base = root / 'oxford-iiit-pet'
    breeds = [('Abyssinian', 1, 1), ('american_bulldog', 2, 2), ('Bengal', 3, 1)]
    for split, numbers in (('trainval', (1, 2)), ('test', (3,))):
        lines = []
        for label, (breed, class_id, species) in enumerate(breeds):
            for n in numbers:
                lines.append(f'{breed}_{n} {class_id} {species} 1')
                _jpeg(base / 'images' / f'{breed}_{n}.jpg', label)
        (base / 'annotations').mkdir(parents=True, exist_ok=True)
        (base / 'annotations' / f'{split}.txt').write_text('\n'.join(lines) + '\n')


# dataset -> (writer, {split given: (images, labels)}, class names start)
CASES = {
    'torch/svhn': (make_svhn, {'train': (6, [0, 1, 2, 0, 1, 2]), 'validation': (3, [0, 1, 2]), 'test': (3, None)},
                   None),
    'torch/food101': (make_food101, {'train': (6, [0, 0, 1, 1, 2, 2]), 'validation': (3, [0, 1, 2])}, 'apple_pie'),
    'torch/stl10': (make_stl10, {'train': (6, [0, 1, 2, 0, 1, 2]), 'test': (3, [0, 1, 2])}, 'airplane'),
    'torch/flowers102': (make_flowers102, {'train': (6, [0, 1, 2, 0, 1, 2]), 'validation': (3, [0, 1, 2]),
                                           'test': (3, [0, 1, 2])}, 'pink primrose'),
    'torch/oxford_iiit_pet': (make_pets, {'train': (6, [0, 0, 1, 1, 2, 2]), 'test': (3, [0, 1, 2])}, 'Abyssinian'),
}


@pytest.mark.parametrize('name', sorted(CASES))
def test_tiny_real_format_copy_loads_with_its_splits(name, tmp_path):
    write, splits, first_class = CASES[name]
    write(tmp_path)
    for split, (count, labels) in splits.items():
        dataset = build_dataset(name, str(tmp_path), split, '--val-split')
        assert len(dataset) == count
        if labels is not None:
            assert list(dataset_targets(dataset)) == labels
        image, label = dataset[0]
        assert isinstance(image, Image.Image) and image.mode == 'RGB' and label == dataset_targets(dataset)[0]
        # the pixels are the ones written (JPEG is lossy: nearly)
        assert np.abs(np.asarray(image, dtype=float)[4, 4] - COLORS[label % 3]).max() < 12
    classes = dataset_classes(dataset)
    assert (classes is None) == (first_class is None) and (classes is None or classes[0] == first_class)


def test_pet_images_get_timms_transform(tmp_path):
    """ timm's loader sets `dataset.transform` after building it; torchvision's Pet class would ignore it. """
    make_pets(tmp_path)
    dataset = build_dataset('torch/oxford_iiit_pet', str(tmp_path), 'train', '--train-split')
    dataset.transform = lambda img: np.asarray(img).shape
    assert dataset[0] == ((40, 40, 3), 0)


@pytest.mark.parametrize('name,split,valid', [
    ('torch/food101', 'extra', 'train, test'),
    ('torch/stl10', 'unlabeled', 'train, test'),
    ('torch/oxford_iiit_pet', 'val2', 'trainval, test'),
])
def test_a_split_the_dataset_lacks_is_named(name, split, valid, tmp_path):
    CASES[name][0](tmp_path)
    with pytest.raises(DataError, match=f"--val-split '{split}' is not a .* split; valid: {valid}"):
        build_dataset(name, str(tmp_path), split, '--val-split')


@pytest.mark.parametrize('name,layout', [
    ('torch/food101', 'food-101/meta'), ('torch/stl10', 'stl10_binary'), ('torch/flowers102', 'setid.mat'),
    ('torch/oxford_iiit_pet', 'oxford-iiit-pet/annotations'), ('torch/svhn', 'train_32x32.mat')])
def test_missing_copy_names_the_download_flag(name, layout, tmp_path, capsys):
    argv = ['--dataset', name, '--data-dir', tmp_path, '--model', 'vit_tiny_patch2_32_mimetic', '--val-split', 'test',
            '--model-kwargs', 'embed_dim=32', 'depth=1', 'num_heads=2', 'patch_size=8']
    code = train_mod.main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert code == 2 and 'Traceback' not in err and len(err.strip().splitlines()) == 1
    assert '--dataset-download' in err and layout in err and str(tmp_path) in err


def test_a_tiny_copy_trains(tmp_path, capsys, caplog):
    make_food101(tmp_path / 'data')
    argv = ['--dataset', 'torch/food101', '--data-dir', tmp_path / 'data', '--model', 'vit_tiny_patch2_32_mimetic',
            '--model-kwargs', 'embed_dim=32', 'depth=1', 'num_heads=2', 'patch_size=8', '--epochs', 1,
            '--batch-size', 2, '--workers', 0, '--opt', 'adamw', '--lr', '1e-3', '--warmup-epochs', 0,
            '--output', tmp_path / 'out', '--experiment', 'food']
    code = train_mod.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert '3 classes' in caplog.text and '6 training / 3 evaluation images' in caplog.text
    assert 'final top-1' in out and 'on 3 validation images' in out
