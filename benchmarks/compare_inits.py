""" What the inits are worth: train every init on the shared real CIFAR-10 at CPU scale, through the project's own
training entry point, and tabulate final and best top-1 against the baseline of the same architecture.

Eleven runs: two seeds for the timm-default and average-pool sin-cos baselines, mimetic and impulse-3, one for the
rest. Scale (stated in every output): a ViT of width 128, depth 6, 4 heads, patch 4 on 32x32 (an 8 x 8 token grid), a
class-balanced 8,000-image training subset, 15 epochs, evaluated each epoch on a class-balanced 5,000-image subset of
the test split. Why this scale: it is the largest at which these runs fit in about two hours on 2 CPU cores (~250
img/s); patch 2 (16 x 16 tokens, as in the papers) costs about 3x more per image, and at width 128 on a 16 x 16 grid
the capped impulse solve leaves only ~15% of the attention mass on the target against ~43% on 8 x 8, so the coarser
grid is also where the impulse structure is clearest at this width.

Each finished run writes `runs/<run>/result.json`; a rerun skips runs already done, so the benchmark can be spread
over several sittings. `report` (run automatically at the end) writes `results.md` and `curves.png`. The runs
committed in `benchmarks/results/compare_inits/` count as done: to train them again, name a new folder with
`--out-dir` (the committed results stay as they are).

`--probes` adds four single runs that take the comparison apart (Q/K against V/proj, 8 x 8 against the papers'
16 x 16 grid); they are reported in a second table. The two patch-2 probes take about 3x as long as the others.

    python benchmarks/compare_inits.py                      # run what is missing, then report
    python benchmarks/compare_inits.py --only mimetic_s0    # one run
    python benchmarks/compare_inits.py --probes             # the main runs, then the probes
    python benchmarks/compare_inits.py --science            # the main runs, then the impulse study (E2-E4)
    python benchmarks/compare_inits.py --families           # the main runs, then Swin and MLP-Mixer
    python benchmarks/compare_inits.py --papers             # the papers' regime (small data, long schedule) only
    python benchmarks/compare_inits.py --papers --out-dir output/compare_inits   # all of it again, in a new folder
    python benchmarks/compare_inits.py --report-only
    python benchmarks/compare_inits.py --gpu-2024 --data-dir DIR --time-limit 500  # one GPU: benchmarks/gpu/

`--gpu-2024` and `--gpu-2025` train the papers' two setups at their own model size on one GPU (see GPU_SETUPS below
and docs/studies.md); benchmarks/gpu/compare_inits.sh runs one of them as one command on the GPU machine.

`--papers` measures the inits in the regime the papers make their claims for: a small class-balanced training set
(2,000 CIFAR-10 images), a long schedule (100 epochs) with the 2025 paper's recipe scaled to that length, and the
rest of the network at PyTorch's default init (`weight_init='reset'`, as the authors' `weight_init=skip`) or at
timm's. Each run evaluates every 2 epochs on 2,000 test images and, when it ends, on all 10,000.
"""
import argparse
import datetime
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from results_file import write_lines
from timm_structinit.compare import session
from timm_structinit.compare.runner import RunSpec, read_summary, run_all
from timm_structinit.train import parse_args

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_DATA = REPO.parent / 'shared' / 'data' / 'cifar10'

ARCH = dict(img_size=32, patch_size=4, embed_dim=128, depth=6, num_heads=4)

RECIPE = (
    '--train-split', 'train', '--val-split', 'test', '--train-subset', '8000', '--val-subset', '5000',
    '--epochs', '15', '--batch-size', '128', '--opt', 'adamw', '--lr', '1e-3', '--weight-decay', '0.05',
    '--sched', 'cosine', '--warmup-epochs', '2', '--warmup-lr', '1e-5', '--min-lr', '1e-5',
    '--scale', '0.8', '1.0', '--hflip', '0.5', '--color-jitter', '0', '--smoothing', '0.1',
    '--workers', '1', '--log-interval', '1000',
)

# The papers' regime (`--papers`). The 2025 small-dataset recipe (osiriszjq/structured_initialization README: AdamW
# lr 2e-3 at global batch 512, eps 1e-8, wd 0.05, cosine, 50 of 300 epochs warm-up from 1e-6, min lr 1e-6,
# rand-m9-mstd0.5-inc1, mixup 0.8, cutmix 1.0, reprob 0.25, smoothing 0.1, color jitter 0.4, drop path 0.1, timm's
# default random-resized crop 0.08-1 and flips, no EMA) scaled to 2,000 images and 100 epochs: batch 128 (15 steps an
# epoch, 1,500 in all; at 512 an epoch would be 3 steps), lr 1e-3 (2e-3 scaled by sqrt(128/512), timm's rule for
# AdamW), 17 warm-up epochs (1/6). Evaluation every 2 epochs on a class-balanced 2,000-image test subset (the curve,
# best and last-10-epoch mean), and once at the end on all 10,000 test images (the final number: a 2,000-image
# estimate near 50% has a standard error of ~1.1 points, 10,000 images ~0.5). Left as the models have them: the
# 32 px input (the paper upsamples to 224) and evaluation crop 1.0 (its crop_pct 0.875 is for 224 px ImageNet-style
# inputs). 2,000 images is what fits: at ~95 img/s per process with two runs at a time (measured here), a
# 100-epoch patch-4 run takes ~40 minutes and a patch-2 run about 5x that.
PAPERS_RECIPE = (
    '--train-split', 'train', '--val-split', 'test', '--train-subset', '2000', '--val-subset', '2000',
    '--epochs', '100', '--val-interval', '2', '--batch-size', '128', '--opt', 'adamw', '--opt-eps', '1e-8',
    '--lr', '1e-3', '--weight-decay', '0.05', '--sched', 'cosine', '--warmup-epochs', '17', '--warmup-lr', '1e-6',
    '--min-lr', '1e-6', '--aa', 'rand-m9-mstd0.5-inc1', '--mixup', '0.8', '--cutmix', '1.0', '--reprob', '0.25',
    '--smoothing', '0.1', '--color-jitter', '0.4', '--drop-path', '0.1', '--scale', '0.08', '1.0', '--hflip', '0.5',
    '--workers', '1', '--log-interval', '1000',
)


