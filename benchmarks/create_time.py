""" Time `timm.create_model` for every registered model against the same architecture in plain timm.

Every model `import timm_structinit` registers, plus timm's own 224 px Swin-T with each init applied by `apply_init`,
is built alternately with its plain-timm twin in one process, several repeats each, at each thread count, and the
medians are compared:

    python benchmarks/create_time.py --repeats 11 --threads 1 2 --out benchmarks/results/create_time.txt

With `--device cuda` every model is built with `timm.create_model(..., device='cuda')` (timm allocates and
initializes its weights on the GPU; the structured inits compute on the CPU and copy their weights there), each build
timed to the GPU's completion.

For every row with an init it also times, against plain timm, the init's floor (`init_floors`): its impulse solve
alone (`solve_floor`: the same solver call on the same pseudo input, targets and generator state, outside the build)
and the D x D matrices it factorizes (mimetic Q/K and V/proj, impulse2025's mimetic V/proj) drawn and factorized as
torch provides it (`drawn_factorizations`); and for the factorizing rows the eigenvalues alone of the same matrices in
float32 (`eigv.`), below which no exact method goes. Every round's ratio is shown under its row.
"""
import argparse
import datetime
import platform
import re
import statistics
import sys
import time
from typing import Dict, Optional, Tuple

import timm
import torch
from timm.models.mlp_mixer import MlpMixer

import timm_structinit
from timm_structinit.inits.impulse_solvers import SOLVERS
from timm_structinit.inits.mimetic import MimeticCfg, _scaled_noise_plus_identity
from timm_structinit.inits.threads import on_one_thread, parallel_map
from results_file import write_lines

_SWIN32 = dict(img_size=32, patch_size=2, window_size=4, num_classes=10)
_MIXER32 = dict(img_size=32, patch_size=4, num_blocks=8, embed_dim=512, mlp_ratio=(0.5, 4.0), num_classes=10)
_GAP = dict(class_token=False, global_pool='avg')


def registered_models():
    return [m for m in timm.list_models() if timm.models.model_entrypoint(m).__module__.startswith('timm_structinit')]


def plain_twin(name: str, device: str = 'cpu'):
    """ A builder of the same architecture in plain timm (timm's init everywhere, a learned position table): timm's
    ViT and Swin entrypoints with the geometry overridden, timm's Mixer class (its entrypoints fix patch, depth and
    width). Average pooling without a class token where the registered model has it. """
    vit = re.fullmatch(r'vit_(tiny|small|base)_patch(2_32|16_224)(.*)', name)
    if vit:
        size, geometry, variant = vit.groups()
        kwargs = dict(img_size=32, patch_size=2, num_classes=10) if geometry == '2_32' else {}
        if 'gap' in variant or 'impulse' in variant:
            kwargs.update(_GAP)
        return lambda: timm.create_model(f'vit_{size}_patch16_224', device=device, **kwargs)
    if name.startswith('swin_tiny_patch2_window4_32'):
        return lambda: timm.create_model('swin_tiny_patch4_window7_224', device=device, **_SWIN32)
    if name.startswith('mixer_s4_32'):
        return lambda: MlpMixer(**_MIXER32, device=device)
    raise ValueError(f'no plain-timm twin for {name}: add one to plain_twin')


def rows(device: str = 'cpu'):
    """ (label, ours, theirs) for every registered model and timm's 224 px Swin-T with each init. """
    out = [(name, (lambda n=name: timm.create_model(n, device=device)), plain_twin(name, device))
           for name in registered_models()]
    swin224 = 'swin_tiny_patch4_window7_224'
    for init in ('mimetic', 'impulse'):
        def ours(init=init):
            model = timm.create_model(swin224, device=device)
            timm_structinit.apply_init(model, init, seed=0)
            return model
        out.append((f'{swin224} + apply_init {init}', ours, lambda: timm.create_model(swin224, device=device)))
    return out


