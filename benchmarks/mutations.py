""" Mutation testing of the init math and of the pipeline that trains and exports the models: realistic single bugs,
each put into a copy of the package outside the repository, and the tests that should notice them run against it.

    python benchmarks/mutations.py --out benchmarks/results/mutations.txt

Each mutation is one bug as someone could write it (a paper constant, a scale, a sign, which rows are Q and which K, a
solve never written, a statistic the record misstates, the pseudo input, how offsets are drawn, what a resume restores;
a dataset split that leaks, a subset from the wrong split, a per-image seed or an order that ignores the epoch, shards
that overlap or drop images, a flip or a normalisation gone wrong, an option that does not reach its loader, a schedule
stepped at the wrong time, an accumulated update scaled wrongly, an EMA or a best checkpoint read from the wrong weights
or in the wrong direction, an export that forgets its run's data config or picks the other weights; in compare's answer,
an interval, a verdict or a spread computed wrongly, the gain of the best top-1, chance or the training split taken for
the majority class of the test split), given as exact text replacements in the package's source. For each, the working
tree (the package, its tests and what they read) is copied to a fresh temporary folder (beside a link to ../shared,
whose data some tests read), the replacements made there (a mutant never touches the working tree), and the test
files named for it run with that copy first on the path, until the first failure. The result lists every mutation
with the test that caught it; a mutation no test fails is `SURVIVED`. `--only NAME ...` runs some of them.

`--list FILE` takes the mutations of another file written in this format (its `MUTATIONS`, of this module's
`Mutation`), and `--fast-subset` runs each mutant against the whole fast subset (`-m "not slow"`, every test file,
until the first failure) instead of the tests named for it: what a bug meets when nobody chose its tests. The copy is
the whole working tree (every file git tracks or would), so a mutation may edit the command lines' package
(`../timm_structinit_cli/...`) and the tests of the docs and the benchmarks find what they read. The test files
that name a mutated module run first and the rest of the subset only if they all pass: the verdict of the whole
subset, sooner. `-n 2` runs the tests in two processes (pytest-xdist). A list may say, in its `EQUIVALENT` (name ->
one line), why a mutation cannot change behaviour; a survivor with such a line is counted apart. `--merge RESULT`
runs the mutations named (`--only`) and keeps every other one's lines from an earlier result of the list, marked.

    python benchmarks/mutations.py --list benchmarks/mutations_second_pass.py --fast-subset -n 2 \
        --out benchmarks/results/mutations_second_pass.txt
"""
import argparse
import datetime
import importlib.util
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from results_file import write_lines

REPO = Path(__file__).resolve().parents[1]

# the test files (and `-k` selection) each kind of mutant runs: the init-math tests of its method, the resume tests
MIMETIC_TESTS = ('tests/test_references.py', 'tests/test_mimetic.py', '-k', 'mimetic and not threads')
IMPULSE_TESTS = ('tests/test_references.py', '-k', 'impulse and not threads')
BOTH_TESTS = ('tests/test_references.py', 'tests/test_mimetic.py', '-k', 'not threads')
RESUME_TESTS = ('tests/test_recipe_paths.py', '-k', 'resume or clip')
# the pipeline's tests: each expected value comes from a definition, a hand-made case or timm's own code
DATA_TESTS = 'tests/test_pipeline_data.py'
LOADER_TESTS = 'tests/test_pipeline_loaders.py'
TRAINING_TESTS = 'tests/test_pipeline_training.py'
EXPORT_TESTS = 'tests/test_pipeline_export.py'
COMPARE_TESTS = 'tests/test_compare.py'
# every test of the fast subset, whatever file it is in
FAST_SUBSET = ('-m', 'not slow')


@dataclass(frozen=True)
class Mutation:
    name: str
    what: str
    edits: Tuple[Tuple[str, str, str], ...]   # (file under timm_structinit/, text, replacement): each text once
    tests: Sequence[str]   # pytest's arguments: test files, then a `-k` selection


