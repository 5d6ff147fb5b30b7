""" The checks every training argument passes before any work is done; each error names the value and what is
valid. """
import argparse
import difflib
import math
import os
import re
from typing import Any

import torch

import timm
from timm.optim import list_optimizers

from ..data import check_dataset_name
from ..errors import ConfigError, DataError
from ..utils.command_line import warn
from ..utils.seeds import check_seed
from ..utils.words import counted
from .config import GRAYSCALE_TORCH_DATASETS, PROG, SCHEDULERS, build_parser
from .failures import rank, world_size
from .inputs import RunInputs, chans_option, in_chans, read_inputs, resume_path
from .thread_count import user_threads


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def check_args(args: argparse.Namespace) -> RunInputs:
    """ Validate every value before any work is done; errors name the value and what is valid. Returns what the
    run starts from, read once as the last check (`inputs.read_inputs`): the checkpoints it names and the model on
    the meta device. """
    check_launch_environment()
    if ':' not in args.model and not timm.is_model(args.model):
        close = difflib.get_close_matches(args.model, timm.list_models(), n=3)
        raise ConfigError(
            f'--model {args.model!r} is not a registered model'
            + (f'; did you mean {", ".join(close)}?' if close else '; see timm.list_models()'))
    _check_numbers(args, build_parser())
    user_threads(args.threads)  # an OMP_NUM_THREADS that is not a count, refused
    _check_min_lr(args)
    _check_model_kwargs(args)
    _check_data(args)
    _check_training(args)
    if args.aa:
        _check_aa(args.aa)
    _check_files(args)
    _check_device(args.device)
    _check_optimizer(args)
    # last, as they cost the most: the checkpoints, a dry build of the model (meta device: nothing allocated or
    # computed) and the source of its weights
    inputs = read_inputs(args)
    if args.warmup_epochs >= args.epochs and args.sched != 'none' and rank() == 0:
        warn(f'--warmup-epochs {args.warmup_epochs} is not shorter than --epochs {args.epochs}: the whole run stays '
             f'in warm-up and never reaches --lr', PROG)
    return inputs


def _check_device(device: str) -> None:
    """ The device exists here: a valid torch device name whose backend is available on this machine. """
    try:
        kind = torch.device(device).type
    except (RuntimeError, ValueError):
        raise ConfigError(f"--device {device!r} is not a torch device; valid: cpu, cuda, cuda:N, mps, ...") from None
    backend = getattr(torch, kind, None) if kind != 'cpu' else None
    available = kind == 'cpu' or bool(getattr(backend, 'is_available', lambda: False)())
    if kind == 'mps':
        available = torch.backends.mps.is_available()
    if not available:
        raise ConfigError(f'--device {device!r}: no {kind} device on this machine; use --device cpu')
    index = torch.device(device).index
    if index is not None and kind == 'cuda' and index >= torch.cuda.device_count():
        raise ConfigError(f'--device {device!r}: this machine has {counted(torch.cuda.device_count(), "CUDA device")}')


def _check_optimizer(args: argparse.Namespace) -> None:
    """ The optimizer options, checked by building the optimizer over a stand-in layer and taking two steps. """
    from timm.optim import create_optimizer_v2, optimizer_kwargs
    options = optimizer_kwargs(cfg=args)
    options.update(lr=args.lr or 1.0, layer_decay=None)  # a learning rate from --lr-base comes later
    stand_in = torch.nn.Linear(1, 1)

    def closure():  # some values are read only in a step (dampening, a beta's type)
        optimizer.zero_grad()
        loss = stand_in(torch.ones(1, 1)).square().sum()
        loss.backward(create_graph=bool(getattr(optimizer, 'is_second_order', False)))
        return loss
    try:
        optimizer = create_optimizer_v2(stand_in, **options, **args.opt_kwargs)
        for _ in range(2):  # the second uses the state the first made (momentum buffers, step counts)
            optimizer.step(closure)
    except Exception as e:  # whatever the factory or the optimizer's constructor says of these values
        detail = ' '.join(str(e).split()) or type(e).__name__
        detail = detail if isinstance(e, (ValueError, TypeError)) else f'{type(e).__name__}: {detail}'
        raise ConfigError(f'optimizer --opt {args.opt} with these options (--opt-eps, --opt-betas, --momentum, '
                          f'--weight-decay, --opt-kwargs {args.opt_kwargs}) is not valid: {detail}') from None


