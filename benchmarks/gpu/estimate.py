""" Will a GPU setup of `compare_inits.py` fit one command? What can be measured on a CPU machine, and the arithmetic.

Measured here, per setup (`compare_inits.py --gpu-2024` / `--gpu-2025`): the training FLOPs of one image (forward and
backward, counted by torch.utils.flop_counter on the registered model, and by hand from the ViT's shape), the images
per CPU second that ONE core turns out through the package's own training loader (JPEG decode, the recipe's
augmentation, collate; workers=0, one thread), the same for the evaluation loader, and the seconds a model takes to
build (the init solve included); once, the images per CPU second that one core only decodes.
Then, for the GPU machine (16 cores, one H100 / H200 of ~800 TFLOP/s bf16 peak, assumed to reach 25-40% of it on
these small models): the seconds the GPU needs for every training image of the setup, and the seconds 16 cores need
to decode and augment them, less one core per concurrent training process. A setup fits when the larger of the two,
plus the fixed costs, stays inside the command's 9 minutes.

    python benchmarks/gpu/estimate.py --data-dir ../shared/data/cifar10
    python benchmarks/gpu/estimate.py --setups gpu_2025 --seconds 5

Prints one table per setup; writes nothing.
"""
import argparse
import os
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # compare_inits, the protocol being estimated

import compare_inits  # noqa: E402

PEAK_TFLOPS = 800.  # bf16 dense, H100 SXM / H200 (KINDS.md: 798 measured on an 8192^3 product)
EFFICIENCY = (0.25, 0.40)  # the share of it assumed on a width-192 ViT
CORES = 16
BUDGET_S = 540.  # one command's 9 minutes


def train_flops(model_name: str, model_kwargs: dict, img_size: int) -> float:
    """ FLOPs of one image's training step: forward and backward of the registered model, counted by torch. """
    import timm
    import timm_structinit  # noqa: F401  (registers the models)
    from torch.utils.flop_counter import FlopCounterMode
    model = timm.create_model(model_name, num_classes=10, **model_kwargs)
    x = torch.randn(2, 3, img_size, img_size)
    with FlopCounterMode(display=False) as counter:
        model(x).sum().backward()
    return counter.get_total_flops() / 2


def counted_by_hand(tokens: int, dim: int = 192, depth: int = 12, mlp_ratio: float = 4.) -> float:
    """ FLOPs of one image's training step from the ViT's shape: per block and token, Q/K/V, the projection and the
    MLP (4 + 2 x mlp_ratio) x D^2 multiply-adds, attention 2 x N x D; backward twice the forward. """
    per_block = tokens * (4 + 2 * mlp_ratio) * dim ** 2 + 2 * tokens ** 2 * dim
    return 3 * 2 * depth * per_block


def build_seconds(model_name: str, model_kwargs: dict) -> float:
    import timm
    start = time.perf_counter()
    timm.create_model(model_name, num_classes=10, **model_kwargs)
    return time.perf_counter() - start


def loader_rate(train_args: list, seconds: float, training: bool) -> float:
    """ Images per second of one core through the package's training (or evaluation) loader, as the recipe builds
    it: decode, augmentation, collate (mixup included) and the prefetcher's normalization (on the GPU machine done
    by the GPU), per second of CPU time; the first batch is left out. """
    from timm_structinit.train import check_args, parse_args
    from timm_structinit.train.build import build_datasets, build_loaders, build_model, data_config
    args = parse_args([*train_args, '--workers', '0', '--device', 'cpu'])
    check_args(args)
    args.distributed, args.world_size, args.rank = False, 1, 0  # what the trainer's device setup would set
    datasets = build_datasets(args)
    model = build_model(args)
    config = data_config(args, model, datasets)
    loader_train, loader_eval, *_ = build_loaders(args, config, *datasets, torch.device('cpu'))
    loader = loader_train if training else loader_eval
    count, start = 0, None
    for inputs, _ in loader:
        if start is None:  # the first batch pays for the iterator's start
            start = time.process_time()
            continue
        count += inputs.shape[0]
        if time.process_time() - start > seconds:
            break
    # per second of this process's CPU time, not of the wall clock: a shared machine's other load does not count
    return count / (time.process_time() - start)


def decode_rate(data_dir: Path, seconds: float) -> float:
    """ Images per CPU second that one core decodes (the JPEG to an RGB image, nothing else): what decoding the
    images once, before training, could save at most. """
    from PIL import Image
    files = sorted((data_dir / 'train').glob('*/*.jpg'))
    count, start = 0, time.process_time()
    while time.process_time() - start < seconds and count < len(files):
        with Image.open(files[count]) as image:
            image.convert('RGB')
        count += 1
    return count / (time.process_time() - start)