MUTATIONS = [
    Mutation('mimetic-a1', "mimetic a1 = 0.5 instead of the paper's 0.7", (
        ('inits/mimetic.py', 'qk_noise: float = field(default=0.7', 'qk_noise: float = field(default=0.5'),),
        MIMETIC_TESTS),
    Mutation('mimetic-b1', "mimetic b1 = 0.5 instead of 0.7", (
        ('inits/mimetic.py', 'qk_identity: float = field(default=0.7', 'qk_identity: float = field(default=0.5'),),
        MIMETIC_TESTS),
    Mutation('mimetic-a2', "mimetic a2 = 0.5 instead of 0.4", (
        ('inits/mimetic.py', 'vproj_noise: float = field(default=0.4', 'vproj_noise: float = field(default=0.5'),),
        MIMETIC_TESTS),
    Mutation('mimetic-b2', "mimetic b2 = 0.5 instead of 0.4", (
        ('inits/mimetic.py', 'vproj_identity: float = field(default=0.4',
         'vproj_identity: float = field(default=0.5'),),
        MIMETIC_TESTS),
    Mutation('mimetic-constants-swapped', "the Q/K and V/proj constant pairs swapped (a1 = b1 = 0.4, a2 = b2 = 0.7)", (
        ('inits/mimetic.py', 'qk_noise: float = field(default=0.7', 'qk_noise: float = field(default=0.4'),
        ('inits/mimetic.py', 'qk_identity: float = field(default=0.7', 'qk_identity: float = field(default=0.4'),
        ('inits/mimetic.py', 'vproj_noise: float = field(default=0.4', 'vproj_noise: float = field(default=0.7'),
        ('inits/mimetic.py', 'vproj_identity: float = field(default=0.4',
         'vproj_identity: float = field(default=0.7')),
        MIMETIC_TESTS),
    Mutation('mimetic-noise-1/D', "noise Z ~ N(0, 1/D^2) (std 1/D, as some ports scale it) instead of N(0, 1/D)", (
        ('inits/mimetic.py', 'standard_normal(shape, generator, noise / math.sqrt(dim))',
         'standard_normal(shape, generator, noise / dim)'),),
        MIMETIC_TESTS),
    Mutation('mimetic-noise-uniform', "noise drawn uniform (variance 1/D) by default instead of normal", (
        ('inits/mimetic.py', "noise_dist: str = field(default='normal'", "noise_dist: str = field(default='uniform'"),),
        MIMETIC_TESTS),
    Mutation('mimetic-uniform-variance', "noise_dist='uniform' on +-sqrt(1/D) (variance 1/(3D)), not +-sqrt(3/D)", (
        ('inits/mimetic.py', '.mul_(noise * math.sqrt(3 / dim))', '.mul_(noise * math.sqrt(1 / dim))'),),
        MIMETIC_TESTS),
    Mutation('mimetic-vproj-sign', "V/proj identity with sign +1 (W_v W_proj = a2 Z' + b2 I)", (
        ('inits/mimetic.py', 'vproj_sign: int = field(default=-1', 'vproj_sign: int = field(default=1'),),
        MIMETIC_TESTS),
    Mutation('vproj-untransposed', "V and proj written untransposed (the 2024 authors' baseline: product (R L)^T)", (
        ('inits/mimetic.py', '            layout.write_vproj_(wv[i], wproj[i])\n',
         '            layout.write_vproj_(wv[i].mT, wproj[i].mT)\n'),),
        MIMETIC_TESTS),
    Mutation('mimetic-bias-kept', "mimetic leaves the qkv and proj biases as they were", (
        ('inits/mimetic.py', '        layout.zero_bias_(qk=True, vproj=vproj)\n', ''),),
        MIMETIC_TESTS),
    Mutation('qk-rows-swapped', "Q and K rows swapped consistently where the package reads and writes them", (
        ('inits/layouts.py', '    return (head_rows(heads, qk_dim), head_rows(heads, qk_dim, heads * qk_dim),',
         '    return (head_rows(heads, qk_dim, heads * qk_dim), head_rows(heads, qk_dim),'),),
        BOTH_TESTS),
    Mutation('no-logit-scale', "impulse maps solved and recorded without timm's 1/sqrt(head_dim) logit scale", (
        ('inits/impulse_maps.py', 'scale = wq.shape[-1] ** -0.5\n', 'scale = 1.0\n'),
        ('inits/impulse_maps.py', 'queries, keys = (x @ wq) * wq.shape[-1] ** -0.5, x @ wk',
         'queries, keys = (x @ wq), x @ wk'),
        ('inits/impulse_solver_fast.py', '_capped_value_and_grad(self.y, targets, wq.shape[-1] ** -0.5)',
         '_capped_value_and_grad(self.y, targets, 1.0)')),
        IMPULSE_TESTS),
    Mutation('impulse-not-written', "the solved impulse Q/K are never written to the model", (
        ('inits/impulse.py',
         '            layout.write_qk_(wq[0 if cfg.share_layers else i], wk[0 if cfg.share_layers else i])\n', ''),),
        IMPULSE_TESTS),
    Mutation('record-hit-rate-1', "the record's hit_rate (measured in the model's forward) forced to 1", (
        ('inits/model_maps.py', "'hit_rate': hit.sum((0, 2)).float() / count",
         "'hit_rate': torch.ones(hit.shape[1])"),),
        IMPULSE_TESTS),
    Mutation('record-target-mass-x2', "the record's target_mass (measured in the model's forward) doubled", (
        ('inits/model_maps.py', "'target_mass': mass.sum((0, 2)) / count}",
         "'target_mass': 2 * mass.sum((0, 2)) / count}"),),
        IMPULSE_TESTS),
    Mutation('record-objective', "the record's objective counts the target term once, not twice (A^2 - A_t + 1)", (
        ('inits/impulse_maps.py', "'objective': (square - 2 * mass + count) / (n * n)",
         "'objective': (square - mass + count) / (n * n)"),),
        IMPULSE_TESTS),
    Mutation('pseudo-input-no-layernorm', "the pseudo input is the raw position table, without LayerNorm", (
        ('inits/impulse_inputs.py', "    return F.layer_norm(table, (embed_dim,), eps=1e-5).float()\n",
         "    return table.float()\n"),),
        IMPULSE_TESTS),
    Mutation('pseudo-input-prefix-row', "the pseudo input drops the last row instead of the class token's", (
        ('inits/impulse_inputs.py', "    return table[first:first + model.patch_embed.num_patches]",
         "    return table[:model.patch_embed.num_patches]"),),
        IMPULSE_TESTS),
    Mutation('target-reversed', "impulse target sends query (r, c) to (r - dy, c - dx)", (
        ('inits/impulse_targets.py', 'key_r, key_c = rows + dy, cols + dx', 'key_r, key_c = rows - dy, cols - dx'),),
        IMPULSE_TESTS),
    Mutation('offsets-not-drawn', "offsets='distinct' takes the first heads of the window instead of a random draw", (
        ('inits/impulse_targets.py', 'index = torch.randperm(len(window), generator=generator)[:num_heads].tolist()',
         'index = list(range(num_heads))'),),
        IMPULSE_TESTS),
    Mutation('offsets-with-replacement', "offsets='distinct' draws with replacement", (
        ('inits/impulse_targets.py', 'index = torch.randperm(len(window), generator=generator)[:num_heads].tolist()',
         'index = torch.randint(0, len(window), (num_heads,), generator=generator).tolist()'),),
        IMPULSE_TESTS),
    Mutation('window-too-wide', "the f x f window's offsets shifted (half = f // 2 + 1)", (
        ('inits/impulse_targets.py', '    half = kernel_size // 2\n', '    half = kernel_size // 2 + 1\n'),),
        IMPULSE_TESTS),
    Mutation('fixed-order', "the 2025 fixed order takes left before right (4, 1, 3, 5, ...)", (
        ('inits/impulse_targets.py', '(0, 1): 2, (0, -1): 3', '(0, 1): 3, (0, -1): 2'),),
        IMPULSE_TESTS),
    Mutation('factor-norm', "the 2025 factors at Frobenius norm 5 instead of 7", (
        ('inits/impulse.py', 'factor_norm: float = field(default=7.0', 'factor_norm: float = field(default=5.0'),),
        IMPULSE_TESTS),
    Mutation('impulse2025-vproj-sign', "impulse2025's mimetic V/proj with +identity", (
        ('inits/impulse.py',
         "        if cfg.vproj == 'mimetic':\n            mimetic_vproj_init_(layouts, MimeticCfg(), generator)\n",
         "        if cfg.vproj == 'mimetic':\n"
         "            mimetic_vproj_init_(layouts, MimeticCfg(vproj_sign=1), generator)\n"),),
        IMPULSE_TESTS),
    Mutation('solve-hit-rate-1', "the solve's own hit_rate in the record forced to 1", (
        ('inits/impulse.py', "'solve': {'hit_rate': per_layer(info['hit_rate'])",
         "'solve': {'hit_rate': per_layer(torch.ones_like(info['hit_rate']))"),),
        IMPULSE_TESTS),
    Mutation('learned-table-not-written', "the 2024 solve on a learned-table ViT without the sin-cos table it assumes "
             "written into the model (the maps at chance in the model's own forward)", (
        ('inits/impulse.py', '        write_sincos_table_(model, cfg.pos_embed_scale)\n', ''),),
        ('tests/test_zoo.py', '-k', 'deit or blank')),
    Mutation('prefix-tokens-unsolved', "the capped solve leaves the class token out (it then draws the largest "
             "attention of many queries)", (
        ('inits/impulse_inputs.py', "    if cfg.solver == 'svd':\n        return torch.zeros(0, dim)",
         "    if True:\n        return torch.zeros(0, dim)"),),
        ('tests/test_zoo.py', '-k', 'blank')),
    Mutation('levit-rows-in-blocks', "LeViT's per-head [q k v] rows read as [q | k | v] blocks", (
        ('inits/timm_layouts.py',
         "    return _blocks(attn, attn.qkv, attn.proj.ln, attn.num_heads, attn.key_dim, attn.val_dim, per_head=True,",
         "    return _blocks(attn, attn.qkv, attn.proj.ln, attn.num_heads, attn.key_dim, attn.val_dim, per_head=False,"),),
        ('tests/test_zoo.py', '-k', 'levit')),
    Mutation('wide-values-zero-padded', "a value space wider than D filled with zero columns instead of an isometry", (
        ('inits/mimetic.py', '    iso = isometry(left.shape[-1], width)\n',
         '    iso = torch.eye(left.shape[-1], width, dtype=torch.float64)\n'),),
        MIMETIC_TESTS),
    Mutation('resume-no-optimizer', "resume never restores the optimizer state", (
        ('train/training_run.py', 'None if args.no_resume_opt else optimizer', 'None'),),
        RESUME_TESTS),
    Mutation('resume-always-optimizer', "--no-resume-opt ignored: the optimizer state restored all the same", (
        ('train/training_run.py', 'None if args.no_resume_opt else optimizer', 'optimizer'),),
        RESUME_TESTS),
    Mutation('resume-epoch-off-by-one', "a resumed run starts one epoch later than the checkpoint's next epoch", (
        ('train/resume.py', 'return start_epoch_of(meta)', 'return start_epoch_of(meta) + 1'),),
        RESUME_TESTS),
    Mutation('resume-updates-off-by-one', "a resumed run counts one epoch fewer of updates (--sched-on-updates)", (
        ('train/epochs.py', 'num_updates = run.start_epoch * updates_in(',
         'num_updates = max(run.start_epoch - 1, 0) * updates_in('),),
        RESUME_TESTS),
    Mutation('clip-grad-ignored', "--clip-grad never applied", (
        ('train/loop.py', '            if args.clip_grad is not None:\n',
         '            if False:\n'),),
        RESUME_TESTS),

    # the data: built-in splits, subsets
    Mutation('digits-split-unseeded', "sklearn/digits split without its seed (each part drawn anew: they overlap)", (
        ('data/digits.py', 'stratify=digits.target, random_state=self.split_seed)',
         'stratify=digits.target, random_state=None)'),),
        (DATA_TESTS, '-k', 'digits_parts')),
    Mutation('digits-parts-swapped', "sklearn/digits trains on the 450 images of the test part and tests on the rest", (
        ('data/digits.py', '        train_idx, test_idx = train_test_split(',
         '        test_idx, train_idx = train_test_split('),),
        (DATA_TESTS, '-k', 'digits_parts')),
    Mutation('split-synonyms-of-every-kind', "a split folder is searched under every split name (val finds train/)", (
        ('data/splits.py',
         'synonyms = TRAIN_SPLITS if name in TRAIN_SPLITS else EVAL_SPLITS if name in EVAL_SPLITS else ()',
         'synonyms = TRAIN_SPLITS + EVAL_SPLITS'),),
        (DATA_TESTS, '-k', 'split_folder')),
    Mutation('flowers-validation-is-train', "Flowers-102's validation split name reads its training split", (
        ('data/torchvision_data.py', "('train', 'val', 'test'), {'train': 'train', 'test': 'test', 'val': 'val'}",
         "('train', 'val', 'test'), {'train': 'train', 'test': 'test', 'val': 'train'}"),),
        (DATA_TESTS, '-k', 'torchvision_parts')),
    Mutation('subset-remainder-dropped', "--train-subset N keeps N // classes per class, fewer than N in all", (
        ('data/dataset_factory.py',
         'share = [num_samples // len(classes) + int(i < num_samples % len(classes)) for i in range(len(classes))]',
         'share = [num_samples // len(classes) for i in range(len(classes))]'),),
        (DATA_TESTS, '-k', 'subset_holds')),
    Mutation('subset-not-drawn', "a subset takes the first images of each class whatever --subset-seed says", (
        ('data/dataset_factory.py', 'chosen.append(rng.permutation(members)[:count])',
         'chosen.append(members[:count])'),),
        (DATA_TESTS, '-k', 'subset_holds')),
    Mutation('val-subset-from-train', "--val-subset draws its images from the training split", (
        ('train/build.py', 'dataset_eval = ClassBalancedSubset(dataset_eval, args.val_subset',
         'dataset_eval = ClassBalancedSubset(dataset_train, args.val_subset'),),
        (DATA_TESTS, '-k', 'own_split')),

    # the data: per-image seeds of timm's loader, orders and shards of both loaders, evaluation counts
    Mutation('item-seed-ignores-epoch', "the per-image augmentation seed leaves out the epoch", (
        ('data/epoch_seeded.py', 'return _mix(_mix(_mix(seed & _MASK) ^ epoch) ^ index) >> 1',
         'return _mix(_mix(_mix(seed & _MASK)) ^ index) >> 1'),),
        (DATA_TESTS, '-k', 'per_image_seed or augmented_differently')),
    Mutation('item-seed-ignores-index', "the per-image augmentation seed leaves out the image's index", (
        ('data/epoch_seeded.py', 'return _mix(_mix(_mix(seed & _MASK) ^ epoch) ^ index) >> 1',
         'return _mix(_mix(_mix(seed & _MASK) ^ epoch)) >> 1'),),
        (DATA_TESTS, '-k', 'per_image_seed or augmented_differently')),
    Mutation('copy-seed-ignores-copy', "under --aug-repeats every copy of an image gets the first copy's seed", (
        ('data/epoch_seeded.py', 'return first if copy == 0 else _mix(first ^ _mix(copy)) >> 1', 'return first'),),
        ('tests/test_repeated_augmentation.py', '-k', 'each_copy')),
    Mutation('copy-number-from-last-copy', "a copy is numbered from the last copy of its image, not the first", (
        ('data/epoch_seeded.py', 'first.setdefault(slot, position)', 'first[slot] = position'),),
        ('tests/test_repeated_augmentation.py', '-k', 'copy_numbers')),
    Mutation('timm-order-ignores-epoch', "timm's loader shuffles every epoch in the order of epoch 0", (
        ('data/epoch_seeded.py', 'self.generator.manual_seed(item_seed(self.order_seed, epoch, -1 & _MASK))',
         'self.generator.manual_seed(item_seed(self.order_seed, 0, -1 & _MASK))'),),
        (DATA_TESTS, '-k', 'timms_training_order')),
    Mutation('timm-sampler-seed-per-rank', "each process's distributed sampler seeded with --seed plus its rank", (
        ('train/loaders.py', 'train_sampler.seed = args.seed  #', 'train_sampler.seed = args.seed + args.rank  #'),),
        (DATA_TESTS, '-k', 'timms_samplers')),
    Mutation('device-order-per-rank', "the device loader's processes each shuffle an order of their own", (
        ('data/device_loader.py', 'shared = epoch_generator(self.seed, self.epoch, -1 % 2 ** 31, device)',
         'shared = epoch_generator(self.seed, self.epoch, self.rank, device)'),),
        (DATA_TESTS, '-k', 'device_loader_shards')),
    Mutation('device-order-ignores-epoch', "the device loader shuffles every epoch in the order of epoch 0", (
        ('data/device_loader.py', 'shared = epoch_generator(self.seed, self.epoch, -1 % 2 ** 31, device)',
         'shared = epoch_generator(self.seed, 0, -1 % 2 ** 31, device)'),),
        ('tests/test_loaders.py', '-k', 'batches_follow_the_epoch')),
    Mutation('device-shards-unpadded', "the device loader's training shards rounded down (the tail never seen)", (
        ('data/device_loader.py', 'return math.ceil(count / self.world_size)', 'return count // self.world_size'),),
        (DATA_TESTS, '-k', 'device_loader_shards')),
    Mutation('device-eval-drops-last-batch', "the device loader's evaluation drops its last, shorter batch", (
        ('data/device_loader.py',
         'return size // self.batch_size if self.shuffle else math.ceil(size / self.batch_size)',
         'return size // self.batch_size'),),
        (DATA_TESTS, '-k', 'device_loader_shards')),
    Mutation('eval-padding-counted', "an evaluation counts the images timm's sampler repeats to even the shares", (
        ('train/loop.py', "remaining = getattr(sampler, 'num_valid_samples', None)", 'remaining = None'),),
        (DATA_TESTS, '-k', 'evaluation_counts')),

    # the data: the transforms, and each option's way to its loader
    Mutation('device-hflip-inverted', "the device transform mirrors with probability 1 - --hflip", (
        ('data/device_transforms.py', 'hflip=flips[:, 0] < self.hflip if self.hflip > 0 else None',
         'hflip=flips[:, 0] > self.hflip if self.hflip > 0 else None'),),
        (LOADER_TESTS, '-k', 'flips_as_often')),
    Mutation('device-flips-one-draw', "the device transform's vertical flip reuses the horizontal flip's draw", (
        ('data/device_transforms.py', 'vflip=flips[:, 1] < self.vflip if self.vflip > 0 else None',
         'vflip=flips[:, 0] < self.vflip if self.vflip > 0 else None'),),
        (LOADER_TESTS, '-k', 'flips_as_often')),
    Mutation('device-normalize-mean-unscaled', "the device loader normalises as (x / 255) / std - mean", (
        ('data/device_transforms.py', 'return images.mul_(1.0 / (255.0 * std)).sub_(mean / std)',
         'return images.mul_(1.0 / (255.0 * std)).sub_(mean)'),),
        (LOADER_TESTS, '-k', 'mirrored_whole_image')),
    Mutation('device-scale-default', "the device transform crops with timm's default --scale, not the option's", (
        ('train/loaders.py', "config['input_size'], args.scale, args.ratio, args.hflip",
         "config['input_size'], (0.08, 1.0), args.ratio, args.hflip"),),
        (LOADER_TESTS, '-k', 'mirrored_whole_image')),
    Mutation('timm-vflip-from-hflip', "timm's loader gets --hflip as its vertical flip probability", (
        ('train/loaders.py', 'hflip=args.hflip, vflip=args.vflip', 'hflip=args.hflip, vflip=args.hflip'),),
        (LOADER_TESTS, '-k', 'reaches_timms_loader')),
    Mutation('device-erase-before-mix', "the device loader erases before it mixes, as timm's --no-prefetcher order", (
        ('train/loaders.py', 'erase_after_mix = mixup is not None and not args.no_prefetcher',
         'erase_after_mix = False'),),
        ('tests/test_erasing_order.py',)),
    Mutation('eval-crop-pct-inverted', "the device evaluation resizes to input * crop_pct, not input / crop_pct", (
        ('data/device_transforms.py', 'scale = tuple(math.floor(s / self.crop_pct) for s in self.size)',
         'scale = tuple(math.floor(s * self.crop_pct) for s in self.size)'),),
        ('tests/test_batch_ops.py', '-k', 'eval_transform')),
    Mutation('device-eval-crop-pct-ignored', "the device loader evaluates with crop_pct 1 whatever --crop-pct says", (
        ('train/loaders.py', "evaluate = DeviceEvalTransform(config['input_size'], config['crop_pct'],",
         "evaluate = DeviceEvalTransform(config['input_size'], 1.0,"),),
        (LOADER_TESTS, '-k', 'evaluation_loader')),

    # the training loop: schedule, accumulation, EMA, best checkpoint, resume
    Mutation('sched-step-lags', "the per-epoch schedule is stepped to the epoch just trained, not the next", (
        ('train/epochs.py', 'run.lr_scheduler.step(epoch + 1, metric)', 'run.lr_scheduler.step(epoch, metric)'),),
        (TRAINING_TESTS, '-k', 'per_epoch_schedule')),
    Mutation('val-interval-sched-not-stepped', "an epoch --val-interval does not evaluate does not step the schedule", (
        ('train/epochs.py',
         '                if run.lr_scheduler is not None:\n'
         '                    run.lr_scheduler.step(epoch + 1, None)\n',
         ''),),
        (TRAINING_TESTS, '-k', 'per_epoch_schedule')),
    Mutation('sched-counts-batches', "--sched-on-updates counts batches, not updates, under --grad-accum-steps", (
        ('train/training_run.py', 'updates_per_epoch = updates_in(len(loader_train), args.grad_accum_steps)',
         'updates_per_epoch = len(loader_train)'),),
        (TRAINING_TESTS, '-k', 'per_update_schedule')),
    Mutation('updates-rounded-down', "an epoch's shorter last group of batches is not counted as an update", (
        ('train/epochs.py', 'return -(-num_batches // max(1, grad_accum_steps))',
         'return num_batches // max(1, grad_accum_steps)'),),
        (TRAINING_TESTS, '-k', 'per_update_schedule')),
    Mutation('accum-loss-not-divided', "--grad-accum-steps N sums N batches' losses instead of averaging them", (
        ('train/loop.py', '_backward(loss / group if group > 1 else loss,', '_backward(loss,'),),
        ('tests/test_train_flags.py', '-k', 'grad_accum')),
    Mutation('accum-last-group-by-n', "the epoch's shorter last group of batches is divided by N, not by its size", (
        ('train/loop.py', 'group = num_batches - last_group_start if batch_idx >= last_group_start else accum',
         'group = accum'),),
        (TRAINING_TESTS, '-k', 'shorter_last_group')),
    Mutation('accum-last-group-skipped', "the epoch's shorter last group of batches never makes its update", (
        ('train/loop.py', 'need_update = batch_idx == num_batches - 1 or (batch_idx + 1) % accum == 0',
         'need_update = (batch_idx + 1) % accum == 0'),),
        ('tests/test_train_flags.py', '-k', 'grad_accum')),
    Mutation('ema-decay-inverted', "the EMA built with 1 - --model-ema-decay as its decay", (
        ('train/training_run.py', 'decay=args.model_ema_decay, use_warmup=args.model_ema_warmup',
         'decay=1 - args.model_ema_decay, use_warmup=args.model_ema_warmup'),),
        (TRAINING_TESTS, '-k', 'ema_averages')),
    Mutation('ema-warmup-always', "the EMA warms its decay up whether --model-ema-warmup is given or not", (
        ('train/training_run.py', 'decay=args.model_ema_decay, use_warmup=args.model_ema_warmup',
         'decay=args.model_ema_decay, use_warmup=True'),),
        (TRAINING_TESTS, '-k', 'ema_averages')),
    Mutation('ema-columns-of-the-model', "the EMA's evaluation runs the model's weights", (
        ('train/epochs.py', 'ema_metrics = validate(run.model_ema, loader_eval,',
         'ema_metrics = validate(run.model, loader_eval,'),),
        (TRAINING_TESTS, '-k', 'ema_columns')),
    Mutation('best-by-model-metric', "checkpoints are ranked by the model's metric when the EMA is evaluated", (
        ('train/epochs.py', 'return metrics, ema_metrics[args.eval_metric]',
         'return metrics, metrics[args.eval_metric]'),),
        (TRAINING_TESTS, '-k', 'best_checkpoint')),
    Mutation('end-reports-cpu-ema', "a run resumed at its end reports the accuracy of an EMA kept on the CPU", (
        ('train/epochs.py', 'validate(run.model_ema if run.ema_evaluated else run.model',
         'validate(run.model_ema if run.model_ema is not None else run.model'),),
        (TRAINING_TESTS, '-k', 'resumed_at_its_end')),
    Mutation('best-direction-ignored', "checkpoints are ranked highest first whatever --eval-metric (a loss too)", (
        ('train/training_run.py', "decreasing=args.eval_metric == 'loss', max_history",
         'decreasing=False, max_history'),),
        (TRAINING_TESTS, '-k', 'best_checkpoint')),
    Mutation('resume-schedule-restarted', "a resumed run's per-epoch schedule starts again at epoch 0", (
        ('train/training_run.py', '            lr_scheduler.step(start_epoch)\n',
         '            lr_scheduler.step(0)\n'),),
        RESUME_TESTS),
    Mutation('resume-ema-not-restored', "a resumed run's EMA starts from the resumed model, not the saved EMA", (
        ('train/training_run.py',
         '                model_ema.module.load_state_dict(ema_state_dict(inputs.resume))\n',
         '                pass\n'),),
        ('tests/test_loaders.py', '-k', 'resumes_bit_for_bit')),

    # the export of a trained run
    Mutation('export-data-config-dropped', "an export carries no data config from its run (the model's defaults)", (
        ('hub/export.py', "data_config={k: args[k] for k in data_keys if args.get(k) not in (None, '')})",
         'data_config=None)'),),
        (EXPORT_TESTS, '-k', 'data_config')),
    Mutation('export-crop-not-carried', "an export carries its run's input size, mean and std but not its crop", (
        ('hub/export.py', "'mean', 'std', 'crop_pct', 'crop_mode', 'interpolation')",
         "'mean', 'std', 'interpolation')"),),
        (EXPORT_TESTS, '-k', 'data_config')),
    Mutation('export-ema-by-default', "an export takes a checkpoint's EMA weights without --use-ema", (
        ('hub/export.py', 'state_dict = load_state_dict(str(path), use_ema=use_ema)',
         'state_dict = load_state_dict(str(path), use_ema=True)'),),
        (EXPORT_TESTS, '-k', 'weights_asked')),
    Mutation('export-num-classes-not-carried', "an export builds the model without the run's number of classes", (
        ('hub/export.py', "trained = dict(num_classes=args.get('num_classes'), ", 'trained = dict('),),
        ('tests/test_hub.py', '-k', 'test_export_trained_checkpoint')),
    Mutation('card-metric-claimed-for-ema', "the card claims the run's metric for EMA weights of a run without EMA", (
        ('hub/export.py', "of_these_weights=of_ema == ('ema' in meta['weights'])", 'of_these_weights=True'),),
        ('tests/test_hub.py', '-k', 'ema_and_plain')),

    # compare's statistics, decision and report
    Mutation('compare-pooled-df', "the gain's interval takes the pooled t's n1 + n2 - 2 degrees of freedom, not "
             "Welch-Satterthwaite's", (
                 ('compare/stats.py',
                  'return va + vb, (va + vb) ** 2 / (va ** 2 / (n_a - 1) + vb ** 2 / (n_b - 1))',
                  'return va + vb, n_a + n_b - 2'),),
             (COMPARE_TESTS, '-k', 'welch or decisions')),
    Mutation('compare-normal-quantile', "the gain's interval takes the normal 1.96, not Student's t quantile", (
        ('compare/stats.py', 't_quantile(0.5 + CONFIDENCE / 2, df) * math.sqrt(variance)',
         '1.959964 * math.sqrt(variance)'),),
        (COMPARE_TESTS, '-k', 'welch or decisions')),
    Mutation('compare-seeds-without-power', "the seeds the spread needs put the gain at the interval's edge (50% "
             "power), not beyond it at 80%", (
                 ('compare/stats.py', '(t_quantile(0.5 + confidence / 2, df) + t_quantile(power, df)) * math.sqrt(',
                  't_quantile(0.5 + confidence / 2, df) * math.sqrt('),),
             (COMPARE_TESTS, '-k', 'seeds')),
    Mutation('compare-margin-from-lowest', "an arm is said to beat every plain run when its lowest run beats the "
             "plain init's lowest, not its highest", (
                 ('compare/stats.py', 'margin = min(finals) - max(plain)', 'margin = min(finals) - min(plain)'),),
             (COMPARE_TESTS, '-k', 'every_run or decisions')),
    Mutation('compare-verdict-sign', "a gain beyond its interval is called worse when positive, better when negative", (
        ('compare/stats.py', "return 'better' if self.gain > 0 else 'worse'",
         "return 'worse' if self.gain > 0 else 'better'"),),
        (COMPARE_TESTS, '-k', 'decisions')),
    Mutation('compare-population-sd', "an arm's spread is the population standard deviation (n, not n - 1)", (
        ('compare/stats.py', 'statistics.stdev(values) if len(values) > 1',
         'statistics.pstdev(values) if len(values) > 1'),),
        (COMPARE_TESTS, '-k', 'spread')),
    Mutation('compare-gain-of-best', "the gain is of the best top-1 over the epochs, not the final", (
        ('compare/report.py',
         "welch_gain(arm, [r['final_top1'] for r in rs], [r['final_top1'] for r in by_arm[reference]])",
         "welch_gain(arm, [r['best_top1'] for r in rs], [r['best_top1'] for r in by_arm[reference]])"),),
        (COMPARE_TESTS, '-k', 'spread or decisions')),
    Mutation('compare-majority-without-spread', "an arm whose mean beats the majority class has learned, whatever "
             "its seed spread", (
                 ('compare/stats.py', 'return arm.final_mean - (arm.final_sd or 0.0) > majority',
                  'return arm.final_mean > majority'),),
             (COMPARE_TESTS, '-k', 'majority or learn')),
    Mutation('compare-chance-for-majority', "the decision holds the arms against chance, not the majority class", (
        ('compare/report.py', "not_learned(list(stats.values()), test_split['chance'], test_split['majority'],",
         "not_learned(list(stats.values()), test_split['chance'], test_split['chance'],"),),
        (COMPARE_TESTS, '-k', 'majority or learn')),
    Mutation('compare-majority-of-training-split', "chance and the majority class are read off the training split", (
        ('compare/command.py', 'targets = list(dataset_targets(datasets[1]))',
         'targets = list(dataset_targets(datasets[0]))'),),
        (COMPARE_TESTS, '-k', 'random_labels')),
]


