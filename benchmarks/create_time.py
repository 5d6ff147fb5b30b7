""" Time `timm.create_model` for registered structured-init models against the same architecture in plain timm.

Both are built alternately in one process, several repeats each, and the medians are compared:

    python benchmarks/create_time.py --repeats 15 --out benchmarks/results/create_time.txt
"""
import argparse
import datetime
import platform
import statistics
import sys
import time

import timm
import torch
from timm.models.mlp_mixer import MlpMixer

import timm_structinit  # noqa: F401  (registers the models)
from results_file import write_lines

_SWIN32 = dict(img_size=32, patch_size=2, window_size=4)
_MIXER32 = dict(img_size=32, patch_size=4, num_blocks=8, embed_dim=512, mlp_ratio=(0.5, 4.0))
# registered model -> the same architecture built by timm's own class (ViT: learned PE; timm's init everywhere).
# timm's Mixer entrypoints fix patch_size, num_blocks and embed_dim, so the plain Mixer is built from its class.
PAIRS = {
    'vit_tiny_patch2_32_mimetic': ('vit_tiny_patch16_224', dict(img_size=32, patch_size=2)),
    'vit_tiny_patch2_32_impulse3': ('vit_tiny_patch16_224', dict(
        img_size=32, patch_size=2, class_token=False, global_pool='avg')),
    'vit_tiny_patch2_32_impulse5': ('vit_tiny_patch16_224', dict(
        img_size=32, patch_size=2, class_token=False, global_pool='avg')),
    'vit_small_patch2_32_impulse3': ('vit_small_patch16_224', dict(
        img_size=32, patch_size=2, class_token=False, global_pool='avg')),
    'swin_tiny_patch2_window4_32': ('swin_tiny_patch4_window7_224', _SWIN32),
    'swin_tiny_patch2_window4_32_impulse3': ('swin_tiny_patch4_window7_224', _SWIN32),
    'swin_tiny_patch2_window4_32_mimetic': ('swin_tiny_patch4_window7_224', _SWIN32),
    'mixer_s4_32': (MlpMixer, _MIXER32),
    'mixer_s4_32_impulse3': (MlpMixer, _MIXER32),
}


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--repeats', type=int, default=15)
    parser.add_argument('--out', default='')
    args = parser.parse_args(argv)
    lines = [
        f'# command: python {" ".join(sys.argv)}',
        f'# date: {datetime.datetime.now().isoformat(timespec="seconds")}',
        f'# machine: {platform.machine()}, {torch.get_num_threads()} torch threads, torch {torch.__version__}, '
        f'timm {timm.__version__}; median of {args.repeats} alternating builds each',
        f'{"model":36} {"ours s":>8} {"timm s":>8} {"ratio":>6}',
    ]
    print('\n'.join(lines), flush=True)
    for name, (plain, plain_args) in PAIRS.items():
        ours = lambda: timm.create_model(name)  # noqa: E731
        build = plain if callable(plain) else lambda **kw: timm.create_model(plain, **kw)  # noqa: E731
        theirs = lambda: build(num_classes=10, **plain_args)  # noqa: E731
        ours(), theirs()  # warm-up: imports, allocator, MKL
        times = {'ours': [], 'timm': []}
        for _ in range(args.repeats):
            times['ours'].append(median_time(ours, 1))
            times['timm'].append(median_time(theirs, 1))
        a, b = statistics.median(times['ours']), statistics.median(times['timm'])
        lines.append(f'{name:36} {a:8.3f} {b:8.3f} {a / b:6.2f}')
        print(lines[-1], flush=True)
    if args.out:
        write_lines(args.out, lines)


if __name__ == '__main__':
    main()
