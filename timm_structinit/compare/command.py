""" `timm-structinit compare`: which init helps on your data, and is the difference real?

Every arm (the plain init, mimetic, impulse-3 by default) trains the same base model on the same data, schedule,
augmentation and evaluation, `--seeds` seeds each, through the training command (`--out`/runs/ARM_sSEED); only the
init differs. An arm is its init and all its hyperparameters, however written. The options the command does not
know are the training command's own (`-c RECIPE`, `--epochs`, `-b`, `--lr`, `--dataset`, `--train-subset`,
`--loader`, ...) and every run gets them. Everything is checked before any training: the files of the folder it
reads back (`records`), the options, each arm's init on the model the runs build, the data (two classes at least)
and, with `--time-limit`, that a run fits it (`estimate`, or the finished runs once there are some). A second call
with the same `--out` trains only what is missing (stopped runs resume from their checkpoints) and refuses other
settings, naming the options that differ (compared by what they mean); `--report` writes the answer from the runs
there. `--concurrent N` runs share the cores (`cores`).
"""
import argparse
import collections
import contextlib
import io
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ..errors import ConfigError
from ..utils.atomic import atomic_file
from .estimate import RunEstimate
from .plan import (
    DEFAULT_ARMS, FORBIDDEN_OPTIONS, NOT_SETTINGS, Arm, Plan, arm_setting, default_model, folder_name, parse_arm,
    run_name,
    settings_difference)
from .records import ELAPSED_FILE, SETTINGS_FILE, read_elapsed, read_results, read_settings
from .slurm_queue import JOBS_FOLDER, read_jobs, refuse_jobs_running
from .slurm_request import SlurmRequest, check_elsewhere, slurm_request

__all__ = ['add_arguments', 'run', 'HELP', 'DEFAULT_ARMS', 'PLAIN']

HELP = 'train every init on your data, several seeds each, and say which helps and whether the difference is real'
PLAIN = Arm('plain', None)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """ compare's options, declared with the command line's parser (`timm_structinit_cli.compare_options`), which
    answers --help without torch or timm. """
    from timm_structinit_cli.compare_options import add_arguments as add_compare_options
    add_compare_options(parser)


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
    """ The arms as written (each entry's syntax, its init's name, a keyword given once); that two entries are not
    the same arm is checked with the model (`_check_arms`). """
    from ..inits import list_inits
    try:
        return [parse_arm(text, list_inits()) for text in texts]
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _with_defaults(args: argparse.Namespace, slurm: Optional[SlurmRequest]) -> List[str]:
    """ The training options every run gets: the user's, with the data folder, the device (on SLURM: the one its jobs
    ask for) and the loader. """
    import torch
    options = list(args.train_options)
    if args.data_dir:
        options += ['--data-dir', args.data_dir]
    here = 'cuda' if (torch.cuda.is_available() if slurm is None else slurm.asks_gpus) else 'cpu'
    device = args.device or here
    options += ['--device', device, '--checkpoint-hist', '1']
    if not any(o.split('=')[0] == '--loader' for o in options) and device.startswith('cuda'):
        options += ['--loader', 'device']  # the fast path on a GPU (train.loaders); the user's --loader wins
    return options


def _plan(args: argparse.Namespace, out: Path, saved_arms: List[str], slurm: Optional[SlurmRequest]) -> 'Checked':
    """ The plan, and what its checks found; every check made before any training (on SLURM, each run's device on
    its node). """
    from ..train import parse_args
    from ..train.build import build_datasets
    check_args = _check_here if slurm is None else check_elsewhere
    arms = _arms(args.inits)
    options = _with_defaults(args, slurm)
    model, model_kwargs = args.model, dict(args.model_kwargs)
    runs = str(out / 'runs')
    probe = Plan(model or 'vit_tiny_patch2_32_gap_sincos', model_kwargs, [PLAIN], 1, options)
    train_args = parse_args(probe.train_argv(PLAIN, 0, runs))
    datasets = build_datasets(train_args)  # the data first: one class, a missing folder: one line
    if model is None:
        side = max(datasets[0][0][0].size) if hasattr(datasets[0][0][0], 'size') else 32
        model, defaults = default_model(side)
        model_kwargs = {**defaults, **model_kwargs}
    plan = Plan(model, model_kwargs, arms, args.seeds, options)
    base_args = parse_args(plan.train_argv(PLAIN, 0, runs))
    base = check_args(base_args).check_model  # the model the runs build, on the meta device (its warnings said once)
    _check_base(plan, base)
    _check_arms(plan, base, saved_arms)
    arm_args, checks = {}, 0.0
    for arm in arms:  # each arm's run, as the training command checks it
        arm_run = parse_args(plan.train_argv(arm, 0, runs))
        start = time.perf_counter()
        with contextlib.redirect_stderr(io.StringIO()):
            inputs = check_args(arm_run)
        checks = max(checks, time.perf_counter() - start)
        arm_run.num_classes = arm_run.num_classes or train_args.num_classes  # the data says so in the run
        arm_args[arm.label] = (arm_run, inputs)
    return Checked(plan, arm_args, (len(datasets[0]), len(datasets[1])), _test_split(datasets, train_args),
                   _model_built(base_args, base), checks, len(datasets[0]) if train_args.train_subset else None)


