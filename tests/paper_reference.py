""" The papers' definitions, restated for the tests independently of the package: nothing here imports it.

Mimetic (Trockman & Kolter, ICML 2023, arXiv 2305.09828): per head W_q W_k^T is the best rank-k
approximation of a1 Z + b1 I and W_v W_proj = a2 Z' - b2 I, Z, Z' with i.i.d. N(0, 1/D) entries, a1 = b1 = 0.7,
a2 = b2 = 0.4. Impulse (Zheng et al., arXiv 2404.01139 and 2505.19985): head i's map sends query patch
(r, c) to key (r + dy, c + dx), rows falling off the grid all zero; the objective is mean((H - A)^2) over the N x N
map. Weights are read from the state dict in timm's fused-qkv layout; maps are what timm's `Attention` computes.
"""
import math

import torch
from timm.layers import Attention

# the paper's default constants (Trockman & Kolter 2023), alpha_1 = beta_1 = 0.7 and alpha_2 = beta_2 = 0.4
A1, B1, A2, B2 = 0.7, 0.7, 0.4, 0.4


def qk_product(state, layer, head, dim, heads):
    """ W_q W_k^T of one head from timm's fused qkv weight: rows [0:D] q, [D:2D] k, head j rows j*k:(j+1)*k; the
    math W_q (D x k) is the transpose of those rows (nn.Linear computes x W^T). """
    k = dim // heads
    w = state[f'blocks.{layer}.attn.qkv.weight'].double()
    wq = w[head * k:(head + 1) * k].T
    wk = w[dim + head * k:dim + (head + 1) * k].T
    return wq @ wk.T


def vproj_product(state, layer, dim):
    """ W_v W_proj: the value path computes x W_v (attention mixes tokens) then W_proj, math forms of the v rows and
    of proj.weight, both transposed from nn.Linear's layout. """
    wv = state[f'blocks.{layer}.attn.qkv.weight'].double()[2 * dim:].T
    wproj = state[f'blocks.{layer}.attn.proj.weight'].double().T
    return wv @ wproj


def best_rank(a: torch.Tensor, k: int) -> torch.Tensor:
    """ Eckart-Young: the best rank-k approximation of a, from a float64 SVD. """
    u, s, vh = torch.linalg.svd(a.double())
    return (u[:, :k] * s[:k]) @ vh[:k]


def paper_targets(seed, layers, heads, dim, a1=A1, b1=B1, a2=A2, b2=B2):
    """ The matrices of the paper for a generator seeded with the model's init seed, in the order the package
    documents (every Q/K draw, layer by layer and head by head, then every V/proj draw): A = a1 Z + b1 I per head,
    B = a2 Z' - b2 I per layer, Z and Z' standard normal over sqrt(D), drawn as the package documents it: by the
    inverse normal CDF of one float32 uniform draw u per value, sqrt(2) erfinv(2u - 1 + 2^-24). """
    g = torch.Generator().manual_seed(seed)
    eye = torch.eye(dim, dtype=torch.float64)

    def normal(*shape):
        u = torch.rand(*shape, generator=g).double()
        return math.sqrt(2) * torch.erfinv(2 * u - 1 + 2.0 ** -24)
    z = normal(layers, heads, dim, dim) / math.sqrt(dim)
    z2 = normal(layers, dim, dim) / math.sqrt(dim)
    return a1 * z + b1 * eye, a2 * z2 - b2 * eye


def paper_target(grid, offset):
    """ (N,) key index of each query under offset (dy, dx), -1 where (r + dy, c + dx) is off the grid (zero rows). """
    height, width = grid
    dy, dx = offset
    keys = []
    for r in range(height):
        for c in range(width):
            rk, ck = r + dy, c + dx
            keys.append(rk * width + ck if 0 <= rk < height and 0 <= ck < width else -1)
    return torch.tensor(keys)


def timm_attention_maps(attn: Attention, tokens: torch.Tensor) -> torch.Tensor:
    """ (heads, N, N) softmax maps timm's own Attention forward computes on `tokens` (1, N, D): its unfused path,
    with its own scale, read from the input of its attention dropout. """
    assert isinstance(attn, Attention)
    seen = {}
    fused, attn.fused_attn = attn.fused_attn, False
    handle = attn.attn_drop.register_forward_hook(lambda module, args, out: seen.update(maps=args[0]))
    try:
        with torch.no_grad():
            attn(tokens)
    finally:
        handle.remove()
        attn.fused_attn = fused
    return seen['maps'][0]


def layer_inputs(model) -> torch.Tensor:
    """ What each block's attention sees at step 0 on a blank image whose patch embedding is zero: the block's own
    norm1 (timm's LayerNorm, at its identity init) of the patch rows of the position table the model adds. """
    table = model.pos_embed.detach()
    if not model.no_embed_class:
        table = table[:, model.num_prefix_tokens:]
    return [block.norm1(table) for block in model.blocks]


def paper_statistics(maps: torch.Tensor, targets) -> dict:
    """ Per head: share of non-empty rows whose argmax is the target key, mean attention on the target over those
    rows, and the 2024 objective mean((H - A)^2) over the whole N x N map (empty rows of H all zero). """
    out = {'hit_rate': [], 'target_mass': [], 'objective': []}
    n = maps.shape[-1]
    for a, target in zip(maps.double(), targets):
        valid = target >= 0
        rows = torch.arange(n)[valid]
        h = torch.zeros(n, n, dtype=torch.float64)
        h[rows, target[valid]] = 1
        out['hit_rate'].append((a[rows].argmax(-1) == target[valid]).double().mean().item())
        out['target_mass'].append(a[rows, target[valid]].mean().item())
        out['objective'].append(((h - a) ** 2).mean().item())
    return out


def timm_layer_statistics(model) -> list:
    """ `paper_statistics` of every layer's maps in timm's Attention on the layer's pseudo input, against the
    offsets the model's init record names. """
    record, grid = model.struct_init_record, tuple(model.patch_embed.grid_size)
    return [paper_statistics(timm_attention_maps(block.attn, x), [paper_target(grid, tuple(o)) for o in offsets])
            for block, x, offsets in zip(model.blocks, layer_inputs(model), record['offsets'])]


def assert_record_is_timms(model, rel: float = 2e-3) -> list:
    """ The solve's hit rate, target mass and objective in the record are what timm's forward gives on the pseudo
    input. """
    record = model.struct_init_record
    record = {**record['solve'], 'objective': record['objective']}  # the solve's statistics, on its input
    stats = timm_layer_statistics(model)
    n = model.patch_embed.grid_size[0] * model.patch_embed.grid_size[1]
    for layer, layer_stats in enumerate(stats):
        for key in ('target_mass', 'objective'):
            for got, recorded in zip(layer_stats[key], record[key][layer]):
                assert abs(got - recorded) <= rel * abs(recorded) + 1e-6, (layer, key, got, recorded)
        for got, recorded in zip(layer_stats['hit_rate'], record['hit_rate'][layer]):
            assert abs(got - recorded) <= 1.5 / n, (layer, 'hit_rate', got, recorded)
    return stats
