""" Seed sweep of every registered model whose init factorizes a product (mimetic, impulse2025, impulse with
mimetic V/proj): what a user touches, per seed and thread count.

For each model, each thread count and each init seed: the largest |w| of the attention weights, the largest and
smallest ratio of the Frobenius norms of the two factors of each product (W_q vs W_k per head, W_v vs W_proj per
layer), whether every weight is finite, whether the weights equal those of the first thread count bit for bit,
and, every `--check-every` seeds, that half and bfloat16 forward passes are finite and that layer 0's products
are the exact rank-k truncation of the drawn targets (mimetic) or the exact V/proj target.

For impulse models the Q/K ratio is not a factorization's: the 2024 norm cap holds each of W_q's k columns and
each of W_k's D rows at one norm, so |W_q| / |W_k| = sqrt(k / D) (0.577 for ViT-T) by design.

The model is built once per thread count and the init re-applied with each seed (`apply_init(model, init,
seed=s)`): the init writes the same weights whatever the rest of the model holds.

    python benchmarks/seed_sweep.py --seeds 50 --out benchmarks/results/seed_sweep.txt
"""
import argparse
import shlex
import copy
import math
import datetime
import platform
import sys
import time

import timm
import torch

import timm_structinit
from timm_structinit.inits.heads import find_attention, read_qk, read_vproj
from timm_structinit.inits.mimetic import MimeticCfg, draw_mimetic_targets
from results_file import write_lines

# (registered model, extra kwargs, init name re-applied, its kwargs); rows with init kwargs are labelled by them
MODELS = [
    ('vit_tiny_patch2_32_mimetic', {}, 'mimetic', {}),
    ('vit_small_patch2_32_mimetic', {}, 'mimetic', {}),
    ('vit_tiny_patch16_224_mimetic', {}, 'mimetic', {}),
    ('vit_small_patch16_224_mimetic', {}, 'mimetic', {}),
    ('vit_base_patch16_224_mimetic', {}, 'mimetic', {}),
    ('vit_tiny_patch2_32', dict(struct_init='impulse2025'), 'impulse2025', {}),
    ('vit_small_patch2_32', dict(struct_init='impulse2025'), 'impulse2025', {}),
    ('vit_tiny_patch2_32_impulse3', dict(struct_init_kwargs=dict(vproj='mimetic')), 'impulse', dict(vproj='mimetic')),
    ('vit_small_patch2_32_impulse3', dict(struct_init_kwargs=dict(vproj='mimetic')), 'impulse',
     dict(vproj='mimetic')),
    # the impulse study's knobs
    ('vit_tiny_patch2_32_impulse3', {}, 'impulse', dict(solver='svd', content='orthogonal')),
    ('vit_tiny_patch2_32_impulse3', {}, 'impulse', dict(solver='svd', layer_inputs='propagated', vproj='mimetic')),
    ('vit_tiny_patch2_32_mimetic', {}, 'mimetic', dict(qk=False)),
]


def row_label(name: str, init_kwargs: dict) -> str:
    return name + ''.join(f' {k}={v}' for k, v in init_kwargs.items() if k != 'vproj' or len(init_kwargs) > 1)


def factor_stats(model):
    attns = find_attention(model)
    weights = [w for a in attns for w in (a.qkv.weight, a.proj.weight)]
    ratios = []
    for attn in attns:
        wq, wk = read_qk(attn)
        ratios += (wq.norm(dim=(1, 2)) / wk.norm(dim=(1, 2))).tolist()
        wv, wproj = read_vproj(attn)
        ratios.append((wv.norm() / wproj.norm()).item())
    finite = all(torch.isfinite(p).all() for p in model.parameters())
    return max(w.abs().max().item() for w in weights), min(ratios), max(ratios), finite


def forward_finite(model) -> bool:
    x = torch.randn(1, 3, *model.patch_embed.img_size, generator=torch.Generator().manual_seed(0))
    ok = True
    for dtype in (torch.float16, torch.bfloat16):
        low = copy.deepcopy(model).to(dtype).eval()  # a copy: casting back would round the weights
        with torch.no_grad():
            ok &= bool(torch.isfinite(low(x.to(dtype))).all())
    return ok