def _check_here(run_args: argparse.Namespace):
    from ..train import check_args
    return check_args(run_args)


@dataclass
class Checked:
    """ A checked plan, and what its checks found: each arm's checked training arguments and the inputs they read,
    the training and evaluation images, the test split's reference top-1s, the model the runs build, and the
    seconds a run's checks take; the images of the training split's subset the runs take (None: the whole split). """
    plan: Plan
    arm_args: Dict[str, Tuple[argparse.Namespace, Any]]
    images: Tuple[int, int]
    test_split: Optional[Dict[str, Any]]
    model_built: str
    checks: float
    train_subset: Optional[int] = None


def _test_split(datasets, train_args: argparse.Namespace) -> Optional[Dict[str, Any]]:
    """ What runs that learned nothing score on the evaluation split: chance (a uniform guess among the classes) and
    the majority class (always answering its largest class); None where its labels cannot be read. """
    from ..data import dataset_targets
    from ..errors import DataError
    try:
        targets = list(dataset_targets(datasets[1]))
    except DataError:
        return None
    if not targets:
        return None
    counts = collections.Counter(targets)
    classes = max(train_args.num_classes or 0, len(counts))
    return dict(images=len(targets), classes=classes, chance=100.0 / classes,
                majority=100.0 * max(counts.values()) / len(targets))


def _model_built(base_args: argparse.Namespace, model) -> str:
    """ The model the runs build, in words: its name and the arguments it gets (the recipe's and --model-kwargs),
    its parameters and input. """
    from ..train.inputs import in_chans
    kwargs = ' '.join(f'{k}={v}' for k, v in base_args.model_kwargs.items())
    words = f'{base_args.model}' + (f' {kwargs}' if kwargs else '')
    if model is not None:
        words += f' ({sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters'
        size = getattr(getattr(model, 'patch_embed', None), 'img_size', None)
        words += f', input {in_chans(base_args)}x{size[0]}x{size[1]})' if size else ')'
    return words


def _check_base(plan: Plan, model) -> None:
    """ A base model with an init of its own would keep it in the plain arm: refused, naming a base. """
    own = getattr(model, 'struct_init', None)
    if own is not None and any(arm.struct_init is None for arm in plan.arms):
        raise ConfigError(f'--model {plan.model} applies the {own!r} init itself, so the plain arm would not be '
                          f'plain; name its base (e.g. vit_tiny_patch2_32_gap_sincos) with --model')


def _check_arms(plan: Plan, model, saved_arms: List[str]) -> None:
    """ Each arm's init and hyperparameters on the model the runs build, a fault blamed on its --inits entry; two
    entries of one arm (the same init and settings however written) refused, naming both, and so is an arm the
    folder's runs already train under another name (`saved_arms`). """
    from ..inits import check_init_cfg, list_inits, make_init_cfg, model_family
    family = model_family(model) if model is not None else 'vit'
    settings = []
    for arm in plan.arms:
        try:
            setting = arm_setting(arm, family)
            if setting is not None and model is not None:
                check_init_cfg(model, arm.struct_init, make_init_cfg(arm.struct_init, family, **arm.kwargs))
        except (ValueError, TypeError) as e:
            raise ConfigError(f'--inits {arm.label!r}: {e}') from None
        same = next((other for other, s in settings if s == setting), None)
        if same is not None:
            raise ConfigError(f'--inits {same.label!r} and {arm.label!r} are the same arm ({_setting_words(same)}); '
                              f'name it once')
        if any(run_name(other, 0) == run_name(arm, 0) for other, _ in settings):
            raise ConfigError(f'--inits {arm.label!r}: its runs would share a folder with another arm\'s '
                              f'({run_name(arm, 0)[:-3]}); write one of them otherwise')
        settings.append((arm, setting))
    for label in saved_arms:
        try:
            saved = parse_arm(label, list_inits())
            setting = arm_setting(saved, family)
        except (ValueError, TypeError):  # an init of another version: not the same arm as any here
            continue
        same = next((arm for arm, s in settings if s == setting and arm.label != label), None)
        if same is not None:
            raise ConfigError(f'--inits {same.label!r} is the arm {label!r} of the runs in --out '
                              f'({_setting_words(same)}); name it {label!r}')


def _setting_words(arm: Arm) -> str:
    if arm.struct_init is None:
        return "the base model's own init"
    given = ', '.join(f'{k}={v!r}' for k, v in arm.kwargs.items())
    return f'{arm.struct_init} with {given}' if given else f'{arm.struct_init} with its defaults'