@dataclass(frozen=True)
class Entry:
    """ One init (or probe) of the comparison: a registered model, the kwargs that differ from ARCH, its seeds, and
    the run it is measured against (the baseline of the same architecture). """
    model: str
    seeds: Tuple[int, ...]
    baseline: Optional[str] = None
    kwargs: Dict[str, Any] = field(default_factory=dict)
    question: str = ''  # probes only: what the probe tests
    recipe: Tuple[str, ...] = ()  # flags that replace or extend RECIPE's for this entry (argparse: the last wins)
    arch: Dict[str, Any] = field(default_factory=lambda: ARCH)  # the scale, for other model families
    base_recipe: Tuple[str, ...] = RECIPE  # the recipe `recipe` extends


INITS: Dict[str, Entry] = {
    'timm_default': Entry('vit_tiny_patch2_32', (0, 1)),
    'sincos': Entry('vit_tiny_patch2_32_sincos', (0,)),
    'gap_sincos': Entry('vit_tiny_patch2_32_gap_sincos', (0, 1)),
    'mimetic': Entry('vit_tiny_patch2_32_mimetic', (0, 1), 'sincos'),
    'impulse3': Entry('vit_tiny_patch2_32_impulse3', (0, 1), 'gap_sincos'),
    'impulse5': Entry('vit_tiny_patch2_32_impulse5', (0,), 'gap_sincos'),
    'impulse2025': Entry('vit_tiny_patch2_32', (0,), 'timm_default', {'struct_init': 'impulse2025'}),
}

# Probes (`--probes`): single runs, same recipe, that take the comparison apart to explain what the table shows.
PROBES: Dict[str, Entry] = {
    'mimetic_qk_only': Entry(
        'vit_tiny_patch2_32_mimetic', (0,), 'sincos', {'struct_init_kwargs': {'vproj': False}},
        'mimetic Q/K alone (V/proj at timm init): how much of mimetic comes from the attention maps?'),
    'impulse3_mimetic_vproj': Entry(
        'vit_tiny_patch2_32_impulse3', (0,), 'gap_sincos', {'struct_init_kwargs': {'vproj': 'mimetic'}},
        'impulse-3 Q/K with mimetic V/proj: does impulse gain once V/proj is mimetic too?'),
    'gap_sincos_p2': Entry(
        'vit_tiny_patch2_32_gap_sincos', (0,), None, {'patch_size': 2},
        'baseline on the papers\' 16 x 16 grid (patch 2)'),
    'impulse3_p2': Entry(
        'vit_tiny_patch2_32_impulse3', (0,), 'gap_sincos_p2', {'patch_size': 2},
        'impulse-3 on the papers\' 16 x 16 grid: is the 8 x 8 grid too coarse for a 3 x 3 filter?'),
}

# The impulse study (`--science`): what it takes for impulse Q/K to carry locality into training at this scale.
# E2 isolates Q/K under a V/proj that transmits (mimetic V/proj on both sides); E3 is the sharp closed-form solve
# (svd, spectrum cut 0.1) blind to patch content (`content='orthogonal'`, the one setting at the standard table that
# kept >= 0.36 of the mass on the target on real images in every layer at step 0, against 0.13-0.18 for the default
# capped solve, when the study was chosen; benchmarks/results/impulse_mass.txt has the current solvers' figures), against the standard base; E4 is E3's pick and the standard
# base at 40 epochs with the papers' augmentation (RandAugment, Mixup / CutMix).
MIMETIC_VPROJ_ONLY = {'struct_init': 'mimetic', 'struct_init_kwargs': {'qk': False}}
SVD_ORTH = {'solver': 'svd', 'content': 'orthogonal'}
LONG_AUG = ('--epochs', '40', '--warmup-epochs', '5', '--aa', 'rand-m9-mstd0.5-inc1', '--mixup', '0.8',
            '--cutmix', '1.0')
SCIENCE: Dict[str, Entry] = {
    'e2_base_mimetic_vproj': Entry(
        'vit_tiny_patch2_32_gap_sincos', (0, 1), 'gap_sincos', MIMETIC_VPROJ_ONLY,
        'E2 base: timm Q/K, mimetic V/proj (transmission control)'),
    'e2_impulse3_mimetic_vproj': Entry(
        'vit_tiny_patch2_32_impulse3', (0, 1), 'e2_base_mimetic_vproj', {'struct_init_kwargs': {'vproj': 'mimetic'}},
        'E2: impulse-3 Q/K against timm Q/K, both with mimetic V/proj'),
    'e3_impulse3_svd_orth': Entry(
        'vit_tiny_patch2_32_impulse3', (0, 1), 'gap_sincos', {'struct_init_kwargs': SVD_ORTH},
        'E3 (E1\'s pick: >= 0.36 in every layer): closed-form impulse-3 Q/K blind to patch content'),
    'e4_gap_sincos': Entry(
        'vit_tiny_patch2_32_gap_sincos', (0,), None, {}, 'E4: the standard base, 40 epochs, RandAugment + Mixup/CutMix',
        LONG_AUG),
    'e4_impulse3_svd_orth': Entry(
        'vit_tiny_patch2_32_impulse3', (0,), 'e4_gap_sincos', {'struct_init_kwargs': SVD_ORTH},
        'E4: E3\'s arm, 40 epochs, RandAugment + Mixup/CutMix', LONG_AUG),
}

# Beyond ViT (`--families`): Swin and MLP-Mixer of about the ViT rows' cost per image (measured: one 128-image
# training step on one thread takes 2.1 s for the ViT, 2.2 s for this Swin, 1.4 s for this Mixer), each with and
# without the impulse init, same recipe. Swin: patch 2 (16 x 16 tokens), windows of 4, three stages of 2 blocks at
# widths 64 / 128 / 256 with 2 / 4 / 8 heads. Mixer: patch 4 (8 x 8 tokens, as the ViT rows), width 128, 6 blocks,
# 128 token-mixing units (2 x 64 tokens: an exact shift).
SWIN_ARCH = dict(img_size=32, patch_size=2, window_size=4, embed_dim=64, depths=(2, 2, 2), num_heads=(2, 4, 8))
MIXER_ARCH = dict(img_size=32, patch_size=4, embed_dim=128, num_blocks=6, mlp_ratio=(1.0, 4.0))
FAMILIES: Dict[str, Entry] = {
    'swin': Entry('swin_tiny_patch2_window4_32', (0, 1), None, question="Swin, timm's init", arch=SWIN_ARCH),
    'swin_impulse3': Entry('swin_tiny_patch2_window4_32_impulse3', (0, 1), 'swin',
                           question='Swin, 3x3 impulse in the relative position bias', arch=SWIN_ARCH),
    'mixer': Entry('mixer_s4_32', (0, 1), None, question="MLP-Mixer, timm's init", arch=MIXER_ARCH),
    'mixer_impulse3': Entry('mixer_s4_32_impulse3', (0, 1), 'mixer',
                            question='MLP-Mixer, token mixing a 3x3 impulse (shift) per block', arch=MIXER_ARCH),
}

