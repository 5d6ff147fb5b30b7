""" benchmarks/compare_inits.py: the GPU setups train what the papers' setups say, through the shipped recipes and the
package's runner (tests/test_compare.py tests the runner itself); the committed runs count as done, and the report is
rewritten from the runs alone. """
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from timm_structinit.train import parse_args

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / 'benchmarks'))
import compare_inits  # noqa: E402

COMMITTED = REPO / 'benchmarks' / 'results' / 'compare_inits'


def _args(name: str, extra=()):
    command = compare_inits.train_command(name, 1, Path('DATA'), Path('/out/run'), extra)
    return parse_args(command[command.index('timm_structinit.train') + 1:])


@pytest.mark.parametrize('name', ['gpu2024_base', 'gpu2024_mimetic', 'gpu2024_impulse3'])
def test_gpu_2024_arms_train_the_2024_setup(name):
    """ The setup as stated: ViT-T/2 through the 2024 recipe, 10,000 images, 100 epochs, evaluation every 10 epochs
    on 2,000 test images, bf16 autocast on the GPU; the arm's init alone differs. """
    args = _args(name)
    assert (args.train_subset, args.epochs, args.val_interval, args.val_subset) == (10000, 100, 10, 2000)
    assert (args.device, args.amp, args.amp_dtype, args.dataset, args.seed) == ('cuda', True, 'bfloat16', '', 1)
    # the 2024 recipe's own optimization (impulse_vit_tiny_patch2_cifar10: AdamW 1e-3, batch 512, clip 3.0)
    assert (args.opt, args.lr, args.batch_size, args.weight_decay, args.clip_grad) == ('adamw', 1e-3, 512, 0.01, 3.0)
    model, kwargs = {'gpu2024_base': ('vit_tiny_patch2_32_gap_sincos', {}),
                     'gpu2024_mimetic': ('vit_tiny_patch2_32_gap_sincos', {'struct_init': 'mimetic'}),
                     'gpu2024_impulse3': ('vit_tiny_patch2_32_impulse3', {})}[name]
    assert (args.model, args.model_kwargs) == (model, kwargs)


@pytest.mark.parametrize('name,recipe_model', [
    ('gpu2025_default', 'vit_tiny_patch16_224'), ('gpu2025_mimetic', 'vit_tiny_patch16_224_mimetic'),
    ('gpu2025_impulse', 'vit_tiny_patch16_224_impulse2025')])
def test_gpu_2025_arms_keep_their_recipes_model_kwargs(name, recipe_model):
    """ The 2025 recipes' own model kwargs survive (no --model-kwargs on the command line would replace them), the
    global batch stays 512 as 64 x 8, and the schedule is the reproduction's 150 epochs on 5,000 images. """
    args = _args(name)
    assert args.model == recipe_model
    assert args.model_kwargs['img_size'] == 224 and args.model_kwargs['weight_init'] == 'reset'
    assert (args.batch_size * args.grad_accum_steps, args.train_subset, args.epochs) == (512, 5000, 150)
    assert (args.amp, args.amp_dtype, args.lr, args.warmup_epochs) == (True, 'bfloat16', 2e-3, 50)


def test_full_test_drops_every_evaluation_subset_and_extra_flags_win():
    extra = ['--device', 'cpu', '--epochs', '2', '--val-subset', '20']
    args = _args('gpu2024_base', extra)
    assert (args.device, args.epochs, args.val_subset) == ('cpu', 2, 20)
    command = compare_inits.full_test_command('gpu2024_base', 0, Path('DATA'), Path('/out/run'), extra)
    assert '--val-subset' not in command and command[-2:] == ['--resume', '/out/run']


def _gpu_result(init, seed, final):
    return dict(init=init, seed=seed, model='m', model_kwargs={}, final_top1=final, best_top1=final + 1,
                epochs=100, curve=[final - 5, final], curve_epochs=[50, 100], train_loss=[2., 1.], target_mass=[],
                seconds=120., date='2026-11-26T06:00:00', device='NVIDIA H100 80GB HBM3', images_per_s=8000.)


def test_report_of_gpu_runs_gives_each_init_its_gain_over_the_base(tmp_path):
    """ Gains restated by hand: mimetic (80, 82) against the base (78, 79) gains 2.5 on the means, 2 and 3 per
    seed; impulse-3 (77, 80) gains 0.0, -1 and +1. """
    finals = {('gpu2024_base', 0): 78., ('gpu2024_base', 1): 79., ('gpu2024_mimetic', 0): 80.,
              ('gpu2024_mimetic', 1): 82., ('gpu2024_impulse3', 0): 77., ('gpu2024_impulse3', 1): 80.}
    for (init, seed), final in finals.items():
        run = tmp_path / 'runs' / f'{init}_s{seed}'
        run.mkdir(parents=True)
        (run / 'result.json').write_text(json.dumps(_gpu_result(init, seed, final)))
    compare_inits.report(tmp_path)
    text = (tmp_path / 'results.md').read_text()
    rows = {line.split(' | ')[0].strip('| '): line for line in text.splitlines() if line.startswith('| gpu2024')}
    assert '+2.50 (per seed: +2.00, +3.00)' in rows['gpu2024_mimetic']
    assert '+0.00 (per seed: -1.00, +1.00)' in rows['gpu2024_impulse3']
    assert 'NVIDIA H100 80GB HBM3' in rows['gpu2024_base'] and ' | 2/2 | 100 | 78.50 ± 0.71 | ' in rows['gpu2024_base']
    assert 'CPU scale' not in text and (tmp_path / 'gpu_2024_curves.png').is_file()
    compare_inits.report(tmp_path)  # from the same runs, the same file
    assert (tmp_path / 'results.md').read_text() == text