def _factorized_matrices(model) -> Dict[int, Tuple[int, int, int]]:
    """ {width D: (Q/K matrices, their rank k, V/proj matrices)} of the attention modules the init writes. """
    shapes: Dict[int, Tuple[int, int, int]] = {}
    for m in model.modules():
        if isinstance(getattr(m, 'qkv', None), torch.nn.Linear) and hasattr(m, 'num_heads'):
            d = m.qkv.in_features
            heads, rank, layers = shapes.get(d, (0, d // m.num_heads, 0))
            shapes[d] = (heads + m.num_heads, rank, layers + 1)
    return shapes


def factorized_parts(label: str) -> Tuple[bool, bool]:
    """ (Q/K, V/proj): which of its attention weights a row's init writes by factorizing a D x D matrix it draws, one
    per head (mimetic Q/K) or per layer (V/proj: mimetic's, which impulse2025 uses too). """
    return 'mimetic' in label, 'mimetic' in label or 'impulse2025' in label


def solver_of(label: str) -> str:
    """ The impulse solver a row's init runs ('fast': the 2024 impulse inits; 'svd': the 2025 closed form), or ''. """
    if 'impulse2025' in label:
        return 'svd'
    if 'impulse' in label and 'mixer' not in label and 'swin' not in label:
        return 'fast'
    return ''


def drawn_factorizations(model, repeats: int, qk: bool = True, vproj: bool = True) -> float:
    """ Seconds, over the threads as the init spreads its work, for drawing the matrices mimetic factorizes (as the
    init draws them: normal noise by the inverse CDF, plus the scaled identity) and factorizing them as torch
    provides it, the factors formed: per head the float32 Gram matrix A^T A, its eigendecomposition (torch has no
    solver for the top k eigenvectors alone) and A V_k; per layer the float64 Gram matrix of B, its
    eigendecomposition (float64: the float32 one leaves the vectors of close singular values to the kernels) and
    B V. What the init does beyond this (the float64 Rayleigh-Ritz step that fixes the top k, the canonical bases,
    the writes) is not counted. """
    shapes = _factorized_matrices(model)
    cfg = MimeticCfg()  # the paper's constants, which impulse2025's V/proj keeps

    def work():
        generator = torch.Generator().manual_seed(0)
        for d, (heads, rank, layers) in shapes.items():
            if qk:
                a = _scaled_noise_plus_identity((heads, d, d), d, cfg.noise_dist, cfg.qk_noise,
                                                cfg.qk_sign * cfg.qk_identity, generator)
                parallel_map(lambda a: (a @ torch.linalg.eigh(a.mT @ a)[1][..., -rank:],), a)
            if vproj:
                b = _scaled_noise_plus_identity((layers, d, d), d, cfg.noise_dist, cfg.vproj_noise,
                                                cfg.vproj_sign * cfg.vproj_identity, generator).double()
                parallel_map(lambda b: (b @ torch.linalg.eigh(b.mT @ b)[1],), b)
    work()  # warm-up
    return statistics.median(_seconds(work) for _ in range(repeats))


def eigenvalue_floor(model, repeats: int, qk: bool = True, vproj: bool = True) -> float:
    """ Seconds for the eigenvalues alone of the same D x D Gram matrices in float32: an exact factorization of a
    dense matrix first reduces it to tridiagonal form, which is what the eigenvalues cost, so no exact method, a
    top-k solver included, factorizes them faster. """
    gen = torch.Generator().manual_seed(0)
    grams = [torch.randn((heads if qk else 0) + (layers if vproj else 0), d, d, generator=gen)
             for d, (heads, rank, layers) in _factorized_matrices(model).items()]

    def eigenvalues():
        for m in grams:
            parallel_map(lambda m: (torch.linalg.eigvalsh(m.mT @ m),), m)
    return statistics.median(_seconds(eigenvalues) for _ in range(repeats))


def solve_floor(build, solver: str, repeats: int):
    """ (seconds of an impulse solve alone, the model built): the solver call a build makes (caught once, with its
    pseudo input, targets and generator state), repeated outside the build: the fast solver's float64 L-BFGS (in
    float32 it carries a kernel path's last bits into the weights: docs/benchmarks.md), or the 2025 closed form
    (its noise, its per-head core and that core's factorization), each with the map statistics it records. """
    calls = []
    solve = SOLVERS[solver]

    def catch(*args, **kwargs):
        calls.append((args[:4], args[4].get_state(), kwargs))
        return solve(*args, **kwargs)
    SOLVERS[solver] = catch
    try:
        model = build()
    finally:
        SOLVERS[solver] = solve

    def solves():
        for args, state, kwargs in calls:
            on_one_thread(solve, *args, torch.Generator().set_state(state), **kwargs)
    solves()  # warm-up
    return statistics.median(_seconds(solves) for _ in range(repeats)), model


def init_floors(label: str, build, repeats: int) -> Tuple[Optional[float], Optional[float]]:
    """ (floor, eigenvalues) seconds of a row, None where they do not apply. The floor is what the init cannot
    build without: its impulse solve alone, and the matrices it factorizes drawn and factorized as torch provides
    it; the eigenvalues are `eigenvalue_floor` of the D x D matrices it factorizes. """
    qk, vproj = factorized_parts(label)
    solver = solver_of(label)
    if not (qk or vproj or solver):
        return None, None
    floor, model = solve_floor(build, solver, repeats) if solver else (0.0, build())
    if not (qk or vproj):
        return floor, None
    return floor + drawn_factorizations(model, repeats, qk, vproj), eigenvalue_floor(model, repeats, qk, vproj)


# what a build's seconds are: time on the wall, or the CPU time of this process (every thread's), which other
# processes on a shared machine do not add to (their load still slows it through the caches it shares)
CLOCKS = {'wall': time.perf_counter, 'cpu': time.process_time}
clock = CLOCKS['wall']


def _seconds(fn) -> float:
    start = clock()
    fn()
    return clock() - start


def round_times(ours, theirs, repeats: int, device: str = 'cpu'):
    """ ([seconds of each round's build], same for plain timm), the two built alternately. """
    ours(), theirs()  # warm-up: imports, allocator, MKL (and the CUDA context and kernels)
    sync = torch.cuda.synchronize if device.startswith('cuda') else (lambda: None)
    times = {'ours': [], 'timm': []}
    for _ in range(repeats):
        for key, build in (('ours', ours), ('timm', theirs)):
            sync()
            start = clock()
            build()
            sync()  # a build on the GPU returns before its kernels finish
            times[key].append(clock() - start)
    return times['ours'], times['timm']


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--repeats', type=int, default=11)
    parser.add_argument('--threads', type=int, nargs='+', default=[1, 2])
    parser.add_argument('--models', nargs='*', default=None, help='labels to time (default: all)')
    parser.add_argument('--device', default='cpu', help="where timm builds the models ('cpu', 'cuda')")
    parser.add_argument('--clock', choices=list(CLOCKS), default='wall',
                        help="'cpu': the process's CPU time, for a machine other work shares (one thread: its wall "
                             "time when the machine is idle; two threads: the work of both)")
    parser.add_argument('--out', default='')
    args = parser.parse_args(argv)
    global clock
    clock = CLOCKS[args.clock]
    where = f'{args.device} ({torch.cuda.get_device_name()})' if args.device.startswith('cuda') else args.device
    lines = [
        f'# command: python {" ".join(sys.argv)}',
        f'# date: {datetime.datetime.now().isoformat(timespec="seconds")}',
        f'# machine: {platform.machine()}, torch {torch.__version__}, timm {timm.__version__}; built on {where}; '
        f'median of {args.repeats} alternating builds each, {args.clock} seconds; ratio = ours / plain timm '
        f'(each round\'s under its row)',
    ]
    print('\n'.join(lines), flush=True)
    saved = torch.get_num_threads()
    for threads in args.threads:
        torch.set_num_threads(threads)
        lines += ['', f'## {threads} torch thread(s)',
                  f'{"model":48} {"ours s":>8} {"timm s":>8} {"ratio":>6} {"floor s":>8} {"floor x":>7} '
                  f'{"eigv. x":>7}']
        print('\n'.join(lines[-3:]), flush=True)
        ratios, floors = [], []
        for label, ours, theirs in rows(args.device):
            if args.models and label not in args.models:
                continue
            each_ours, each_timm = round_times(ours, theirs, args.repeats, args.device)
            a, b = statistics.median(each_ours), statistics.median(each_timm)
            ratios.append((a / b, label))
            floor = ''
            fact, eigv = init_floors(label, ours, min(args.repeats, 3))
            if fact is not None:
                floors.append((fact / b, None if eigv is None else eigv / b, label))
                floor = f' {fact:8.3f} {fact / b:7.2f} ' + (f'{eigv / b:7.2f}' if eigv is not None else f'{"":>7}')
            lines.append(f'{label:48} {a:8.3f} {b:8.3f} {a / b:6.2f}{floor}')
            lines.append('  each round: ' + ' '.join(f'{x / y:.2f}' for x, y in zip(each_ours, each_timm)))
            print('\n'.join(lines[-2:]), flush=True)
        over = [label for ratio, label in ratios if ratio > 3]
        summary = len(lines)
        lines.append(f'# {threads} thread(s): {len(ratios) - len(over)} of {len(ratios)} within 3x of plain timm'
                     + (f'; above: {", ".join(over)}' if over else ''))
        beyond = {label for fact, _, label in floors if 1 + fact > 3}
        factorizing = [(eigv, label) for _, eigv, label in floors if eigv is not None]
        below = [label for eigv, label in factorizing if 1 + eigv <= 3]
        if floors:
            lines.append(f'# floor: what the init cannot build without, against plain timm: its impulse solve alone, '
                         f'and the matrices it factorizes drawn and factorized as torch provides it; with plain '
                         f'timm\'s own build (1x) it exceeds 3x for {len(beyond)} of {len(floors)} rows'
                         + (f' ({", ".join(sorted(beyond))})' if beyond else ''))
            if factorizing:
                lines.append(f'# eigv.: the eigenvalues alone of the same matrices in float32 (no exact method is '
                             f'faster); with plain timm\'s build they stay within 3x for {len(below)} of '
                             f'{len(factorizing)} factorizing rows' + (f' ({", ".join(below)})' if below else ''))
            lines.append(f'# above 3x with the floor above 3x too: {len([l for l in over if l in beyond])}; above 3x '
                         f'with the floor within 3x: {", ".join(l for l in over if l not in beyond) or "none"}')
        print('\n'.join(lines[summary:]), flush=True)
    torch.set_num_threads(saved)
    if args.out:
        write_lines(args.out, lines)


if __name__ == '__main__':
    main()
