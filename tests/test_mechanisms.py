""" Each way a run could go silently wrong or end in a traceback, closed as a class and tried with several inputs:
weights shared between layers, a file under two labels, the target-mass tracking on other grids, writes refused
mid-run (checkpoints, push's staging, the commands' own output), mapping keys that are not names, inits on model
families they do not fit, options that would not do what they say, files passed over or links that lead nowhere,
export names given to the commands, causes the errno hides (inodes, a deleted working folder, paths too long), and
the stop signals a scheduler sends before it pre-empts a job. """
import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import timm
import torch
from PIL import Image

import timm_structinit
from timm_structinit import cli, train as train_mod
from timm_structinit.data import DataError, build_dataset, folder_dataset
from timm_structinit.train import output as output_mod
from train_command import ENV, TINY, TINY_KWARGS, lock_is_free, one_line, run_main, two_class_folder
from train_command import FAST as FAST_OPTIONS

FAST = [*FAST_OPTIONS, '--epochs', '1']
DIGITS = ['--dataset', 'sklearn/digits', '--val-split', 'test', '--train-subset', '24', '--val-subset', '12']


def folder(root: Path, per_class: int = 3) -> Path:
    return two_class_folder(root, per_class, 8)


def refused(argv, capsys, status, *named) -> str:
    try:
        code, _, err = run_main(argv, capsys)
    except SystemExit as e:  # argparse's usage error, as the console script exits with it
        code, err = e.code, capsys.readouterr().err
    line = one_line(err)
    assert code == status, (code, line)
    for word in named:
        assert word in line, line
    return line


# --- 1. weights shared between layers ----------------------------------------------------------------------------

def _vit():
    return timm.create_model('vit_tiny_patch16_224', depth=2, embed_dim=32, num_heads=2, img_size=64)


def _tie_qkv(m):
    m.blocks[1].attn.qkv = m.blocks[0].attn.qkv


def _tie_attention(m):
    m.blocks[1].attn = m.blocks[0].attn


def _tie_proj_parameter(m):
    m.blocks[1].attn.proj.weight = m.blocks[0].attn.proj.weight


def _share_storage_with_head(m):
    m.head.weight = torch.nn.Parameter(m.blocks[0].attn.proj.weight.data)  # another Parameter, the same memory


def _swin():
    return timm.create_model('swin_tiny_patch2_window4_32', embed_dim=12, depths=(2,), num_heads=(2,))


def _tie_swin_table(m):
    m.layers[0].blocks[1].attn.relative_position_bias_table = m.layers[0].blocks[0].attn.relative_position_bias_table


def _mixer():
    return timm.create_model('mixer_s4_32', num_blocks=2, embed_dim=16, mlp_ratio=(8.0, 1.0))


def _tie_token_mixing(m):
    m.blocks[1].mlp_tokens = m.blocks[0].mlp_tokens


@pytest.mark.parametrize('build,tie,init,places', [
    (_vit, _tie_qkv, 'impulse', ('blocks.0.attn.qkv.weight', 'blocks.1.attn.qkv.weight')),
    (_vit, _tie_attention, 'mimetic', ('blocks.0.attn.qkv.weight', 'blocks.1.attn.qkv.weight')),
    (_vit, _tie_proj_parameter, 'impulse2025', ('blocks.0.attn.proj.weight', 'blocks.1.attn.proj.weight')),
    (_vit, _share_storage_with_head, 'mimetic', ('blocks.0.attn.proj.weight', 'head.weight')),
    (_swin, _tie_swin_table, 'impulse', ('blocks.0.attn.relative_position_bias_table',
                                         'blocks.1.attn.relative_position_bias_table')),
    (_mixer, _tie_token_mixing, 'impulse', ('blocks.0.mlp_tokens.fc1.weight', 'blocks.1.mlp_tokens.fc1.weight')),
])
def test_weights_shared_between_layers_are_refused_before_any_write(build, tie, init, places):
    model = build()
    tie(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError) as info:
        timm_structinit.apply_init(model, init, seed=0)
    message = str(info.value)
    assert '\n' not in message and 'untie them' in message, message
    assert all(place in message for place in places), message
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # nothing was written
    assert getattr(model, 'struct_init_record', None) is None


