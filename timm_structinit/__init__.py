""" timm-structinit: structured attention initializations (mimetic, impulse) for timm Vision Transformers.

Importing this package registers its models with timm, so `timm.create_model('vit_tiny_patch2_32_mimetic')` works, and
changes nothing else of timm's: the package's two changes to timm apply inside its own commands, or where asked
(`timm_patches`). `list_models()` lists the package's models alone (timm lists them under its own module names).
"""
__version__ = '0.1.0'  # the package's one version: pyproject.toml reads it, both commands print it (--version)

from .startup import quiet_startup_stops
quiet_startup_stops()  # first: before torch and timm take their seconds to import
from .inits import apply_init, list_inits, make_init_cfg, register_init
from .vision_transformer import CIFAR10_MEAN, CIFAR10_STD, StructVisionTransformer
from .swin_transformer import StructSwinTransformer
from .mlp_mixer import StructMlpMixer

from .model_build import list_models
from .timm_patches import patch_timm, patched_timm
from . import hub  # noqa: E402,F401  export, push, and the loader hook behind registered_exports()

