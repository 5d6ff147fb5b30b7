""" Reading and writing the per-head math matrices of timm's fused-qkv attention.

timm's `Attention` computes `qkv = x @ qkv.weight.T`: rows [0:D] are q, [D:2D] k, [2D:3D] v, and head j owns rows
j*k:(j+1)*k of each block, k = D / heads. The papers write the math form x W_q with W_q of shape (D, k), so head j's
W_q is `qkv.weight[j*k:(j+1)*k].T`, and the output projection is x W_proj with W_proj = `proj.weight.T`.
Every init in this package writes through these helpers, and the tests read back through them, so the
transposition convention lives in exactly one place.
"""
from typing import List, Tuple

import torch
from torch import nn

__all__ = [
    'find_attention', 'head_dim_of', 'read_qk', 'write_qk_', 'read_vproj', 'write_vproj_', 'zero_attention_bias_',
    'written_tensors',
]


def _is_fused_qkv_attention(module: nn.Module) -> bool:
    qkv, proj = getattr(module, 'qkv', None), getattr(module, 'proj', None)
    return (
        isinstance(qkv, nn.Linear) and isinstance(proj, nn.Linear)
        and isinstance(getattr(module, 'num_heads', None), int)
        and qkv.out_features == 3 * qkv.in_features
        and proj.in_features == proj.out_features == qkv.in_features
    )


def find_attention(model: nn.Module) -> List[nn.Module]:
    """ The model's fused-qkv self-attention modules, in forward order; ValueError if it has none usable. """
    attns = [m for m in model.modules() if _is_fused_qkv_attention(m)]
    if not attns:
        kinds = sorted({type(m).__name__ for m in model.modules() if 'attn' in type(m).__name__.lower()})
        raise ValueError(
            f'{type(model).__name__} has no fused-qkv self-attention (a module with qkv: Linear(D, 3D), '
            f'proj: Linear(D, D) and num_heads, such as timm.layers.Attention); attention modules found: '
            f'{kinds or "none"}. Structured inits support timm ViT-style models (vit_*, deit_*, ...).')
    shapes = sorted({(a.qkv.in_features, a.num_heads) for a in attns})
    if len(shapes) > 1:
        # hierarchical models change width from stage to stage; the ViT path assumes one token grid and one width
        # throughout (timm's Swin V1 has its own path, see inits.swin)
        raise ValueError(
            f'{type(model).__name__} is not supported: its attention modules have (width, heads) {shapes}, '
            f'not one shape. Structured inits support plain ViT-style models with one width and fused-qkv '
            f'attention over all tokens (timm VisionTransformer: vit_*, deit_*, ...), timm\'s SwinTransformer '
            f'(swin_*) and MlpMixer (mixer_*)')
    for i, attn in enumerate(attns):
        for name in ('q_norm', 'k_norm'):
            norm = getattr(attn, name, None)
            if norm is not None and not isinstance(norm, nn.Identity):
                raise ValueError(
                    f'attention {i} has {name}={type(norm).__name__}: a normalized q or k does not keep the '
                    f'product W_q W_k^T an init writes; build the model with qk_norm=False')
        dim = attn.qkv.in_features
        if dim % attn.num_heads:
            raise ValueError(f'attention {i}: embed_dim={dim} is not divisible by num_heads={attn.num_heads}')
    return attns


def head_dim_of(attn: nn.Module) -> int:
    return attn.qkv.in_features // attn.num_heads


def read_qk(attn: nn.Module) -> Tuple[torch.Tensor, torch.Tensor]:
    """ Per-head math W_q and W_k, each (heads, D, k). """
    dim, heads, k = attn.qkv.in_features, attn.num_heads, head_dim_of(attn)
    w = attn.qkv.weight.detach()
    wq = w[:dim].reshape(heads, k, dim).transpose(1, 2)
    wk = w[dim:2 * dim].reshape(heads, k, dim).transpose(1, 2)
    return wq, wk


@torch.no_grad()
def write_qk_(attn: nn.Module, wq: torch.Tensor, wk: torch.Tensor) -> None:
    """ Write per-head math W_q, W_k (heads, D, k) into the fused qkv weight. """
    dim, heads, k = attn.qkv.in_features, attn.num_heads, head_dim_of(attn)
    if wq.shape != (heads, dim, k) or wk.shape != (heads, dim, k):
        raise ValueError(f'expected W_q and W_k of shape {(heads, dim, k)}, got {tuple(wq.shape)}, {tuple(wk.shape)}')
    w = attn.qkv.weight
    w[:dim].copy_(wq.transpose(1, 2).reshape(dim, dim))
    w[dim:2 * dim].copy_(wk.transpose(1, 2).reshape(dim, dim))


def read_vproj(attn: nn.Module) -> Tuple[torch.Tensor, torch.Tensor]:
    """ Math W_v (D, D) and W_proj (D, D): the value path computes x W_v W_proj (with attention in between). """
    dim = attn.qkv.in_features
    return attn.qkv.weight.detach()[2 * dim:].T, attn.proj.weight.detach().T


@torch.no_grad()
def write_vproj_(attn: nn.Module, wv: torch.Tensor, wproj: torch.Tensor) -> None:
    dim = attn.qkv.in_features
    attn.qkv.weight[2 * dim:].copy_(wv.T)
    attn.proj.weight.copy_(wproj.T)


# biases kept beside a bias-free fused qkv (timm's BEiT and EVA attention: q_bias, v_bias and a zero k_bias buffer)
_SPLIT_BIASES = {'q_bias': 'qk', 'k_bias': 'qk', 'v_bias': 'vproj'}


@torch.no_grad()
def zero_attention_bias_(attn: nn.Module, qk: bool = True, vproj: bool = True) -> None:
    """ Zero the biases of the parts an init wrote, so the written products are the whole linear map. """
    dim = attn.qkv.in_features
    if attn.qkv.bias is not None:
        if qk:
            attn.qkv.bias[:2 * dim].zero_()
        if vproj:
            attn.qkv.bias[2 * dim:].zero_()
    if vproj and attn.proj.bias is not None:
        attn.proj.bias.zero_()
    for name, part in _SPLIT_BIASES.items():
        bias = getattr(attn, name, None)
        if isinstance(bias, torch.Tensor) and (qk if part == 'qk' else vproj):
            bias.zero_()


def written_tensors(attn: nn.Module) -> List[torch.Tensor]:
    """ Every tensor of `attn` an init may write: the fused qkv and proj weights and biases, and the split biases. """
    split = [getattr(attn, name, None) for name in _SPLIT_BIASES]
    return [*attn.qkv.parameters(), *attn.proj.parameters(), *(t for t in split if isinstance(t, torch.Tensor))]