def test_the_same_models_untied_take_the_init():
    for build, init in ((_vit, 'impulse'), (_swin, 'impulse'), (_mixer, 'impulse')):
        record = timm_structinit.apply_init(build(), init, seed=0)
        assert len(record['offsets']) == 2


# --- 2. one file under two labels ----------------------------------------------------------------------------------

def _class_linked(root):
    shutil.rmtree(root / 'train' / 'dog')
    (root / 'train' / 'dog').symlink_to('cat', target_is_directory=True)


def _nested_linked(root):
    (root / 'train' / 'cat' / 'extra').mkdir()
    Image.new('RGB', (8, 8)).save(root / 'train' / 'cat' / 'extra' / 'x.png')
    (root / 'train' / 'dog' / 'extra').symlink_to(root / 'train' / 'cat' / 'extra', target_is_directory=True)


def _hard_linked(root):
    os.link(root / 'train' / 'cat' / '0.png', root / 'train' / 'dog' / 'h.png')


def _file_linked(root):
    (root / 'train' / 'dog' / 'l.png').symlink_to(root / 'train' / 'cat' / '1.png')


@pytest.mark.parametrize('link', [_class_linked, _nested_linked, _hard_linked, _file_linked])
def test_a_file_under_two_labels_is_refused_naming_it(link, tmp_path):
    data = folder(tmp_path / 'data')
    link(data)
    with pytest.raises(DataError) as info:
        build_dataset('', str(data), 'train', '--train-split')
    message = str(info.value)
    assert "carries two labels, class 'cat'" in message and "class 'dog'" in message, message
    assert str(data / 'train' / 'cat') in message


def test_both_splits_linked_across_classes_stop_the_run(tmp_path, capsys):
    data = folder(tmp_path / 'data')
    for split in ('train', 'test'):
        shutil.rmtree(data / split / 'dog')
        (data / split / 'dog').symlink_to('cat', target_is_directory=True)
    refused(['--data-dir', data, '--val-split', 'test', *TINY, *FAST, '--output', tmp_path / 'o'], capsys, 2,
            'carries two labels')
    assert not (tmp_path / 'o').exists()


def test_a_file_linked_within_its_class_is_read_once(tmp_path, caplog):
    data = folder(tmp_path / 'data')
    (data / 'train' / 'cat' / 'again.png').symlink_to(data / 'train' / 'cat' / '0.png')
    dataset = folder_dataset(str(data / 'train'), '--train-split train')
    assert len(dataset) == 6 and 'each file is read once' in caplog.text


# --- 3. the target-mass tracking on the grid the run uses --------------------------------------------------------

@pytest.mark.parametrize('kwargs,extra', [
    (['dynamic_img_size=True'], ['--img-size', '48']),  # a 6 x 6 grid on a model built for 4 x 4
    (['dynamic_img_size=True', 'dynamic_img_pad=True'], ['--img-size', '44']),  # padded to 6 x 6
    (['reg_tokens=2', 'class_token=True', 'global_pool="token"'], []),  # three prefix tokens
    (['img_size=48'], []),
])
def test_target_mass_is_tracked_with_the_options_the_model_takes(kwargs, extra, tmp_path, capsys):
    argv = ['--model', 'vit_tiny_patch2_32_impulse3', '--model-kwargs', *TINY_KWARGS, *kwargs, *extra, *DIGITS,
            *FAST, '--output', tmp_path / 'o', '--experiment', 'e']
    code, out, err = run_main(argv, capsys)
    assert code == 0, err
    assert 'target mass at epoch 0:' in out and 'Traceback' not in err
    rows = (tmp_path / 'o' / 'e' / 'target_mass.csv').read_text().splitlines()
    assert rows[0] == 'epoch,mean,layer1' and len(rows) == 3  # epochs 0 and 1


def test_a_model_the_tracking_cannot_follow_is_said_in_one_line(caplog, monkeypatch):
    from timm_structinit.diagnostics import mass_tracking
    model = timm.create_model('vit_tiny_patch2_32_impulse3', embed_dim=16, depth=1, num_heads=2, patch_size=8)
    assert mass_tracking.TargetMassTracker.applies_to(model)

    def cannot(model, images):
        raise ValueError('a layout the measurement does not know')
    monkeypatch.setattr(mass_tracking, '_layer_masses', cannot)
    assert not mass_tracking.TargetMassTracker.applies_to(model)
    assert 'target mass: not tracked for this model (ValueError: a layout the measurement does not know)' \
        in caplog.text