# (options, condition, what is valid) for the values that have a range; None (unset) passes
_RANGES = (
    (('epochs', 'batch_size', 'log_interval', 'val_interval', 'grad_accum_steps', 'checkpoint_hist', 'lr_cycle_limit',
      'lr_base_size', 'recount', 'validation_batch_size',
      'train_subset', 'val_subset', 'num_classes', 'img_size', 'in_chans', 'threads'), lambda v: v >= 1,
     'must be >= 1'),
    (('workers', 'warmup_epochs', 'cooldown_epochs', 'mixup_off_epoch', 'weight_decay', 'patience_epochs',
      'local_rank', 'color_jitter', 'lr_noise_pct', 'lr_noise_std', 'aug_repeats',
      'mixup', 'cutmix', 'drop', 'warmup_lr', 'min_lr', 'momentum'), lambda v: v >= 0, 'must be >= 0'),
    (('hflip', 'vflip', 'reprob', 'mixup_prob', 'mixup_switch_prob'), lambda v: 0 <= v <= 1, 'must be in [0, 1]'),
    (('smoothing', 'drop_path', 'drop', 'drop_block', 'momentum'), lambda v: 0 <= v < 1, 'must be in [0, 1)'),
    (('lr', 'lr_base', 'lr_cycle_mul', 'lr_k_decay', 'decay_epochs', 'decay_rate', 'layer_decay'),
     lambda v: v > 0, 'must be > 0'),
    (('crop_pct', 'lr_cycle_decay'), lambda v: 0 < v <= 1, 'must be in (0, 1]'),
    (('clip_grad',), lambda v: v > 0, 'must be > 0 (or unset)'),
    (('model_ema_decay',), lambda v: 0 < v < 1, 'must be in (0, 1)'),
)


