""" What an init does to attention: products of weight matrices, attention maps, and the papers' figures.

Pure functions compute the quantities (per layer and head); `summarize` turns them into printable rows;
`plot_layer` draws one layer in the papers' style with matplotlib (imported lazily: an optional dependency).
"""
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import torch
from torch import nn

from ..inits.heads import find_attention, read_qk, read_vproj
from ..inits.impulse import impulse_pseudo_input, impulse_target
from ..inits.impulse_solvers import attention_maps, map_metrics
from ..utils.figures import epoch_axis, new_figure, save_figure

__all__ = [
    'qk_products', 'vproj_product', 'product_stats', 'pseudo_input_maps', 'image_attention_maps', 'summarize',
    'format_summary', 'plot_layer', 'load_images', 'layer_image_mass', 'impulse_offsets',
    'plot_target_mass',
]


def qk_products(attn: nn.Module) -> torch.Tensor:
    """ W_q W_k^T per head: (heads, D, D). """
    wq, wk = read_qk(attn)
    return wq @ wk.transpose(-1, -2)


def vproj_product(attn: nn.Module) -> torch.Tensor:
    """ W_v W_proj: (D, D). """
    wv, wproj = read_vproj(attn)
    return wv @ wproj


def product_stats(product: torch.Tensor) -> Dict[str, float]:
    """ Diagonal mean and off-diagonal spread (std) of a square matrix, the papers' summary of a product. """
    eye = torch.eye(product.shape[-1], dtype=torch.bool)
    return {'diag_mean': product[eye].mean().item(), 'offdiag_std': product[~eye].std().item()}


def _grid(model: nn.Module):
    patch_embed = getattr(model, 'patch_embed', None)
    if patch_embed is None or getattr(patch_embed, 'grid_size', None) is None:
        raise ValueError(f'{type(model).__name__} has no patch grid (patch_embed.grid_size)')
    return tuple(patch_embed.grid_size)


@torch.no_grad()
def pseudo_input_maps(model: nn.Module, layer: int) -> torch.Tensor:
    """ Attention maps of a layer on a pseudo input: (heads, N, N), patch tokens only.

    The pseudo input is the one the model's impulse init solved on (LayerNorm of its own position embedding for
    `impulse2025`), else the 2024 one (LayerNorm of the grid's sin-cos table), a model-independent probe of any
    init's locality.
    """
    _grid(model)  # a ValueError for a model without a patch grid
    attn = find_attention(model)[layer]
    wq, wk = (w.cpu() for w in read_qk(attn))  # the pseudo input is built on the CPU
    return attention_maps(impulse_pseudo_input(model, attn.qkv.in_features, _init_cfg(model)), wq, wk)


def _image_grid(model: nn.Module, images: torch.Tensor):
    """ The patch grid `images` give: the model's own, or, for a model that takes other sizes (timm's
    dynamic_img_size, dynamic_img_pad padding them), the one its patch embedding computes for them. A head's
    target offset means the same on any grid, so its target there is the same impulse. """
    patch_embed = getattr(model, 'patch_embed', None)
    if getattr(model, 'dynamic_img_size', False) and hasattr(patch_embed, 'dynamic_feat_size'):
        return tuple(patch_embed.dynamic_feat_size(tuple(images.shape[-2:])))
    return _grid(model)


def _init_cfg(model: nn.Module) -> Dict[str, Any]:
    """ The hyperparameters the model's structured init ran with ({} without one). """
    return (getattr(model, 'struct_init_record', None) or {}).get('cfg') or {}


def _patch_block(maps: torch.Tensor, model: nn.Module, num_patches: int) -> torch.Tensor:
    """ The patch-to-patch block of (heads, tokens, tokens) maps: timm puts class and register tokens first. """
    prefix = getattr(model, 'num_prefix_tokens', 0)
    if maps.shape[-1] != prefix + num_patches:
        raise ValueError(
            f'the images gave {maps.shape[-1]} tokens, but the model has {prefix} prefix tokens and a grid of '
            f'{num_patches} patches; pass images of the model\'s input size')
    return maps[..., prefix:, prefix:]


@torch.no_grad()
def image_attention_maps(model: nn.Module, layer: int, images: torch.Tensor) -> torch.Tensor:
    """ A layer's attention probabilities averaged over a batch of images: (heads, tokens, tokens). """
    return _image_attention_maps(model, [layer], images)[layer]


