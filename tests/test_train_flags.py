""" timm train.py's options that the papers' recipes and GPU users need, with timm's names and semantics: gradient
accumulation, evaluation interval, repeated augmentation, torch.compile, Weights & Biases; and every other option of
timm's train.py refused in one line that points to running timm's own script. """
import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from timm_structinit import train as train_mod
from timm_structinit.train.config import TIMM_TRAIN_ONLY

REPO = Path(__file__).resolve().parents[1]
TIMM_TRAIN = REPO.parent / 'shared' / 'timm-scripts' / 'train.py'
TINY = ['--model', 'vit_tiny_patch2_32_mimetic', '--model-kwargs', 'embed_dim=32', 'depth=1', 'num_heads=2',
        'patch_size=8']
DIGITS = ['--dataset', 'sklearn/digits', '--val-split', 'test', '--hflip', '0', '--workers', '0', '--opt', 'adamw',
          '--lr', '1e-3', '--warmup-epochs', '0', '--log-interval', '1000', '--seed', '3']


pytestmark = pytest.mark.usefixtures('one_torch_thread')


def _run(argv, capsys):
    code = train_mod.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _state(path: Path):
    return torch.load(path, map_location='cpu', weights_only=False)


def test_grad_accum_steps_sums_batches_into_one_update(tmp_path, capsys):
    """ 2 x 16 images with accumulation make the same update as 32 at once (no augmentation, no dropout: the same
    images, the same mean loss; SGD, whose step is linear in the gradient), and the optimizer steps once per group
    of batches, the epoch's last, shorter group included. """
    common = [*TINY, *DIGITS, '--no-aug', '--smoothing', '0', '--train-subset', 96, '--val-subset', 20, '--epochs', 1,
              '--output', tmp_path]
    sgd = ['--opt', 'sgd', '--momentum', '0.9', '--lr', '0.1', '--weight-decay', '0']
    assert _run([*common, *sgd, '--batch-size', 32, '--experiment', 'whole'], capsys)[0] == 0
    code, out, err = _run([*common, *sgd, '--batch-size', 16, '--grad-accum-steps', 2, '--experiment', 'accum'],
                          capsys)
    assert code == 0, err
    whole, accum = _state(tmp_path / 'whole' / 'last.pth.tar'), _state(tmp_path / 'accum' / 'last.pth.tar')
    for key, value in whole['state_dict'].items():
        torch.testing.assert_close(accum['state_dict'][key], value, rtol=1e-4, atol=1e-6)
    # against the same 16-image batches without accumulation, which step twice as often: different weights
    assert _run([*common, *sgd, '--batch-size', 16, '--experiment', 'each'], capsys)[0] == 0
    each = _state(tmp_path / 'each' / 'last.pth.tar')['state_dict']
    assert not torch.allclose(each['head.weight'], whole['state_dict']['head.weight'], atol=1e-4)
    # Adam counts its steps: 96 images in batches of 16 are 6 batches; 4 per update makes 2 updates (4 + 2)
    for accum_steps, updates in ((1, 6), (4, 2)):
        name = f'adam{accum_steps}'
        argv = [*common, '--batch-size', 16, '--grad-accum-steps', accum_steps, '--experiment', name]
        assert _run(argv, capsys)[0] == 0
        assert _state(tmp_path / name / 'last.pth.tar')['optimizer']['state'][0]['step'].item() == updates


def test_val_interval_evaluates_every_n_epochs_and_the_last(tmp_path, capsys):
    argv = [*TINY, *DIGITS, '--train-subset', 64, '--val-subset', 20, '--batch-size', 32, '--epochs', 5,
            '--val-interval', 2, '--output', tmp_path, '--experiment', 'v']
    code, out, err = _run(argv, capsys)
    assert code == 0, err
    rows = (tmp_path / 'v' / 'summary.csv').read_text().splitlines()[1:]
    assert [int(r.split(',')[0]) for r in rows] == [1, 3, 4]  # after epochs 2, 4 and the last (timm counts from 0)
    assert re.search(r'epoch   1/5  train loss \S+  lr', out) and re.search(r'epoch   2/5  train loss \S+  eval', out)
    assert sorted(p.name for p in (tmp_path / 'v').glob('checkpoint-*')) == [
        'checkpoint-1.pth.tar', 'checkpoint-3.pth.tar', 'checkpoint-4.pth.tar']