def _copy_tree(work: Path, whole: bool = True) -> None:
    """ Every file of the working tree that git tracks or would track into `work` (its ignored files, a venv or build
    outputs, stay behind): the package, the command lines' light package beside it, the tests and what they read;
    without `whole`, the package, its tests and pyproject.toml only. """
    if whole:
        listed = subprocess.run(['git', 'ls-files', '-z', '--cached', '--others', '--exclude-standard'], cwd=REPO,
                                capture_output=True, check=True).stdout.decode().split('\0')
        for name in filter(None, listed):
            source = REPO / name
            if source.is_file():  # a file deleted but not yet committed is listed all the same
                (work / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, work / name)
        return
    shutil.copytree(REPO / 'timm_structinit', work / 'timm_structinit',
                    ignore=shutil.ignore_patterns('__pycache__', '*.pyc'))
    shutil.copytree(REPO / 'tests', work / 'tests', ignore=shutil.ignore_patterns('__pycache__', '*.pyc'))
    shutil.copy(REPO / 'pyproject.toml', work / 'pyproject.toml')


def _apply(work: Path, mutation: Mutation) -> None:
    for file, text, replacement in mutation.edits:
        path = work / 'timm_structinit' / file
        source = path.read_text()
        if source.count(text) != 1:
            raise ValueError(f'{mutation.name}: {text!r} occurs {source.count(text)} times in {file}, not once')
        path.write_text(source.replace(text, replacement))