# The papers' regime (`--papers`): every arm on the same architecture (the average-pool sin-cos base, patch 4), the
# rest of the network at PyTorch's default init (RESET, the authors' setting for every arm) or at timm's. A/B: the
# base with each rest-of-network init; C, D, F, G: the inits on B's rest; D': impulse on A's; E/E': the base and
# impulse-3 on the papers' 16 x 16 grid (patch 2), in the rest-of-network setting that serves impulse best at patch 4.
# F puts the 2025 init on the sin-cos base, whose unit-scale table x18 dwarfs the patch content; H/H' measure it on the
# base it was made for, timm's learned table (std 0.02; x18, about 0.36) with a class token.
RESET = {'weight_init': 'reset'}
P2 = {'patch_size': 2}
PAPERS: Dict[str, Entry] = {
    'paper_a_base': Entry(
        'vit_tiny_patch2_32_gap_sincos', (0, 1), None, {}, "A: the base, timm's init (the standard base)",
        base_recipe=PAPERS_RECIPE),
    'paper_b_base_reset': Entry(
        'vit_tiny_patch2_32_gap_sincos', (0, 1), None, RESET, "B: the base, PyTorch's default init (the authors' "
        'default arm)', base_recipe=PAPERS_RECIPE),
    'paper_c_mimetic_reset': Entry(
        'vit_tiny_patch2_32_gap_sincos', (0, 1), 'paper_b_base_reset', {'struct_init': 'mimetic', **RESET},
        "C: mimetic, PyTorch's default rest", base_recipe=PAPERS_RECIPE),
    'paper_d_impulse3_reset': Entry(
        'vit_tiny_patch2_32_impulse3', (0, 1), 'paper_b_base_reset', RESET,
        "D: impulse-3 (2024 default), PyTorch's default rest", base_recipe=PAPERS_RECIPE),
    'paper_d_impulse3_timm': Entry(
        'vit_tiny_patch2_32_impulse3', (0, 1), 'paper_a_base', {}, "D': impulse-3 (2024 default), timm's rest",
        base_recipe=PAPERS_RECIPE),
    'paper_f_impulse2025_reset': Entry(
        'vit_tiny_patch2_32_gap_sincos', (0, 1), 'paper_b_base_reset', {'struct_init': 'impulse2025', **RESET},
        "F: impulse2025 (closed-form Q/K, mimetic V/proj, table x18), PyTorch's default rest",
        base_recipe=PAPERS_RECIPE),
    'paper_g_mimetic_vproj_reset': Entry(
        'vit_tiny_patch2_32_gap_sincos', (0, 1), 'paper_b_base_reset', {**MIMETIC_VPROJ_ONLY, **RESET},
        "G: mimetic V/proj only (F's transmission without its impulse Q/K), PyTorch's default rest",
        base_recipe=PAPERS_RECIPE),
    'paper_h_base_learned_reset': Entry(
        'vit_tiny_patch2_32', (0, 1), None, {'class_token': True, 'global_pool': 'token', **RESET},
        "H: the 2025 paper's own base (timm's learned table, class token), PyTorch's default rest",
        base_recipe=PAPERS_RECIPE),
    'paper_h_impulse2025_learned_reset': Entry(
        'vit_tiny_patch2_32', (0, 1), 'paper_h_base_learned_reset', {'struct_init': 'impulse2025', **RESET},
        "H': impulse2025 on its own base, as the authors' code (a learned table of std 0.02, x18)",
        base_recipe=PAPERS_RECIPE),
    'paper_e_base_p2': Entry(
        'vit_tiny_patch2_32_gap_sincos', (0, 1), None, {**P2, **RESET}, "E: the base on 16 x 16 tokens (patch 2), "
        "PyTorch's default rest", base_recipe=PAPERS_RECIPE),
    'paper_e_impulse3_p2': Entry(
        'vit_tiny_patch2_32_impulse3', (0, 1), 'paper_e_base_p2', {**P2, **RESET},
        "E': impulse-3 on 16 x 16 tokens (patch 2), PyTorch's default rest", base_recipe=PAPERS_RECIPE),
}

# At the papers' model size, on one GPU (`--gpu-2024`, `--gpu-2025`): the registered ViT-T models as they are (width
# 192, depth 12, 3 heads), each arm through its shipped recipe with only the data, the schedule's length, the
# evaluation and the device changed: bf16 autocast, evaluation every 10 epochs on a class-balanced 2,000-image test
# subset and, at the end, on all 10,000 test images. Three runs share the GPU as separate processes (a ViT-T does
# not fill an H100), so that the 2024 setup, bound by the GPU, fits both seeds in one command of 9 minutes, and the
# 2025 setup, bound by decoding and augmenting 224 px images on the machine's 16 cores, one seed
# (benchmarks/gpu/estimate.py has the arithmetic, docs/studies.md the figures).
# 2024 setup (Zheng et al. 2024, ViT-T/2 on 32 px, 16 x 16 tokens): the impulse_vit_tiny_patch2_cifar10 recipe (AdamW
# lr 1e-3 at batch 512, wd 0.01, 10 warm-up epochs, RandAugment, clipping 3.0) for its three arms, the base the paper
# calls trunc-normal (timm's init on the sin-cos, average-pool ViT), mimetic on that base, and impulse-3; 10,000
# class-balanced training images, 100 epochs (the recipe's 200 halved: the paper's length does not fit).
# 2025 setup (the independent reproduction of Zheng et al. 2025: ViT-Ti/16 at 224 px, 5,000 images, 150 epochs): the
# {default,mimetic,impulse}2025 CIFAR-10 recipes, their global batch of 512 as 64 x 8 accumulated batches (what the
# recipes say for one GPU), their 50 warm-up epochs kept.
GPU_COMMON = (
    '--dataset', '', '--train-split', 'train', '--val-split', 'test', '--val-subset', '2000', '--val-interval', '10',
    '--device', 'cuda', '--amp', '--amp-dtype', 'bfloat16', '--pin-mem', '--log-interval', '1000',
    '--checkpoint-hist', '1',  # the last checkpoint is all the final evaluation needs; each is ~66 MB to write
)