# --- 4. writes refused after the start ---------------------------------------------------------------------------

def test_torch_saves_refused_write_is_one_line_naming_the_reason(tmp_path):
    (tmp_path / 'tmp.pth.tar').mkdir()  # torch.save cannot open it: its RuntimeError keeps no errno
    with pytest.raises(output_mod.OutputWriteError, match='Is a directory'):
        with output_mod.writing_output(str(tmp_path)):
            torch.save({'x': 1}, tmp_path / 'tmp.pth.tar')
    gone = tmp_path / 'gone'  # the output folder, deleted under the run
    with pytest.raises(output_mod.OutputWriteError, match=f'its folder {gone} no longer exists'):
        with output_mod.writing_output(str(gone)):
            torch.save({'x': 1}, gone / 'tmp.pth.tar')


def test_a_checkpoint_refused_after_an_epoch_keeps_the_last_one(tmp_path, capsys, monkeypatch):
    from timm.utils import CheckpointSaver
    save = CheckpointSaver.save_checkpoint

    def refuse_the_second(self, epoch, metric=None):
        if epoch >= 1:  # the folder refuses the second checkpoint, as a folder made read-only would
            os.mkdir(os.path.join(self.checkpoint_dir, 'tmp' + self.extension))
        return save(self, epoch, metric)
    monkeypatch.setattr(CheckpointSaver, 'save_checkpoint', refuse_the_second)
    run = tmp_path / 'o' / 'e'
    argv = [*TINY, *DIGITS, *FAST, '--epochs', 3, '--output', tmp_path / 'o', '--experiment', 'e']
    line = refused(argv, capsys, 1, f'in the output folder {run}', 'Is a directory',
                   f'continue with --resume {run / "last.pth.tar"}')
    assert line.startswith('timm-structinit-train: error: cannot write')
    assert torch.load(run / 'last.pth.tar', weights_only=False)['epoch'] == 0


def test_pushs_staging_on_a_full_file_system_is_one_line(tmp_path, capsys, monkeypatch):
    import safetensors
    import safetensors.torch
    import tempfile

    def full(*args, **kwargs):
        raise safetensors.SafetensorError('Error while serializing: I/O error: No space left on device (os error 28)')
    monkeypatch.setattr(safetensors.torch, 'save_file', full)
    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))
    code = cli.main(['push', 'vit_tiny_patch2_32_mimetic', '--repo-id', 'me/m', '--dry-run', '--model-kwargs',
                     *TINY_KWARGS])
    err = capsys.readouterr().err
    assert code == 1 and err.count('\n') == 1 and 'Traceback' not in err, err
    assert f"cannot write push's staging folder in {tmp_path}" in err and 'No space left on device' in err
    assert list(tmp_path.iterdir()) == []  # the staging folder went


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists('/dev/full'), reason='needs /dev/full')
@pytest.mark.parametrize('argv', [
    ['timm_structinit.cli', 'models'],
    ['timm_structinit.cli', 'recipes'],
    ['timm_structinit.train', *TINY, *DIGITS, *FAST, '--output', 'o'],
])
def test_standard_output_on_a_full_device_is_one_line(argv, tmp_path):
    with open('/dev/full', 'w') as full:
        proc = subprocess.run([sys.executable, '-m', *argv], stdout=full, stderr=subprocess.PIPE, text=True, env=ENV,
                              timeout=600, cwd=tmp_path)
    lines = [line for line in proc.stderr.splitlines() if line.strip() and 'warning' not in line]
    assert proc.returncode == 1 and len(lines) == 1 and 'Traceback' not in proc.stderr, proc.stderr
    assert 'cannot write to standard output (/dev/full): No space left on device' in lines[0]
    assert not (tmp_path / 'o').exists()  # no epoch finished: nothing is kept


# --- 5. mapping keys that are not names --------------------------------------------------------------------------