def _failed_tests(output: str):
    return sorted({m.group(1) for m in re.finditer(r'^(?:FAILED|ERROR) (\S+)', output, re.M)})


def _nearby_tests(work: Path, mutation: Mutation) -> List[str]:
    """ The test files that name a module the mutation edits (its file's name; its package's for an __init__.py). """
    names = {Path(file).parent.name if Path(file).stem == '__init__' else Path(file).stem
             for file, _, _ in mutation.edits}
    pattern = re.compile(r'\b(?:' + '|'.join(map(re.escape, sorted(names))) + r')\b')
    return sorted(str(path.relative_to(work)) for path in (work / 'tests').glob('test_*.py')
                  if pattern.search(path.read_text()))


def _pytest(work: Path, args: Sequence[str], workers: int, timeout: float) -> Tuple[Optional[list], float]:
    """ (the failed test ids, or None past `timeout`; seconds) of pytest with `args` in the copy `work`. """
    env = dict(os.environ, PYTHONPATH=str(work), OMP_NUM_THREADS='1', PYTHONDONTWRITEBYTECODE='1')
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, '-m', 'pytest', '-q', '-x', '-p', 'no:cacheprovider', '-rfE', '--no-header',
             '-o', 'addopts=', *(['-n', str(workers), '--dist', 'loadgroup'] if workers else []), *args],
            cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, time.perf_counter() - start
    failed = _failed_tests(done.stdout + done.stderr)
    if done.returncode not in (0, 1, 5) and not failed:  # 5: no test collected
        raise RuntimeError(f'pytest exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}')
    return failed, time.perf_counter() - start


