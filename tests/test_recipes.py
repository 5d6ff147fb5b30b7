""" The training recipes ship inside the package, are addressed by name from any folder, each cites its source, and
the 2025 paper's recipes carry the authors' commands option by option. """
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from timm_structinit import cli
from timm_structinit import train as train_mod
from timm_structinit.recipes import RECIPES_DIR, list_recipes, recipe_path, recipe_source
from timm_structinit.run import with_recipe_files

PAPER_2025_SMALL = dict(
    input_size=[3, 224, 224], mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225], seed=0, batch_size=64,
    workers=10, lr=2e-3, layer_decay=1.0, warmup_lr=1e-6, min_lr=1e-6, weight_decay=0.05, opt='adamw', opt_eps=1e-8,
    epochs=300, sched='cosine', warmup_epochs=50, amp=True, aa='rand-m9-mstd0.5-inc1', cutmix=1.0, mixup=0.8,
    reprob=0.25, smoothing=0.1, drop=0.0, color_jitter=0.4, drop_path=0.1, crop_pct=0.875, pin_mem=True,
    model_ema=False, model_ema_decay=0.9999, dataset_download=True, val_split='test')
PAPER_2025_IMAGENET = dict(
    input_size=[3, 224, 224], mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225], seed=42, num_classes=1000,
    batch_size=64, workers=10, lr_base=5e-4, lr_base_size=512, lr_base_scale='linear', warmup_lr=1e-6, min_lr=1e-5,
    weight_decay=0.05, opt='adamw', opt_eps=1e-8, epochs=300, sched='cosine', warmup_epochs=5, cooldown_epochs=10,
    amp=True, aa='rand-m9-mstd0.5-inc1', cutmix=1.0, mixup=0.8, reprob=0.25, smoothing=0.1, drop=0.0,
    color_jitter=0.3, drop_path=0.1, crop_pct=0.875, aug_repeats=3.0, pin_mem=True, lr=None, model_ema=False)
DATASETS_2025 = {'cifar10': 10, 'cifar100': 100, 'food101': 101, 'stl10': 10, 'flowers102': 102,
                 'oxford_iiit_pet': 37}
MODELS_2025 = {  # method -> (model, model_kwargs): the authors' post_weight_init with weight_init=skip
    'default': ('vit_{size}_patch16_224', {'img_size': 224, 'weight_init': 'reset'}),
    'mimetic': ('vit_{size}_patch16_224_mimetic', {'img_size': 224, 'pos_embed': 'learn', 'weight_init': 'reset'}),
    'impulse': ('vit_{size}_patch16_224_impulse2025', {'img_size': 224, 'weight_init': 'reset'}),
}


def test_every_recipe_is_a_packaged_file_with_a_source():
    names = list_recipes()
    assert 'digits' in names and 'impulse_vit_tiny_patch2_cifar10' in names
    assert len([n for n in names if '2025_' in n]) == 3 * (len(DATASETS_2025) + 1)
    for name in names:
        assert recipe_path(name).parent == RECIPES_DIR and recipe_source(name)
    assert 'arXiv 2505.19985' in recipe_source('impulse2025_vit_tiny_patch16_224_food101')
    assert not (RECIPES_DIR.parents[1] / 'configs').exists()  # one source of truth: the packaged files


@pytest.mark.parametrize('method', sorted(MODELS_2025))
def test_2025_recipes_carry_the_authors_commands(method, monkeypatch):
    # the ImageNet recipe repeats augmentations across processes: checked as one process of a torchrun launch
    for key, value in dict(WORLD_SIZE='16', RANK='0', LOCAL_RANK='0', MASTER_ADDR='127.0.0.1',
                           MASTER_PORT='29500').items():
        monkeypatch.setenv(key, value)
    model, kwargs = MODELS_2025[method]
    for dataset, classes in [*DATASETS_2025.items(), ('imagenet', 1000)]:
        size = 'base' if dataset == 'imagenet' else 'tiny'
        name = f'{method}2025_vit_{size}_patch16_224_{dataset}'
        args = train_mod.parse_args(['-c', name, '--data-dir', 'data'])  # no recipe names one
        train_mod.check_args(args)
        facts = PAPER_2025_IMAGENET if dataset == 'imagenet' else dict(PAPER_2025_SMALL, num_classes=classes)
        for key, value in facts.items():
            assert getattr(args, key) == value, (name, key)
        assert args.model == model.format(size=size) and args.model_kwargs == kwargs, name
        header = recipe_path(name).read_text()
        assert 'weight_init=skip' in header and 'Left open by the source' in header and 'no EMA' in header \
            or dataset == 'imagenet'
        if dataset != 'imagenet':
            assert args.dataset == f'torch/{dataset}'