def test_aug_repeats_needs_a_distributed_run(capsys):
    code, out, err = _run([*TINY, *DIGITS, '--aug-repeats', 3], capsys)
    assert code == 2 and err.count('\n') == 1 and '--aug-repeats 3.0 needs a distributed run' in err


@pytest.mark.slow
def test_aug_repeats_in_a_distributed_run(tmp_path):
    """ timm's RepeatAugSampler: every image 3 times per epoch, spread over the processes, the epoch cut to a multiple
    of 256 images (1,347 digits: 1,280, so 640 per process, 20 batches of 32) instead of 674 per process. """
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2', '-m',
           'timm_structinit.train', *TINY, *DIGITS, '--batch-size', '32', '--epochs', '1', '--val-subset', '50',
           '--output', str(tmp_path), '--experiment', 'repeats', '--aug-repeats', '3']
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env=dict(os.environ, OMP_NUM_THREADS='1'))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # without repeats each process would take 674 images, 21 batches (test_ddp_two_processes counts those)
    assert _state(tmp_path / 'repeats' / 'last.pth.tar')['optimizer']['state'][0]['step'].item() == 20


@pytest.mark.slow
def test_torchcompile_trains_a_tiny_model(tmp_path, capsys, caplog):
    # aot_eager: torch.compile's graph capture and autograd tracing without inductor's C++ builds (minutes on 2 cores;
    # the GPU checks compile with inductor)
    argv = [*TINY, *DIGITS, '--train-subset', 64, '--val-subset', 20, '--batch-size', 32, '--epochs', 1,
            '--torchcompile', 'aot_eager', '--output', tmp_path, '--experiment', 'c']
    code, out, err = _run(argv, capsys)
    assert code == 0, err
    assert 'backend aot_eager' in caplog.text and 'final top-1' in out
    # the checkpoint holds the model's own names, not the compiled wrapper's
    assert all(not k.startswith('_orig_mod') for k in _state(tmp_path / 'c' / 'last.pth.tar')['state_dict'])
    code, out, err = _run([*argv, '--torchcompile-mode', 'fastest'], capsys)
    assert code == 2 and "--torchcompile-mode 'fastest' is not valid" in err


@pytest.mark.slow
def test_log_wandb_offline_writes_its_run_folder(tmp_path):
    pytest.importorskip('wandb', reason='--log-wandb needs wandb (the wandb extra)')
    cmd = [sys.executable, '-m', 'timm_structinit.train', *TINY, *DIGITS, '--train-subset', '64', '--val-subset', '20',
           '--batch-size', '32', '--epochs', '2', '--log-wandb', '--wandb-project', 'structinit-test',
           '--output', str(tmp_path / 'out'), '--experiment', 'w']
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env=dict(os.environ, WANDB_MODE='offline', WANDB_SILENT='true', WANDB_DIR=str(tmp_path),
                                    OMP_NUM_THREADS='1'))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = list((tmp_path / 'wandb').glob('offline-run-*'))
    assert len(runs) == 1
    records = b''.join(p.read_bytes() for p in runs[0].glob('*.wandb'))  # what `wandb sync` would upload
    assert b'structinit-test' in records and b'eval_top1' in records and b'train_loss' in records


def _timm_train_options():
    text = TIMM_TRAIN.read_text()
    return sorted({o for pair in re.findall(r"add_argument\(\s*'(-[^']+)'(?:,\s*'(-[^']+)')?", text) for o in pair
                   if o})


@pytest.mark.skipif(not TIMM_TRAIN.is_file(),
                    reason=f"needs timm's train.py at {TIMM_TRAIN} (../shared beside the repository); not found")
