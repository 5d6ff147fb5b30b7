""" How much attention an impulse init puts on each head's target when the input is real images (no training).

The solve sees a pseudo input (LayerNorm of the position table alone); a real token is LayerNorm(content +
position), so the mass on the target at step 0 is lower on real images. This measures it per layer for the
settings the impulse study compares, at the CPU-scale geometry of `compare_inits.py` (width 128, depth 6, 4 heads,
patch 4 on 32 x 32: an 8 x 8 grid), on 64 evenly spaced CIFAR-10 test images, for two init seeds.

    python benchmarks/impulse_mass.py                    # writes results/impulse_mass.txt
    python benchmarks/impulse_mass.py --geometry         # writes results/impulse_mass_geometry.txt

`--geometry` measures the 2024 default (impulse-3, capped fast solve) with PyTorch's default init for the rest of the
network (`weight_init='reset'`, the papers' regime of `compare_inits.py --papers`) on the token grids and head widths
that regime compares: this scale on 8 x 8 and 16 x 16 tokens, and the papers' ViT-Ti (width 192, depth 12, 3 heads of
64 dimensions) on 16 x 16 tokens and at 224 px with patch 16 (14 x 14 tokens, the images upsampled). A finer grid
has more keys to share the mass among, so each row also gives the mass as a multiple of chance (1 / tokens).
"""
import argparse
import datetime
import platform
import statistics
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


GEOMETRIES = [  # (label, model kwargs), every one impulse-3 with PyTorch's default rest
    ('ViT 128/6/4, patch 4 on 32 px', ARCH),
    ('ViT 128/6/4, patch 2 on 32 px', {**ARCH, 'patch_size': 2}),
    ('ViT-Ti 192/12/3, patch 2 on 32 px', dict(img_size=32, patch_size=2, embed_dim=192, depth=12, num_heads=3)),
    ('ViT-Ti 192/12/3, patch 16 on 224 px', dict(img_size=224, patch_size=16, embed_dim=192, depth=12, num_heads=3)),
]


def build(model: str, kwargs, seed: int, arch: dict = ARCH, **model_kwargs):
    torch.manual_seed(seed)  # the weights the init does not write come from torch's global generator
    if kwargs is None:
        return timm.create_model(model, **arch, struct_init='impulse2025', struct_init_seed=seed, **model_kwargs)
    return timm.create_model(model, **arch, struct_init_seed=seed, struct_init_kwargs=kwargs, **model_kwargs)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--data-dir', type=Path, default=HERE.parent.parent / 'shared' / 'data' / 'cifar10')
    parser.add_argument('--seeds', type=int, default=2)
    parser.add_argument('--out', type=Path, help='default: results/impulse_mass.txt (--geometry: '
                                                 'results/impulse_mass_geometry.txt)')
    parser.add_argument('--geometry', action='store_true',
                        help='the default impulse-3 on the token grids and head widths of the papers\' regime instead')
    args = parser.parse_args(argv)
    out = args.out or HERE / 'results' / ('impulse_mass_geometry.txt' if args.geometry else 'impulse_mass.txt')
    if args.geometry:
        return geometry(args.data_dir, args.seeds, out)
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
    write_lines(out, lines)


def geometry(data_dir: Path, seeds: int, out: Path) -> None:
    start = time.time()
    lines = [
        '# Impulse-3 (2024 default) target mass on real images at step 0, by token grid and head width (no training)',
        f'# command: python benchmarks/impulse_mass.py --geometry --seeds {seeds}',
        f'# date: {datetime.date.today().isoformat()}; {platform.machine()}, torch {torch.__version__}, '
        f'timm {timm.__version__}',
        f"# rest of the network: PyTorch's default (weight_init='reset'); 64 evenly spaced CIFAR-10 test images at "
        f'each model\'s input size; init seeds 0..{seeds - 1}',
        '# columns: geometry, tokens, head dim, then per seed the mass on the target (mean over layers, heads, query '
        'patches, images), chance (1 / tokens), and the mean mass as a multiple of chance',
        '',
    ]
    for label, arch in GEOMETRIES:
        masses, images = [], None
        for seed in range(seeds):
            model = build('vit_tiny_patch2_32_impulse3', {}, seed, arch, weight_init='reset')
            if images is None:
                images = load_images(str(data_dir / 'test'), model, 64)
            masses.append(statistics.mean(layer_image_mass(model, images)))
        grid = arch['img_size'] // arch['patch_size']
        lines.append(f'{label:38s} {grid:2d}x{grid:<2d} head dim {arch["embed_dim"] // arch["num_heads"]:2d} | '
                     + ' '.join(f's{seed} {m:.3f}' for seed, m in enumerate(masses))
                     + f' | chance {1 / grid ** 2:.4f} | x{statistics.mean(masses) * grid ** 2:.1f}')
        print(lines[-1], flush=True)
    lines.append(f'# {time.time() - start:.0f} s')
    write_lines(out, lines)


if __name__ == '__main__':
    main()
