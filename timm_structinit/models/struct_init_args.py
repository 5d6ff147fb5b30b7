""" The `struct_init`, `struct_init_kwargs`, `struct_init_seed` arguments every registered model takes, and what its
`weight_init` means beside them.

A registered model checks the init's hyperparameters once, when it is built, and applies the init at the end of its
own `init_weights`, after the rest of the network was initialized as timm's `weight_init` says: '' (the default)
keeps timm's init for every weight the init does not own, 'reset' keeps PyTorch's default init (each layer's
`reset_parameters`), as the structured-init authors' runs do with `weight_init=skip post_weight_init=METHOD`.
`model.init_weights()` re-applies both; `weight_init='skip'` skips both (the fast way to build a model whose
weights are then loaded).
"""
import warnings
from typing import Any, Dict, Mapping, Optional, Sequence

from ..inits import apply_init_cfg, check_init_cfg, list_inits, make_init_cfg
from ..utils.seeds import check_seed

__all__ = ['StructInitArgs']


class StructInitArgs:
    """ Mixin for a timm model class: call `_set_struct_init` before timm's `__init__` (which runs `init_weights`),
    `_struct_init_built` after it, and `_apply_struct_init` at the end of `init_weights`. """

    def _set_struct_init(self, family: str, struct_init: Optional[str], struct_init_kwargs: Optional[Dict[str, Any]],
                         struct_init_seed: Optional[int], example: str, weight_init: Any = '',
                         weight_init_modes: Sequence[str] = ('', 'reset', 'jax', 'jax_nlhb', 'moco', 'skip')) -> None:
        if not isinstance(weight_init, str) or weight_init not in weight_init_modes:
            raise ValueError(f'weight_init={weight_init!r} is not valid; choose one of {list(weight_init_modes)} '
                             f"('' timm's init, 'reset' PyTorch's default for every layer, 'skip' no init at all)")
        if weight_init == 'skip' and struct_init is not None:
            warnings.warn(f"weight_init='skip' skips struct_init={struct_init!r} too (it builds a model whose weights "
                          f"are then loaded); for PyTorch's default init of the other weights with the structured "
                          f"init, as the authors' `weight_init=skip post_weight_init=...`, use weight_init='reset'",
                          stacklevel=4)
        if struct_init_seed is not None:
            check_seed(struct_init_seed, 'struct_init_seed')
        if struct_init_kwargs is not None and not (
                isinstance(struct_init_kwargs, Mapping) and all(isinstance(k, str) for k in struct_init_kwargs)):
            raise ValueError(f'struct_init_kwargs={struct_init_kwargs!r} must be a dict of hyperparameter names to '
                             f'values, e.g. {{"kernel_size": 5}}')
        self.struct_init = struct_init
        self.struct_init_kwargs = dict(struct_init_kwargs or {})
        self.struct_init_seed = struct_init_seed
        self.struct_init_record: Optional[Dict[str, Any]] = None
        if struct_init is None and struct_init_kwargs:
            # (a struct_init_seed alone is harmless: tools pass one to every model so that any init is seeded)
            raise ValueError(
                f'struct_init_kwargs={struct_init_kwargs} given without struct_init, so nothing would use them; add '
                f'struct_init=NAME (one of {", ".join(list_inits())}) or use a registered init model such as '
                f'{example}')
        # checked here, before timm allocates anything; the model's shape is checked when the init is applied
        self.struct_init_cfg = None if struct_init is None else make_init_cfg(
            struct_init, family, **self.struct_init_kwargs)
        # until the model's own `__init__` ends (`_struct_init_built`): an init that fails then leaves no model
        # behind, so it keeps no copy of the weights to restore
        self._under_construction = True

    def _struct_init_built(self) -> None:
        self._under_construction = False

    def _apply_struct_init(self) -> None:
        if self.struct_init is None:
            return
        if any(p.is_meta for p in self.parameters()):
            # built on the meta device to check its arguments (the training entry point does, before any work):
            # check that the init applies, write nothing
            check_init_cfg(self, self.struct_init, self.struct_init_cfg)
            return
        apply_init_cfg(self, self.struct_init, self.struct_init_cfg, seed=self.struct_init_seed,
                       restore_on_failure=not getattr(self, '_under_construction', False))