@dataclass(frozen=True)
class GpuSetup:
    """ One setup at the papers' model size: its arms, its data and schedule, and how it shares the GPU machine. """
    entries: Dict[str, Entry]
    train_images: int
    epochs: int
    img_size: int
    concurrent: int  # runs at a time, each its own process on the one GPU
    workers: int  # loader processes per run: about (16 cores - concurrent) / concurrent
    title: str
    papers: str  # the published numbers the setup is read against
    val_interval: int = 10
    val_images: int = 2000


def gpu_setup(arms: Dict[str, Tuple[str, Optional[str], Dict[str, Any], str, str]], train_images: int, epochs: int,
              img_size: int, concurrent: int, workers: int, title: str, papers: str, more: Tuple[str, ...] = ()
              ) -> GpuSetup:
    """ A setup of `arms` (name: model, baseline, model kwargs, what it is, shipped recipe), two seeds each, every
    arm's recipe with the setup's data, schedule, loaders and GPU_COMMON, then `more`. """
    entries = {
        name: Entry(model, (0, 1), baseline, kwargs, question, arch={}, base_recipe=(
            '-c', recipe, *GPU_COMMON, '--train-subset', str(train_images), '--epochs', str(epochs),
            '--workers', str(workers), *more))
        for name, (model, baseline, kwargs, question, recipe) in arms.items()}
    return GpuSetup(entries, train_images, epochs, img_size, concurrent, workers, title, papers)


GPU_SETUPS: Dict[str, GpuSetup] = {
    'gpu_2024': gpu_setup(
        {'gpu2024_base': ('vit_tiny_patch2_32_gap_sincos', None, {},
                          "trunc-normal: timm's init (sin-cos, average pooling)", 'impulse_vit_tiny_patch2_cifar10'),
         'gpu2024_mimetic': ('vit_tiny_patch2_32_gap_sincos', 'gpu2024_base', {'struct_init': 'mimetic'},
                             'mimetic on the same base', 'impulse_vit_tiny_patch2_cifar10'),
         'gpu2024_impulse3': ('vit_tiny_patch2_32_impulse3', 'gpu2024_base', {},
                              "impulse-3 (the 2024 paper's init)", 'impulse_vit_tiny_patch2_cifar10')},
        train_images=10000, epochs=100, img_size=32, concurrent=3, workers=4,
        title='2024 setup: ViT-T/2 at 32 px (16 x 16 tokens), 10,000 images, 100 epochs',
        papers='the 2024 paper (all 50,000 images, 200 epochs): trunc-normal 88.63, mimetic 91.16, impulse-3 91.62'),
    'gpu_2025': gpu_setup(
        {'gpu2025_default': ('vit_tiny_patch16_224', None, {},
                             "default: PyTorch's init, timm's learned table, class token",
                             'default2025_vit_tiny_patch16_224_cifar10'),
         'gpu2025_mimetic': ('vit_tiny_patch16_224_mimetic', 'gpu2025_default', {}, 'mimetic (the 2025 recipe)',
                             'mimetic2025_vit_tiny_patch16_224_cifar10'),
         'gpu2025_impulse': ('vit_tiny_patch16_224_impulse2025', 'gpu2025_default', {},
                             'impulse (the 2025 closed form)', 'impulse2025_vit_tiny_patch16_224_cifar10')},
        train_images=5000, epochs=150, img_size=224, concurrent=3, workers=5,
        title='2025 setup: ViT-Ti/16 at 224 px (14 x 14 tokens), 5,000 images, 150 epochs',
        papers="the reproduction with the authors' code (5,000 images, 150 epochs, one seed): default 49.24, mimetic "
               '55.59, impulse 57.30',
        # the recipes' 8 processes x 64 images as one process: 64 x 8 accumulated batches, as their headers say
        more=('-b', '64', '--grad-accum-steps', '8')),
}
GPU = {name: entry for setup in GPU_SETUPS.values() for name, entry in setup.entries.items()}
ENTRIES = {**INITS, **PROBES, **SCIENCE, **FAMILIES, **PAPERS, **GPU}


def run_name(init: str, seed: int) -> str:
    return f'{init}_s{seed}'


def all_runs(entries: Dict[str, Entry]) -> List[tuple]:
    """ Every entry's first seed before any second seed, so a partial benchmark already compares them all. """
    runs = [(name, seed) for name, entry in entries.items() for seed in entry.seeds]
    return sorted(runs, key=lambda run: run[1])


def model_kwargs(entry: Entry) -> Dict[str, Any]:
    return {**entry.arch, **entry.kwargs}


def grid_of(kwargs: Dict[str, Any]) -> int:
    return kwargs['img_size'] // kwargs['patch_size']


def train_command(name: str, seed: int, data_dir: Path, out: Path, extra: Sequence[str] = ()) -> List[str]:
    """ The training command of one run; `extra` flags come last, so they win over the recipe's (a rehearsal's). """
    entry = ENTRIES[name]
    kwargs = [f'{k}={v}'.replace(' ', '') for k, v in model_kwargs(entry).items()]
    # no --model-kwargs where there are none: on the command line it would replace a recipe's own model_kwargs
    return [
        sys.executable, '-m', 'timm_structinit.train', '--data-dir', str(data_dir), '--model', entry.model,
        *(['--model-kwargs', *kwargs] if kwargs else []), '--seed', str(seed),
        '--output', str(out.parent), '--experiment', out.name, *entry.base_recipe, *entry.recipe, *extra,
    ]


def full_test_command(name: str, seed: int, data_dir: Path, work: Path, extra: Sequence[str] = ()) -> List[str]:
    """ The finished run evaluated on the whole test split: the training entry point resumed at its last epoch
    (nothing left to train, so it evaluates and reports), without the evaluation subset. """
    command = train_command(name, seed, data_dir, work, extra)
    while '--val-subset' in command:  # the recipe's and any added after it
        at = command.index('--val-subset')
        command = command[:at] + command[at + 2:]
    return command + ['--resume', str(work)]


def full_test_top1(name: str, seed: int, data_dir: Path, work: Path, log, extra: Sequence[str] = ()
                   ) -> Tuple[float, int]:
    """ (top-1, number of images) of the finished run in `work` on the whole test split. """
    done = subprocess.run(full_test_command(name, seed, data_dir, work, extra), check=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, cwd=REPO, env={**os.environ, 'PYTHONUNBUFFERED': '1'})
    log.write(done.stdout)
    match = re.search(r'final top-1 ([0-9.]+)% on (\d+) ', done.stdout)
    if match is None:
        raise RuntimeError(f'no final top-1 in the output of the full-test evaluation of {run_name(name, seed)}')
    return float(match.group(1)), int(match.group(2))


