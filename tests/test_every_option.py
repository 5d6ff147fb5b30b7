""" Every option of both commands, fed an invalid value: one line naming the option (or the value it sets) and what
is valid, exit status 2 (1 for a failure during the work), no traceback, nothing left behind.

The parsers know every option; the tests walk them, so an option added without a refusal of its bad values fails
here until it has one.
"""
import inspect
from pathlib import Path

import pytest
import timm
import torch
from PIL import Image
from torch import nn

import timm_structinit
from timm_structinit import cli, hub
from timm_structinit.hub import export as export_mod
from timm_structinit import train as train_mod

TRAIN_BASE = ['--dataset', 'sklearn/digits', '--val-split', 'test', '--model', 'vit_tiny_patch2_32_mimetic',
              '--model-kwargs', 'img_size=16', 'patch_size=4', 'embed_dim=16', 'depth=1', 'num_heads=2',
              '--epochs', '1', '--batch-size', '32', '--workers', '0', '--warmup-epochs', '0', '--opt', 'adamw',
              '--lr', '1e-3', '--experiment', 'x']

# option -> (extra arguments that make its value invalid, text the error must contain: the option by default)
TRAIN_INVALID = {
    '--config': (['-c', 'no-such-recipe'], None),
    '--data-dir': (['--dataset', '', '--data-dir', '/nonexistent/data'], None),
    '--dataset': (['--dataset', 'torch/nope'], None),
    '--train-split': (['--dataset', '', '--data-dir', '{folder}', '--train-split', 'nope'], None),
    '--val-split': (['--dataset', '', '--data-dir', '{folder}', '--val-split', 'nope'], None),
    '--dataset-download': (['--dataset-download=1'], None),
    '--train-subset': (['--train-subset', '0'], None),
    '--val-subset': (['--val-subset', '100000'], None),
    '--subset-seed': (['--subset-seed', '-1'], None),
    '--model': (['--model', 'no_such_model'], None),
    '--pretrained': (['--pretrained'], None),
    '--initial-checkpoint': (['--initial-checkpoint', '/nonexistent.pth.tar'], None),
    '--resume': (['--resume', '/nonexistent.pth.tar'], None),
    '--no-resume-opt': (['--no-resume-opt=1'], None),
    '--num-classes': (['--num-classes', '0'], None),
    '--gp': (['--gp', 'nope'], 'global_pool'),
    '--img-size': (['--img-size', '0'], None),
    '--in-chans': (['--in-chans', '0'], None),
    '--input-size': (['--input-size', '3', '0', '16'], None),
    '--crop-pct': (['--crop-pct', '1.5'], None),
    '--mean': (['--mean', '0.5', '0.4'], None),
    '--std': (['--std', '0'], None),
    '--interpolation': (['--interpolation', 'nope'], None),
    '--batch-size': (['--batch-size', '0'], None),
    '--validation-batch-size': (['--validation-batch-size', '0'], None),
    '--grad-accum-steps': (['--grad-accum-steps', '0'], None),
    '--model-kwargs': (['--model-kwargs', 'depht=2'], 'depht'),
    '--device': (['--device', 'tpu'], None),
    '--threads': (['--threads', '0'], None),
    '--amp': (['--amp=1'], None),
    '--amp-dtype': (['--amp-dtype', 'float8'], None),
    '--torchcompile': (['--torchcompile', 'nope'], None),
    '--torchcompile-mode': (['--torchcompile-mode', 'fastest'], None),
    '--dist-backend': (['--dist-backend', 'nope'], None),
    '--local-rank': (['--local-rank', '-1'], '--local'),
    '--opt': (['--opt', 'nope'], None),
    '--opt-eps': (['--opt-eps', '-1'], None),
    '--opt-betas': (['--opt-betas', '2', '0.9'], '--opt'),
    '--momentum': (['--momentum', '-0.5'], None),
    '--weight-decay': (['--weight-decay', '-1'], None),
    '--clip-grad': (['--clip-grad', '0'], None),
    '--clip-mode': (['--clip-mode', 'nope'], None),
    '--layer-decay': (['--layer-decay', '0'], None),
    '--opt-kwargs': (['--opt-kwargs', 'foo=1'], '--opt-kwargs'),
    '--sched': (['--sched', 'nope'], None),
    '--sched-on-updates': (['--sched-on-updates=1'], None),
    '--lr': (['--lr', '0'], None),
    '--lr-base': (['--lr-base', '-1'], None),
    '--lr-base-size': (['--lr-base-size', '0'], None),
    '--lr-base-scale': (['--lr-base-scale', 'cubic'], None),
    '--lr-noise': (['--lr-noise', '-1'], None),
    '--lr-noise-pct': (['--lr-noise-pct', '-1'], None),
    '--lr-noise-std': (['--lr-noise-std', '-1'], None),
    '--lr-cycle-mul': (['--lr-cycle-mul', '0'], None),
    '--lr-cycle-decay': (['--lr-cycle-decay', '0'], None),
    '--lr-cycle-limit': (['--lr-cycle-limit', '0'], None),
    '--lr-k-decay': (['--lr-k-decay', '0'], None),
    '--warmup-lr': (['--warmup-lr', '-1'], None),
    '--min-lr': (['--min-lr', '-1'], None),
    '--epochs': (['--epochs', '0'], None),
    '--decay-milestones': (['--decay-milestones', '-3'], None),
    '--decay-epochs': (['--decay-epochs', '0'], None),
    '--warmup-epochs': (['--warmup-epochs', '-1'], None),
    '--warmup-prefix': (['--warmup-prefix=1'], None),
    '--cooldown-epochs': (['--cooldown-epochs', '-1'], None),
    '--patience-epochs': (['--patience-epochs', '-1'], None),
    '--decay-rate': (['--decay-rate', '0'], None),
    '--no-aug': (['--no-aug=1'], None),
    '--train-crop-mode': (['--train-crop-mode', 'nope'], None),
    '--scale': (['--scale', '0.5'], None),
    '--ratio': (['--ratio', '2', '1'], None),
    '--hflip': (['--hflip', '2'], None),
    '--vflip': (['--vflip', '-1'], None),
    '--color-jitter': (['--color-jitter', '-1'], None),
    '--aa': (['--aa', 'rand-x9'], None),
    '--aug-repeats': (['--aug-repeats', '3'], None),
    '--reprob': (['--reprob', '2'], None),
    '--remode': (['--remode', 'zeros'], None),
    '--recount': (['--recount', '0'], None),
    '--resplit': (['--resplit=1'], None),
    '--mixup': (['--mixup', '-1'], None),
    '--cutmix': (['--cutmix', '-1'], None),
    '--cutmix-minmax': (['--cutmix-minmax', '0.5', '0.2'], None),
    '--mixup-prob': (['--mixup-prob', '2'], None),
    '--mixup-switch-prob': (['--mixup-switch-prob', '-1'], None),
    '--mixup-mode': (['--mixup-mode', 'nope'], None),
    '--mixup-off-epoch': (['--mixup-off-epoch', '-1'], None),
    '--smoothing': (['--smoothing', '1'], None),
    '--train-interpolation': (['--train-interpolation', 'nope'], None),
    '--drop': (['--drop', '1'], None),
    '--drop-path': (['--drop-path', '1'], None),
    '--drop-block': (['--drop-block', '-1'], None),
    '--model-ema': (['--model-ema=1'], None),
    '--model-ema-force-cpu': (['--model-ema-force-cpu=1'], None),
    '--model-ema-decay': (['--model-ema-decay', '1'], None),
    '--model-ema-warmup': (['--model-ema-warmup=1'], None),
    '--seed': (['--seed', '-1'], None),
    '--log-interval': (['--log-interval', '0'], None),
    '--val-interval': (['--val-interval', '0'], None),
    '--checkpoint-hist': (['--checkpoint-hist', '0'], None),
    '--stop-signals': (['--stop-signals', 'SIGKILL'], None),
    '--loader': (['--loader', 'gpu'], None),
    '--workers': (['--workers', '-1'], None),
    '--pin-mem': (['--pin-mem=1'], None),
    '--no-prefetcher': (['--no-prefetcher=1'], None),
    '--output': (['--output', '{file}'], None),
    '--experiment': (['--experiment', 'a/b'], None),
    '--overwrite': (['--overwrite=1'], None),
    '--eval-metric': (['--eval-metric', 'top3'], None),
    '--plot': (['--plot=1'], None),
    '--log-wandb': (['--log-wandb=1'], None),
    '--wandb-project': (['--wandb-project', 'p'], None),
    '--wandb-tags': (['--wandb-tags', 't'], None),
}