def product_error(model, init: str) -> float:
    """ Largest |entry| error of layer 0's products against the exact targets (float64 SVD for the rank-k). """
    attn = find_attention(model)[0]
    dim, heads = attn.qkv.in_features, attn.num_heads
    record = model.struct_init_record
    g = torch.Generator().manual_seed(record['seed'])
    err = 0.0
    wv, wproj = read_vproj(attn)
    cfg = record['cfg']
    if init == 'mimetic' and cfg['qk']:
        targets = draw_mimetic_targets(dim, heads, len(find_attention(model)), MimeticCfg(), g)
        wq, wk = read_qk(attn)
        k = dim // heads
        for h in range(heads):
            u, s, vh = torch.linalg.svd(targets['qk'][0, h].double())
            best = (u[:, :k] * s[:k]) @ vh[:k]
            err = max(err, (wq[h].double() @ wk[h].double().T - best).abs().max().item())
        err = max(err, (wv.double() @ wproj.double() - targets['vproj'][0].double()).abs().max().item())
    elif cfg.get('vproj') in ('mimetic', True):  # a V/proj-only draw: check its spectrum's sign instead
        err = abs((wv @ wproj).diagonal().mean().item() + 0.4)
    else:  # V/proj left at timm's init: no product to check
        err = float('nan')
    return err


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--seeds', type=int, default=50)
    parser.add_argument('--threads', type=int, nargs='+', default=[1, 2])
    parser.add_argument('--check-every', type=int, default=10)
    parser.add_argument('--models', nargs='*', default=None)
    parser.add_argument('--large-seeds', type=int, default=10,
                        help='seeds for models of width >= 768 (ViT-B: 156 float64 factorizations of 768 x 768 a seed)')
    parser.add_argument('--out', default='')
    args = parser.parse_args(argv)
    lines = [
        f'# command: python {shlex.join(sys.argv)}',
        f'# date: {datetime.datetime.now().isoformat(timespec="seconds")}',
        f'# machine: {platform.machine()}, torch {torch.__version__}, timm {timm.__version__}; seeds 0..{args.seeds - 1} (width 768: 0..{args.large_seeds - 1})'
        f' per thread count {args.threads} (figures from the first, the others checked bit-equal to it); forward (fp16, bf16) and layer-0 products every {args.check_every} seeds',
        '# ratio: Frobenius norm of left / right factor over every product (W_q/W_k per head, W_v/W_proj per layer);'
        ' same: weights bit-equal to the first thread count\'s for every seed; prod err: layer 0 products vs exact '
        '(mimetic: rank-k truncation and V/proj target; impulse: |mean diag(W_v W_proj) + 0.4|)',
        f'{"model":30} {"init":12} {"thr":>3} {"max|w|":>7} {"ratio min":>9} {"ratio max":>9} {"finite":>6} '
        f'{"fwd ok":>6} {"same":>5} {"prod err":>9} {"s/seed":>6} {"seeds":>5}',
    ]
    print('\n'.join(lines), flush=True)
    saved_threads = torch.get_num_threads()
    for name, build_kwargs, init, init_kwargs in MODELS:
        label = row_label(name, init_kwargs)
        if args.models and name not in args.models and label not in args.models:
            continue
        reference = {}
        for threads in args.threads:
            torch.set_num_threads(threads)
            torch.manual_seed(0)
            model = timm.create_model(name, **build_kwargs)
            worst_w, r_min, r_max, all_finite, fwd_ok, same, prod = 0.0, float('inf'), 0.0, True, True, True, 0.0
            start = time.perf_counter()
            seeds = args.seeds if find_attention(model)[0].qkv.in_features < 768 else args.large_seeds
            for seed in range(seeds):
                timm_structinit.apply_init(model, init, seed=seed, **init_kwargs)
                attn_state = [a.qkv.weight.detach().clone() for a in find_attention(model)]
                if threads != args.threads[0]:  # equal bits: every figure below is the first thread count's
                    same &= all(torch.equal(a, b) for a, b in zip(attn_state, reference[seed]))
                    continue
                reference[seed] = attn_state
                w, lo, hi, finite = factor_stats(model)
                worst_w, r_min, r_max, all_finite = max(worst_w, w), min(r_min, lo), max(r_max, hi), all_finite and finite
                if seed % args.check_every == 0:
                    fwd_ok &= forward_finite(model)
                    error = product_error(model, init)
                    prod = error if math.isnan(error) else max(prod, error)  # nan: no product to check
            per_seed = (time.perf_counter() - start) / seeds
            if threads != args.threads[0]:
                lines.append(f'{label:30} {init:12} {threads:>3} {"weights bit-equal to " + str(args.threads[0]) + " thread(s): " + str(same):>62} {per_seed:6.2f} {seeds:>5}')
                print(lines[-1], flush=True)
                continue
            lines.append(
                f'{label:30} {init:12} {threads:>3} {worst_w:7.3f} {r_min:9.4f} {r_max:9.4f} {str(all_finite):>6} '
                f'{str(fwd_ok):>6} {str(same):>5} {prod:9.2e} {per_seed:6.2f} {seeds:>5}')
            print(lines[-1], flush=True)
    torch.set_num_threads(saved_threads)
    if args.out:
        write_lines(args.out, lines)


if __name__ == '__main__':
    main()
