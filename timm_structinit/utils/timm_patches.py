""" The two changes to timm this package makes, each where its own commands need it, or for the whole process on
request. Importing the package makes neither: it registers the models and nothing else.

* `data.pillow_compat`: timm's RandAugment posterize ops keep working with Pillow >= 13, which rejects the 0-bit posterize
  timm's `-inc1` policies ask for (an entry of `timm.data.auto_augment.NAME_TO_OP`, only where Pillow needs it);
* `hub.plain_timm`: timm's `local-dir:` / `hf-hub:` loaders build the registered model a package export names, not
  the timm model its config.json names for plain timm (timm's private `timm.models._hub._parse_model_cfg`).

`patched_timm()` applies both for one block: `timm-structinit-train` trains in it, and `python -m timm_structinit.run`
runs timm's scripts in it. `patch_timm()` applies both for the rest of the process; importing
`timm_structinit.patched` calls it, for timm's train.py, whose `--device-modules` imports modules and calls nothing.
"""
from contextlib import contextmanager
from typing import Iterator

from ..data.pillow_compat import make_posterize_zero_bits_safe, posterize_zero_bits_safe_ops
from ..hub.plain_timm import install_config_hook, registered_exports

__all__ = ['patched_timm', 'patch_timm']


@contextmanager
def patched_timm() -> Iterator[None]:
    """ Both changes within the block; timm's own objects are back on exit. """
    with registered_exports(), posterize_zero_bits_safe_ops():
        yield


def patch_timm() -> None:
    """ Both changes for the rest of the process. """
    install_config_hook()
    make_posterize_zero_bits_safe()
