""" Mutation testing of the init math and the resume path: realistic single bugs, each put into a copy of the package
outside the repository, and the tests that should notice them run against it.

    python benchmarks/mutations.py --out benchmarks/results/mutations.txt

Each mutation is one bug as someone could write it (a paper constant, a scale, a sign, which rows are Q and which K,
a solve never written, a statistic the record misstates, the pseudo input, how offsets are drawn, what a resume
restores), given as exact text replacements in the package's source. For each, the package and its tests are copied
to a fresh temporary folder, the replacements made there (a mutant never touches the working tree), and the test
files named for it run with that copy first on the path, until the first failure. The result lists every mutation
with the test that caught it; a mutation no test fails is `SURVIVED`. `--only NAME ...` runs some of them.
"""
import argparse
import datetime
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
from typing import Sequence, Tuple

from results_file import write_lines

REPO = Path(__file__).resolve().parents[1]

# the test files (and `-k` selection) each kind of mutant runs: the init-math tests of its method, the resume tests
MIMETIC_TESTS = ('tests/test_references.py', 'tests/test_mimetic.py', '-k', 'mimetic and not threads')
IMPULSE_TESTS = ('tests/test_references.py', '-k', 'impulse and not threads')
BOTH_TESTS = ('tests/test_references.py', 'tests/test_mimetic.py', '-k', 'not threads')
RESUME_TESTS = ('tests/test_recipe_paths.py', '-k', 'resume or clip')


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
        ('inits/mimetic.py', 'normal_(0.0, 1.0 / math.sqrt(dim)', 'normal_(0.0, 1.0 / dim'),),
        MIMETIC_TESTS),
    Mutation('mimetic-noise-uniform', "noise drawn uniform (variance 1/D) by default instead of normal", (
        ('inits/mimetic.py', "noise_dist: str = field(default='normal'", "noise_dist: str = field(default='uniform'"),),
        MIMETIC_TESTS),
    Mutation('mimetic-uniform-variance', "noise_dist='uniform' on +-sqrt(1/D) (variance 1/(3D)), not +-sqrt(3/D)", (
        ('inits/mimetic.py', '* 2 - 1) * math.sqrt(3 / dim)', '* 2 - 1) * math.sqrt(1 / dim)'),),
        MIMETIC_TESTS),
    Mutation('mimetic-vproj-sign', "V/proj identity with sign +1 (W_v W_proj = a2 Z' + b2 I)", (
        ('inits/mimetic.py', 'vproj_sign: int = field(default=-1', 'vproj_sign: int = field(default=1'),),
        MIMETIC_TESTS),
    Mutation('vproj-untransposed', "V and proj written untransposed (the 2024 authors' baseline: product (R L)^T)", (
        ('inits/heads.py', 'attn.qkv.weight[2 * dim:].copy_(wv.T)', 'attn.qkv.weight[2 * dim:].copy_(wv)'),
        ('inits/heads.py', 'attn.proj.weight.copy_(wproj.T)', 'attn.proj.weight.copy_(wproj)')),
        MIMETIC_TESTS),
    Mutation('mimetic-bias-kept', "mimetic leaves the qkv and proj biases as they were", (
        ('inits/mimetic.py', '        zero_attention_bias_(attn, qk=True, vproj=cfg.vproj)\n', ''),),
        MIMETIC_TESTS),
    Mutation('qk-rows-swapped', "Q and K rows swapped consistently where the package reads and writes them", (
        ('inits/heads.py', '    wq = w[:dim].reshape(heads, k, dim).transpose(1, 2)\n    wk = w[dim:2 * dim]',
         '    wq = w[dim:2 * dim].reshape(heads, k, dim).transpose(1, 2)\n    wk = w[:dim]'),
        ('inits/heads.py', '    w[:dim].copy_(wq.transpose(1, 2).reshape(dim, dim))\n    w[dim:2 * dim].copy_(wk',
         '    w[dim:2 * dim].copy_(wq.transpose(1, 2).reshape(dim, dim))\n    w[:dim].copy_(wk')),
        BOTH_TESTS),
    Mutation('no-logit-scale', "impulse maps solved and recorded without timm's 1/sqrt(head_dim) logit scale", (
        ('inits/impulse_maps.py', 'scale = wq.shape[-1] ** -0.5\n', 'scale = 1.0\n'),
        ('inits/impulse_maps.py', 'queries, keys = (x @ wq) * wq.shape[-1] ** -0.5, x @ wk',
         'queries, keys = (x @ wq), x @ wk'),
        ('inits/impulse_solver_fast.py', '_capped_value_and_grad(self.y, targets, wq.shape[-1] ** -0.5)',
         '_capped_value_and_grad(self.y, targets, 1.0)')),
        IMPULSE_TESTS),
    Mutation('impulse-not-written', "the solved impulse Q/K are never written to the model", (
        ('inits/impulse.py', '            write_qk_(attn, wq[src].to(dtype), wk[src].to(dtype))\n', ''),),
        IMPULSE_TESTS),
    Mutation('record-hit-rate-1', "the record's hit_rate forced to 1", (
        ('inits/impulse.py', "'hit_rate': per_layer(info['hit_rate'])",
         "'hit_rate': per_layer(torch.ones_like(info['hit_rate']))"),),
        IMPULSE_TESTS),
    Mutation('record-target-mass-x2', "the record's target_mass doubled", (
        ('inits/impulse.py', "'target_mass': per_layer(info['target_mass'])",
         "'target_mass': per_layer(2 * info['target_mass'])"),),
        IMPULSE_TESTS),
    Mutation('record-objective', "the record's objective counts the target term once, not twice (A^2 - A_t + 1)", (
        ('inits/impulse_maps.py', "'objective': (square - 2 * mass + count) / (n * n)",
         "'objective': (square - mass + count) / (n * n)"),),
        IMPULSE_TESTS),
    Mutation('pseudo-input-no-layernorm', "the pseudo input is the raw position table, without LayerNorm", (
        ('inits/impulse.py', "    return F.layer_norm(table, (embed_dim,), eps=1e-5).float()\n",
         "    return table.float()\n"),),
        IMPULSE_TESTS),
    Mutation('pseudo-input-prefix-row', "the pseudo input drops the last row instead of the class token's", (
        ('inits/impulse.py', "table = table[getattr(model, 'num_prefix_tokens', 0):]",
         "table = table[:table.shape[0] - getattr(model, 'num_prefix_tokens', 0)]"),),
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
         "        if cfg.vproj == 'mimetic':\n            mimetic_vproj_init_(attns, MimeticCfg(), generator)\n",
         "        if cfg.vproj == 'mimetic':\n"
         "            mimetic_vproj_init_(attns, MimeticCfg(vproj_sign=1), generator)\n"),),
        IMPULSE_TESTS),
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
]


