""" How much attention an impulse init puts on each head's target when the input is real images (no training).

The solve sees a pseudo input (LayerNorm of the position table alone); a real token is LayerNorm(content +
position), so the mass on the target at step 0 is lower on real images. This measures it per layer for the
settings the impulse study compares, at the CPU-scale geometry of `compare_inits.py` (width 128, depth 6, 4 heads,
patch 4 on 32 x 32: an 8 x 8 grid), on 64 evenly spaced CIFAR-10 test images, for two init seeds.

    python benchmarks/impulse_mass.py                    # writes results/impulse_mass.txt
"""
import argparse
import datetime
import platform
import time
from pathlib import Path

import timm
import torch

import timm_structinit  # noqa: F401  registers the models
from timm_structinit.diagnostics import layer_image_mass, load_images

from results_file import write_lines

HERE = Path(__file__).resolve().parent
ARCH = dict(img_size=32, patch_size=4, embed_dim=128, depth=6, num_heads=4)
MIMETIC_VPROJ = {'vproj': 'mimetic'}
SETTINGS = [  # (label, model, model kwargs)
    ('impulse3 (2024 default: capped fast solve)', 'vit_tiny_patch2_32_impulse3', {}),
    ('impulse3, sin-cos table x2', 'vit_tiny_patch2_32_impulse3', {'pos_embed_scale': 2.0}),
    ('impulse3, sin-cos table x3', 'vit_tiny_patch2_32_impulse3', {'pos_embed_scale': 3.0}),
    ('impulse3, content orthogonal', 'vit_tiny_patch2_32_impulse3', {'content': 'orthogonal'}),
    ('impulse3, svd solve', 'vit_tiny_patch2_32_impulse3', {'solver': 'svd'}),
    ('impulse3, svd solve, content orthogonal', 'vit_tiny_patch2_32_impulse3', {'solver': 'svd', 'content': 'orthogonal'}),
    ('impulse5, svd solve', 'vit_tiny_patch2_32_impulse5', {'solver': 'svd'}),
    ('impulse3, mimetic V/proj', 'vit_tiny_patch2_32_impulse3', MIMETIC_VPROJ),
    ('impulse3, mimetic V/proj, propagated layer inputs', 'vit_tiny_patch2_32_impulse3',
     {**MIMETIC_VPROJ, 'layer_inputs': 'propagated'}),
    ('impulse3, svd solve, mimetic V/proj', 'vit_tiny_patch2_32_impulse3', {'solver': 'svd', **MIMETIC_VPROJ}),
    ('impulse3, svd solve, mimetic V/proj, propagated', 'vit_tiny_patch2_32_impulse3',
     {'solver': 'svd', **MIMETIC_VPROJ, 'layer_inputs': 'propagated'}),
    ('impulse2025 preset on the sin-cos base (table x18)', 'vit_tiny_patch2_32_gap_sincos', None),
    ('impulse2025 preset on the learned-PE base (table x18)', 'vit_tiny_patch2_32', None),
]


def build(model: str, kwargs, seed: int):
    if kwargs is None:
        return timm.create_model(model, **ARCH, struct_init='impulse2025', struct_init_seed=seed)
    return timm.create_model(model, **ARCH, struct_init_seed=seed, struct_init_kwargs=kwargs)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--data-dir', type=Path, default=HERE.parent.parent / 'shared' / 'data' / 'cifar10')
    parser.add_argument('--seeds', type=int, default=2)
    parser.add_argument('--out', type=Path, default=HERE / 'results' / 'impulse_mass.txt')
    args = parser.parse_args(argv)
    images = load_images(str(args.data_dir / 'test'), build(*SETTINGS[0][1:], 0), 64)
    start = time.time()
    lines = [
        '# Impulse target mass on real images at step 0, per layer (no training)',
        f'# command: python benchmarks/impulse_mass.py --seeds {args.seeds}',
        f'# date: {datetime.date.today().isoformat()}; {platform.machine()}, torch {torch.__version__}, '
        f'timm {timm.__version__}',
        f'# scale: {ARCH}; 64 evenly spaced CIFAR-10 test images; init seeds 0..{args.seeds - 1}',
        '# columns: setting, seed, min over layers, then the mass of layers 1..6 (mean over heads, query patches, images)',
        '',
    ]
    for label, model, kwargs in SETTINGS:
        for seed in range(args.seeds):
            masses = layer_image_mass(build(model, kwargs, seed), images)
            lines.append(f'{label:55s} s{seed}  min {min(masses):.3f} | ' + ' '.join(f'{m:.3f}' for m in masses))
            print(lines[-1], flush=True)
    lines.append(f'# {time.time() - start:.0f} s')
    write_lines(args.out, lines)


if __name__ == '__main__':
    main()
