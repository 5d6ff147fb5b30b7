""" timm-structinit: structured attention initializations (mimetic, impulse) for timm Vision Transformers.

Importing this package registers its models with timm, so `timm.create_model('vit_tiny_patch2_32_mimetic')` works, and
changes nothing else of timm's: the package's two changes to timm apply inside its own commands, or where asked
(`patch_timm`, `patched_timm`). `list_models()` lists the package's models alone (timm lists them under its own
module names).

The package is grouped as timm groups itself: `models/` (the registered models, their arguments and their checks),
`inits/` (the inits' math), `layers/` (the sin-cos table), `data/` (datasets), `diagnostics/` (what an init does to
attention), `hub/` (export and push), `train/` (the training command), `recipes/`, and `utils/` (what every part
shares); `errors` holds the error types and their exit statuses, `version` the version.
"""
from .version import __version__  # noqa: F401
from .utils.startup import quiet_startup_stops, refuse_gone_working_folder
quiet_startup_stops()  # first: before torch and timm take their seconds to import
refuse_gone_working_folder()  # torch's math library aborts the import in a deleted folder
from .utils.pytorch_install import refuse_broken_pytorch  # noqa: E402
refuse_broken_pytorch()  # a torch that cannot be imported, or a torchvision that fails beside it: one line
from .inits import apply_init, list_inits, make_init_cfg, register_init  # noqa: E402
from .models import (  # noqa: E402
    CIFAR10_MEAN, CIFAR10_STD, StructMlpMixer, StructSwinTransformer, StructVisionTransformer, list_models)
from .utils.timm_patches import patch_timm, patched_timm  # noqa: E402
from . import hub  # noqa: E402,F401  export, push, and the loader hook behind registered_exports()

__all__ = ['__version__', 'apply_init', 'list_inits', 'make_init_cfg', 'register_init', 'StructVisionTransformer',
           'StructSwinTransformer', 'StructMlpMixer', 'CIFAR10_MEAN', 'CIFAR10_STD', 'list_models', 'patch_timm',
           'patched_timm', 'hub']
