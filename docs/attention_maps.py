""" The README's picture: what each init does to attention, side by side.

For ViT-T/2 on 32 x 32 inputs (a 16 x 16 patch grid, 3 heads) at init with timm's default, mimetic (Trockman & Kolter
2023) and impulse 3x3 (Zheng et al. 2024), layer 0's attention on the position-only pseudo input (LayerNorm of the
sin-cos table, the same for every model: `timm_structinit.diagnostics.pseudo_input_maps`): per init, head 0's whole
256 x 256 map, then each head's map of the centre query as the 16 x 16 grid it looks at, with its largest
probability (attention spread evenly would put 1/256 = 0.004 on every key).

    python docs/attention_maps.py                  # writes docs/attention_maps.png (a few seconds)
"""
import argparse
from pathlib import Path

import timm
import torch

import timm_structinit  # noqa: F401  registers the models
from timm_structinit.diagnostics import pseudo_input_maps
from timm_structinit.utils.figures import new_figure, save_figure

HERE = Path(__file__).resolve().parent
INITS = {  # row title -> registered model
    "default (timm's init)": 'vit_tiny_patch2_32_sincos',
    'mimetic': 'vit_tiny_patch2_32_mimetic',
    'impulse 3x3': 'vit_tiny_patch2_32_impulse3',
}


def draw(out: Path, seed: int = 0, layer: int = 0) -> Path:
    rows = []
    for title, name in INITS.items():
        torch.manual_seed(seed)  # every init draws from torch's generator
        model = timm.create_model(name)
        rows.append((title, pseudo_input_maps(model, layer), tuple(model.patch_embed.grid_size)))
    heads = rows[0][1].shape[0]
    fig = new_figure(figsize=(2.1 * (heads + 1), 2.3 * len(rows)))
    axes = fig.subplots(len(rows), heads + 1, squeeze=False)
    panels = []  # per row: head 0's whole map, then each head's centre query on the grid
    for title, maps, grid in rows:
        centre = (grid[0] // 2) * grid[1] + grid[1] // 2
        panels.append([maps[0]] + [maps[h, centre].view(*grid) for h in range(heads)])
    # one colour scale per column kind, shared by the inits (square-root, so mimetic's broad maps show beside the
    # impulse's peaks): attention spread evenly, 1/256 a key, stays dark
    from matplotlib.colors import PowerNorm
    top_whole = max(p[0].max().item() for p in panels)
    top_centre = max(q.max().item() for p in panels for q in p[1:])
    for row, ((title, _, _), row_panels) in enumerate(zip(rows, panels)):
        for col, panel in enumerate(row_panels):
            ax = axes[row, col]
            top = top_whole if col == 0 else top_centre
            ax.imshow(panel.numpy(), cmap='viridis', norm=PowerNorm(0.5, vmin=0, vmax=top))
            ax.set_xticks([]), ax.set_yticks([])
            ax.set_xlabel(f'max {panel.max().item():.3f}', fontsize=8)
            if row == 0:
                ax.set_title('head 0, all queries' if col == 0 else f'head {col - 1}, centre query', fontsize=9)
        axes[row, 0].set_ylabel(title, fontsize=10)
    fig.suptitle(f'ViT-T/2 at init: layer {layer} attention on the position-only input (square-root colour scale)',
                 fontsize=10)
    return save_figure(fig, out, dpi=80)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--out', default=str(HERE / 'attention_maps.png'), help='figure path')
    parser.add_argument('--seed', type=int, default=0, help="torch's seed before each model is built")
    args = parser.parse_args()
    print(draw(Path(args.out), args.seed))


if __name__ == '__main__':
    main()