def run_spec(name: str, seed: int, data_dir: Path, runs_dir: Path, extra: Sequence[str] = ()) -> RunSpec:
    """ One run for the package's runner: it trains into `<run>.partial`, and `finish_run` moves it to `<run>` with
    its result, so that a folder without `.partial` is a finished run. """
    run = run_name(name, seed)
    command = train_command(name, seed, data_dir, runs_dir / f'{run}.partial', extra)
    epochs = parse_args(command[command.index('timm_structinit.train') + 1:]).epochs
    return RunSpec(run, command, runs_dir / f'{run}.partial', epochs, done_folder=runs_dir / run)


def device_record(command: Sequence[str]) -> Dict[str, Any]:
    """ Where a run ran: the device its command names (its last --device), and the versions that ran it. """
    device = command[len(command) - 1 - command[::-1].index('--device') + 1] if '--device' in command else 'cpu'
    return session.device_record(device)


def finish_run(spec: RunSpec, seconds: float, resumed: bool, data_dir: Path, runs_dir: Path,
               extra: Sequence[str] = ()) -> dict:
    """ The result of a finished training process: result.json in the run's folder, checkpoints removed. """
    name, seed = next((n, s) for n, entry in ENTRIES.items() for s in entry.seeds if run_name(n, s) == spec.name)
    run, work = spec.name, spec.folder
    rows = read_summary(work / 'summary.csv')
    mass_rows = read_summary(work / 'target_mass.csv') if (work / 'target_mass.csv').exists() else []
    entry = ENTRIES[name]
    result = dict(
        init=name, seed=seed, model=entry.model, model_kwargs=model_kwargs(entry),
        final_top1=rows[-1]['eval_top1'], best_top1=max(r['eval_top1'] for r in rows),
        epochs=int(rows[-1]['epoch']) + 1,  # trained; the curve has one point per evaluation (see curve_epochs)
        curve=[r['eval_top1'] for r in rows], train_loss=[r['train_loss'] for r in rows],
        target_mass=[{k: round(v, 4) for k, v in r.items()} for r in mass_rows],
        seconds=round(seconds, 1),  # a resumed run's seconds: every part of it (the runner keeps them)
        resumed=resumed, command=shlex.join(spec.command[1:]),
        date=datetime.datetime.now().isoformat(timespec='seconds'))
    if name in PAPERS or name in GPU:  # evaluated every few epochs on a subset: the curve's epochs, and the final
        last = rows[-1]['epoch'] + 1
        with open(runs_dir / f'{run}.log', 'a') as log:
            top1, count = full_test_top1(name, seed, data_dir, work, log, extra)
        result.update(
            curve_epochs=[int(r['epoch']) + 1 for r in rows], final_subset_top1=result['final_top1'],
            final_top1=top1, final_images=count,
            last10_top1=statistics.mean(r['eval_top1'] for r in rows if r['epoch'] + 1 > last - 10),
            full_test_command=shlex.join(full_test_command(name, seed, data_dir, work, extra)[1:]))
    if name in GPU:
        images = read_train_images(runs_dir / f'{run}.log')
        result.update(
            device_record(spec.command),
            seconds_with_final_test=round(seconds, 1),
            # the training loop's own rate (evaluated epochs), and the whole run's: images trained per second
            train_images_per_s=round(statistics.mean(r['train_img_per_sec'] for r in rows), 1),
            images_per_s=round(images * result['epochs'] / result['seconds'], 1) if images else None,
            train_images=images)
    (work / 'result.json').write_text(json.dumps(result, indent=1))
    for ckpt in work.glob('*.pth.tar'):  # keep the record small: curves and results, not weights
        ckpt.unlink()
    work.rename(runs_dir / run)
    return result


def read_train_images(log: Path) -> Optional[int]:
    """ The number of training images a run reported at its start ('N training / M evaluation images'). """
    match = re.search(r'(\d+) training / \d+ evaluation images', log.read_text())
    return int(match.group(1)) if match else None


def train_runs(runs: Sequence[tuple], data_dir: Path, runs_dir: Path, concurrent: int = 1,
               deadline: Optional[float] = None, extra: Sequence[str] = ()) -> List[str]:
    """ The runs through the package's runner (`timm_structinit.compare.runner`), `concurrent` at a time as separate
    processes (sharing one GPU), in the order given; returns the runs not finished. With a `deadline`
    (time.monotonic()'s), a run starts only if the longest finished run would still end before it, and the runs
    under way then are stopped (their checkpoints let a later call resume them); a run that fails is reported and
    the others go on. """
    specs = [run_spec(name, seed, data_dir, runs_dir, extra) for name, seed in runs]

    def finish(spec: RunSpec, seconds: float, resumed: bool) -> dict:
        return finish_run(spec, seconds, resumed, data_dir, runs_dir, extra)
    outcome = run_all(specs, finish, concurrent, deadline, log_dir=runs_dir,
                      show=lambda line: print(line, flush=True))
    return list(outcome.failed) + outcome.stopped + outcome.not_started


def _spread(values: List[float]) -> str:
    return f'{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}' if len(values) > 1 else f'{values[0]:.2f}'


def _table(entries: Dict[str, Entry], by_name: Dict[str, List[dict]], probes: bool) -> List[str]:
    means = {name: statistics.mean(r['final_top1'] for r in rs) for name, rs in by_name.items()}
    head = '| init | model | seeds | final top-1 | best top-1 | gap to same-architecture baseline (final) |'
    lines = [head + (' question |' if probes else ''), '|---' * (7 if probes else 6) + '|']
    for name, entry in entries.items():
        label = f'`{entry.model}`' + (f' + {entry.kwargs}' if entry.kwargs else '')
        rs = by_name.get(name, [])
        question = f' {entry.question} |' if probes else ''
        if not rs:
            lines.append(f'| {name} | {label} | 0/{len(entry.seeds)} | not run yet | | |{question}')
            continue
        gap = ''
        if entry.baseline is not None and entry.baseline in means:
            gap = f'{means[name] - means[entry.baseline]:+.2f} vs {entry.baseline}'
        finals, bests = [r['final_top1'] for r in rs], [r['best_top1'] for r in rs]
        lines.append(f'| {name} | {label} | {len(rs)}/{len(entry.seeds)} | {_spread(finals)} | {_spread(bests)} '
                     f'| {gap} |{question}')
    return lines