def _call(main, argv) -> int:
    """ The exit status of a console entry point called in-process (argparse's usage errors exit). """
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


def _options(parser):
    return {max(a.option_strings, key=len) for a in parser._actions
            if a.option_strings and a.dest not in ('help', 'version')}


def test_every_training_option_has_an_invalid_case():
    assert _options(train_mod.build_parser()) == set(TRAIN_INVALID)


@pytest.fixture(scope='module')
def places(tmp_path_factory):
    root = tmp_path_factory.mktemp('places')
    for split in ('train', 'test'):
        for cls in ('cat', 'dog'):
            (root / 'data' / split / cls).mkdir(parents=True)
            for i in range(2):
                Image.new('RGB', (16, 16), (60 * i, 80, 120)).save(root / 'data' / split / cls / f'{i}.png')
    (root / 'a-file').write_text('not a folder')
    return {'folder': str(root / 'data'), 'file': str(root / 'a-file')}


def _one_error_line(err: str, prog: str) -> str:
    lines = [line for line in err.splitlines() if line.strip() and ': warning: ' not in line]
    assert len(lines) == 1, err
    assert lines[0].startswith(f'{prog}') and 'error' in lines[0] and 'Traceback' not in err, err
    return lines[0]


@pytest.mark.parametrize('option', sorted(TRAIN_INVALID))
def test_invalid_training_option_is_one_line_before_any_work(option, places, tmp_path, capsys):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    extra, named = TRAIN_INVALID[option]
    extra = [a.format(**places) for a in extra]
    try:
        code = _call(train_mod.main, [*TRAIN_BASE, '--output', str(tmp_path / 'out'), *extra])
    finally:
        torch.set_num_threads(threads)
    out, err = capsys.readouterr()
    assert code == 2, (code, out[-500:], err)
    line = _one_error_line(err, 'timm-structinit-train')
    assert (named or option) in line, line
    assert not (tmp_path / 'out').exists()  # nothing written
    assert 'epoch' not in out  # nothing trained