def run_mutation(mutation: Mutation, timeout: float, tests: Optional[Sequence[str]] = None,
                 workers: int = 0) -> Tuple[str, list, float]:
    """ ('caught' | 'SURVIVED' | 'timeout' | 'NOT APPLIED', the failed test ids, seconds) of one mutant in a fresh
    copy, against `tests` (pytest's arguments; the mutation's own by default) in `workers` processes (0: in pytest's
    own); NOT APPLIED where an edit's text is not in the code once (the code changed since it was written).

    Against the whole fast subset, the test files that name a mutated module run first, and the rest of the subset
    only if none of them fails: the same verdict as the whole subset at once, sooner where a nearby test catches
    the bug (the test named is then the first nearby one to fail). """
    tests = mutation.tests if tests is None else tests
    with tempfile.TemporaryDirectory(prefix='structinit-mutant-') as folder:
        work = Path(folder) / REPO.name
        shared = REPO.parent / 'shared'
        if shared.is_dir():  # the tests find ../shared (CIFAR-10, timm's scripts) beside the copy, as beside the repo
            (Path(folder) / 'shared').symlink_to(shared, target_is_directory=True)
        _copy_tree(work, whole=True)
        try:
            _apply(work, mutation)
        except ValueError as e:
            return 'NOT APPLIED', [str(e)], 0.0
        stages = [list(tests)]
        if tuple(tests) == FAST_SUBSET:
            nearby = _nearby_tests(work, mutation)
            stages = [[*FAST_SUBSET, *nearby], [*FAST_SUBSET, *(f'--ignore={f}' for f in nearby)]] if nearby else \
                stages
        seconds = 0.0
        for args in stages:
            failed, took = _pytest(work, args, workers, timeout - seconds)
            seconds += took
            if failed is None:
                return 'timeout', [], seconds
            if failed:
                return 'caught', failed, seconds
        return 'SURVIVED', [], seconds