def test_papers_in_a_clone_trains_nothing_and_says_how_to_rerun(monkeypatch, tmp_path, capsys):
    """ The committed runs count as done: `--papers` starts no training process, needs no data (a fresh clone has
    none), points to --out-dir, and rewrites the same report. """
    out = tmp_path / 'results'
    for run in COMMITTED.glob('runs/paper_*'):
        if run.is_dir():
            shutil.copytree(run, out / 'runs' / run.name)
    monkeypatch.setattr(compare_inits.subprocess, 'Popen', lambda *a, **k: pytest.fail(f'started {a}'))
    compare_inits.main(['--papers', '--data-dir', str(tmp_path / 'no-data'), '--out-dir', str(out)])
    printed = capsys.readouterr().out
    assert '[nothing trained]' in printed and '--out-dir' in printed
    # the papers' table as committed, from the same runs
    def rows(text):
        return [line for line in text.splitlines() if line.startswith('| paper_')]
    assert rows((out / 'results.md').read_text()) == rows((COMMITTED / 'results.md').read_text()) != []


@pytest.mark.slow
def test_packed_images_are_those_the_training_subset_reads_on_the_full_copy(cifar10_dir, tmp_path):
    """ The GPU machine reads the pack; the trainer's own `--train-subset 20` must read the same images from it as
    from the full copy, in the same order, and the pack holds the test images asked for, class-balanced. """
    import tarfile
    from timm_structinit.train.build import build_datasets
    sys.path.insert(0, str(REPO / 'benchmarks' / 'gpu'))
    import pack_cifar10
    assert pack_cifar10.main(['--data-dir', str(cifar10_dir), '--out', str(tmp_path / 'c.tar.gz'),
                              '--train-images', '20', '--test-images', '30']) == 0
    with tarfile.open(tmp_path / 'c.tar.gz') as tar:
        tar.extractall(tmp_path, filter='data')
    manifest = json.loads((tmp_path / 'cifar10' / 'manifest.json').read_text())
    assert manifest['images'] == {'train': 20, 'test': 30}
    assert len(list((tmp_path / 'cifar10' / 'test').glob('*/*.jpg'))) == 30
    assert {len(list(d.glob('*.jpg'))) for d in (tmp_path / 'cifar10' / 'test').iterdir()} == {3}

    def images(data_dir):
        args = parse_args(['--data-dir', str(data_dir), '--train-split', 'train', '--val-split', 'test',
                           '--train-subset', '20'])
        train, _ = build_datasets(args)
        return [(Path(train.dataset.filename(int(i), absolute=True)).read_bytes(), label)
                for i, label in zip(train.indices, train.targets)]

    assert images(tmp_path / 'cifar10') == images(cifar10_dir)


def test_only_narrows_a_gpu_setup_to_the_runs_named(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(compare_inits, 'train_runs', lambda runs, *a, **k: seen.append((list(runs), a[2:3])) or [])
    (tmp_path / 'data' / 'train').mkdir(parents=True)
    compare_inits.main(['--gpu-2024', '--only', 'gpu2024_mimetic_s1', '--data-dir', str(tmp_path / 'data'),
                        '--out-dir', str(tmp_path / 'out')])
    # the CPU runs (none), then the setup's, three at a time
    assert seen == [([], ()), ([('gpu2024_mimetic', 1)], (3,))]


def test_papers_into_a_new_folder_trains_every_run_there_and_leaves_the_committed_ones(monkeypatch, tmp_path):
    """ The documented rerun (`--papers --out-dir NEW`), dry: every run of the papers' regime goes to NEW. """
    trained = []
    monkeypatch.setattr(compare_inits, 'train_runs', lambda runs, data, runs_dir, *a, **k: trained.extend(
        (name, seed, runs_dir) for name, seed in runs) or [])
    (tmp_path / 'data' / 'train').mkdir(parents=True)
    before = (COMMITTED / 'results.md').stat().st_mtime_ns
    compare_inits.main(['--papers', '--data-dir', str(tmp_path / 'data'), '--out-dir', str(tmp_path / 'new')])
    assert sorted(trained) == sorted((name, seed, tmp_path / 'new' / 'runs') for name, entry in
                                     compare_inits.PAPERS.items() for seed in entry.seeds)
    assert len(trained) == 22 and (COMMITTED / 'results.md').stat().st_mtime_ns == before


@pytest.mark.parametrize('args,env,message', [
    (['2026'], {'OUT': 'OUTDIR'}, "setup '2026': must be 2024 or 2025"),
    (['2024'], {}, 'OUT is not set'),
    (['2025'], {'OUT': 'OUTDIR', 'PACK': 'OUTDIR/none.tar.gz'}, 'none.tar.gz: no such file')])
def test_gpu_script_refuses_bad_input_in_one_line_before_any_work(tmp_path, args, env, message):
    environ = {k: v for k, v in os.environ.items() if k not in ('OUT', 'PACK')}
    environ.update({k: v.replace('OUTDIR', str(tmp_path)) for k, v in env.items()})
    done = subprocess.run(['bash', str(REPO / 'benchmarks' / 'gpu' / 'compare_inits.sh'), *args], env=environ,
                          cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 2 and message in done.stderr and done.stderr.count('\n') == 1
    assert list(tmp_path.iterdir()) == []