@pytest.mark.parametrize('text,named', [
    ('model_kwargs: {embed_dim: 16, 7: 1}\n', 'key 7 (int) is not a name'),
    ('model_kwargs: {embd_dim: 16, 7: 1}\n', 'key 7 (int) is not a name'),
    ('model_kwargs: {struct_init_kwargs: {qk_nois: 1, 3: 4}}\n', 'key 3 in struct_init_kwargs (int)'),
    ('opt_kwargs: {null: 2}\n', 'key None (NoneType) is not a name'),
    ('model_kwargs: {struct_init_kwargs: {true: 1}}\n', 'key True in struct_init_kwargs (bool)'),
    ('7: 1\n', 'key 7 (int) is not an option name'),
])
def test_yaml_keys_that_are_not_names_are_refused(text, named, tmp_path, capsys):
    config = tmp_path / 'c.yaml'
    config.write_text(text)
    refused(['-c', config, *DIGITS, '--output', tmp_path / 'o'], capsys, 2, named)


@pytest.mark.parametrize('command,value', [
    (['train'], 'struct_init_kwargs={1: 2}'),
    (['cli', 'export', 'vit_tiny_patch2_32_mimetic', 'x'], 'struct_init_kwargs={(1, 2): 2}'),
    (['cli', 'show', 'vit_tiny_patch2_32_mimetic', '--init', 'impulse', '--init-kwargs'], 'offsets={1: 2}'),
])
def test_command_line_keys_that_are_not_names_are_refused(command, value, tmp_path, capsys):
    flag = [] if '--init-kwargs' in command else ['--model-kwargs']
    with pytest.raises(SystemExit) as usage:  # argparse's one-line usage error
        if command[0] == 'train':
            train_mod.main([*DIGITS, '--model-kwargs', value, '--output', str(tmp_path / 'o')])
        else:
            cli.main([*command[1:], *flag, value])
    code, err = usage.value.code, capsys.readouterr().err
    assert code == 2 and err.count('\n') == 1 and 'is not a name' in err, err


# --- 6. inits on model families they do not fit ------------------------------------------------------------------

@pytest.mark.parametrize('name,kwargs,init,named', [
    ('xcit_nano_12_p16_224', dict(depth=1, img_size=32), 'mimetic', 'cross-covariance attention'),
    ('cait_xxs24_224', dict(depth=1, depth_token_only=1, img_size=32), 'mimetic', 'talking-heads attention'),
    ('convit_tiny', dict(depth=2, local_up_to_layer=1, img_size=32), 'mimetic', 'gated positional'),
    ('beit_base_patch16_224', dict(depth=1, embed_dim=32, num_heads=2, img_size=64), 'impulse',
     'no absolute position embedding'),
    ('vit_relpos_small_patch16_224', dict(depth=1, embed_dim=32, num_heads=2, img_size=64), 'impulse',
     'no absolute position embedding'),
    ('vit_tiny_patch16_224', dict(depth=1, pos_embed='none', img_size=64), 'impulse2025',
     'no absolute position embedding'),
    ('samvit_base_patch16', dict(depth=1, embed_dim=32, num_heads=2, img_size=64, window_size=2), 'impulse',
     'attends within windows'),
    ('vit_tiny_patch16_224', dict(depth=1, scale_attn_norm=True, img_size=64), 'mimetic', "normalizes the heads'"),
    ('gmixer_12_224', dict(img_size=64), 'impulse', 'not a plain fc1-act-fc2 MLP'),
])
def test_an_init_on_a_family_it_does_not_fit_is_refused(name, kwargs, init, named):
    model = timm.create_model(name, **kwargs)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError) as info:
        timm_structinit.apply_init(model, init, seed=0)
    assert named in str(info.value) and '\n' not in str(info.value), str(info.value)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize('name,kwargs,init', [
    ('beit_base_patch16_224', dict(depth=1, embed_dim=32, num_heads=2, img_size=64), 'mimetic'),
    ('beit_base_patch16_224', dict(depth=1, embed_dim=32, num_heads=2, img_size=64, use_abs_pos_emb=True), 'impulse'),
    ('vit_relpos_small_patch16_224', dict(depth=1, embed_dim=32, num_heads=2, img_size=64), 'mimetic'),
    ('eva02_tiny_patch14_224', dict(depth=1, img_size=56), 'mimetic'),
    ('vit_tiny_patch16_224', dict(depth=1, scale_attn_norm=True, img_size=64), 'impulse'),  # V/proj kept
])
def test_the_families_the_docs_list_take_the_init(name, kwargs, init):
    model = timm.create_model(name, **kwargs)
    with torch.no_grad():
        for attn in model.modules():
            for bias in ('q_bias', 'v_bias'):
                if isinstance(getattr(attn, bias, None), torch.nn.Parameter):
                    getattr(attn, bias).fill_(0.5)
    record = timm_structinit.apply_init(model, init, seed=0)
    assert record['method'] == init
    for attn in model.modules():  # BEiT's and EVA's split biases are part of the map the init writes
        for bias in ('q_bias', 'v_bias'):
            if isinstance(getattr(attn, bias, None), torch.nn.Parameter) and (init == 'mimetic' or bias == 'q_bias'):
                assert not getattr(attn, bias).any(), (name, bias)