def load_mutations(path: str) -> List[Mutation]:
    """ The `MUTATIONS` of another file in this format. """
    sys.modules.setdefault('mutations', sys.modules[__name__])  # its `from mutations import ...`: this module
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.MUTATIONS)


def load_equivalents(path: Optional[str]) -> Dict[str, str]:
    """ The `EQUIVALENT` of a list file (mutation name -> one line saying why it cannot change behaviour), if any. """
    if not path:
        return {}
    sys.modules.setdefault('mutations', sys.modules[__name__])
    spec = importlib.util.spec_from_file_location(Path(path).stem + '_equivalents', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(getattr(module, 'EQUIVALENT', {}))


def _blocks(path: str) -> Dict[str, List[str]]:
    """ The result blocks (name -> its lines) of an earlier result file. """
    blocks, name = {}, None
    for line in Path(path).read_text().splitlines():
        if line and not line.startswith((' ', '#')) and ': ' in line and not line[0].isdigit():
            name = line.split(': ', 1)[0]
            blocks[name] = [line]
        elif line.startswith(' ') and name is not None:
            blocks[name].append(line)
        else:
            name = None
    return blocks


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--list', metavar='FILE', help="another file's MUTATIONS instead of this one's")
    parser.add_argument('--only', nargs='+', metavar='NAME', help='run only these mutations')
    parser.add_argument('--fast-subset', action='store_true',
                        help='run every mutant against the whole fast subset (-m "not slow"), not its own tests')
    parser.add_argument('-n', dest='workers', type=int, default=0, metavar='N',
                        help='run the tests in N processes (pytest-xdist); 0: in one')
    parser.add_argument('--timeout', type=float, default=900, help='seconds per mutant')
    parser.add_argument('--out', help='write the result here too')
    parser.add_argument('--merge', metavar='RESULT', help='an earlier result file of the same list: the mutations not '
                                                            'run now keep their lines from it')
    args = parser.parse_args(argv)
    mutations = load_mutations(args.list) if args.list else MUTATIONS
    names = [m.name for m in mutations]
    if len(set(names)) != len(names):
        parser.error(f'mutation names given twice: {sorted({n for n in names if names.count(n) > 1})}')
    unknown = sorted(set(args.only or ()) - set(names))
    if unknown:
        parser.error(f'unknown mutation(s) {unknown}; valid: {names}')
    chosen = [m for m in mutations if not args.only or m.name in args.only]
    tests = FAST_SUBSET if args.fast_subset else None
    lines = [f'# command: python benchmarks/mutations.py {shlex.join(argv if argv is not None else sys.argv[1:])}',
             f'# date: {datetime.datetime.now().isoformat(timespec="seconds")}',
             f'# machine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}; each '
             f'mutant in a fresh copy of the ' + ('working tree, the whole fast subset' if args.fast_subset else
                                                  'package, the selected tests') +
             f' run until the first failure (-x){f" in {args.workers} processes" if args.workers else ""}', '']
    for line in lines:
        print(line, flush=True)
    equivalent = load_equivalents(args.list)
    earlier = _blocks(args.merge) if args.merge else {}
    if earlier:
        lines.insert(3, f'# merged with {args.merge}: the mutations not run now keep their lines from it, each marked')
    verdicts = {}
    for mutation in (mutations if earlier else chosen):
        if mutation not in chosen:
            block = [line for line in earlier.get(mutation.name, [f'{mutation.name}: {mutation.what}', '  NOT RUN'])
                     if not line.startswith('    cannot change behaviour: ')]
            if not block[1].endswith(' [earlier run]'):  # a result merged before keeps its one mark
                block = [block[0], block[1] + ' [earlier run]', *block[2:]]
            verdicts[mutation.name] = block[1].split()[0]
        else:
            verdict, failed, seconds = run_mutation(mutation, args.timeout, tests, args.workers)
            verdicts[mutation.name] = verdict
            block = [f'{mutation.name}: {mutation.what}',
                     f'  {verdict} ({len(failed)} failed, {seconds:.0f}s; ran {shlex.join(tests or mutation.tests)})']
            block += [f'    {test}' for test in failed]
        if verdicts[mutation.name] != 'caught' and mutation.name in equivalent:
            block.append(f'    cannot change behaviour: {equivalent[mutation.name]}')
        for line in block:
            print(line, flush=True)
        lines += block
    caught = sum(v == 'caught' for v in verdicts.values())
    explained = sum(v != 'caught' and n in equivalent for n, v in verdicts.items())
    summary = (f'{caught} of {len(verdicts)} mutations caught' +
               (f'; {explained} survive that cannot change behaviour (each says why)' if explained else '') +
               f'; {len(verdicts) - caught - explained} unexplained')
    print(summary)
    lines += ['', summary]
    if args.out:
        write_lines(args.out, lines)
    return 0 if len(verdicts) - caught - explained == 0 else 1


if __name__ == '__main__':
    sys.exit(main())