CLI_BASE = {
    'export': ['export', 'vit_tiny_patch2_32_mimetic', '{target}', '--model-kwargs', 'embed_dim=16', 'depth=1',
               'num_heads=2'],
    'push': ['push', 'vit_tiny_patch2_32_mimetic', '--repo-id', 'org/name', '--dry-run', '--model-kwargs',
             'embed_dim=16', 'depth=1', 'num_heads=2'],
    'show': ['show', 'vit_tiny_patch2_32_mimetic', '--model-kwargs', 'embed_dim=16', 'depth=1', 'num_heads=2',
             '--out', '{target}.png'],
    'recipes': ['recipes'],
    'models': ['models'],
    'compare': ['compare', '--out', '{target}', '--dataset', 'sklearn/digits', '--epochs', '1', '--model-kwargs',
                'embed_dim=16', 'depth=1', 'num_heads=2', 'patch_size=8'],
}
# (command, option) -> (arguments replacing or extending the base, text the error must contain)
CLI_INVALID = {
    ('export', 'model'): (['export', 'no_such_model', '{target}'], 'no_such_model'),
    ('export', '--seed'): (['--seed', '-1'], '--seed'),
    ('export', '--model-kwargs'): (['--model-kwargs', 'depht=2'], 'depht'),
    ('export', '--checkpoint'): (['--checkpoint', '/nonexistent.pth.tar'], 'checkpoint'),
    ('export', '--use-ema'): (['--use-ema'], 'use_ema'),
    ('export', 'out_dir'): (['export', 'vit_tiny_patch2_32_mimetic', '{file}'], 'export target'),
    ('export', '--force'): (['--force=1'], '--force'),
    ('push', 'model'): (['push', 'no_such_model', '--repo-id', 'org/name', '--dry-run'], 'no_such_model'),
    ('push', '--seed'): (['--seed', 'x'], '--seed'),
    ('push', '--model-kwargs'): (['--model-kwargs', 'embed_dim=0'], 'embed_dim'),
    ('push', '--checkpoint'): (['--checkpoint', '{file}'], 'checkpoint'),
    ('push', '--use-ema'): (['--use-ema=1'], '--use-ema'),
    ('push', '--repo-id'): (['--repo-id', 'no-slash'], 'repo id'),
    ('push', '--private'): (['--private=1'], '--private'),
    ('push', '--revision'): (['--revision', ' '], 'revision'),
    ('push', '--commit-message'): (['--commit-message', ''], 'commit_message'),
    ('push', '--dry-run'): (['--dry-run=1'], '--dry-run'),
    ('show', 'model'): (['show', 'no_such_model'], 'no_such_model'),
    ('show', '--seed'): (['--seed', '2**70'], '--seed'),
    ('show', '--model-kwargs'): (['--model-kwargs', 'patch_size=3'], 'patch_size'),
    ('show', '--checkpoint'): (['--checkpoint', '/nonexistent.pth.tar'], 'checkpoint'),
    ('show', '--use-ema'): (['--use-ema'], 'use_ema'),
    ('show', '--init'): (['--init', 'nope'], 'nope'),
    ('show', '--init-kwargs'): (['--init', 'mimetic', '--init-kwargs', 'foo=1'], 'foo'),
    ('show', '--layer'): (['--layer', '99'], '--layer'),
    ('show', '--images'): (['--images', '/nonexistent'], '--images'),
    ('show', '--num-images'): (['--num-images', '0'], '--num-images'),
    ('show', '--out'): (['--out', '{target}.txt'], '--out'),
    ('recipes', 'name'): (['recipes', 'nope'], 'nope'),
    ('recipes', '--path'): (['--path'], '--path'),
    ('models', 'filter'): (['models', 'nope*'], 'nope*'),
    ('compare', '--out'): (['--out', '{file}'], '--out'),
    ('compare', '--data-dir'): (['--dataset', '', '--data-dir', '/nonexistent/data'], '--data-dir'),
    ('compare', '--model'): (['--model', 'no_such_model'], 'no_such_model'),
    ('compare', '--model-kwargs'): (['--model-kwargs', 'depht=2'], 'depht'),
    ('compare', '--inits'): (['--inits', 'plain', 'nope'], 'nope'),
    ('compare', '--seeds'): (['--seeds', '0'], '--seeds'),
    ('compare', '--device'): (['--device', 'tpu'], '--device'),
    ('compare', '--concurrent'): (['--concurrent', '0'], '--concurrent'),
    ('compare', '--time-limit'): (['--time-limit', '-5'], '--time-limit'),
    ('compare', '--report'): (['--report=1'], '--report'),
    ('compare', '--launcher'): (['--launcher', 'pbs'], '--launcher'),
    ('compare', '--detach'): (['--detach'], '--detach'),
    ('compare', '--slurm-config'): (['--launcher', 'slurm', '--slurm-config', '/nonexistent/cluster.yaml'],
                                    '--slurm-config'),
    ('compare', '--slurm-partition'): (['--slurm-partition', 'a b'], '--slurm-partition'),
    ('compare', '--slurm-time'): (['--slurm-time', 'soon'], '--slurm-time'),
    ('compare', '--slurm-gpus'): (['--slurm-gpus', '-1'], '--slurm-gpus'),
    ('compare', '--slurm-cpus'): (['--slurm-cpus', '0'], '--slurm-cpus'),
    ('compare', '--slurm-account'): (['--slurm-account', ''], '--slurm-account'),
    ('compare', '--slurm-qos'): (['--slurm-qos', 'a b'], '--slurm-qos'),
    ('compare', '--slurm-extra'): (['--slurm-extra', 'mem'], '--slurm-extra'),
    ('compare', '--slurm-signal-delay'): (['--slurm-signal-delay', '0'], '--slurm-signal-delay'),
    ('compare', '--slurm-poll'): (['--slurm-poll', '0'], '--slurm-poll'),
}


