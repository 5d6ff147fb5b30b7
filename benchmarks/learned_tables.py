""" Impulse inits on timm's own ViTs, whose position table is learned: how far each head's map holds at step 0, in
the model's own forward pass, under each rule the package offers for such a table.

The 2024 solve assumes the tokens carry the grid's sin-cos table; timm's ViTs carry a learned table (trunc-normal
0.02). The rules compared, each `apply_init(model, ..., seed)` on a model timm built (`pretrained=False`):

- `impulse` (the default, `pseudo_input='sincos'`): the sin-cos table the solve assumes is written into the patch
  rows of the model's learned table (which stays a trained parameter), the prefix tokens seen by the solve;
- `impulse, pseudo_input='pos_embed'`: the solve on the model's own table as it is (scale 1);
- `impulse2025`: the 2025 closed form on the model's own table x18 (the model keeps the x18).

For each: per layer, the mean over heads of the share of patch queries whose largest attention is on the head's
target key (hit) and the mean attention there (mass), on position alone (the patch embedding's output set to zero)
and on real images (CIFAR-10 test images through the model's own eval transform, evenly spaced, `--images`), and
chance (1 / tokens).

    python benchmarks/learned_tables.py --out benchmarks/results/learned_tables.txt
"""
import argparse
import datetime
import platform
import sys
from pathlib import Path

import timm
import torch

import timm_structinit  # noqa: F401
from timm_structinit.diagnostics import load_images
from timm_structinit.inits.heads import model_layouts
from timm_structinit.inits.impulse import impulse_target
from timm_structinit.inits.model_maps import blank_image, captured_maps, impulse_hits

from results_file import Report

RULES = [
    ('impulse (sin-cos written)', 'impulse', {}),
    ("impulse, pseudo_input='pos_embed'", 'impulse', dict(pseudo_input='pos_embed')),
    ('impulse2025 (own table x18)', 'impulse2025', {}),
]


def layer_stats(model, record, images, position_only):
    layouts = model_layouts(model)
    maps = captured_maps(model, [a.module for a in layouts], images, position_only=position_only)
    grid, prefix = tuple(record['grid_size']), int(getattr(model, 'num_prefix_tokens', 0))
    out = []
    for layer_maps, offsets in zip(maps, record['offsets']):
        targets = torch.stack([impulse_target(grid, tuple(o)) for o in offsets])
        stats = impulse_hits(layer_maps[0], targets, prefix)
        out.append((float(stats['hit_rate'].mean()), float(stats['target_mass'].mean())))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--models', nargs='+', default=['deit_tiny_patch16_224', 'vit_small_patch16_224'])
    parser.add_argument('--images', default=str(Path(__file__).resolve().parents[2] / 'shared/data/cifar10/test'))
    parser.add_argument('--num-images', type=int, default=16)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--out')
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    report = Report([
        f'# {datetime.date.today()}, {platform.node()}, torch {torch.__version__}, timm {timm.__version__}, one thread',
        f'# python benchmarks/learned_tables.py {" ".join(sys.argv[1:])}'.rstrip(),
        '# per rule: layer: hit / mass on position alone | hit / mass on real images (mean over heads)',
    ])
    for name in args.models:
        for label, init, kwargs in RULES:
            torch.manual_seed(0)
            model = timm.create_model(name, pretrained=False).eval()
            record = timm_structinit.apply_init(model, init, seed=args.seed, **kwargs)
            images = load_images(args.images, model, args.num_images)
            position = layer_stats(model, record, blank_image(model), True)
            real = layer_stats(model, record, images, False)
            tokens = model.patch_embed.num_patches + model.num_prefix_tokens
            report.add(f'{name}  {label}  (chance {1 / tokens:.4f}; record layer 0 hit '
                       f'{sum(record["hit_rate"][0]) / len(record["hit_rate"][0]):.3f})')
            for layer, ((ph, pm), (rh, rm)) in enumerate(zip(position, real)):
                report.add(f'  layer {layer:2d}: {ph:.3f} / {pm:.3f} | {rh:.3f} / {rm:.3f}')
    report.write(args.out)
    return 0


if __name__ == '__main__':
    sys.exit(main())
