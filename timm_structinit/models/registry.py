""" The package's models in timm's registry, and a model's name and arguments checked through it before any work: the
arguments its class takes (unknown ones named, with close matches; a string where a flag takes True or False), then
one dry build on the meta device that runs every constructor check and the init's own (nothing allocated, nothing
computed). That model is returned, so that a command makes its other checks (a checkpoint's shapes, an optimizer's
parameter groups) on it instead of building it again.

The training entry point and `export` / `push` / `show` call `check_model_args` first, so that a mistyped argument or
an impossible geometry ends in one line before data is read or weights are computed.
"""
import difflib
import inspect
import warnings
from typing import Any, List, Mapping, Optional, Union

import timm
import torch
from timm.models import is_model, model_entrypoint
from torch import nn

from ..utils.words import plural

__all__ = ['is_package_model', 'list_models', 'model_class', 'valid_model_args', 'check_model_args']


def is_package_model(model_name: str) -> bool:
    return model_entrypoint(model_name).__module__.startswith('timm_structinit.')


def list_models(filter: Union[str, List[str]] = '', **kwargs: Any) -> List[str]:
    """ The registered models of this package, in timm's order: `timm.list_models(filter, **kwargs)` (timm's wildcards and
    options) without timm's own. timm lists them under its module names, so that
    `timm.list_models(module='vision_transformer')` holds both. """
    return [name for name in timm.list_models(filter, **kwargs) if is_package_model(name.split('.')[0])]


def _meta_build(model_name: str, kwargs: Mapping[str, Any]) -> nn.Module:
    """ `model_name` built with `kwargs` on the meta device: shapes only, nothing allocated or computed. """
    with torch.device('meta'), warnings.catch_warnings():
        warnings.simplefilter('ignore')
        return timm.create_model(model_name, pretrained=False, **kwargs)


def model_class(model_name: str) -> type:
    """ The class a registered name builds, read from a default instance built on the meta device. """
    return type(_meta_build(model_name, {}))


def valid_model_args(cls: type) -> List[str]:
    """ The keyword arguments the classes of `cls`'s MRO take (timm's entrypoints pass them through). """
    names = {p for c in cls.__mro__ if '__init__' in vars(c) and c is not nn.Module
             for p in inspect.signature(c.__init__).parameters}
    return sorted(names - {'self', 'args', 'kwargs'} | {'out_indices'})


def _unknown_args(model_name: str, cls: type, kwargs: Mapping[str, Any]) -> Optional[str]:
    parameters = inspect.signature(cls.__init__).parameters.values()
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    if takes_any and not is_package_model(model_name):
        return None  # a timm class that passes any name on: its layers say what they do not take
    valid = valid_model_args(cls)
    unknown = sorted(set(kwargs) - set(valid))
    if not unknown:
        return None
    close = sorted({m for k in unknown for m in difflib.get_close_matches(k, valid, n=3)})
    return (f'unknown {plural(len(unknown), "model argument")} {unknown} for {model_name}' + (
        f' (did you mean {", ".join(close)}?)' if close else '') + f'; valid: {", ".join(valid)}')


def _not_booleans(model_name: str, cls: type, kwargs: Mapping[str, Any]) -> Optional[str]:
    """ The arguments whose default in the model's classes is True or False but whose value is not a bool: a
    string such as 'no' or 'False' would be taken as true. """
    flags = {name for c in cls.__mro__ if '__init__' in vars(c) and c is not nn.Module
             for name, p in inspect.signature(c.__init__).parameters.items() if isinstance(p.default, bool)}
    bad = [f'{k}={kwargs[k]!r}' for k in sorted(flags & set(kwargs)) if not isinstance(kwargs[k], bool)]
    return (f'{", ".join(bad)} for {model_name}: must be True or False (a string is taken as true, "no" included)'
            if bad else None)


def _argument_problem(model_name: str, cls: type, kwargs: Mapping[str, Any]) -> Optional[str]:
    return _unknown_args(model_name, cls, kwargs) or _not_booleans(model_name, cls, kwargs)


def _build_failure(model_name: str, kwargs: Mapping[str, Any], error: Exception) -> str:
    """ Why `model_name` did not build with `kwargs`, on one line: an argument its class does not take or a flag that
    is no bool (the class read from a default build), else the constructor's own complaint. """
    try:
        problem = _argument_problem(model_name, model_class(model_name), kwargs)
    except Exception:  # the defaults themselves do not build: the constructor's complaint says why
        problem = None
    if problem:
        return problem
    detail = ' '.join(str(error).split()) or type(error).__name__
    kind = '' if isinstance(error, ValueError) else f'{type(error).__name__}: '
    return f'cannot build {model_name} with {dict(kwargs)}: {kind}{detail}'


def check_model_args(model_name: str, kwargs: Mapping[str, Any]) -> Optional[nn.Module]:
    """ `model_name` built with `kwargs` on the meta device, where the constructor's checks and the structured init's
    (which writes nothing there) run and nothing is allocated; ValueError with one line naming what is wrong. None
    for a `local-dir:` or `hf-hub:` model, which `hub.probe.check_weights_source` checks. """
    if not is_model(model_name):
        return None
    try:
        model = _meta_build(model_name, kwargs)
    except Exception as e:  # any constructor's complaint (ZeroDivisionError, AssertionError, ...), as one line
        raise ValueError(_build_failure(model_name, kwargs, e)) from None
    problem = _argument_problem(model_name, type(model), kwargs) or _dropped_nones(model_name, model, kwargs)
    if problem:
        raise ValueError(problem)
    return model


def _dropped_nones(model_name: str, model: nn.Module, kwargs: Mapping[str, Any]) -> Optional[str]:
    """ An argument given as None, which `timm.create_model` drops before the model sees it (it passes on only the
    arguments that are not None): the model keeps its own value, the registered init included. """
    own = getattr(model, 'struct_init', None)
    # (struct_init=None on a model without an init asks for what it builds)
    key = next((k for k, v in kwargs.items() if v is None and (k != 'struct_init' or own is not None)), None)
    if key is None:
        return None
    if key == 'struct_init':
        return (f'struct_init=None for {model_name}: timm.create_model drops arguments that are None, so the model '
                f'would keep its registered struct_init={own!r}; for its architecture without a structured init, '
                f'build its base model (the name without the init, see `timm-structinit models`)')
    return (f'{key}=None for {model_name}: timm.create_model drops arguments that are None, so the model would keep '
            f'its own {key}; leave it out, or give it a value')
