""" Every model the inits can build, from seed 0, for comparing builds made on other kernel paths or devices.

    python tests/kernel_path_builds.py OUT.pt [--device cuda] [--full vit_base_patch16_224_impulse3 ...]

writes {label: state dict (on the CPU)} of every registered model at the compatibility fixtures' small size, every
init applied by `apply_init` to a small model of each family it supports, and the registered models named after
`--full` at their own size. The tests run it under other kernel paths (environment variables) in a subprocess and
compare with `largest_difference`.
"""
import argparse
import sys
from pathlib import Path
from typing import Dict, Sequence

import timm
import torch

import timm_structinit

sys.path.insert(0, str(Path(__file__).resolve().parent / 'fixtures'))
from make_fixtures import small_args  # noqa: E402

# the weights of two builds may differ by this fraction of each tensor's largest magnitude: float32 weights computed
# in float64 from the same draws differ between kernel paths in their last bits, and the fast impulse solve's
# L-BFGS amplifies the float64 differences to ~1e-5 at its default evaluation counts; a flipped sign or a turned
# eigenspace differs by the order of the weights themselves
TOLERANCE = 1e-4

# a plain model of each family (the registered bases without an init), small, for `apply_init`
FAMILY_BASES = {
    'vit': ('vit_tiny_patch2_32', dict(embed_dim=32, depth=2, num_heads=2, img_size=32, patch_size=8)),
    'swin': ('swin_tiny_patch2_window4_32', small_args('swin_tiny_patch2_window4_32')),
    'relpos': ('beit_base_patch16_224', dict(embed_dim=32, depth=2, num_heads=2, img_size=32, patch_size=8)),
    'mixer': ('mixer_s4_32', small_args('mixer_s4_32')),
}
# timm's own models whose attention layouts the inits read otherwise (several widths, per-head rows, BatchNorm
# folded, a value space narrower than the width, a class token in the capped impulse solve)
TIMM_BUILDS = [
    ('pit_ti_224', dict(img_size=64, depth=(1, 1, 1)), 'mimetic'),
    ('levit_128s', dict(img_size=64, depth=(1, 1, 1)), 'mimetic'),
    ('deit_tiny_patch16_224', dict(depth=2, img_size=64), 'impulse'),
]


def applied_inits():
    """ (init, family) for every registered init and every family it has a version for. """
    from timm_structinit.inits import get_init
    return [(name, family) for name in timm_structinit.list_inits()
            for family in ('vit', *sorted(get_init(name).families))]


def build_every_model(device: str = 'cpu', full: Sequence[str] = ()) -> Dict[str, Dict[str, torch.Tensor]]:
    builds = {}

    def keep(label, model):
        builds[label] = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}

    for name in timm_structinit.list_models():
        torch.manual_seed(0)
        keep(name, timm.create_model(name, device=device, **small_args(name)))
    for name in full:
        torch.manual_seed(0)
        keep(f'{name} (full size)', timm.create_model(name, device=device))
    for init, family in applied_inits():
        base, kwargs = FAMILY_BASES[family]
        torch.manual_seed(0)
        model = timm.create_model(base, device=device, **kwargs)
        timm_structinit.apply_init(model, init, seed=0)
        keep(f'{base} + apply_init {init}', model)
    for name, kwargs, init in TIMM_BUILDS:
        torch.manual_seed(0)
        model = timm.create_model(name, device=device, **kwargs)
        timm_structinit.apply_init(model, init, seed=0)
        keep(f'{name} + apply_init {init}', model)
    return builds


def largest_difference(a: Dict[str, torch.Tensor], b: Dict[str, torch.Tensor]) -> float:
    """ The largest, over the floating-point tensors of two state dicts with the same keys, of max |a - b| divided by
    max |a|. """
    assert sorted(a) == sorted(b)
    worst = 0.0
    for key, x in a.items():
        if x.is_floating_point() and x.numel():
            scale = float(x.double().abs().max()) or 1.0
            worst = max(worst, float((x.double() - b[key].double()).abs().max()) / scale)
    return worst


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('out', type=Path)
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--full', nargs='*', default=[])
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.save(build_every_model(args.device, args.full), args.out)
    print(torch.backends.cpu.get_cpu_capability())


if __name__ == '__main__':
    main()
