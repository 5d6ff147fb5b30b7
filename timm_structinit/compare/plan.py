""" What a comparison trains: its arms (the plain init and the structured inits, each with its hyperparameters), its
seeds, the one base model every arm builds, and the training options every arm shares; each run's exact command; the
settings a folder of runs was made with, and how another call's differ.

An arm is written `NAME` or `NAME:key=value,key=value`: `plain` (the base model's own init), any init of
`timm_structinit.list_inits()` (`mimetic`, `impulse`, ...), or `impulse3` / `impulse5` (impulse with a 3 x 3 or
5 x 5 window). Values are Python literals, as the training command's `--model-kwargs` reads them.
"""
import ast
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

__all__ = ['Arm', 'parse_arm', 'arm_setting', 'DEFAULT_ARMS', 'Plan', 'run_name', 'folder_name', 'FORBIDDEN_OPTIONS',
           'default_model', 'settings_difference', 'NOT_SETTINGS']

DEFAULT_ARMS = ('plain', 'mimetic', 'impulse3')
_ALIASES = {'impulse3': ('impulse', {'kernel_size': 3}), 'impulse5': ('impulse', {'kernel_size': 5})}
# the training options a comparison sets itself, per run, and why a user's would not do
FORBIDDEN_OPTIONS = {
    '--model': 'name the base model with compare --model',
    '--model-kwargs': "pass the base model's arguments to compare --model-kwargs",
    '--seed': 'compare seeds each run itself (--seeds N trains seeds 0..N-1)',
    '--output': 'compare writes every run under --out',
    '--experiment': 'compare names every run itself',
    '--resume': 'compare resumes its stopped runs itself',
    '--overwrite': 'compare keeps what its runs wrote',
    '--initial-checkpoint': 'it would replace the init the comparison is about',
    '--pretrained': 'pretrained weights would replace the init the comparison is about',
}


@dataclass(frozen=True)
class Arm:
    """ One arm: its label, the init it applies (None: the base model's own) and that init's hyperparameters. """
    label: str
    struct_init: Optional[str]
    kwargs: Dict[str, Any] = field(default_factory=dict)

    def model_kwargs(self) -> Dict[str, Any]:
        if self.struct_init is None:
            return {}
        return {'struct_init': self.struct_init, **({'struct_init_kwargs': dict(self.kwargs)} if self.kwargs else {})}


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # as the training command's key=value items: a word that is no literal stays a string


def parse_arm(text: str, known_inits: Sequence[str]) -> Arm:
    """ An arm from its text; ValueError naming it and what is valid. A keyword is given once: twice, or one its
    name already sets (`impulse3:kernel_size=5`), is refused rather than one of the values taken. """
    name, _, rest = text.partition(':')
    valid = ['plain', *sorted(_ALIASES), *known_inits]
    if name not in valid:
        raise ValueError(f'--inits {text!r}: unknown init {name!r}; valid: {", ".join(valid)} (each optionally '
                         f'followed by :key=value,...)')
    if name == 'plain' and rest:
        raise ValueError(f'--inits {text!r}: the plain arm takes no hyperparameters')
    struct_init, kwargs = _ALIASES.get(name, (None if name == 'plain' else name, {}))
    kwargs = dict(kwargs)
    given = set()
    for item in filter(None, rest.split(',')):
        key, sep, value = item.partition('=')
        if not sep or not key.isidentifier():
            raise ValueError(f'--inits {text!r}: {item!r} is not key=value (e.g. mimetic:qk_noise=0.5)')
        if key in given:
            raise ValueError(f'--inits {text!r}: {key} is given twice; give it once')
        if key in kwargs:
            raise ValueError(f'--inits {text!r}: {name} is {struct_init} with {key}={kwargs[key]!r} already; write '
                             f'{struct_init}:{key}={value} for another value')
        given.add(key)
        kwargs[key] = _literal(value)
    return Arm(text, struct_init, kwargs)


def arm_setting(arm: Arm, family: str = 'vit') -> Optional[Tuple[str, Dict[str, Any]]]:
    """ What an arm trains with, whatever its spelling: None for the plain arm, else its init's name and every
    hyperparameter of it, its defaults and preset included (`impulse3` and `impulse:kernel_size=3` are one arm;
    `mimetic`, `mimetic:` and `mimetic:qk_noise=0.7` too, as are `qk_noise=0.5` and `qk_noise=5e-1`). ValueError
    from the init's own check of the hyperparameters. """
    if arm.struct_init is None:
        return None
    import dataclasses
    from ..inits import make_init_cfg
    return arm.struct_init, dataclasses.asdict(make_init_cfg(arm.struct_init, family, **arm.kwargs))