def test_every_option_of_timms_train_py_is_ours_or_refused_with_a_pointer(capsys):
    ours = {o for action in train_mod.build_parser()._actions for o in action.option_strings}
    refused = 0
    for option in _timm_train_options():
        if option in ours:
            continue
        code, out, err = _run([option, '1'], capsys)
        assert code == 2 and err.count('\n') == 1, (option, err)
        assert f"{option} is an option of timm's train.py" in err and 'python -m timm_structinit.run' in err, option
        refused += 1
    assert refused == len(TIMM_TRAIN_ONLY)
    # the same in a YAML config
    import tempfile
    with tempfile.NamedTemporaryFile('w', suffix='.yaml', delete=False) as f:
        f.write('jsd_loss: true\n')
    code, out, err = _run(['-c', f.name], capsys)
    os.unlink(f.name)
    assert code == 2 and "key 'jsd_loss'" in err and 'python -m timm_structinit.run' in err


# the defaults the training command gives otherwise than timm's train.py, each for a reason its help states
OWN_DEFAULTS = {'model': "a model of this package's", 'device': 'cuda where torch sees one, else cpu',
                'amp_dtype': 'the dtype the device supports'}


@pytest.mark.skipif(not TIMM_TRAIN.is_file(),
                    reason=f"needs timm's train.py at {TIMM_TRAIN} (../shared beside the repository); not found")
def test_every_option_shared_with_timms_train_py_has_its_default(monkeypatch):
    """ timm's own parser, from its train.py: each option both commands take defaults alike (--smoothing 0.1,
    --epochs 300, ...), but for the few this command chooses otherwise. """
    import importlib.util
    spec = importlib.util.spec_from_file_location('timm_train_script', TIMM_TRAIN)
    script = importlib.util.module_from_spec(spec)
    monkeypatch.setattr(sys, 'argv', ['train.py'])
    spec.loader.exec_module(script)
    theirs = {a.dest: a.default for p in (script.config_parser, script.parser) for a in p._actions if a.option_strings}
    ours = {a.dest: a.default for a in train_mod.build_parser()._actions if a.option_strings}
    shared = sorted(set(theirs) & set(ours))
    assert len(shared) > 100
    differ = {k for k in shared if theirs[k] != ours[k]}
    assert differ == set(OWN_DEFAULTS), {k: (theirs[k], ours[k]) for k in differ}


def _literal_defaults(parser):
    """ (option, the default its help states, the default it has) where the help writes a value, not words. A SLURM
    option that --slurm-config may set has no parser default: its default is the one taken without the file. """
    import re
    from timm_structinit_cli.slurm_options import SLURM_DEFAULTS, SLURM_KEYS
    unset = {option: SLURM_DEFAULTS.get(key) for key, (option, *_) in SLURM_KEYS.items()}
    for action in parser._actions:
        match = re.search(r'default:? ([^)]*)\)', action.help or '')
        if not match or '%(default' in action.help:
            continue
        stated = match.group(1).split(',')[0].strip()
        option = (action.option_strings or [action.dest])[-1]
        default = unset[option] if option in unset and action.default is None else action.default
        if re.fullmatch(r'-?\d+(\.\d+)?', stated):
            yield option, float(stated), default
        elif isinstance(default, list):
            yield option, stated.split(), default


@pytest.mark.parametrize('options, mixing', [([], False), (['--mixup', '0.2'], True), (['--cutmix', '1'], True),
                                             (['--cutmix-minmax', '0.2', '0.8'], True)])
def test_mixing_is_on_where_timms_train_py_turns_it_on(options, mixing):
    """ As timm's train.py: mixup or cutmix above 0, or a cutmix box range alone (cutmix_minmax), turns mixing on,
    and then a batch of odd size is refused (the mix pairs each image with the batch's mirror). """
    from timm_structinit.errors import ConfigError
    args = train_mod.parse_args(['--dataset', 'sklearn/digits', '--batch-size', '7', *TINY, *options])
    if mixing:
        with pytest.raises(ConfigError, match='--batch-size 7 must be even with mixup/cutmix'):
            train_mod.check_args(args)
    else:
        train_mod.check_args(args)