def _setting_values(settings: Dict[str, Any]) -> Dict[str, Any]:
    """ What a comparison's settings (its base model, model arguments and training options) mean: each setting by
    the name the user writes it (`--lr`, `--model-kwargs embed_dim`), with the value the training command reads
    (a recipe's values included, whatever the order and spelling they were given in). """
    from ..train import build_parser, parse_args
    args = parse_args(['--model', settings['model'], *settings['train_options']])
    names = {a.dest: max(a.option_strings, key=len) for a in build_parser()._actions if a.option_strings}
    values = {'--model': args.model}
    kwargs = {**args.model_kwargs, **settings['model_kwargs']}  # as the run's --model-kwargs merge over a recipe's
    values.update((f'--model-kwargs {k}', v) for k, v in sorted(kwargs.items()))
    per_run = {'model', 'model_kwargs', 'seed', 'output', 'experiment', 'config', 'resume', *NOT_SETTINGS}
    values.update((names.get(k, k), v) for k, v in vars(args).items() if k not in per_run)
    return values


def _check_same_settings(out: Path, plan: Plan, saved: Optional[Dict[str, Any]]) -> None:
    """ Refuse a folder whose runs were made with other settings, naming only the settings that differ. """
    if saved is None:
        return
    try:
        before = _setting_values(saved)
    except (ConfigError, SystemExit) as e:
        raise ConfigError(f'{out / SETTINGS_FILE}: its training options {saved["train_options"]} are not valid '
                          f'here ({e}); start another --out (the runs there are kept)') from None
    difference = settings_difference(before, _setting_values(plan.settings()))
    if difference:
        raise ConfigError(f'--out {out} holds the runs of another comparison ({difference}); use another --out, '
                          f'or the settings of those runs')


def _record_settings(out: Path, checked: Checked, saved: Optional[Dict[str, Any]],
                     estimate: Optional[RunEstimate]) -> None:
    """ Record this call's settings, the arms of the folder's runs so far, what the answer shows of them, and each
    arm's first estimate of a run's seconds (what its runs took can be held against it). """
    arms = list(dict.fromkeys((saved['arms'] if saved else []) + [a.label for a in checked.plan.arms]))
    record = dict(checked.plan.settings(), arms=arms, reference='plain' if 'plain' in arms else arms[0],
                  model_built=checked.model_built)
    if checked.test_split is not None:
        record['test_split'] = checked.test_split
    if checked.train_subset is not None:
        record['train_subset'] = checked.train_subset
    estimated = {**({k: round(v, 1) for k, v in estimate.per_arm.items()} if estimate else {}),
                 **((saved or {}).get('estimated_seconds') or {})}
    if estimated:
        record['estimated_seconds'] = estimated
    out.mkdir(parents=True, exist_ok=True)
    with atomic_file(out / SETTINGS_FILE) as tmp:
        tmp.write_text(json.dumps(record, indent=1) + '\n')


def run(args: argparse.Namespace) -> int:
    from .cores import core_share
    from .estimate import estimate_runs
    from .session import report_only, train_and_report
    _check_options(args)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f'--out {out}: a file, not a folder; name a folder for the runs and the answer')
    if args.report:
        return report_only(out)
    slurm = slurm_request(args)  # None: the runs train here
    saved = read_settings(out / SETTINGS_FILE)  # the files read back, each checked before any work
    finished = read_results(out / 'runs', folder_name)
    for path in sorted((out / 'runs').glob(f'*/{ELAPSED_FILE}')):
        read_elapsed(path)
    jobs = read_jobs(out / JOBS_FOLDER)  # the SLURM jobs of the folder's runs
    if slurm is None:
        refuse_jobs_running(out, jobs)
    checked = _plan(args, out, saved['arms'] if saved else [], slurm)
    _check_same_settings(out, checked.plan, saved)
    if slurm is not None:
        from .slurm_session import run_on_slurm
        _record_settings(out, checked, saved, None)  # each run's time is its job's (what ran here says nothing)
        return run_on_slurm(args, out, checked, slurm)
    # once a run has finished, the runs that finished say what a run takes; before, the estimate, made beside the
    # runs --concurrent trains at the same time (the comparison's first run, into a temporary folder)
    first_args = next(iter(checked.arm_args.values()))[0]
    share = core_share(args.concurrent, first_args.threads)
    beside = checked.plan.command(checked.plan.arms[0], 0, str(out / 'runs')) + share.run_options(first_args.workers)
    estimate = None if finished else estimate_runs(checked.arm_args, share, checked.checks, beside)
    seconds = max(r['seconds'] for r in finished) if finished else estimate.seconds
    if args.time_limit is not None and seconds > args.time_limit:
        how = (f'the longest of the {len(finished)} finished runs took {seconds:.0f} s' if finished else
               f'a run takes about {seconds:.0f} s here ({estimate.describe()})')
        raise ConfigError(f'--time-limit {args.time_limit:g}: {how}, so no run would fit; raise it, or train less '
                          f'(--epochs, --train-subset)')
    _record_settings(out, checked, saved, estimate)
    return train_and_report(args, out, checked, share, estimate, finished)

