""" Which models an init can write, checked before it writes anything: weights that belong to more than one place of
the model, and weights computed from others. (Which attention layouts an init reads, and what the ones it cannot
read compute, is `timm_attention`'s.)
"""
from typing import Dict, Iterable, List

import torch
from torch import nn

from .timm_attention import kind_of as attention_kind  # noqa: F401  (the qualified class name the tables key)

__all__ = ['attention_kind', 'refuse_shared_weights', 'refuse_derived_weights']


def _key(tensor: torch.Tensor):
    # one tensor under two names (tied modules or parameters), or two tensors on one memory
    if tensor.is_meta or not tensor.numel():
        return 'id', id(tensor)
    return 'ptr', tensor.data_ptr()


def refuse_shared_weights(model: nn.Module, written: Dict[str, Iterable[torch.Tensor]]) -> None:
    """ ValueError, before any work, when a tensor an init writes (`written`: the tensors of each written module, by
    the module's name) belongs to more than one place of the model: the init writes each layer as its own, so the
    later layer's values would overwrite the earlier one's while the record still lists both. """
    names: Dict[tuple, List[str]] = {}
    for name, tensor in [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]:
        names.setdefault(_key(tensor), []).append(name)
    for module_name, tensors in written.items():
        for tensor in tensors:
            places = names.get(_key(tensor), [])
            if len(places) > 1:
                raise ValueError(
                    f'{places[0]} and {places[1]} of {type(model).__name__} are one tensor (weights shared between '
                    f'modules, read by {module_name}): an init writes each layer\'s weights as its own, so one layer '
                    f'would overwrite the other\'s; untie them first (give each module its own copy), or apply the '
                    f'init before tying them')


def refuse_derived_weights(model: nn.Module, scopes: List[nn.Module]) -> None:
    """ An init writes weights in place; a weight computed from others (torch.nn.utils.parametrize, e.g.
    `parametrizations.weight_norm`, or the older `weight_norm` / `spectral_norm` hooks) would be written and then
    recomputed from its sources, leaving a record that says the init is there when it is not. """
    from torch.nn.utils import parametrize
    names = {id(m): n for n, m in model.named_modules()}
    for scope in scopes:
        for module in scope.modules():
            hooks = [type(h).__name__ for h in module._forward_pre_hooks.values()
                     if type(h).__name__ in ('WeightNorm', 'SpectralNorm')]
            if parametrize.is_parametrized(module) or hooks:
                how = hooks[0] if hooks else 'a parametrization (torch.nn.utils.parametrize)'
                raise ValueError(f'{names.get(id(module)) or type(module).__name__} of {type(model).__name__} has its '
                                 f'weight computed by {how}: an init cannot write it; apply the init before adding the '
                                 f'parametrization, or remove it first (parametrize.remove_parametrizations)')
