""" Seed sweep of the inits on timm's own models, over the attention layouts `inits.timm_attention` reads: per model,
init and thread count, over many seeds, the largest |w| of every tensor an init writes, the smallest and largest ratio
of the Frobenius norms of the two factors of each written product (W_q vs W_k per head, W_v vs W_proj per attention),
whether every weight is finite, and whether the weights equal those of the first thread count bit for bit.

The model is built once per thread count (timm's init, torch seed 0) and the init re-applied with each seed.

    python benchmarks/zoo_seed_sweep.py --seeds 20 --out benchmarks/results/zoo_seed_sweep.txt
"""
import argparse
import datetime
import platform
import sys
import time

import timm
import torch

import timm_structinit
from timm_structinit.inits.heads import model_layouts
from results_file import write_lines

# (timm model, its kwargs, init): one of each layout kind the inits read beyond the ViT's fused blocks
MODELS = [
    ('pit_ti_224', dict(img_size=64), 'mimetic'),                      # several widths (timm Attention per stage)
    ('levit_128s', dict(img_size=64), 'mimetic'),                      # per-head rows, BatchNorm folded, h d_v < D
    ('efficientformer_l1', dict(), 'mimetic'),                         # per-head rows, h d_v > D (an isometry)
    ('twins_svt_small', dict(depths=(1, 1, 1, 1)), 'mimetic'),         # windows, q beside kv
    ('pvt_v2_b0', dict(), 'mimetic'),                                  # q beside kv, reduced keys
    ('maxvit_pico_rw_256', dict(img_size=64), 'mimetic'),              # 1x1 convolutions, per-head rows
    ('tnt_s_patch16_224', dict(depth=1, img_size=64), 'mimetic'),      # fused qk beside v
    ('swinv2_tiny_window8_256', dict(img_size=64, patch_size=4, window_size=4, embed_dim=24, depths=(2, 2),
                                     num_heads=(3, 6)), 'mimetic'),      # split q/v biases, cosine attention
    ('deit_tiny_patch16_224', dict(depth=2, img_size=64), 'impulse'),  # learned table, class token in the solve
    ('deit_tiny_patch16_224', dict(depth=2, img_size=64), 'impulse2025'),
    ('beit_base_patch16_224', dict(depth=2, embed_dim=64, num_heads=2, img_size=64), 'impulse2025'),  # bias tables
]


def written(model, init):
    layouts = model_layouts(model)
    tensors = [t for a in layouts for t in a.tensors()]
    ratios = []
    for a in layouts:
        wq, wk = a.read_qk()
        ratios += (wq.norm(dim=(1, 2)) / wk.norm(dim=(1, 2))).tolist()
        if a.square and init != 'impulse':  # the 2024 preset keeps timm's V/proj
            wv, wp = a.read_vproj()
            ratios.append(float(wv.norm() / wp.norm()))
    return tensors, ratios


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--seeds', type=int, default=20)
    parser.add_argument('--threads', type=int, nargs='+', default=[1, 2])
    parser.add_argument('--out')
    args = parser.parse_args(argv)
    lines = [
        f'# command: python benchmarks/zoo_seed_sweep.py {" ".join(sys.argv[1:])}'.rstrip(),
        f'# date: {datetime.datetime.now().isoformat(timespec="seconds")}; machine: {platform.machine()}, torch '
        f'{torch.__version__}, timm {timm.__version__}; seeds 0..{args.seeds - 1} per thread count {args.threads} '
        f'(figures from the first, the others checked bit-equal to it)',
        '# ratio: Frobenius norm of left / right factor of every product (W_q/W_k per head, W_v/W_proj per attention '
        'whose V/proj the init writes); impulse: the 2024 cap holds |W_q| / |W_k| at sqrt(k / D) by design; '
        'impulse2025 on BEiT writes its bias tables, and its Q/K ratios are timm\'s init',
        f'{"model":26} {"init":12} {"thr":>3} {"max|w|":>8} {"ratio min":>9} {"ratio max":>9} {"finite":>6} '
        f'{"same":>5} {"s/seed":>6}',
    ]
    print('\n'.join(lines), flush=True)
    saved = torch.get_num_threads()
    for name, kwargs, init in MODELS:
        reference = {}
        for threads in args.threads:
            torch.set_num_threads(threads)
            torch.manual_seed(0)
            model = timm.create_model(name, pretrained=False, **kwargs)
            worst, lo, hi, finite, same = 0.0, float('inf'), 0.0, True, True
            start = time.perf_counter()
            for seed in range(args.seeds):
                timm_structinit.apply_init(model, init, seed=seed)
                tensors, ratios = written(model, init)
                state = [t.detach().clone() for t in tensors]
                if threads != args.threads[0]:
                    same &= all(torch.equal(a, b) for a, b in zip(state, reference[seed]))
                    continue
                reference[seed] = state
                finite &= all(bool(torch.isfinite(t).all()) for t in state)
                worst = max(worst, max(float(t.abs().max()) for t in state if t.numel()))
                if ratios:
                    lo, hi = min(lo, min(ratios)), max(hi, max(ratios))
            per_seed = (time.perf_counter() - start) / args.seeds
            if threads != args.threads[0]:
                lines.append(f'{name:26} {init:12} {threads:>3} weights bit-equal to {args.threads[0]} thread(s): '
                             f'{same}   {per_seed:6.2f}')
            else:
                lines.append(f'{name:26} {init:12} {threads:>3} {worst:8.3f} {lo:9.4f} {hi:9.4f} {str(finite):>6} '
                             f'{str(same):>5} {per_seed:6.2f}')
            print(lines[-1], flush=True)
    torch.set_num_threads(saved)
    if args.out:
        write_lines(args.out, lines)


if __name__ == '__main__':
    main()
