""" One attention, whatever timm's layout: per head the math W_q and W_k (D_in x k), the value map W_v (D_in x d_v) and
the output projection W_proj (h d_v x D_out), read from and written to the weights that hold them.

timm writes attention in many layouts: one fused `qkv` Linear with q, k, v in blocks ([q | k | v], head j owning
rows j k:(j + 1) k of each) or per head ([q_j k_j v_j] for each head j: LeViT, TinyViT, EfficientFormer, MaxViT's
head-first layout), separate q / k / v Linears, a q Linear beside a kv one (PVT, Twins), 1x1 convolutions on NCHW
maps (MaxViT, Visformer), projections followed by a BatchNorm (LeViT's LinearNorm), an output projection that takes
the heads' outputs head-major (h d_v + j) or channel-major (j h + h, NesT). A `Projection` names, for one of q, k,
v, the rows of a weight each head owns (and the BatchNorm after it, folded as in eval mode: timm's `fuse`), an
`OutputProjection` the columns that take each head's output; an `AttentionLayout` holds the four, and everything
an init does to an attention goes through it, so each layout is one small builder (`timm_attention`) and the inits'
math stays one set of pure functions over (heads, D, k) tensors.

nn.Linear computes x W^T: the math W (D_in x width) of head j is the transpose of the rows it owns.
"""
import copy
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

import torch
from torch import nn

__all__ = ['Projection', 'OutputProjection', 'PositionBias', 'AttentionLayout', 'head_rows', 'fused_rows',
           'projection_of']


def _weight_2d(linear: nn.Module) -> torch.Tensor:
    """ (out, in) view of a Linear's or a 1x1 Conv2d's weight (the data itself: writes go to the module). """
    weight = linear.weight
    return weight.data.view(weight.shape[0], -1)


def _fold_gain(norm: Optional[nn.Module]) -> Optional[torch.Tensor]:
    """ Per output channel, the factor a BatchNorm in eval mode multiplies by: weight / sqrt(running_var + eps). """
    if norm is None:
        return None
    return norm.weight.detach() / (norm.running_var + norm.eps).sqrt()


def head_rows(heads: int, width: int, start: int = 0, stride: Optional[int] = None) -> torch.Tensor:
    """ (heads, width) row indices: head j's `width` consecutive rows from start + j * stride (stride: width). """
    stride = width if stride is None else stride
    return start + torch.arange(heads)[:, None] * stride + torch.arange(width)


def fused_rows(heads: int, qk_dim: int, v_dim: int, per_head: bool) -> Tuple[torch.Tensor, ...]:
    """ Rows of q, k and v in one fused weight: blocks [q | k | v] (per_head False) or one [q_j k_j v_j] per head. """
    if per_head:
        stride = 2 * qk_dim + v_dim
        return (head_rows(heads, qk_dim, 0, stride), head_rows(heads, qk_dim, qk_dim, stride),
                head_rows(heads, v_dim, 2 * qk_dim, stride))
    return (head_rows(heads, qk_dim), head_rows(heads, qk_dim, heads * qk_dim),
            head_rows(heads, v_dim, 2 * heads * qk_dim))


def projection_of(module: nn.Module) -> Tuple[nn.Module, Optional[nn.Module]]:
    """ (the Linear or 1x1 Conv2d, the BatchNorm after it or None) of a projection: a plain layer, or one of timm's
    conv/linear + BatchNorm pairs (`.linear` and `.bn`: LeViT's LinearNorm, ConvNorm). """
    if isinstance(module, (nn.Linear, nn.Conv2d)):
        return module, None
    linear, norm = getattr(module, 'linear', None), getattr(module, 'bn', None)
    if isinstance(linear, (nn.Linear, nn.Conv2d)) and isinstance(norm, nn.modules.batchnorm._BatchNorm):
        return linear, norm
    raise TypeError(f'{type(module).__name__} is not a linear projection this package reads')