def _mass_table(entries: Dict[str, Entry], by_name: Dict[str, List[dict]]) -> List[str]:
    lines = ['| init | target mass per layer at epoch 0 | epoch 1 | epoch 3 | last epoch |', '|---|---|---|---|---|']
    for name in entries:
        runs = [r for r in by_name.get(name, []) if r['seed'] == 0 and r.get('target_mass')]
        if not runs:
            continue
        rows = {int(row['epoch']): row for row in runs[0]['target_mass']}
        cells = []
        for epoch in (0, 1, 3, max(rows)):
            row = rows.get(epoch)
            layers = [v for k, v in sorted(row.items(), key=lambda kv: kv[0]) if k.startswith('layer')] if row else []
            cells.append(' '.join(f'{v:.2f}' for v in layers) + (f' (mean {row["mean"]:.2f})' if row else ''))
        lines.append(f'| {name} | ' + ' | '.join(cells) + ' |')
    return lines


def _papers_table(by_name: Dict[str, List[dict]]) -> List[str]:
    means = {name: statistics.mean(r['final_top1'] for r in rs) for name, rs in by_name.items()}
    lines = ['| arm | init | seeds | final top-1 (10,000 images) | per seed | best (2,000) | last 10 epochs (2,000) '
             '| gap (final) |', '|---' * 8 + '|']
    for name, entry in PAPERS.items():
        rs = sorted(by_name.get(name, []), key=lambda r: r['seed'])
        if not rs:
            lines.append(f'| {name} | {entry.question} | 0/{len(entry.seeds)} | not run yet | | | | |')
            continue
        gap = (f'{means[name] - means[entry.baseline]:+.2f} vs {entry.baseline}'
               if entry.baseline in means else '')
        per_seed = ', '.join(f'{r["final_top1"]:.2f}' for r in rs)
        lines.append(
            f'| {name} | {entry.question} | {len(rs)}/{len(entry.seeds)} | {_spread([r["final_top1"] for r in rs])} '
            f'| {per_seed} | {_spread([r["best_top1"] for r in rs])} | {_spread([r["last10_top1"] for r in rs])} '
            f'| {gap} |')
    return lines


def _papers_mass(by_name: Dict[str, List[dict]]) -> List[str]:
    lines = ['| arm | epoch 0 | 2 | 10 | 20 | 50 | 100 |', '|---|---|---|---|---|---|---|']
    for name in PAPERS:
        runs = [r for r in by_name.get(name, []) if r['seed'] == 0 and r.get('target_mass')]
        if runs:
            rows = {int(row['epoch']): row['mean'] for row in runs[0]['target_mass']}
            lines.append(f'| {name} | ' + ' | '.join(f'{rows[e]:.3f}' if e in rows else '' for e in
                                                      (0, 2, 10, 20, 50, 100)) + ' |')
    return lines


def _gpu_section(setup_name: str, setup: GpuSetup, by_name: Dict[str, List[dict]]) -> List[str]:
    """ The table of a setup at the papers' model size: final top-1 on all 10,000 test images per arm and seed, the
    gain over the base, and where and how fast each ran. """
    means = {name: statistics.mean(r['final_top1'] for r in rs) for name, rs in by_name.items()}
    flag = '--' + setup_name.replace('_', '-')
    lines = [f"## At the papers' model size: {setup.title} (`python benchmarks/compare_inits.py {flag}`)", '',
             f'Every arm through its shipped recipe, bf16 autocast on one GPU, {setup.concurrent} runs at a time; '
             f'evaluated every {setup.val_interval} epochs on a class-balanced {setup.val_images:,}-image test subset '
             f'and at the end on all 10,000 test images. For reference, {setup.papers}.', '',
             '| arm | init | seeds | epochs | final top-1 (10,000 images) | per seed | best (subset) | gain over the '
             'base (final) | device | minutes per run | training img/s per run |', '|---' * 11 + '|']
    for name, entry in setup.entries.items():
        rs = sorted(by_name.get(name, []), key=lambda r: r['seed'])
        if not rs:
            lines.append(f'| {name} | {entry.question} | 0/{len(entry.seeds)} | | not run yet | | | | | | |')
            continue
        gains = ''
        if entry.baseline in by_name:  # per seed against the base's same seed, and the means' difference
            base = {r['seed']: r['final_top1'] for r in by_name[entry.baseline]}
            paired = [r['final_top1'] - base[r['seed']] for r in rs if r['seed'] in base]
            gains = f'{means[name] - means[entry.baseline]:+.2f}' + (
                f' (per seed: {", ".join(f"{g:+.2f}" for g in paired)})' if len(paired) > 1 else '')
        devices = ', '.join(sorted({r.get('device', '?') for r in rs}))
        rates = [r['images_per_s'] for r in rs if r.get('images_per_s')]
        per_seed = ', '.join(f'{r["final_top1"]:.2f}' for r in rs)
        minutes = statistics.mean(r['seconds'] for r in rs) / 60
        rate = f'{statistics.mean(rates):.{0 if statistics.mean(rates) >= 100 else 1}f}' if rates else ''
        epochs = ', '.join(str(e) for e in sorted({r['epochs'] for r in rs}))  # a shortened run shows here
        lines.append(
            f'| {name} | {entry.question} | {len(rs)}/{len(entry.seeds)} | {epochs} '
            f'| {_spread([r["final_top1"] for r in rs])} '
            f'| {per_seed} | {_spread([r["best_top1"] for r in rs])} | {gains} | {devices} | {minutes:.1f} '
            f'| {rate} |')
    return lines