def test_every_command_option_has_an_invalid_case():
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if a.dest == 'command').choices
    expected = {(name, max(a.option_strings, key=len) if a.option_strings else a.dest)
                for name, sub in commands.items() for a in sub._actions if a.dest != 'help'}
    assert expected == set(CLI_INVALID)


@pytest.mark.parametrize('command,option', sorted(CLI_INVALID))
def test_invalid_command_option_is_one_line_before_any_work(command, option, places, tmp_path, capsys):
    extra, named = CLI_INVALID[(command, option)]
    fill = dict(places, target=str(tmp_path / 'target'))
    base = [a.format(**fill) for a in CLI_BASE[command]]
    extra = [a.format(**fill) for a in extra]
    argv = extra if extra[0] == command else [*base, *extra]
    code = _call(cli.main, argv)
    out, err = capsys.readouterr()
    assert code == 2, (code, out, err)
    line = _one_error_line(err, f'timm-structinit')
    assert named in line, line
    assert not list(tmp_path.iterdir())  # no export, no figure


# The public Python API: every parameter of every documented function (the package's top level, the Hub helpers and
# the arguments the registered model classes add to timm's), fed invalid values. Each raises one exception whose
# one-line message names the parameter (or the bad value) before any work: the model given to apply_init keeps its
# weights, no export folder appears, no model is built for a bad export or push argument.
_TINY_KWARGS = dict(img_size=16, patch_size=4, embed_dim=16, depth=1, num_heads=2)
_PUBLIC = {
    'apply_init': lambda: timm_structinit.apply_init,
    'list_inits': lambda: timm_structinit.list_inits,
    'make_init_cfg': lambda: timm_structinit.make_init_cfg,
    'register_init': lambda: timm_structinit.register_init,
    'build_model': lambda: hub.build_model,
    'export_model': lambda: hub.export_model,
    'push_model': lambda: hub.push_model,
    'list_export_files': lambda: hub.list_export_files,
}
_CLASSES = {'StructVisionTransformer': 'vit_tiny_patch2_32', 'StructSwinTransformer': 'swin_tiny_patch2_window4_32',
            'StructMlpMixer': 'mixer_s4_32'}