def run_name(arm: Arm, seed: int) -> str:
    """ The folder of an arm's run with a seed (`folder_name` of its label). """
    return folder_name(arm.label, seed)


def folder_name(label: str, seed: int) -> str:
    """ The folder of the run of the arm labelled `label` with a seed: the label, characters other than letters,
    digits and ._=- replaced. """
    return re.sub(r'[^A-Za-z0-9._=-]', '-', label) + f'_s{seed}'


def default_model(image_side: int) -> Tuple[str, Dict[str, Any]]:
    """ A ViT-Tiny the data suits, on which every init applies: average pooling and a fixed sin-cos table (the
    structured-init papers' base); 16 x 16 tokens of 2 px on 32 px for small images (up to 64 px, which are resized
    to 32), 14 x 14 tokens of 16 px on 224 px otherwise. """
    if image_side <= 64:
        return 'vit_tiny_patch2_32_gap_sincos', {}
    return 'vit_tiny_patch2_32_gap_sincos', {'img_size': 224, 'patch_size': 16}


@dataclass
class Plan:
    """ A comparison: every arm x seed trains `model` with `model_kwargs` (and the arm's init) and the shared
    `train_options` (the training command's own options, as given). """
    model: str
    model_kwargs: Dict[str, Any]
    arms: List[Arm]
    seeds: int
    train_options: List[str]

    def runs(self) -> List[Tuple[Arm, int]]:
        """ Every arm's seed 0 before any seed 1, so that a comparison stopped early already compares every arm. """
        return [(arm, seed) for seed in range(self.seeds) for arm in self.arms]

    def arm_model_kwargs(self, arm: Arm) -> Dict[str, Any]:
        return {**self.model_kwargs, **arm.model_kwargs()}

    def train_argv(self, arm: Arm, seed: int, runs_dir: str) -> List[str]:
        """ The training command's arguments of one run (without the interpreter). """
        kwargs = self.arm_model_kwargs(arm)
        return ['--model', self.model, *(['--model-kwargs', *_items(kwargs)] if kwargs else []),
                '--seed', str(seed), '--output', runs_dir, '--experiment', run_name(arm, seed),
                *self.train_options]

    def command(self, arm: Arm, seed: int, runs_dir: str) -> List[str]:
        return [sys.executable, '-m', 'timm_structinit.train', *self.train_argv(arm, seed, runs_dir)]

    def settings(self) -> Dict[str, Any]:
        """ What every run of a folder must share: the base model, its arguments and the training options. """
        return dict(model=self.model, model_kwargs=self.model_kwargs, train_options=list(self.train_options))


def _items(kwargs: Dict[str, Any]) -> List[str]:
    """ `key=value` items that the training command's --model-kwargs reads back as `kwargs`. """
    import shlex
    from ..utils.kwargs import format_kwargs
    return shlex.split(format_kwargs(kwargs))


# training options that do not change what a run trains, left out when two calls' settings are compared: the loader
# processes (the batches are the same whatever --workers says) and torch's threads (the last bits of float sums
# only); compare sets each run's share of them itself
NOT_SETTINGS = ('workers', 'threads')


def _canonical(value: Any) -> Any:
    """ A value as JSON gives it back (tuples as lists, keys as strings), so that a setting read from compare.json
    and the same setting parsed now compare equal. """
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    return value


def settings_difference(saved: Dict[str, Any], now: Dict[str, Any]) -> Optional[str]:
    """ How the settings `now` differ from those a folder's runs were made with, `saved` (each: the name of a setting
    as the user writes it, e.g. `--lr` or `--model-kwargs embed_dim`, to its value, as the training command reads
    it), on one line naming only the settings that differ; None when they agree. Values are compared by meaning:
    `1e-3` and `0.001`, `3` and `3.0`, and the order the options were given in, are the same setting. """
    unset = object()
    parts = []
    for name in [*now, *(k for k in saved if k not in now)]:
        before, after = saved.get(name, unset), now.get(name, unset)
        if before is unset or after is unset or _canonical(before) != _canonical(after):
            shown = ['not set' if v is unset else repr(v) for v in (before, after)]
            parts.append(f'{name} {shown[0]} there, {shown[1]} now')
    return '; '.join(parts) or None