def report(out_dir: Path) -> None:
    runs_dir = out_dir / 'runs'
    results = [json.loads(p.read_text()) for p in sorted(runs_dir.glob('*/result.json'))]
    by_name: Dict[str, List[dict]] = {}
    for r in results:
        by_name.setdefault(r['init'], []).append(r)
    grid = grid_of(ARCH)
    cpu = [r for r in results if r['init'] not in GPU]
    # written from the runs alone (no date or machine of its own), so rewriting it from the same runs changes nothing
    lines = [
        '# Init comparison on real CIFAR-10 (shared JPEG copy), CPU scale',
        '',
        '- command of this table: `python benchmarks/compare_inits.py`; each further section names its own; '
        '`python benchmarks/compare_inits.py --report-only` rewrites this file from `runs/`',
        f'- machine of the CPU runs: 2 CPU cores, no GPU; dates of the runs: '
        f'{min((r["date"] for r in cpu), default="-")[:10]} to {max((r["date"] for r in cpu), default="-")[:10]}',
        f'- scale: ViT width {ARCH["embed_dim"]}, depth {ARCH["depth"]}, {ARCH["num_heads"]} heads, patch '
        f'{ARCH["patch_size"]} on 32x32 ({grid} x {grid} tokens); class-balanced 8,000 training images; 15 epochs; '
        'top-1 on a class-balanced 5,000-image subset of the test split',
        f'- recipe (same for every run): `{" ".join(RECIPE)}`',
        '- spread: mean ± standard deviation over seeds (one value where one seed ran); each run\'s exact command, '
        'curve and duration are in `runs/<run>/result.json`',
        '',
        *_table(INITS, by_name, probes=False),
    ]
    if not any(name in by_name for name in INITS) and any(name in by_name for name in GPU):
        lines = ["# Init comparison on real CIFAR-10 (shared JPEG copy) at the papers' model size, one GPU"]
    if any(name in by_name for name in PROBES):
        lines += [
            '',
            '## Probes (`python benchmarks/compare_inits.py --probes`)',
            '',
            'Same recipe, one seed each; kwargs shown are the changes from the scale above.',
            '',
            *_table(PROBES, by_name, probes=True),
        ]
    if any(name in by_name for name in SCIENCE):
        lines += [
            '',
            '## Impulse study (`python benchmarks/compare_inits.py --science`)',
            '',
            'Same recipe unless the question says otherwise (E4: `' + ' '.join(LONG_AUG) + '`). The target-mass '
            'columns are the mean attention mass on each head\'s impulse target over 64 fixed class-balanced test '
            'images, per layer (layer 1 ... last), at epoch 0 (init), 1, 3 and the last epoch; seed 0.',
            '',
            *_table(SCIENCE, by_name, probes=True),
            '',
            *_mass_table(SCIENCE, by_name),
        ]
    if any(name in by_name for name in FAMILIES):
        lines += [
            '',
            '## Beyond ViT: Swin and MLP-Mixer (`python benchmarks/compare_inits.py --families`)',
            '',
            f'Same recipe. Swin: `{SWIN_ARCH}`; Mixer: `{MIXER_ARCH}` (see the module docstring). Curves: '
            '`families_curves.png`.',
            '',
            *_table(FAMILIES, by_name, probes=True),
        ]
        if any(r.get('target_mass') for name in FAMILIES for r in by_name.get(name, [])):
            lines += ['', 'Mass on the impulse targets per layer (Swin: attention in the forward pass on 64 fixed test '
                      'images, chance 1/16 in a full 4 x 4 window; Mixer: token mixing linearized at zero input, 1.00 '
                      'at init), at epoch 0 (init), 1, 3 and the last epoch; seed 0.', '',
                      *_mass_table(FAMILIES, by_name)]
    if any(name in by_name for name in PAPERS):
        lines += ['', "## The papers' regime (`python benchmarks/compare_inits.py --papers`)", '',
                  'ViT width 128, depth 6, 4 heads, patch 4 (E, E\': patch 2), 2,000 class-balanced CIFAR-10 training '
                  'images, 100 epochs; final top-1 on all 10,000 test images, best and last-10-epoch mean of the '
                  'evaluations every 2 epochs on a class-balanced 2,000-image test subset. Recipe: `'
                  + ' '.join(PAPERS_RECIPE) + '`. Gap: final, means, against the arm of the same architecture and '
                  'rest-of-network init.', '', *_papers_table(by_name), '',
                  'Mass on the impulse targets (mean of the 6 layers, 64 fixed test images; chance 1/64, patch 2: '
                  '1/256), seed 0, at epochs 0 / 2 / 10 / 20 / 50 / 100:', '', *_papers_mass(by_name)]
    for setup_name, setup in GPU_SETUPS.items():
        if any(name in by_name for name in setup.entries):
            lines += ['', *_gpu_section(setup_name, setup, by_name)]
    write_lines(out_dir / 'results.md', lines)
    print('\n'.join(lines))
    grid = grid_of(ARCH)
    vit = f'ViT {ARCH["embed_dim"]}/{ARCH["depth"]}/{ARCH["num_heads"]} patch {ARCH["patch_size"]} ({grid}x{grid} tokens)'
    # the impulse study is drawn with the standard base it is judged by
    for entries, bases, file, title in (
            (INITS, [], 'curves.png', f'CIFAR-10, 8k train images, {vit}'),
            (SCIENCE, ['gap_sincos'], 'science_curves.png', f'impulse study, {vit}'),
            (FAMILIES, [], 'families_curves.png', 'CIFAR-10, 8k train images, Swin and MLP-Mixer'),
            (PAPERS, [], 'papers_curves.png', "papers' regime: 2k images, 100 epochs, ViT 128/6/4 (E: patch 2)"),
            *[(setup.entries, [], f'{name}_curves.png', setup.title) for name, setup in GPU_SETUPS.items()]):
        if any(r['init'] in entries for r in results):
            names = [*bases, *entries]
            plot_curves([r for r in results if r['init'] in names], names, out_dir / file, f'{title}; dashed: seed 1')
    tracked = [dict(r, mass=[m['mean'] for m in r['target_mass']]) for r in results if r.get('target_mass')]
    # the impulse structure through training (epoch 0 is the init); ViT heads on the 8 x 8 grid (chance 1/64) and
    # the other families (their own windows and blocks) in separate figures
    for file, group_of, ylabel in (('target_mass.png', SCIENCE, 'mass on target (chance 1/64)'),
                                   ('families_target_mass.png', FAMILIES, 'mass on target'),
                                   ('papers_target_mass.png', PAPERS, 'mass on target (chance 1/64; patch 2: 1/256)')):
        group = [r for r in tracked if r['init'] in group_of]
        if group:
            plot_curves(group, list(dict.fromkeys(r['init'] for r in group)), out_dir / file,
                        'mean mass on the impulse targets; dashed: seed 1', key='mass', ylabel=ylabel, first_epoch=0)