def test_a_runs_args_yaml_read_back_with_c_trains_anew(tmp_path):
    """ args.yaml, written next to the checkpoints to be reused with -c, is read back (its empty --wandb-tags too)
    and leaves out what belongs to that one run: it resumes nothing, names no experiment and overwrites nothing, and
    keeps the run's settings. """
    from timm_structinit.train.config import parse_args, save_args
    args = parse_args(['--dataset', 'sklearn/digits', *TINY, '--resume', str(tmp_path / 'last.pth.tar'),
                       '--experiment', 'first', '--overwrite', '--lr', '0.02'])
    save_args(args, str(tmp_path / 'args.yaml'))
    again = parse_args(['-c', str(tmp_path / 'args.yaml')])
    fresh = parse_args(['--dataset', 'sklearn/digits', *TINY])
    assert (again.resume, again.experiment, again.overwrite) == (fresh.resume, fresh.experiment, fresh.overwrite)
    assert (again.lr, again.dataset, again.model) == (0.02, 'sklearn/digits', args.model)
    # an empty list where the option needs values (the crop's scale range) is refused, naming the default
    from timm_structinit.errors import ConfigError
    (tmp_path / 'empty.yaml').write_text('scale: []\n')
    with pytest.raises(ConfigError, match=r'scale=\[\] is not valid; expected at least one value; leave the key '
                                          r'out for the default \[0\.08, 1\.0\]'):
        parse_args(['-c', str(tmp_path / 'empty.yaml')])


@pytest.mark.parametrize('min_lr, taken', [(0.04, True), (0.05, True), (0.06, False)])
def test_min_lr_is_held_to_the_rate_lr_base_gives_the_global_batch_accumulated(min_lr, taken):
    """ timm's train.py: with no --lr, the rate is --lr-base scaled by the global batch over --lr-base-size, the
    global batch counting --grad-accum-steps (linearly for SGD): 0.1 x (32 x 4) / 256 = 0.05, so a --min-lr up to
    0.05 is a floor the schedule decays to, and above it is refused. """
    from timm_structinit.errors import ConfigError
    args = train_mod.parse_args(['--dataset', 'sklearn/digits', *TINY, '--opt', 'sgd', '--lr-base', '0.1',
                                 '--lr-base-size', '256', '--batch-size', '32', '--grad-accum-steps', '4',
                                 '--min-lr', str(min_lr)])
    if taken:
        train_mod.check_args(args)
    else:
        with pytest.raises(ConfigError, match=r'--min-lr 0.06 is above the learning rate 0.05 '):
            train_mod.check_args(args)


def test_a_seed_is_taken_over_its_documented_range_and_refused_just_outside():
    """ --seed: an integer from 0 to 2**63 - 1 (what a signed 64-bit integer holds), each end taken. """
    from timm_structinit_cli.arg_types import seed
    assert [seed(text) for text in ('0', '1', str(2 ** 63 - 1))] == [0, 1, 2 ** 63 - 1]
    for text in ('-1', str(2 ** 63), '1.5', 'x'):
        with pytest.raises(argparse.ArgumentTypeError, match='not a valid seed'):
            seed(text)


def test_every_default_a_help_states_is_the_default():
    from timm_structinit import cli
    subcommands = next(a for a in cli.build_parser()._actions if isinstance(getattr(a, 'choices', None), dict))
    parsers = [train_mod.build_parser(), *subcommands.choices.values()]
    checked = [(option, stated, default) for parser in parsers for option, stated, default in
               _literal_defaults(parser)]
    assert {'--seeds', '--concurrent', '--inits', '--workers'} <= {option for option, _, _ in checked}, checked
    for option, stated, default in checked:
        assert stated == default, (option, stated, default)