_CLASS_KWARGS = {'vit_tiny_patch2_32': _TINY_KWARGS, 'swin_tiny_patch2_window4_32': dict(depths=(1,), num_heads=(2,),
                 embed_dim=16), 'mixer_s4_32': dict(num_blocks=1, embed_dim=16)}
_MODEL = 'vit_tiny_patch2_32_mimetic'

# function -> the valid call's arguments
API_BASE = {
    'apply_init': dict(model=None, name='mimetic', seed=0),  # model: a tiny ViT, built per test
    'make_init_cfg': dict(name='impulse', family='vit'),
    'register_init': dict(init=timm_structinit.inits.get_init('mimetic')),  # the built-in again: no change
    'build_model': dict(model_name=_MODEL, model_kwargs=_TINY_KWARGS),
    'export_model': dict(model_name=_MODEL, out_dir='{target}', model_kwargs=_TINY_KWARGS),
    'push_model': dict(model_name=_MODEL, repo_id='org/name', model_kwargs=_TINY_KWARGS, dry_run=True),
    'list_export_files': dict(),
}
# (function, parameter) -> invalid values
API_INVALID = {
    ('apply_init', 'model'): ['a model', nn.Linear(4, 4)],
    ('apply_init', 'name'): ['mimetik', 3, None],
    ('apply_init', 'seed'): [-1, 2 ** 70, 1.5, 'a', True],
    ('apply_init', 'weight_init'): ['skip', ''],
    ('apply_init', 'kwargs'): [{'qk_nois': 1.0}, {'qk_noise': -1.0}, {'qk_noise': 'x'}, {'vproj_sign': 2}],
    ('make_init_cfg', 'name'): ['nope', None],
    ('make_init_cfg', 'family'): ['cnn', 3],
    ('make_init_cfg', 'kwargs'): [{'kernel_size': 4}, {'solver': 'sgd'}, {'kernel': 3}],
    ('register_init', 'init'): ['x', None],
    ('register_init', 'replace'): ['yes', 1],
    ('build_model', 'model_name'): ['vit_nope', None],
    ('build_model', 'seed'): [-3, 'x'],
    ('build_model', 'model_kwargs'): [{'depht': 1}, ['depth'], {'embed_dim': 0}],
    ('build_model', 'checkpoint'): ['/nonexistent.pth'],
    ('build_model', 'use_ema'): ['yes'],
    ('export_model', 'model_name'): ['vit_nope'],
    ('export_model', 'out_dir'): [None, '', '/proc/no-such-dir/x', '{file}'],
    ('export_model', 'seed'): [2 ** 64],
    ('export_model', 'model_kwargs'): [{'depht': 1}],
    ('export_model', 'checkpoint'): ['/nonexistent.pth'],
    ('export_model', 'use_ema'): [1],
    ('export_model', 'force'): ['no'],
    ('export_model', 'repo_id'): ['bad repo id', 'a/b/c'],
    ('push_model', 'model_name'): ['vit_nope'],
    ('push_model', 'repo_id'): ['bad repo', None],
    ('push_model', 'seed'): [-1],
    ('push_model', 'model_kwargs'): [{'depht': 1}],
    ('push_model', 'checkpoint'): ['/nonexistent.pth'],
    ('push_model', 'use_ema'): ['yes'],
    ('push_model', 'private'): ['x'],
    ('push_model', 'revision'): ['bad..rev', 'with space', ''],
    ('push_model', 'commit_message'): [3, ''],
    ('push_model', 'dry_run'): ['x'],
    ('push_model', 'token'): [5, ''],
    ('list_export_files', 'folder'): ['/nonexistent', '{file}', None],
}
# model class -> the arguments it adds to timm's (timm's own are checked by `check_model_args`), invalid values
CLASS_INVALID = {
    'struct_init': ['foo', 5],
    'struct_init_kwargs': [['kernel_size'], 'kernel_size=5', {1: 2}, {'kernel_size': 4}],
    'struct_init_seed': [-1, 2 ** 70, 'a'],
    'weight_init': ['bogus', 3],  # (None is timm's create_model for "not given")
}


