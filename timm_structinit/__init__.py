""" timm-structinit: structured attention initializations (mimetic, impulse) for timm Vision Transformers.

Importing this package registers its models with timm, so `timm.create_model('vit_tiny_patch2_32_mimetic')` works.
"""
__version__ = '0.1.0'  # the package's one version: pyproject.toml reads it, both commands print it (--version)

from .startup import quiet_startup_stops
quiet_startup_stops()  # first: before torch and timm take their seconds to import
from .pillow_compat import make_posterize_zero_bits_safe
from .inits import apply_init, list_inits, make_init_cfg, register_init
from .vision_transformer import CIFAR10_MEAN, CIFAR10_STD, StructVisionTransformer
from .swin_transformer import StructSwinTransformer
from .mlp_mixer import StructMlpMixer

make_posterize_zero_bits_safe()  # timm's RandAugment on Pillow >= 13, see pillow_compat
from . import hub  # noqa: E402,F401  lets timm's local-dir:/hf-hub: loads rebuild the registered models