@dataclass(eq=False)
class Projection:
    """ Rows of a token-wise linear map that each head owns (q, k or v), with an optional BatchNorm after the map,
    read and written folded (its eval-mode scale), as timm's `fuse` folds it. """
    linear: nn.Module
    rows: torch.Tensor  # (heads, width) long
    norm: Optional[nn.Module] = None

    @property
    def in_features(self) -> int:
        return _weight_2d(self.linear).shape[1]

    @property
    def width(self) -> int:
        return self.rows.shape[1]

    def read(self) -> torch.Tensor:
        """ Per head math W (heads, D_in, width), float32 on the weight's device. """
        weight = _weight_2d(self.linear).float()
        gain = _fold_gain(self.norm)
        if gain is not None:
            weight = weight * gain.float()[:, None]
        return weight[self.rows].transpose(1, 2)

    @torch.no_grad()
    def write_(self, values: torch.Tensor) -> None:
        """ Write per head math W (heads, D_in, width). A folded BatchNorm with zero weight (LeViT's residual
        branches start at 0) gets weight 1 on the rows written: otherwise nothing written would reach the output. """
        weight = _weight_2d(self.linear)
        rows = self.rows.flatten()
        if values.shape != (*self.rows.shape[:1], weight.shape[1], self.rows.shape[1]):
            raise ValueError(f'expected weights of shape {(self.rows.shape[0], weight.shape[1], self.rows.shape[1])}, '
                             f'got {tuple(values.shape)}')
        rows_values = values.transpose(1, 2).reshape(len(rows), -1).to(weight.device, torch.float32)
        if self.norm is not None:
            norm_weight = self.norm.weight.data
            norm_weight[rows] = torch.where(norm_weight[rows] == 0, torch.ones_like(norm_weight[rows]),
                                            norm_weight[rows])
            rows_values = rows_values / _fold_gain(self.norm)[rows].float()[:, None]
        written = weight.clone()
        written[rows] = rows_values.to(weight.dtype)
        weight.copy_(written)  # one write of the whole weight

    @torch.no_grad()
    def zero_bias_(self) -> None:
        """ No additive term on the rows: the map written is all there is (a folded BatchNorm's bias cancels its
        running mean). """
        rows = self.rows.flatten()
        if getattr(self.linear, 'bias', None) is not None:
            self.linear.bias.data[rows] = 0
        if self.norm is not None:
            self.norm.bias.data[rows] = (self.norm.running_mean[rows] * _fold_gain(self.norm)[rows]).to(
                self.norm.bias.dtype)

    def tensors(self) -> List[torch.Tensor]:
        out = [*self.linear.parameters()]
        if self.norm is not None:
            out += [*self.norm.parameters()]
        return out


@dataclass(eq=False)
class OutputProjection:
    """ The output projection: `cols[j]` are the input columns that take head j's d_v outputs. """
    linear: nn.Module
    cols: torch.Tensor  # (heads, width) long
    norm: Optional[nn.Module] = None

    @property
    def out_features(self) -> int:
        return _weight_2d(self.linear).shape[0]

    def read(self) -> torch.Tensor:
        """ Math W_proj (heads * width, D_out): row h * width + j takes head h's output j. """
        weight = _weight_2d(self.linear).float()
        gain = _fold_gain(self.norm)
        if gain is not None:
            weight = weight * gain.float()[:, None]
        return weight[:, self.cols.flatten()].T

    @torch.no_grad()
    def write_(self, values: torch.Tensor) -> None:
        weight = _weight_2d(self.linear)
        cols = self.cols.flatten()
        if values.shape != (len(cols), weight.shape[0]):
            raise ValueError(f'expected W_proj of shape {(len(cols), weight.shape[0])}, got {tuple(values.shape)}')
        values = values.T.to(weight.device, torch.float32)
        if self.norm is not None:
            norm_weight = self.norm.weight.data
            norm_weight.copy_(torch.where(norm_weight == 0, torch.ones_like(norm_weight), norm_weight))
            values = values / _fold_gain(self.norm).float()[:, None]
        written = weight.clone()
        written[:, cols] = values.to(weight.dtype)
        weight.copy_(written)

    @torch.no_grad()
    def zero_bias_(self) -> None:
        if getattr(self.linear, 'bias', None) is not None:
            self.linear.bias.data.zero_()
        if self.norm is not None:
            self.norm.bias.data.copy_(self.norm.running_mean * _fold_gain(self.norm))

    def tensors(self) -> List[torch.Tensor]:
        out = [*self.linear.parameters()]
        if self.norm is not None:
            out += [*self.norm.parameters()]
        return out