def _parameters(fn):
    return {name for name in inspect.signature(fn).parameters}


def test_every_api_parameter_has_an_invalid_case():
    expected = {(name, p) for name, get in _PUBLIC.items() for p in _parameters(get())}
    assert expected == set(API_INVALID)
    for cls_name, model_name in _CLASSES.items():
        cls = getattr(timm_structinit, cls_name)
        added = {p for p in _parameters(cls.__init__) if p.startswith('struct_init')}
        assert added | {'weight_init'} == set(CLASS_INVALID), cls_name  # weight_init: timm's, with 'reset' added


def _api_cases():
    return [(fn, p, i) for (fn, p), values in sorted(API_INVALID.items(), key=str) for i in range(len(values))]


@pytest.mark.parametrize('fn,param,index', _api_cases())
def test_invalid_api_argument_is_one_clear_error(fn, param, index, places, tmp_path, monkeypatch):
    value = API_INVALID[(fn, param)][index]
    fill = dict(target=str(tmp_path / 'target'), file=places['file'])
    if isinstance(value, str):
        value = value.format(**fill)
    args = {k: (v.format(**fill) if isinstance(v, str) else v) for k, v in API_BASE.get(fn, {}).items()}
    model = None
    if fn == 'apply_init':
        model = timm.create_model('vit_tiny_patch2_32', **_TINY_KWARGS)
        args['model'] = model
    before = {k: v.clone() for k, v in (model or nn.Module()).state_dict().items()}
    if fn in ('export_model', 'push_model'):  # nothing is built before every argument is checked
        monkeypatch.setattr(export_mod, '_build', lambda *a, **k: pytest.fail('built the model'))
    if param == 'kwargs':
        args.update(value)
    else:
        args[param] = value
    if param == 'model' and isinstance(value, nn.Module):
        before = {k: v.clone() for k, v in value.state_dict().items()}
        model = value
    with pytest.raises((ValueError, TypeError, OSError)) as info:
        _PUBLIC[fn]()(**args)
    message = str(info.value)
    assert message and '\n' not in message, message
    if param == 'kwargs':  # the hyperparameter's own name
        names = set(value)
    else:
        names = {param, repr(value)} | ({str(value)} if isinstance(value, str) and value else set())
        names |= {type(value).__name__} if param == 'model' else {'struct_init'} if param == 'name' else set()
    assert any(n in message for n in names), message
    after = (model or nn.Module()).state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert not (tmp_path / 'target').exists()
    assert not [p for p in tmp_path.iterdir()]


@pytest.mark.parametrize('model_name', sorted(_CLASS_KWARGS))
@pytest.mark.parametrize('param,index', [(p, i) for p, values in CLASS_INVALID.items() for i in range(len(values))])
def test_invalid_model_class_argument_is_one_clear_error(model_name, param, index):
    value = CLASS_INVALID[param][index]
    kwargs = dict(_CLASS_KWARGS[model_name], **{param: value})
    if param == 'struct_init_kwargs':
        kwargs['struct_init'] = 'impulse'
    with pytest.raises((ValueError, TypeError)) as info:
        timm.create_model(model_name, **kwargs)
    message = str(info.value)
    assert message and '\n' not in message, message
    names = {param, repr(value)} | (set(value) if isinstance(value, dict) else set())
    assert any(str(n) in message for n in names), message
