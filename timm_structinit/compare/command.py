""" `timm-structinit compare`: which init helps on your data, and is the difference real?

Every arm (the plain init, mimetic, impulse-3 by default) trains the same base model on the same data, schedule,
augmentation and evaluation, `--seeds` seeds each, through the training command (`--out`/runs/ARM_sSEED); only the
init differs. The options the command does not know are the training command's own (`-c RECIPE`, `--epochs`, `-b`,
`--lr`, `--dataset`, `--train-subset`, `--loader`, ...) and every run gets them. Everything is checked before any
training: the options, each arm's init on the model, the data (two classes at least) and, with `--time-limit`, that
a run fits it. A second call with the same `--out` trains only what is missing (stopped runs resume from their
checkpoints) and refuses other settings, naming the difference; `--report` writes the answer from the runs there.
"""
import argparse
import contextlib
import io
import json
from pathlib import Path
from typing import List

from ..errors import ConfigError
from ..utils.atomic import atomic_file
from .plan import DEFAULT_ARMS, FORBIDDEN_OPTIONS, Plan, default_model, parse_arm, run_name, settings_difference

__all__ = ['add_arguments', 'run', 'HELP']

HELP = 'train every init on your data, several seeds each, and say which helps and whether the difference is real'
SETTINGS_FILE = 'compare.json'


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """ compare's options, declared with the command line's parser (`timm_structinit_cli.compare_options`), which
    answers --help without torch or timm. """
    from timm_structinit_cli.compare_options import add_arguments as add_compare_options
    add_compare_options(parser)


def _kwargs_action():
    from ..utils.kwargs import ParseKwargs
    return ParseKwargs


def _check_options(args: argparse.Namespace) -> None:
    for name, value, low in (('--seeds', args.seeds, 1), ('--concurrent', args.concurrent, 1)):
        if value < low:
            raise ConfigError(f'{name} {value}: must be at least {low}')
    if args.time_limit is not None and not args.time_limit > 0:
        raise ConfigError(f'--time-limit {args.time_limit:g}: must be a positive number of seconds')
    for option in args.train_options:
        flag = option.split('=', 1)[0]
        if flag in FORBIDDEN_OPTIONS:
            raise ConfigError(f'{flag}: not a training option of compare: {FORBIDDEN_OPTIONS[flag]}')


def _arms(texts: List[str]):
    from ..inits import list_inits
    try:
        arms = [parse_arm(text, list_inits()) for text in texts]
    except ValueError as e:
        raise ConfigError(str(e)) from None
    names = [run_name(arm, 0) for arm in arms]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f'--inits names the arm {twice[0][:-3]!r} twice')
    return arms


def _with_defaults(args: argparse.Namespace) -> List[str]:
    """ The training options every run gets: the user's, with the data folder, the device and the loader. """
    import torch
    options = list(args.train_options)
    if args.data_dir:
        options += ['--data-dir', args.data_dir]
    device = args.device or ('cuda' if torch.cuda.is_available() else 'cpu')
    options += ['--device', device, '--checkpoint-hist', '1']
    if not any(o.split('=')[0] == '--loader' for o in options) and device.startswith('cuda'):
        options += ['--loader', 'device']  # the fast path on a GPU (train.loaders); the user's --loader wins
    return options


def _plan(args: argparse.Namespace, out: Path):
    """ The plan and the checked training arguments of its first run; every check made before any training. """
    from ..train import check_args, parse_args
    from ..train.build import build_datasets
    arms = _arms(args.inits)
    options = _with_defaults(args)
    model, model_kwargs = args.model, dict(args.model_kwargs)
    probe = Plan(model or 'vit_tiny_patch2_32_gap_sincos', model_kwargs, arms[:1], 1, options)
    train_args = parse_args(probe.train_argv(arms[0], 0, str(out / 'runs')))
    datasets = build_datasets(train_args)  # the data first: one class, a missing folder: one line
    if model is None:
        side = max(datasets[0][0][0].size) if hasattr(datasets[0][0][0], 'size') else 32
        model, defaults = default_model(side)
        model_kwargs = {**defaults, **model_kwargs}
    plan = Plan(model, model_kwargs, arms, args.seeds, options)
    _check_base(plan)
    checked = None
    for arm in arms:  # each arm's init on the model, as the training command checks it (its warnings said once)
        arm_args = parse_args(plan.train_argv(arm, 0, str(out / 'runs')))
        with contextlib.redirect_stderr(io.StringIO()) if checked is not None else contextlib.nullcontext():
            check_args(arm_args)
        checked = checked or arm_args
    return plan, checked, (len(datasets[0]), len(datasets[1]))


def _check_base(plan: Plan) -> None:
    """ A base model with an init of its own would keep it in the plain arm: refused, naming a base. """
    from ..models.registry import check_model_args
    try:
        model = check_model_args(plan.model, plan.model_kwargs)
    except ValueError as e:
        raise ConfigError(f'--model {plan.model} (--model-kwargs): {e}') from None
    own = getattr(model, 'struct_init', None)
    if own is not None and any(arm.struct_init is None for arm in plan.arms):
        raise ConfigError(f'--model {plan.model} applies the {own!r} init itself, so the plain arm would not be '
                          f'plain; name its base (e.g. vit_tiny_patch2_32_gap_sincos) with --model')


def _settings(out: Path, plan: Plan) -> None:
    """ Refuse a folder whose runs were made with other settings; record this call's. """
    path = out / SETTINGS_FILE
    now = plan.settings()
    if path.is_file():
        saved = json.loads(path.read_text())
        difference = settings_difference(saved, now)
        if difference:
            raise ConfigError(f'--out {out} holds the runs of another comparison ({difference}); use another --out, '
                              f'or the settings of those runs')
        arms = list(dict.fromkeys(saved.get('arms', []) + [a.label for a in plan.arms]))
    else:
        arms = [a.label for a in plan.arms]
    out.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as tmp:
        tmp.write_text(json.dumps(dict(now, arms=arms, reference=_reference(plan.arms)), indent=1) + '\n')


def _reference(arms) -> str:
    return next((a.label for a in arms if a.struct_init is None), arms[0].label)


def run(args: argparse.Namespace) -> int:
    from .session import estimate_run_seconds, report_only, train_and_report
    _check_options(args)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f'--out {out}: a file, not a folder; name a folder for the runs and the answer')
    if args.report:
        return report_only(out)
    plan, train_args, images = _plan(args, out)
    estimate, startup = estimate_run_seconds(train_args, images) if args.time_limit else (None, 0.0)
    if estimate is not None and estimate > args.time_limit:
        raise ConfigError(f'--time-limit {args.time_limit:g}: a run takes about {estimate:.0f} s here ({startup:.0f} s '
                          f'to start, then {images[0]} training images, {train_args.epochs} epochs), so no run would '
                          f'fit; raise it, or train less (--epochs, --train-subset)')
    _settings(out, plan)
    return train_and_report(args, out, plan, train_args, images, estimate)