@pytest.mark.parametrize('dataset', ['cifar10', 'cifar100', 'svhn'])
def test_the_2024_baseline_recipe_is_the_impulse_recipe_on_the_plain_base(dataset):
    """ The 2024 paper's baseline arm: its impulse recipe's every value, on the same architecture at timm's default
    init (vit_tiny_patch2_32_gap_sincos: average pooling, fixed sin-cos, trunc-normal weights). """
    impulse = yaml.safe_load(recipe_path(f'impulse_vit_tiny_patch2_{dataset}').read_text())
    default = yaml.safe_load(recipe_path(f'default_vit_tiny_patch2_{dataset}').read_text())
    assert impulse.pop('model') == 'vit_tiny_patch2_32_impulse3'
    assert default.pop('model') == 'vit_tiny_patch2_32_gap_sincos'
    assert default == impulse
    args = train_mod.parse_args(['-c', f'default_vit_tiny_patch2_{dataset}', '--data-dir', 'data'])
    assert args.model == 'vit_tiny_patch2_32_gap_sincos' and args.model_kwargs == {}


# a path that means something only on the machine that wrote it: parent-relative, or absolute under a local root
LOCAL_PATH = re.compile(r'(?<![\w.])\.\./\w|(?<![\w:/.])/(?:work|home|tmp|root|mnt|data|Users)/|\bshared/(?:data|timm)')
REPO = Path(__file__).resolve().parents[1]


def test_the_local_path_pattern():
    found = [t for t in ('--data-dir ../shared/data/cifar10', 'data_dir: /work/shared/x', 'at /home/me/data',
                         'shared/data/cifar10') if LOCAL_PATH.search(t)]
    assert len(found) == 4
    assert not LOCAL_PATH.search('https://arxiv.org/abs/2305.09828 --data-dir path/to/cifar10 output/train/x '
                                 'a.b/c ../ DIR/train/')


def test_nothing_shipped_names_a_local_path():
    """ Every file of the package (recipes, code and its messages) and the README: no data folder of this machine. """
    shipped = [p for p in RECIPES_DIR.parent.rglob('*')
               if p.suffix in ('.py', '.yaml') and '__pycache__' not in p.parts]
    assert len(shipped) > 50
    for path in [*shipped, REPO / 'README.md']:
        for number, line in enumerate(path.read_text(encoding='utf-8').splitlines(), 1):
            assert not LOCAL_PATH.search(line), f'{path.relative_to(REPO)}:{number}: {line.strip()}'


@pytest.mark.parametrize('name', [n for n in list_recipes() if n != 'digits'])
def test_no_recipe_names_a_data_folder_and_the_error_says_to_pass_one(name, tmp_path, monkeypatch):
    assert 'data_dir' not in yaml.safe_load(recipe_path(name).read_text()), name
    # the ImageNet recipes repeat augmentations across processes: checked as one process of a torchrun would be
    for key, value in dict(WORLD_SIZE='16', RANK='0', LOCAL_RANK='0', MASTER_ADDR='127.0.0.1',
                           MASTER_PORT='29500').items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(train_mod.ConfigError, match=r'needs --data-dir DIR: the folder'):
        train_mod.check_args(train_mod.parse_args(['-c', name]))


def test_recipes_resolve_by_name_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = train_mod.parse_args(['-c', 'digits', '--epochs', '2'])
    assert args.dataset == 'sklearn/digits' and args.epochs == 2 and args.config == 'digits'
    # a path still works, and a file of the same name in the folder wins over the packaged recipe
    (tmp_path / 'digits').write_text('epochs: 5\n')
    assert train_mod.parse_args(['-c', 'digits']).epochs == 5
    assert train_mod.parse_args(['-c', str(recipe_path('digits'))]).dataset == 'sklearn/digits'
    with pytest.raises(train_mod.ConfigError, match=r"'digts' is neither a file nor a packaged recipe; did you mean "
                                                     r"digits\?"):
        train_mod.parse_args(['-c', 'digts'])


def test_recipes_command_lists_prints_and_locates(capsys):
    assert cli.main(['recipes']) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in list_recipes())  # what each trains: tests/test_help_texts.py
    assert cli.main(['recipes', 'digits']) == 0
    assert capsys.readouterr().out == recipe_path('digits').read_text()
    assert cli.main(['recipes', 'digits', '--path']) == 0
    assert capsys.readouterr().out.strip() == str(recipe_path('digits'))
    assert cli.main(['recipes', 'nope']) == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and "'nope' is neither a file nor a packaged recipe" in err


@pytest.mark.slow
def test_timm_scripts_get_the_recipe_file(tmp_path):
    path = str(recipe_path('impulse_vit_tiny_patch2_cifar10'))
    assert with_recipe_files(['-c', 'impulse_vit_tiny_patch2_cifar10', '--epochs', '1']) == ['-c', path, '--epochs',
                                                                                           '1']
    assert with_recipe_files(['--config=impulse_vit_tiny_patch2_cifar10']) == [f'--config={path}']
    assert with_recipe_files(['-c', 'not-a-recipe']) == ['-c', 'not-a-recipe']
    # the script sees the file: a stand-in script that prints what it was given
    script = tmp_path / 'show_args.py'
    script.write_text('import sys, yaml\nprint(yaml.safe_load(open(sys.argv[2]))["model"])\n')
    done = subprocess.run([sys.executable, '-m', 'timm_structinit.run', script, '-c', 'impulse_vit_tiny_patch2_cifar10'],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == yaml.safe_load(open(path))['model']