def _copy_tree(work: Path) -> None:
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


def run_mutation(mutation: Mutation, timeout: float) -> Tuple[str, list, float]:
    """ ('caught' | 'SURVIVED' | 'timeout', the failed test ids, seconds) of one mutant in a fresh copy. """
    with tempfile.TemporaryDirectory(prefix='structinit-mutant-') as folder:
        work = Path(folder)
        _copy_tree(work)
        _apply(work, mutation)
        env = dict(os.environ, PYTHONPATH=str(work), OMP_NUM_THREADS='1', PYTHONDONTWRITEBYTECODE='1')
        start = time.perf_counter()
        try:
            done = subprocess.run(
                [sys.executable, '-m', 'pytest', '-q', '-x', '-p', 'no:cacheprovider', '-rfE', '--no-header',
                 '-o', 'addopts=', *mutation.tests],
                cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return 'timeout', [], time.perf_counter() - start
        seconds = time.perf_counter() - start
        failed = _failed_tests(done.stdout + done.stderr)
        if done.returncode not in (0, 1) and not failed:
            raise RuntimeError(f'{mutation.name}: pytest exited {done.returncode}:\n{done.stdout[-3000:]}'
                               f'\n{done.stderr[-3000:]}')
        return ('caught' if failed else 'SURVIVED'), failed, seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--only', nargs='+', metavar='NAME', help='run only these mutations')
    parser.add_argument('--timeout', type=float, default=900, help='seconds per mutant')
    parser.add_argument('--out', help='write the result here too')
    args = parser.parse_args(argv)
    names = [m.name for m in MUTATIONS]
    unknown = sorted(set(args.only or ()) - set(names))
    if unknown:
        parser.error(f'unknown mutation(s) {unknown}; valid: {names}')
    chosen = [m for m in MUTATIONS if not args.only or m.name in args.only]
    lines = [f'# command: python benchmarks/mutations.py{" --only " + " ".join(args.only) if args.only else ""}'
             f'{" --out " + args.out if args.out else ""}',
             f'# date: {datetime.datetime.now().isoformat(timespec="seconds")}',
             f'# machine: {platform.machine()}, python {platform.python_version()}; each mutant in a fresh copy of '
             f'the package, the selected tests run until the first failure (-x)', '']
    for line in lines:
        print(line, flush=True)
    survived = 0
    for mutation in chosen:
        verdict, failed, seconds = run_mutation(mutation, args.timeout)
        survived += verdict != 'caught'
        block = [f'{mutation.name}: {mutation.what}',
                 f'  {verdict} ({len(failed)} failed, {seconds:.0f}s; ran {shlex.join(mutation.tests)})']
        block += [f'    {test}' for test in failed]
        for line in block:
            print(line, flush=True)
        lines += block
    summary = f'{len(chosen) - survived} of {len(chosen)} mutations caught'
    print(summary)
    lines += ['', summary]
    if args.out:
        write_lines(args.out, lines)
    return 0 if survived == 0 else 1


if __name__ == '__main__':
    sys.exit(main())