@torch.no_grad()
def _image_attention_maps(model: nn.Module, layers: Sequence[int], images: torch.Tensor) -> Dict[int, torch.Tensor]:
    """ Several layers' maps from one forward pass.

    timm's attention runs fused kernels that never materialize the probabilities, so a hook on each attention
    module's input recomputes them from its own weights (qk norm is refused by `find_attention`).
    """
    attns = find_attention(model)
    captured: Dict[int, torch.Tensor] = {}

    def hook_for(layer):
        def hook(module, args):
            x = args[0]
            batch, tokens, dim = x.shape
            qkv = module.qkv(x).reshape(batch, tokens, 3, module.num_heads, dim // module.num_heads)
            q, k = qkv[:, :, 0].transpose(1, 2), qkv[:, :, 1].transpose(1, 2)
            probs = (q @ k.transpose(-1, -2) * (dim // module.num_heads) ** -0.5).softmax(-1)
            captured[layer] = probs.mean(0).cpu()  # what reads the maps (metrics, figures) works on the CPU
        return hook

    handles = [attns[layer].register_forward_pre_hook(hook_for(layer)) for layer in layers]
    was_training = model.training
    try:
        model.eval()
        model(images)
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    return captured


def load_images(folder: str, model: nn.Module, count: int) -> torch.Tensor:
    """ Up to `count` images from `folder` (ImageFolder layout or flat), evenly spaced over the folder's sorted
    listing, through the model's own eval transform (timm's data config) at the size and channels the model takes. """
    from timm.data import create_transform, resolve_data_config
    from ..data import folder_dataset
    from ..errors import DataError, ImageReadError
    if not Path(folder).is_dir():
        raise ValueError(f'--images {folder!r} is not a directory')
    patch_embed = getattr(model, 'patch_embed', None)
    size = getattr(patch_embed, 'img_size', None)  # model_kwargs img_size=... leaves pretrained_cfg behind
    chans = getattr(getattr(patch_embed, 'proj', None), 'in_channels', 3)
    config = resolve_data_config({'input_size': (chans, *size)} if size is not None else {}, model=model)
    for name in ('mean', 'std'):  # the registered 3-channel values, averaged for a model of other channels
        if len(config[name]) != chans:
            config[name] = (sum(config[name]) / len(config[name]),) * chans
    transform = create_transform(**config)
    try:
        dataset = folder_dataset(folder, f'--images {folder!r}', check_classes=False, transform=transform,
                                 input_img_mode='L' if chans == 1 else 'RGB')
        step = max(1, len(dataset) // count)
        return torch.stack([dataset[i][0] for i in range(0, len(dataset), step)[:count]])
    except (DataError, ImageReadError) as e:
        raise ValueError(str(e)) from None


def impulse_offsets(model: nn.Module) -> Optional[List[List[List[int]]]]:
    """ Per layer and head, the target offset of a ViT's impulse init; None for a model without one (or a Swin or
    Mixer record, whose offsets are windows' and blocks'). """
    record = getattr(model, 'struct_init_record', None) or {}
    return None if 'family' in record else record.get('offsets')


@torch.no_grad()
def layer_image_mass(model: nn.Module, images: torch.Tensor) -> Optional[List[float]]:
    """ Per layer, the attention mass on each head's impulse target averaged over heads, query patches and
    `images` (normalized, the model's input size); None for a model without impulse offsets.

    This is the structure a real input sees, so tracked through training it shows whether the locality an impulse
    init starts from is kept or fades.
    """
    offsets = impulse_offsets(model)
    if offsets is None:
        return None
    grid = _image_grid(model, images)
    border = _init_cfg(model).get('border', 'zero')
    maps = _image_attention_maps(model, range(len(offsets)), images)
    masses = []
    for layer, layer_offsets in enumerate(offsets):
        targets = torch.stack([impulse_target(grid, tuple(o), border) for o in layer_offsets])
        patch = _patch_block(maps[layer], model, targets.shape[-1])
        masses.append(map_metrics(patch.float(), targets)['target_mass'].mean().item())
    return masses


def summarize(model: nn.Module, images: Optional[torch.Tensor] = None) -> List[Dict[str, Any]]:
    """ One row per layer and head: product statistics, and for impulse models offset, hit rate and target mass on
    the pseudo input, plus, with `images`, the mass on the target averaged over those images (`image_mass`: the
    real input mixes patch content into the position signal, so it is lower than on the pseudo input). Models
    without impulse offsets (mimetic, timm default) have no target: `images` adds nothing to their rows. """
    record = getattr(model, 'struct_init_record', None) or {}
    offsets = record.get('offsets')
    grid = None
    try:
        grid = _grid(model)
    except ValueError:
        pass
    attns = find_attention(model)
    real = None
    if images is not None and offsets is not None and grid is not None:
        real = _image_attention_maps(model, range(len(attns)), images)
    rows = []
    for layer, attn in enumerate(attns):
        qk = qk_products(attn)
        vp = product_stats(vproj_product(attn))
        maps = pseudo_input_maps(model, layer) if grid is not None else None
        for head in range(attn.num_heads):
            row = {'layer': layer, 'head': head}
            row.update({f'qk_{k}': v for k, v in product_stats(qk[head]).items()})
            row.update({f'vproj_{k}': v for k, v in vp.items()})
            if offsets is not None and maps is not None:
                offset = tuple(offsets[layer][head])
                target = impulse_target(grid, offset, _init_cfg(model).get('border', 'zero'))
                metrics = map_metrics(maps[head:head + 1], target.unsqueeze(0))
                row.update(offset=offset, hit_rate=metrics['hit_rate'].item(),
                           target_mass=metrics['target_mass'].item())
                if real is not None:
                    patch = _patch_block(real[layer][head:head + 1], model, target.shape[0])
                    row['image_mass'] = map_metrics(patch, target.unsqueeze(0))['target_mass'].item()
            rows.append(row)
    return rows


def format_summary(rows: Sequence[Dict[str, Any]]) -> str:
    header = f'{"layer":>5} {"head":>4} {"qk diag":>8} {"qk off sd":>9} {"vp diag":>8} {"vp off sd":>9}'
    impulse = 'offset' in rows[0]
    on_images = 'image_mass' in rows[0]
    if impulse:
        header += f' {"offset":>8} {"hit":>6} {"mass":>6}' + (f' {"img mass":>8}' if on_images else '')
    lines = [header]
    for r in rows:
        line = (f'{r["layer"]:5d} {r["head"]:4d} {r["qk_diag_mean"]:8.3f} {r["qk_offdiag_std"]:9.4f} '
                f'{r["vproj_diag_mean"]:8.3f} {r["vproj_offdiag_std"]:9.4f}')
        if impulse:
            line += f' {str(r["offset"]):>8} {r["hit_rate"]:6.3f} {r["target_mass"]:6.3f}'
            if on_images:
                line += f' {r["image_mass"]:8.3f}'
        lines.append(line)
    return '\n'.join(lines)


def plot_layer(
        model: nn.Module,
        layer: int,
        out: Path,
        images: Optional[torch.Tensor] = None,
        title: str = '',
        zoom: int = 0,
) -> Path:
    """ One figure for one layer: per head, the attention map on the pseudo input (whole and a zoomed corner),
    the same averaged over real images when given, the map of the centre query as a grid (the filter view), and
    W_q W_k^T; plus W_v W_proj. Written to a temporary file, then renamed. """
    attn = find_attention(model)[layer]
    heads = attn.num_heads
    grid = _grid(model)
    n = grid[0] * grid[1]
    zoom = zoom or min(n, 2 * grid[1] + 2)
    maps = pseudo_input_maps(model, layer)
    real = image_attention_maps(model, layer, images) if images is not None else None
    real_patches = _patch_block(real, model, n) if real is not None else None
    qk = qk_products(attn)
    columns = ['pseudo input', f'zoom {zoom}x{zoom}', 'centre query'] + (
        ['real images', 'real zoom'] if real is not None else []) + ['W_q W_k^T']
    fig = new_figure(figsize=(2.6 * len(columns), 2.6 * (heads + 1)))
    axes = fig.subplots(heads + 1, len(columns), squeeze=False)
    centre = (grid[0] // 2) * grid[1] + grid[1] // 2
    for head in range(heads):
        panels = [maps[head], maps[head, :zoom, :zoom], maps[head, centre].view(*grid)]
        if real is not None:
            patch = real_patches[head]
            panels += [patch, patch[:zoom, :zoom]]
        panels.append(qk[head])
        for col, panel in enumerate(panels):
            ax = axes[head, col]
            symmetric = columns[col] == 'W_q W_k^T'
            limit = panel.abs().max().item() if symmetric else None
            ax.imshow(panel.numpy(), cmap='RdBu_r' if symmetric else 'viridis',
                      vmin=-limit if symmetric else None, vmax=limit)
            ax.set_xticks([]), ax.set_yticks([])
            if head == 0:
                ax.set_title(columns[col], fontsize=9)
        axes[head, 0].set_ylabel(f'head {head}', fontsize=9)
    vp = vproj_product(attn)
    limit = vp.abs().max().item()
    axes[heads, 0].imshow(vp.numpy(), cmap='RdBu_r', vmin=-limit, vmax=limit)
    axes[heads, 0].set_title('W_v W_proj', fontsize=9)
    for ax in axes[heads]:
        ax.set_xticks([]), ax.set_yticks([])
    for ax in axes[heads, 1:]:
        ax.axis('off')
    fig.suptitle(title or f'layer {layer}', fontsize=10)
    return save_figure(fig, out, dpi=90)


def plot_target_mass(rows: Sequence[Dict[str, float]], png_path: str, title: str = '') -> str:
    """ Real-image mass on the impulse targets per layer against the epoch (0: at init), from rows of
    `{'epoch': e, 'layer1': m, ...}`; written to a temporary file, then renamed. """
    layers = [k for k in rows[0] if k.startswith('layer')]
    epochs = [r['epoch'] for r in rows]
    fig = new_figure(figsize=(6, 4), dpi=100)
    ax = fig.subplots()
    for i, key in enumerate(layers):
        ax.plot(epochs, [r[key] for r in rows], marker='.', color=f'C{i % 10}', label=key.replace('layer', 'layer '))
    ax.set(ylabel='mass on the target offset', title=title or 'impulse target mass')
    epoch_axis(ax, 'epoch (0: at init)')
    ax.set_ylim(0, None)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, png_path)
    return png_path