def estimate(setup: str, data_dir: Path, seconds: float) -> None:
    protocol = compare_inits.GPU_SETUPS[setup]
    arms = protocol.entries
    first = next(iter(arms))
    command = compare_inits.train_command(first, 0, data_dir, Path('/tmp/unused'))
    train_args = command[command.index('timm_structinit.train') + 1:]
    train_args = [*train_args[:train_args.index('--output')], *train_args[train_args.index('--experiment') + 2:]]
    for flag in ('--amp', '--pin-mem'):  # bf16 autocast and pinned memory are for the GPU
        train_args = [a for a in train_args if a != flag]
    entry = compare_inits.ENTRIES[first]
    img_size = protocol.img_size
    torch.set_num_threads(1)
    flops = {name: train_flops(e.model, compare_inits.model_kwargs(e), img_size) for name, e in arms.items()}
    counted = max(flops.values())
    tokens = (img_size // (2 if img_size == 32 else 16)) ** 2 + (img_size != 32)  # ViT-T/2: 256; ViT-Ti/16: 196 + 1
    by_hand = counted_by_hand(tokens)
    # the larger count sizes the GPU's share (torch's counter can miss parts of the attention's backward)
    flops = {name: max(f, by_hand) for name, f in flops.items()}
    builds = {name: build_seconds(e.model, compare_inits.model_kwargs(e)) for name, e in arms.items()}
    rate_train = loader_rate(train_args, seconds, training=True)
    rate_eval = loader_rate(train_args, seconds, training=False)
    seeds = sorted({seed for e in arms.values() for seed in e.seeds})
    images = protocol.train_images * protocol.epochs  # per run
    evals = protocol.epochs // protocol.val_interval * protocol.val_images + 10000  # + the full test at the end
    worker_cores = CORES - protocol.concurrent  # one core per training process for Python and kernel launches
    print(f'## {setup}: arms {", ".join(arms)}; seeds {seeds}; {protocol.train_images} images x {protocol.epochs} '
          f'epochs at {img_size} px; {protocol.concurrent} runs at a time')
    print(f'- training FLOPs per image (forward + backward, {entry.model}): torch\'s counter {counted / 1e9:.2f} G, '
          f'by hand ({tokens} tokens) {by_hand / 1e9:.2f} G; the larger is used')
    print('- model build (init included), one thread: ' + ', '.join(f'{n} {s:.1f} s' for n, s in builds.items()))
    print(f'- one core (per CPU second): training loader {rate_train:.0f} img/s, evaluation loader {rate_eval:.0f} '
          f'img/s')
    for count in sorted({1, len(seeds)}):
        runs = len(arms) * count
        total_flops = sum(flops.values()) * count * images
        gpu_s = [total_flops / (eff * PEAK_TFLOPS * 1e12) for eff in EFFICIENCY]
        cpu_s = (runs * images / rate_train + runs * evals / rate_eval) / worker_cores
        bound = max(cpu_s, gpu_s[0])
        print(f'- {count} seed(s), {runs} runs: {runs * images / 1e6:.2f} M training images, '
              f'{total_flops / 1e15:.1f} PFLOP: GPU at {EFFICIENCY[1]:.0%}-{EFFICIENCY[0]:.0%} of {PEAK_TFLOPS:.0f} '
              f'TFLOP/s {gpu_s[1]:.0f}-{gpu_s[0]:.0f} s; {worker_cores} cores decoding and augmenting {cpu_s:.0f} s; '
              f'bound {bound:.0f} s of {BUDGET_S:.0f} ({"fits" if bound < BUDGET_S else "does NOT fit"}, before '
              'start-up)')
    print()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--data-dir', type=Path, default=compare_inits.DEFAULT_DATA)
    parser.add_argument('--setups', nargs='*', default=list(compare_inits.GPU_SETUPS),
                        choices=list(compare_inits.GPU_SETUPS))
    parser.add_argument('--seconds', type=float, default=10., help='seconds of loading measured per loader')
    args = parser.parse_args(argv)
    if not (args.data_dir / 'train').is_dir():
        sys.exit(f'no CIFAR-10 ImageFolder at {args.data_dir}; pass --data-dir')
    os.environ.setdefault('OMP_NUM_THREADS', '1')
    print(f'JPEG decode alone, one core: {decode_rate(args.data_dir, args.seconds):.0f} img/s per CPU second\n')
    for setup in args.setups:
        estimate(setup, args.data_dir, args.seconds)


if __name__ == '__main__':
    main()
