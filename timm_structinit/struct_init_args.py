""" The `struct_init`, `struct_init_kwargs`, `struct_init_seed` arguments every registered model takes.

A registered model checks the init's hyperparameters once, when it is built, and applies the init at the end of its
own `init_weights` (after timm's init, so every weight the init does not own keeps timm's values); `model.init_weights()`
re-applies it and `weight_init='skip'` skips it.
"""
from typing import Any, Dict, Optional

from .inits import apply_init_cfg, list_inits, make_init_cfg

__all__ = ['StructInitArgs']


class StructInitArgs:
    """ Mixin for a timm model class: call `_set_struct_init` before timm's `__init__` (which runs `init_weights`)
    and `_apply_struct_init` at the end of `init_weights`. """

    def _set_struct_init(self, family: str, struct_init: Optional[str], struct_init_kwargs: Optional[Dict[str, Any]],
                         struct_init_seed: Optional[int], example: str) -> None:
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

    def _apply_struct_init(self) -> None:
        if self.struct_init is not None:
            apply_init_cfg(self, self.struct_init, self.struct_init_cfg, seed=self.struct_init_seed)
