""" The `adam` impulse solver: the 2024 authors' procedure, kept as the reference (Adam from a uniform start, the
norm cap applied every `norm_every` steps). """
from typing import Any, Dict, Tuple

import torch
import torch.nn.functional as F

from .impulse_maps import _cap_, _finish, _uniform_start, attention_maps, dense_target

__all__ = ['solve_adam']


def solve_adam(
        x: torch.Tensor,
        targets: torch.Tensor,
        head_dim: int,
        num_heads: int,
        generator: torch.Generator,
        iters: int = 10000,
        lr: float = 1e-4,
        norm_every: int = 100,
) -> Tuple[torch.Tensor, torch.Tensor, Dict[str, Any]]:
    """ The authors' 2024 solver, kept as the reference. targets (B, N) with B a multiple of num_heads.

    Each group of `num_heads` targets (one layer) is solved jointly as in the authors' code: one Adam over the
    mean loss of the group, nq the mean initial column norm of the group's Q. The returned weights are the last
    iterate, up to `norm_every - 1` steps after the last rescale, so their norms sit a little above nq, as the
    authors' weights do.
    """
    with torch.enable_grad():  # a model's init_weights runs under no_grad; this solver needs autograd
        return _solve_adam(x, targets, head_dim, num_heads, generator, iters, lr, norm_every)


def _solve_adam(x, targets, head_dim, num_heads, generator, iters, lr, norm_every):
    dim = x.shape[-1]
    out_q, out_k, nqs = [], [], []
    for group in targets.split(num_heads):
        wq, wk = _uniform_start(group.shape[0], dim, head_dim, num_heads, generator)
        nq = wq.norm(dim=-2).mean()
        wq.requires_grad_(True), wk.requires_grad_(True)
        dense = dense_target(group, x.dtype)
        optimizer = torch.optim.Adam([wq, wk], lr=lr)
        for step in range(iters):
            if step % norm_every == 0:
                _cap_(wq, wk, nq)
            optimizer.zero_grad(set_to_none=True)
            F.mse_loss(attention_maps(x, wq, wk), dense).backward()
            optimizer.step()
        out_q.append(wq.detach()), out_k.append(wk.detach()), nqs.append(float(nq))
    return _finish(x, torch.cat(out_q), torch.cat(out_k), targets, nq=nqs, iters=iters, lr=lr)