def plot_curves(results: List[dict], names: List[str], out: Path, title: str, key: str = 'curve',
                ylabel: str = 'test top-1 (%)', first_epoch: int = 1) -> None:
    """ One line per run of `results[i][key]` against the epoch, a colour per init, dashed for seed 1. """
    from timm_structinit.utils.figures import epoch_axis, new_figure, save_figure
    from matplotlib import colormaps
    palette = colormaps['tab10' if len(names) <= 10 else 'tab20'].colors  # 11 arms in the papers' regime
    colors = {name: palette[i % len(palette)] for i, name in enumerate(names)}
    fig = new_figure(figsize=(7, 4.5))
    ax = fig.subplots()
    seen = set()
    for r in results:
        label = r['init'] if r['init'] not in seen else None
        seen.add(r['init'])
        # runs evaluated every few epochs carry their epochs; the target mass is measured at those epochs and 0
        epochs = r.get('curve_epochs') if key == 'curve' else (
            [int(m['epoch']) for m in r['target_mass']] if key == 'mass' else None)
        ax.plot(epochs or range(first_epoch, first_epoch + len(r[key])), r[key], color=colors[r['init']],
                label=label, linestyle='-' if r['seed'] == 0 else '--')
    epoch_axis(ax), ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3), ax.legend(fontsize=8)
    save_figure(fig, out, dpi=100)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--data-dir', type=Path, default=DEFAULT_DATA)
    parser.add_argument('--out-dir', type=Path, default=HERE / 'results' / 'compare_inits',
                        help='folder of runs/ and results.md (default: the committed results, whose runs count '
                             'as done; name a new folder to train them again)')
    parser.add_argument('--only', nargs='*', default=None, help='run names (e.g. mimetic_s0) or init names')
    parser.add_argument('--probes', action='store_true', help='also run the probes (after the main runs)')
    parser.add_argument('--science', action='store_true', help='also run the impulse study (E2-E4)')
    parser.add_argument('--families', action='store_true', help='also run Swin and MLP-Mixer, with and without init')
    parser.add_argument('--papers', action='store_true',
                        help="run the papers' regime (2,000 images, 100 epochs, the 2025 recipe; not the main runs)")
    parser.add_argument('--gpu-2024', action='store_true',
                        help="run the 2024 setup at the papers' model size on one GPU (ViT-T/2, 10,000 images)")
    parser.add_argument('--gpu-2025', action='store_true',
                        help="run the 2025 setup at the papers' model size on one GPU (ViT-Ti/16 at 224 px, 5,000 "
                             'images)')
    parser.add_argument('--concurrent', type=int, default=None,
                        help="GPU setups: runs at a time (default: the setup's)")
    parser.add_argument('--time-limit', type=float, default=None, metavar='SECONDS',
                        help='GPU setups: start no run that would end after this many seconds from now, and stop '
                             'the runs under way then (finished runs are kept)')
    parser.add_argument('--train-flags', default='', metavar='FLAGS',
                        help='training flags added to every run (they win over the recipe), e.g. a rehearsal\'s '
                             '"--device cpu --epochs 2"')
    parser.add_argument('--report-only', action='store_true')
    args = parser.parse_args(argv)
    if args.only:
        known = {run_name(n, s) for n, s in all_runs(ENTRIES)} | set(ENTRIES)
        unknown = [name for name in args.only if name not in known]
        if unknown:
            parser.error(f'--only {" ".join(unknown)}: unknown; valid: {", ".join(sorted(known))}')
    if args.concurrent is not None and args.concurrent < 1:
        parser.error(f'--concurrent {args.concurrent}: must be at least 1')
    if args.time_limit is not None and args.time_limit <= 0:
        parser.error(f'--time-limit {args.time_limit:g}: must be a positive number of seconds')
    try:
        extra = shlex.split(args.train_flags)
    except ValueError as e:
        parser.error(f'--train-flags {args.train_flags!r}: {e}')
    gpu = [name for name, wanted in (('gpu_2024', args.gpu_2024), ('gpu_2025', args.gpu_2025)) if wanted]
    runs_dir = args.out_dir / 'runs'
    if not args.report_only:
        runs = ([] if args.papers or gpu else all_runs(INITS)) + (
            all_runs(PROBES) if args.probes or args.only else []) + (
            all_runs(SCIENCE) if args.science or args.only else []) + (
            all_runs(FAMILIES) if args.families or args.only else []) + (
            all_runs(PAPERS) if args.papers or args.only else []) + (all_runs(GPU) if args.only and not gpu else [])
        if args.only:  # in the order given
            runs = [run for wanted in args.only for run in runs if wanted in (run_name(*run), run[0])]
        gpu_runs = {  # run concurrently, those of --only alone when it is given
            setup: [run for run in all_runs(GPU_SETUPS[setup].entries)
                    if not args.only or {run_name(*run), run[0]} & set(args.only)] for setup in gpu}
        todo = [run for run in runs + [r for rs in gpu_runs.values() for r in rs]
                if not (runs_dir / run_name(*run) / 'result.json').exists()]
        if not todo:  # the data is not needed either
            print(f'[nothing trained] every run of this command is already in {runs_dir}; to rerun them, name a new '
                  'folder: --out-dir output/compare_inits', flush=True)
        elif not (args.data_dir / 'train').is_dir():
            sys.exit(f'no CIFAR-10 ImageFolder at {args.data_dir}; pass --data-dir')
        else:
            runs_dir.mkdir(parents=True, exist_ok=True)
            unfinished = train_runs(runs, args.data_dir, runs_dir, extra=extra)
            if unfinished:
                sys.exit(f'not finished: {", ".join(unfinished)} (their logs are in {runs_dir})')
            deadline = time.monotonic() + args.time_limit if args.time_limit else None
            try:
                for setup, setup_runs in gpu_runs.items():
                    unfinished = train_runs(setup_runs, args.data_dir, runs_dir,
                                            args.concurrent or GPU_SETUPS[setup].concurrent, deadline, extra)
                    if unfinished:
                        print(f'[{setup}] not finished: {", ".join(unfinished)}', flush=True)
            except KeyboardInterrupt as e:  # Ctrl-C, or the hard stop of benchmarks/gpu/compare_inits.sh
                outcome = getattr(e, 'outcome', None)
                stopped = outcome.stopped + outcome.not_started if outcome is not None else []
                print(f'[interrupted] the runs under way are stopped{": " + ", ".join(stopped) if stopped else ""}; '
                      'the finished ones are kept and reported', flush=True)
    runs_dir.mkdir(parents=True, exist_ok=True)
    report(args.out_dir)


if __name__ == '__main__':
    main()