@dataclass(eq=False)
class PositionBias:
    """ A relative position bias an attention adds to its logits: `table` holds one value per (entry, head)
    (`heads_first`: (heads, entries)), and `index` (queries, keys) the entry each logit takes, over a map whose
    tokens are `prefix` prefix tokens, then a `grid` (H, W) of tokens, row-major (a window of Swin, BEiT's whole
    patch grid). `shared`: one table for several attentions (BEiT's and relpos ViT's shared bias). """
    table: torch.Tensor
    index: torch.Tensor
    grid: Tuple[int, int]
    prefix: int = 0
    heads_first: bool = False
    shared: bool = False
    owner: Optional[nn.Module] = None   # the module that keeps `index` as its buffer `index_name`
    index_name: str = ''

    def index_cpu(self) -> Optional[torch.Tensor]:
        """ The index on the CPU; for a model built on the meta device (no values), the one its owner's own
        `init_non_persistent_buffers` computes on a CPU copy, or None where the owner cannot. """
        if not self.index.is_meta:
            return self.index.cpu()
        if self.owner is None or not hasattr(self.owner, 'init_non_persistent_buffers'):
            return None
        clone = copy.deepcopy(self.owner).to_empty(device='cpu')
        clone.init_non_persistent_buffers()
        return getattr(clone, self.index_name).reshape(self.index.shape)

    def column(self, head: int) -> torch.Tensor:
        """ Head `head`'s entries, a view of the table. """
        return self.table.data[head] if self.heads_first else self.table.data[:, head]


@dataclass(eq=False)
class AttentionLayout:
    """ One attention of a model, as an init reads and writes it.

    `between`: what the model applies between the projections and the products an init writes (a norm of q and k,
    an activation before proj, pooled keys, ...), said in words for the record and the docs; `split_biases`: biases
    kept beside a bias-free fused weight ((tensor, 'qk' or 'vproj'): BEiT's q_bias, v_bias and k_bias buffer);
    `qk_normalized`: q or k pass a norm (or are scaled to unit length) before their product; `whole_grid`: queries
    and keys are every token of one grid, unpooled and unwindowed (what an impulse Q/K solve assumes); `position`:
    a relative position bias an impulse can be written into. """
    module: nn.Module
    heads: int
    q: Projection
    k: Projection
    v: Projection
    proj: OutputProjection
    split_biases: Sequence[Tuple[torch.Tensor, str]] = ()
    between: Tuple[str, ...] = ()
    qk_normalized: bool = False
    whole_grid: bool = False
    position: Optional[PositionBias] = None
    name: str = ''
    kind: str = ''
    extra: dict = field(default_factory=dict)

    @property
    def dim_in(self) -> int:
        return self.q.in_features

    @property
    def qk_dim(self) -> int:
        return self.q.width

    @property
    def v_dim(self) -> int:
        return self.v.width

    @property
    def dim_out(self) -> int:
        return self.proj.out_features

    @property
    def square(self) -> bool:
        """ The value path maps the token's space to itself (D_in == D_out): the paper's -I has a meaning. """
        return self.v.in_features == self.dim_out

    def shape(self) -> Tuple[int, ...]:
        return (self.dim_in, self.heads, self.qk_dim, self.v_dim, self.dim_out, self.v.in_features)

    def read_qk(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """ Per-head math W_q and W_k, each (heads, D_in, k). """
        return self.q.read(), self.k.read()

    def write_qk_(self, wq: torch.Tensor, wk: torch.Tensor) -> None:
        self.q.write_(wq)
        self.k.write_(wk)

    def read_vproj(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """ Math W_v (D_in, heads * d_v) and W_proj (heads * d_v, D_out): the value path computes x W_v W_proj
        (with the attention, and what `between` names, in between). """
        wv = self.v.read()  # (heads, D_in, d_v)
        return wv.transpose(0, 1).reshape(wv.shape[1], -1), self.proj.read()

    def write_vproj_(self, wv: torch.Tensor, wproj: torch.Tensor) -> None:
        heads, width = self.v.rows.shape
        self.v.write_(wv.reshape(wv.shape[0], heads, width).transpose(0, 1))
        self.proj.write_(wproj)

    @torch.no_grad()
    def zero_bias_(self, qk: bool = True, vproj: bool = True) -> None:
        """ Zero the biases of the parts an init wrote, so the written products are the whole linear map. """
        parts = ([self.q, self.k] if qk else []) + ([self.v] if vproj else [])
        for part in parts:
            part.zero_bias_()
        if vproj:
            self.proj.zero_bias_()
        for tensor, part in self.split_biases:
            if (qk if part == 'qk' else vproj):
                tensor.data.zero_()

    def tensors(self) -> List[torch.Tensor]:
        """ Every tensor an init may write here (projections, their norms and biases, a position table). """
        out: List[torch.Tensor] = []
        for part in (self.q, self.k, self.v, self.proj):
            out += [t for t in part.tensors() if not any(t is o for o in out)]
        out += [t for t, _ in self.split_biases if not any(t is o for o in out)]
        if self.position is not None and not any(self.position.table is o for o in out):
            out.append(self.position.table)
        return out
