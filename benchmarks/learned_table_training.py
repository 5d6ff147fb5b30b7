""" Does the impulse structure on a timm learned-table ViT survive training? The runs of one `timm-structinit
compare` (the plain init against `impulse3` on timm's own `vit_tiny_patch2_32`, whose learned table the 2024 solve
now fills with the sin-cos table it assumes), read back: per seed the final top-1, the impulse run's mass on its
heads' targets per layer and epoch (the training command's own tracking, `target_mass.csv`, on its fixed batch of 64
evaluation images), and for comparison the plain run's trained model measured on the same images at the same
seed's offsets (what attention a model that never had the impulse puts there).

    timm-structinit compare --out OUT ... (the command in the result file), then
    python benchmarks/learned_table_training.py OUT --out benchmarks/results/learned_table_training
"""
import argparse
import csv
import json
import shutil
import sys
import tempfile
from pathlib import Path

import timm
import torch

import timm_structinit  # noqa: F401  registers the models
from timm.utils import random_seed
from timm_structinit.data import ClassBalancedSubset
from timm_structinit.diagnostics import layer_image_mass
from timm_structinit.diagnostics.mass_tracking import TargetMassTracker


def _rows(path: Path):
    with open(path, newline='') as f:
        return list(csv.DictReader(f))


DATA = Path(__file__).resolve().parents[2] / 'shared' / 'data' / 'cifar10' / 'test'  # the runs' --val-split


def _tracked_images(model) -> torch.Tensor:
    """ The 64 class-balanced images the training command tracked the mass on: of the 2,000-image evaluation subset
    (`--val-subset 2000`, subset seed 0), through its evaluation loader's options. """
    from timm.data import create_dataset, resolve_data_config
    config = resolve_data_config({}, model=model)
    subset = ClassBalancedSubset(create_dataset('', root=str(DATA)), 2000, 0, '--val-subset')
    options = dict(input_size=config['input_size'], mean=config['mean'], std=config['std'], crop_pct=config['crop_pct'],
                   interpolation=config['interpolation'], num_workers=0, use_prefetcher=True,
                   device=torch.device('cpu'), distributed=False, pin_memory=False)
    with tempfile.TemporaryDirectory() as folder:
        return TargetMassTracker(subset, options, folder).images


def _trained(model, run_dir: Path):
    state = torch.load(run_dir / 'last.pth.tar', map_location='cpu', weights_only=False)['state_dict']
    model.load_state_dict(state)
    return model.eval()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('compare_dir', type=Path)
    parser.add_argument('--out', type=Path, required=True)
    args = parser.parse_args(argv)
    runs = args.compare_dir / 'runs'
    saved = json.loads((args.compare_dir / 'compare.json').read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    for name in ('results.md', 'results.json', 'curves.png', 'compare.json'):
        if (args.compare_dir / name).exists():
            shutil.copy(args.compare_dir / name, args.out / name)
    lines = []
    seeds = sorted(int(p.name.rsplit('_s', 1)[1]) for p in runs.glob('impulse3_s*') if p.is_dir())
    for seed in seeds:
        impulse_dir, plain_dir = runs / f'impulse3_s{seed}', runs / f'plain_s{seed}'
        shutil.copy(impulse_dir / 'target_mass.csv', args.out / f'target_mass_impulse3_s{seed}.csv')
        mass = _rows(impulse_dir / 'target_mass.csv')
        results = {arm: json.loads((runs / f'{arm}_s{seed}' / 'result.json').read_text()) for arm in ('plain', 'impulse3')}
        # both arms at init (rebuilt as the training command built them: timm's random_seed(seed), then the model,
        # whose impulse init draws its own seed from torch's generator) and trained, measured the same way: the mass
        # on the impulse run's offsets, on the training command's own 64 tracked images
        kwargs = dict(saved['model_kwargs'], num_classes=10)

        def build(init):
            random_seed(seed, 0)
            extra = dict(struct_init='impulse', struct_init_kwargs={'kernel_size': 3}) if init else {}
            return timm.create_model(saved['model'], **extra, **kwargs).eval()
        record = build(True).struct_init_record
        images = _tracked_images(build(False))
        measured = {}
        for arm, run_dir in (('impulse3', impulse_dir), ('plain', plain_dir)):
            for when, model in (('init', build(arm == 'impulse3')), ('trained', _trained(build(arm == 'impulse3'),
                                                                                       run_dir))):
                model.struct_init_record = record  # the offsets to measure at
                measured[arm, when] = layer_image_mass(model, images)
        assert max(abs(a - float(mass[0][f'layer{i + 1}'])) for i, a in enumerate(measured['impulse3', 'init'])) < 1e-5
        layers = [k for k in mass[0] if k.startswith('layer')]
        lines += [
            f'seed {seed}: final top-1 plain {results["plain"]["final_top1"]:.2f}, impulse3 '
            f'{results["impulse3"]["final_top1"]:.2f}',
            '  attention mass on the impulse targets per layer, on the 64 images the training command tracked: '
            'impulse3 at init -> epoch 3 -> trained (epoch ' + str(mass[-1]['epoch']) + ') | plain at init -> '
            'trained, at the same offsets:',
            *[f'    {layer}: {float(mass[0][layer]):.3f} -> {float(mass[3][layer]):.3f} -> '
              f'{measured["impulse3", "trained"][i]:.3f} | {measured["plain", "init"][i]:.3f} -> '
              f'{measured["plain", "trained"][i]:.3f}' for i, layer in enumerate(layers)],
        ]
    tokens = 1 + (32 // saved['model_kwargs'].get('patch_size', 2)) ** 2
    lines.append(f'chance (attention spread evenly over the {tokens} keys): {1 / tokens:.3f}')
    lines.append('the impulse run at init as rebuilt here equals its tracked epoch 0 to 1e-5 on every layer (checked)')
    header = [f'# python benchmarks/learned_table_training.py {" ".join(sys.argv[1:])}',
              f'# the runs: timm-structinit compare with {saved["model_built"]}; arms {saved["arms"]}; options '
              f'{" ".join(saved["train_options"])}']
    (args.out / 'survival.txt').write_text('\n'.join(header + lines) + '\n')
    print('\n'.join(header + lines))
    return 0


if __name__ == '__main__':
    sys.exit(main())