def test_the_docs_list_each_supported_family():
    from timm_structinit.inits.fit import ATTENTION_KINDS
    text = (Path(__file__).resolve().parents[1] / 'docs' / 'inits.md').read_text()
    for families in set(ATTENTION_KINDS.values()):
        assert families.split(' (')[0] in text, families


# --- 7. options accepted but not doing what they say -------------------------------------------------------------

@pytest.mark.parametrize('model', ['vit_tiny_patch2_32_mimetic', 'vit_tiny_patch2_32_impulse3',
                                   'swin_tiny_patch2_window4_32_impulse3', 'mixer_s4_32_impulse3'])
def test_struct_init_none_on_an_init_model_is_refused(model, tmp_path, capsys):
    refused(['--model', model, '--model-kwargs', 'struct_init=None', *DIGITS, *FAST, '--output', tmp_path / 'o'],
            capsys, 2, 'struct_init=None', 'drops arguments that are None', 'base model')


def test_struct_init_none_in_a_recipe_and_for_export_is_refused(tmp_path, capsys):
    config = tmp_path / 'c.yaml'
    config.write_text('model: vit_tiny_patch2_32_impulse3\nmodel_kwargs: {struct_init: null}\n')
    refused(['-c', config, *DIGITS, *FAST, '--output', tmp_path / 'o'], capsys, 2, "struct_init='impulse'")
    code = cli.main(['export', 'vit_tiny_patch2_32_mimetic', str(tmp_path / 'x'), '--model-kwargs',
                     'struct_init=None'])
    err = capsys.readouterr().err
    assert code == 2 and "struct_init='mimetic'" in err and err.count('\n') == 1, err
    from timm_structinit.models import check_model_args  # on a base model it asks for what the model is
    assert check_model_args('vit_tiny_patch2_32_sincos', dict(struct_init=None)).struct_init is None


@pytest.mark.parametrize('extra,named', [
    (['--lr', '1e-3', '--min-lr', '1e-2'], '--min-lr 0.01 is above --lr 0.001'),
    (['--lr', '1e-3', '--min-lr', '1e-2', '--sched', 'poly'], 'the poly schedule would rise'),
    (['--lr-base', '0.1', '--batch-size', '8', '--min-lr', '0.05'], 'the learning rate 0.0177 (from --lr-base 0.1'),
])
def test_a_min_lr_above_the_lr_is_refused(extra, named, tmp_path, capsys):
    argv = [*TINY, *DIGITS, *[a for a in FAST if a not in ('--lr', '1e-3')], *extra, '--output', tmp_path / 'o']
    refused(argv, capsys, 2, named)


def test_a_min_lr_the_schedule_does_not_use_is_taken(tmp_path):
    from timm_structinit.train.checks import _check_min_lr
    from timm_structinit.train.config import parse_args
    for sched in ('constant', 'none'):
        _check_min_lr(parse_args(['--lr', '1e-3', '--min-lr', '1e-2', '--sched', sched]))


# --- 8. files passed over, links that lead nowhere ---------------------------------------------------------------

def test_files_timm_passes_over_are_counted_by_kind(tmp_path, caplog):
    data = folder(tmp_path / 'data')
    for i, ext in enumerate(['tif', 'gif', 'webp', 'webp']):
        Image.new('RGB', (8, 8)).save(data / 'train' / 'cat' / f'o{i}.{ext}')
    (data / 'train' / 'dog' / '.DS_Store').write_text('hidden files are no data')
    dataset = folder_dataset(str(data / 'train'), '--train-split train')
    assert len(dataset) == 6
    assert '2 .webp files, 1 .tif file, 1 .gif file under' in caplog.text and 'are passed over' in caplog.text
    assert '.DS_Store' not in caplog.text