def _check_numbers(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    for action in parser._actions:  # inf and nan pass every range check below
        value = getattr(args, action.dest, None) if action.type is float else None
        bad = [v for v in (value if isinstance(value, (list, tuple)) else [value])
               if v is not None and not math.isfinite(v)]
        _check(not bad, f'{max(action.option_strings, key=len)} {value} must be a finite number')
    for name in ('seed', 'subset_seed'):
        try:
            check_seed(getattr(args, name), f'--{name.replace("_", "-")}')
        except ValueError as e:
            raise ConfigError(str(e).replace('=', ' ', 1)) from None
    for names, ok, valid in _RANGES:
        for name in names:
            value = getattr(args, name)
            _check(value is None or ok(value), f'--{name.replace("_", "-")} {value} {valid}')
    _check(len(args.scale) == 2 and 0 < args.scale[0] <= args.scale[1] <= 1,
           f'--scale {args.scale} must be two numbers 0 < lo <= hi <= 1')
    _check(len(args.ratio) == 2 and 0 < args.ratio[0] <= args.ratio[1],
           f'--ratio {args.ratio} must be two numbers 0 < lo <= hi')
    _check(args.input_size is None or all(v >= 1 for v in args.input_size),
           f'--input-size {args.input_size} must be three positive integers C H W')
    _check(args.std is None or all(v > 0 for v in args.std), f'--std {args.std} must be positive')
    for name in ('decay_milestones', 'lr_noise'):
        values = getattr(args, name)
        _check(values is None or all(v >= 0 for v in values),
               f'--{name.replace("_", "-")} {values} must be epochs (numbers >= 0)')
    _check(args.cutmix_minmax is None or (len(args.cutmix_minmax) == 2 and
                                          0 < args.cutmix_minmax[0] <= args.cutmix_minmax[1] <= 1),
           f'--cutmix-minmax {args.cutmix_minmax} must be two numbers 0 < lo <= hi <= 1')


def _check_min_lr(args: argparse.Namespace) -> None:
    """ --min-lr is the floor the schedule decays to: above the rate it starts from, the schedule would rise. """
    if args.sched in ('none', 'constant') or not args.min_lr:
        return
    lr, where = args.lr, f'--lr {args.lr}'
    if lr is None:  # --lr-base scaled by the global batch, as the optimizer will be given it
        ratio = args.batch_size * world_size() * args.grad_accum_steps / args.lr_base_size
        scale = args.lr_base_scale or ('sqrt' if any(o in args.opt.lower() for o in ('ada', 'lamb')) else 'linear')
        lr = args.lr_base * (math.sqrt(ratio) if scale == 'sqrt' else ratio)
        where = f'the learning rate {lr:.3g} (from --lr-base {args.lr_base} and the global batch)'
    _check(args.min_lr <= lr, f'--min-lr {args.min_lr} is above {where}: the {args.sched} schedule would rise to it '
                              f'instead of decaying; valid: --min-lr <= the learning rate')


# model arguments that have an option of their own: (option, model argument)
_MODEL_ARG_OPTIONS = (('--in-chans/--input-size', 'in_chans'), ('--num-classes', 'num_classes'),
                      ('--drop-path', 'drop_path_rate'), ('--drop-block', 'drop_block_rate'), ('--gp', 'global_pool'))


# model arguments whose option has a range (`_RANGES`): the option's range holds for them too
_MODEL_ARG_RANGES = {'drop_path_rate': 'drop_path', 'drop_block_rate': 'drop_block', 'drop_rate': 'drop',
                     'num_classes': 'num_classes'}


def _check_range(what: str, option: str, value: Any) -> None:
    """ `value`, set as `what`, is within the range of `option` (every range of `_RANGES` that names it). """
    flag = f'--{option.replace("_", "-")}'
    integer = option in ('num_classes',)
    kind = (int,) if integer else (int, float)
    _check(isinstance(value, kind) and not isinstance(value, bool) and math.isfinite(value),
           f'{what}={value!r} must be {"an integer" if integer else "a finite number"} (as {flag})')
    for names, ok, valid in _RANGES:
        if option in names:
            _check(ok(value), f'{what}={value!r} {valid} (as {flag})')


def _check_model_kwargs(args: argparse.Namespace) -> None:
    _check(isinstance(args.model_kwargs, dict), f'model_kwargs {args.model_kwargs!r} must be a mapping')
    chans = in_chans(args)
    _check(isinstance(chans, int) and not isinstance(chans, bool) and chans >= 1,
           f'model_kwargs in_chans={chans!r} must be a positive integer')
    option_values = dict(in_chans=chans_option(args), num_classes=args.num_classes, drop_path_rate=args.drop_path,
                         drop_block_rate=args.drop_block, global_pool=args.gp)
    for flag, key in _MODEL_ARG_OPTIONS:
        # only a value the user set can contradict model_kwargs, not an option's default
        value = option_values[key]
        _check(value is None or key not in args.model_kwargs or args.model_kwargs[key] == value,
               f'model_kwargs {key}={args.model_kwargs.get(key)!r} contradicts {flag} {value}; set it in one place')
    for key, option in _MODEL_ARG_RANGES.items():  # one setting, two spellings: one range
        if key in args.model_kwargs:
            _check_range(f'model_kwargs {key}', option, args.model_kwargs[key])
    for name in ('mean', 'std'):
        value = getattr(args, name)
        _check(value is None or len(value) in (1, chans) or len(set(value)) == 1,
               f'--{name} {value} must have 1 value or one per input channel ({chans})')


def _check_data(args: argparse.Namespace) -> None:
    try:
        kind = check_dataset_name(args.dataset)
    except DataError as e:
        raise ConfigError(str(e)) from None
    where = {'folder': 'the folder holding its split folders (train/, validation/ or test/), one folder per class',
             'hfds': 'the folder for its Hugging Face datasets cache'}.get(
        kind, 'the folder holding it (or where --dataset-download puts it)')
    _check(kind == 'digits' or bool(args.data_dir),
           f'--dataset {args.dataset!r} needs --data-dir DIR: {where}; the packaged recipes name none')
    chans = in_chans(args)
    if kind == 'torch' and args.dataset.split('/')[-1].lower() in GRAYSCALE_TORCH_DATASETS:
        _check(chans == 1, f'--dataset {args.dataset!r} has 1-channel images but the model would take {chans}; '
                           f'pass --in-chans 1')
    _check(not mixup_active(args) or args.batch_size % 2 == 0,
           f'--batch-size {args.batch_size} must be even with mixup/cutmix, which pairs images within a batch')


def mixup_active(args: argparse.Namespace) -> bool:
    return args.mixup > 0 or args.cutmix > 0 or args.cutmix_minmax is not None


def _check_training(args: argparse.Namespace) -> None:
    _check(args.sched in SCHEDULERS, f'--sched {args.sched!r} is not valid; choose one of {", ".join(SCHEDULERS)}')
    optimizers = list_optimizers()
    # timm reads the part after the last '_' and takes the one prefix 'lookahead_'; any other prefix it would drop
    name = args.opt.lower()
    _check(name.removeprefix('lookahead_') in optimizers,
           f'--opt {args.opt!r} is not a timm optimizer; valid: {", ".join(optimizers)}, each also as '
           f'lookahead_<name>')
    _check(args.opt_betas is None or len(args.opt_betas) in (2, 3), f'--opt-betas {args.opt_betas} needs 2 values')
    from timm.data.transforms import _str_to_pil_interpolation as interpolations
    for name, extra in (('interpolation', ('',)), ('train_interpolation', ('', 'random'))):
        value = getattr(args, name)
        _check(value in (*interpolations, *extra), f'--{name.replace("_", "-")} {value!r} is not valid; choose '
                                                   f'one of {", ".join((*extra[1:], *interpolations))}')
    _check(args.train_crop_mode in (None, 'rrc', 'rkrc', 'rkrr'),
           f"--train-crop-mode {args.train_crop_mode!r} is not valid; choose one of rrc, rkrc, rkrr")
    import torch.distributed as dist
    _check(args.dist_backend is None or args.dist_backend.lower() in dist.Backend.backend_list,
           f'--dist-backend {args.dist_backend!r} is not valid; choose one of {", ".join(dist.Backend.backend_list)}')
    _check(not (args.wandb_project or args.wandb_tags) or args.log_wandb,
           '--wandb-project / --wandb-tags name a Weights & Biases run: add --log-wandb, or leave them out')
    _check(not args.experiment or (os.sep not in args.experiment and args.experiment not in ('.', '..')),
           f'--experiment {args.experiment!r} must be a folder name (under --output), not a path')
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise ConfigError("--plot needs matplotlib: pip install 'timm-structinit[plots]'") from None
    if args.log_wandb:
        try:
            import wandb  # noqa: F401
        except ImportError:
            raise ConfigError("--log-wandb needs wandb: pip install 'timm-structinit[wandb]'") from None
        _check(_wandb_can_log(), '--log-wandb: no Weights & Biases login here (no WANDB_API_KEY, no entry for '
                                 f'{_wandb_host()} in ~/.netrc); run `wandb login`, or set WANDB_MODE=offline to keep '
                                 f'the log on disk')
    # as timm's loader: repeated augmentation spreads each image's copies over the processes of a distributed run
    _check(not args.aug_repeats or world_size() > 1,
           f'--aug-repeats {args.aug_repeats} needs a distributed run (torchrun --nproc_per_node=N ...), as in timm; '
           f'this one has a single process')
    _check_compile(args)
    if args.loader == 'device':
        from ..data.device_transforms import unsupported_options
        what = unsupported_options(args)
        _check(what is None, f'--loader device cannot do {what}; use --loader timm')


def _wandb_host() -> str:
    from urllib.parse import urlparse
    return urlparse(os.environ.get('WANDB_BASE_URL') or 'https://api.wandb.ai').hostname or 'api.wandb.ai'


def _wandb_can_log() -> bool:
    """ wandb.init would not stop for a login: an offline or disabled mode, an API key in the environment, an
    identity token file, or the key `wandb login` writes to the netrc file. """
    if os.environ.get('WANDB_MODE', '').lower() in ('offline', 'dryrun', 'disabled') or \
            os.environ.get('WANDB_API_KEY') or os.environ.get('WANDB_IDENTITY_TOKEN_FILE'):
        return True
    import netrc
    try:
        auth = netrc.netrc(os.environ.get('NETRC') or None).authenticators(_wandb_host())
    except (OSError, netrc.NetrcParseError):
        return False
    return bool(auth and auth[2])


def check_launch_environment() -> None:
    """ The variables a launcher sets (RANK, WORLD_SIZE, LOCAL_RANK) make sense together and come with one: left
    in a shell, RANK=1 would silence every error line (only rank 0 prints) and WORLD_SIZE=2 would wait for peers
    that never start. """
    names = ('RANK', 'WORLD_SIZE', 'LOCAL_RANK')
    values = {}
    for name in names:
        text = os.environ.get(name, '')
        if text:
            _check(text.isdigit(), f'environment variable {name}={text!r} must be a non-negative integer (as torchrun '
                                   f'sets it); unset it to train in one process')
            values[name] = int(text)
    if not values:
        return
    shown = ' '.join(f'{k}={v}' for k, v in values.items())
    if values.get('WORLD_SIZE', 1) > 1:
        _check(bool(os.environ.get('MASTER_ADDR') and os.environ.get('MASTER_PORT')),
               f'{shown} is set in the environment but no launcher is (MASTER_ADDR and MASTER_PORT are unset): start '
               f'the run with torchrun --nproc_per_node=N, or unset {" ".join(values)} to train in one process')
        _check(values.get('RANK', 0) < values['WORLD_SIZE'],
               f'{shown}: RANK must be below WORLD_SIZE')
    else:
        _check(values.get('RANK', 0) == 0 and values.get('LOCAL_RANK', 0) == 0,
               f'{shown} is set in the environment without WORLD_SIZE > 1 (no launcher started this process): '
               f'unset {" ".join(values)} to train in one process, or start the run with torchrun')


# torch.compile modes (torch 2.x); None is torch's default
_COMPILE_MODES = ('default', 'reduce-overhead', 'max-autotune', 'max-autotune-no-cudagraphs')


def _check_compile(args: argparse.Namespace) -> None:
    if args.torchcompile_mode is not None:
        _check(args.torchcompile_mode in _COMPILE_MODES,
               f'--torchcompile-mode {args.torchcompile_mode!r} is not valid; choose one of {", ".join(_COMPILE_MODES)}')
        _check(args.torchcompile is not None, '--torchcompile-mode needs --torchcompile')
    if args.torchcompile is not None:
        import torch
        _check(args.torchcompile in torch.compiler.list_backends(exclude_tags=()),
               f'--torchcompile {args.torchcompile!r} is not a torch.compile backend; valid: '
               f'{", ".join(torch.compiler.list_backends())} (and torch\'s debugging backends)')


# the sections timm's auto-augment parsers read (timm/data/auto_augment.py), with the type of their value; timm
# silently ignores a section without a digit, so a typo would go unnoticed
_AA_SECTIONS = {
    'rand': dict(m=int, n=int, p=float, mstd=float, mmax=int, inc=int),
    'augmix': dict(m=int, w=int, d=int, a=float, b=int, mstd=float),
    'auto': dict(mstd=float),
}
_AA_POLICIES = ('original', 'originalr', 'v0', 'v0r', '3a')  # the 'auto' policies
_AA_RAND_TRANSFORMS = ('weights', '3aw', '3a')  # rand-...-t<name>
_AA_EXAMPLES = "e.g. 'rand-m9-mstd0.5-inc1', 'augmix-m5-w4-d2', 'original-mstd0.5'"


def _check_aa(policy: str) -> None:
    """ Check an auto-augment policy string against timm's grammar, section by section, then build it. """
    name, *sections = policy.split('-')
    kind = name if name in ('rand', 'augmix') else 'auto'
    keys = _AA_SECTIONS[kind]
    grammar = ', '.join(f'{k}<{t.__name__}>' for k, t in keys.items())
    if kind == 'rand':
        grammar += f', t<{"|".join(_AA_RAND_TRANSFORMS)}>'
    _check(kind != 'auto' or name in _AA_POLICIES,
           f"--aa {policy!r}: unknown policy {name!r}; valid: rand-..., augmix-..., {', '.join(_AA_POLICIES)} "
           f"({_AA_EXAMPLES})")
    for section in sections:
        if kind == 'rand' and section.startswith('t'):
            ok = section[1:] in _AA_RAND_TRANSFORMS
        else:
            key, value = re.fullmatch(r'(\D*)(.*)', section).groups()
            number = r'\d+' if keys.get(key) is int else r'\d+(\.\d*)?'
            ok = key in keys and re.fullmatch(number, value) is not None
        _check(ok, f"--aa {policy!r}: section {section!r} is not valid; {name!r} takes {grammar} ({_AA_EXAMPLES})")
    from timm.data import create_transform
    try:  # timm parses the policy string lazily; build it once here to fail before any work
        create_transform(32, is_training=True, auto_augment=policy)
    except (AssertionError, ValueError, KeyError, IndexError) as e:
        raise ConfigError(f'--aa {policy!r} is not a valid auto-augment policy ({e or type(e).__name__}); '
                          f'{_AA_EXAMPLES}') from None


def _check_files(args: argparse.Namespace) -> None:
    if args.resume:
        path = resume_path(args.resume)
        _check(not os.path.isdir(args.resume) or os.path.isfile(path),
               f'--resume {args.resume!r}: nothing to resume, {os.path.abspath(args.resume)} holds no last.pth.tar '
               f'or checkpoint-N.pth.tar '
               f'(no epoch of that run finished); start it again without --resume (with --overwrite to reuse '
               f'that folder)')
        _check(os.path.isfile(path), f'--resume {args.resume!r}: no checkpoint at {os.path.abspath(path)}')
    if args.initial_checkpoint:
        _check(os.path.isfile(args.initial_checkpoint),
               f'--initial-checkpoint {args.initial_checkpoint!r}: no such file')
