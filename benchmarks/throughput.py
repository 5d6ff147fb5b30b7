""" Training and inference throughput of registered models against the same timm architectures without the plugin.

Each pair is measured side by side in one process: rounds alternate between the two models, each round timing
`--steps` training steps (forward, backward, AdamW step on a fixed synthetic batch) and `--steps` inference batches;
the medians over rounds give img/s and the ratio ours / timm. The registered models differ from their timm twins
only in the fixed sin-cos table (a buffer instead of a learned parameter) and their init, so the ratio should
sit at 1 within noise.

    python benchmarks/throughput.py --out benchmarks/results/throughput.txt
"""
import argparse
import datetime
import platform
import statistics
import sys
import time

import timm
import timm.optim
import torch

import timm_structinit  # noqa: F401  (registers the models)
from results_file import Report

SCALED = dict(img_size=32, patch_size=4, embed_dim=128, depth=6, num_heads=4)
GAP = dict(class_token=False, global_pool='avg')
# registered model -> timm twin args (timm's vit_tiny_patch16_224 rebuilt to the same shape)
PAIRS = {
    'vit_tiny_patch2_32_mimetic': dict(),
    'vit_tiny_patch2_32_impulse3': GAP,
    'vit_tiny_patch2_32_gap_sincos': GAP,
}


def images_per_second(model, batch: torch.Tensor, steps: int, train: bool) -> float:
    if train:
        model.train()
        optimizer = model._bench_optimizer
        target = torch.zeros(batch.shape[0], dtype=torch.long)
        start = time.perf_counter()
        for _ in range(steps):
            loss = torch.nn.functional.cross_entropy(model(batch), target)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    else:
        model.eval()
        start = time.perf_counter()
        with torch.no_grad():
            for _ in range(steps):
                model(batch)
    return steps * batch.shape[0] / (time.perf_counter() - start)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--batch-size', type=int, default=128)
    parser.add_argument('--steps', type=int, default=5)
    parser.add_argument('--rounds', type=int, default=7)
    parser.add_argument('--full-size', action='store_true', help='ViT-T/2 at full size instead of the scaled ViT')
    parser.add_argument('--out', default='')
    args = parser.parse_args(argv)
    shape = {} if args.full_size else SCALED
    report = Report([
        f'# command: python {" ".join(sys.argv)}',
        f'# date: {datetime.datetime.now().isoformat(timespec="seconds")}',
        f'# machine: {platform.machine()}, {torch.get_num_threads()} torch threads, torch {torch.__version__}, '
        f'timm {timm.__version__}',
        f'# shape: {shape or "registered (ViT-T/2)"}; batch {args.batch_size}, {args.steps} steps a round, '
        f'median of {args.rounds} alternating rounds',
        f'{"model":30} {"train ours":>10} {"timm":>8} {"ratio":>6} {"infer ours":>10} {"timm":>8} {"ratio":>6}',
    ])
    torch.manual_seed(0)
    batch = torch.randn(args.batch_size, 3, 32, 32)
    for name, twin_args in PAIRS.items():
        ours = timm.create_model(name, **shape)
        twin_shape = {**dict(img_size=32, patch_size=2), **shape}
        theirs = timm.create_model('vit_tiny_patch16_224', num_classes=10, **{**twin_shape, **twin_args})
        results = {'ours': {'train': [], 'infer': []}, 'timm': {'train': [], 'infer': []}}
        models = {'ours': ours, 'timm': theirs}
        for model in models.values():
            model._bench_optimizer = timm.optim.create_optimizer_v2(model, 'adamw', lr=1e-4)
            images_per_second(model, batch, 1, True), images_per_second(model, batch, 1, False)  # warm-up
        for _ in range(args.rounds):
            for key, model in models.items():
                results[key]['train'].append(images_per_second(model, batch, args.steps, True))
                results[key]['infer'].append(images_per_second(model, batch, args.steps, False))
        med = {k: {m: statistics.median(v) for m, v in r.items()} for k, r in results.items()}
        report.add(
            f'{name:30} {med["ours"]["train"]:10.1f} {med["timm"]["train"]:8.1f} '
            f'{med["ours"]["train"] / med["timm"]["train"]:6.3f} {med["ours"]["infer"]:10.1f} '
            f'{med["timm"]["infer"]:8.1f} {med["ours"]["infer"] / med["timm"]["infer"]:6.3f}')
    report.write(args.out)


if __name__ == '__main__':
    main()