def test_a_folder_of_other_kinds_says_what_it_holds(tmp_path):
    data = tmp_path / 'data' / 'train'
    for cls in ('cat', 'dog'):
        (data / cls).mkdir(parents=True)
        Image.new('RGB', (8, 8)).save(data / cls / 'a.tif')
    with pytest.raises(DataError, match=r'no images found under .* it holds 2 \.tif files, which are not read'):
        folder_dataset(str(data), '--train-split train')


@pytest.mark.parametrize('where', ['class', 'file', 'nested'])
def test_a_link_that_leads_nowhere_is_named(where, tmp_path, capsys):
    data = folder(tmp_path / 'data')
    if where == 'class':  # a class folder whose target is gone: timm would drop the class without a word
        shutil.rmtree(data / 'test' / 'dog')
        link = data / 'test' / 'dog'
    else:
        link = data / 'test' / 'dog' / ('x.png' if where == 'file' else 'more')
    link.symlink_to(tmp_path / 'gone')
    line = refused(['--data-dir', data, '--val-split', 'test', *TINY, *FAST, '--output', tmp_path / 'o'], capsys, 2,
                   f'{link} is a link to {tmp_path / "gone"}, which does not exist')
    assert 'different classes' not in line


# --- 9. export names given to the commands -----------------------------------------------------------------------

def test_show_takes_an_export_and_export_push_say_what_to_do(tmp_path, capsys):
    target = tmp_path / 'export'
    assert cli.main(['export', 'vit_tiny_patch2_32_impulse3', str(target), '--model-kwargs', *TINY_KWARGS]) == 0
    printed = capsys.readouterr().out
    assert f'local-dir:{target}' in printed
    assert cli.main(['show', f'local-dir:{target}', '--out', str(tmp_path / 'f.png')]) == 0
    out = capsys.readouterr().out
    assert 'init: impulse (seed 0' in out and (tmp_path / 'f.png').exists()
    for argv in (['export', f'local-dir:{target}', str(tmp_path / 'again')],
                 ['push', 'hf-hub:me/model', '--repo-id', 'me/other', '--dry-run']):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.count('\n') == 1 and 'is an export already' in err and '--checkpoint' in err, err
    assert cli.main(['show', f'local-dir:{target}', '--checkpoint', str(target / 'model.safetensors')]) == 2
    assert 'brings its own weights' in capsys.readouterr().err


def test_shows_checkpoint_of_another_model_names_it_as_the_model(capsys):
    fixture = Path(__file__).resolve().parent / 'fixtures' / 'run' / 'last.pth.tar'
    arch = torch.load(fixture, map_location='cpu', weights_only=False)['arch']
    other = 'vit_tiny_patch2_32_sincos' if arch != 'vit_tiny_patch2_32_sincos' else 'vit_tiny_patch2_32_mimetic'
    assert cli.main(['show', other, '--checkpoint', str(fixture)]) == 2
    err = capsys.readouterr().err
    assert f'name {arch} as the MODEL' in err and 'export it as' not in err, err


# --- 10. causes the errno hides ------------------------------------------------------------------------------------

def test_no_free_inodes_is_said_as_such(tmp_path, monkeypatch):
    from timm_structinit.utils import write_failures
    real = os.statvfs(tmp_path)

    class NoInodes:
        def __getattr__(self, name):
            return 0 if name == 'f_favail' else getattr(real, name)
    monkeypatch.setattr(write_failures.os, 'statvfs', lambda path: NoInodes())
    reason = write_failures.write_failure_reason(OSError(errno.ENOSPC, 'No space left on device'),
                                                 str(tmp_path / 'x'))
    assert reason.startswith('no free inodes left on its file system') and 'MiB are still free' in reason


@pytest.mark.parametrize('command', [['timm-structinit-train', '-c', 'digits'], ['timm-structinit', 'models']])
def test_a_deleted_working_folder_is_one_line_before_torch_loads(command, tmp_path):
    gone = tmp_path / 'gone'
    gone.mkdir()
    script = Path(sys.executable).parent / command[0]
    # started in a folder removed meanwhile: the math library would abort the import of torch
    proc = subprocess.run(['sh', '-c', f'cd "{gone}" && rmdir "{gone}" && exec "{script}" {" ".join(command[1:])}'],
                          capture_output=True, text=True, env=ENV, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count('\n') == 1 and f'the working folder {gone} no longer exists' in proc.stderr, proc.stderr


def test_a_working_folder_deleted_under_the_run_is_named(tmp_path, capsys, monkeypatch):
    from timm_structinit.utils import startup
    monkeypatch.chdir(tmp_path)
    startup.working_folder_gone()  # the folder the command started in, recorded

    def gone():
        raise FileNotFoundError(errno.ENOENT, 'No such file or directory')
    monkeypatch.setattr(train_mod, 'check_args', lambda args: (monkeypatch.setattr(os, 'getcwd', gone), None)[1])
    refused([*TINY, *DIGITS, *FAST, '--output', 'relative'], capsys, 1,
            f'the working folder {tmp_path} no longer exists')


@pytest.mark.parametrize('which', ['output', 'experiment', 'export', 'figure'])
def test_a_path_longer_than_the_system_allows_is_refused_leaving_nothing(which, tmp_path, capsys):
    deep = str(tmp_path / '/'.join(['d' * 200] * 22))  # every name fits, the path does not
    if which in ('output', 'experiment'):
        extra = ['--output', deep] if which == 'output' else ['--output', tmp_path / 'o', '--experiment', 'x' * 300]
        line = refused([*TINY, *DIGITS, *FAST, *extra], capsys, 2, 'cannot be made')
    else:
        argv = (['export', 'vit_tiny_patch2_32_mimetic', deep] if which == 'export'
                else ['show', 'vit_tiny_patch2_32_mimetic', '--out', deep + '/f.png'])
        assert cli.main([*argv, '--model-kwargs', *TINY_KWARGS]) == 2
        line = capsys.readouterr().err
        assert line.count('\n') == 1, line
    assert 'more than the' in line and ('the system allows' in line or 'for one name' in line), line
    assert list(tmp_path.iterdir()) == []


# --- 11. the stop signals a scheduler sends ----------------------------------------------------------------------

def _train_until_an_epoch(tmp_path: Path, *extra):
    cmd = [sys.executable, '-m', 'timm_structinit.train', *TINY, *DIGITS, *FAST, '--train-subset', '200',
           '--epochs', '20', '--workers', '1', '--output', str(tmp_path / 'o'), '--experiment', 'e', *extra]
    proc = subprocess.Popen([str(a) for a in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=ENV, start_new_session=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line or line.startswith('epoch   1/20'):
            break
    return proc


@pytest.mark.slow
@pytest.mark.parametrize('signame,extra', [('SIGUSR1', []), ('SIGUSR2', ['--stop-signals', 'TERM', 'usr2'])])
def test_a_pre_emption_signal_stops_with_the_resume_line(signame, extra, tmp_path):
    proc = _train_until_an_epoch(tmp_path, *extra)
    os.killpg(proc.pid, getattr(signal, signame))  # the whole job, loader worker included, as schedulers send it
    out, err = proc.communicate(timeout=120)
    last = tmp_path / 'o' / 'e' / 'last.pth.tar'
    assert proc.returncode == 128 + getattr(signal, signame), err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and f'interrupted ({signame})' in lines[0] and f'--resume {last}' in lines[0], err
    assert last.exists() and lock_is_free(tmp_path / 'o' / 'e')


@pytest.mark.parametrize('argv,named', [
    (['--stop-signals', 'SIGKILL'], "'SIGKILL' is not a stop signal here; valid: SIGTERM, SIGHUP, SIGUSR1"),
    (['--stop-signals', '17'], "'17' is not a stop signal here"),  # SIGCHLD: a worker ending
    (['--stop-signals', 'USR3'], "'USR3' is not a stop signal here"),
])
def test_a_signal_that_cannot_be_a_stop_is_refused(argv, named, tmp_path, capsys):
    refused([*TINY, *DIGITS, *FAST, *argv], capsys, 2, named)
    config = tmp_path / 'c.yaml'
    config.write_text(f'stop_signals: [{argv[1]}]\n')
    refused(['-c', config, *TINY, *DIGITS, *FAST], capsys, 2, named)


def test_the_stop_signals_default_to_what_schedulers_send():
    from timm_structinit.train.config import parse_args
    assert parse_args([]).stop_signals == ['SIGTERM', 'SIGHUP', 'SIGUSR1']
    assert parse_args(['--stop-signals']).stop_signals == []
    assert parse_args(['--stop-signals', '10', 'hup']).stop_signals == ['SIGUSR1', 'SIGHUP']
