""" timm-structinit: structured attention initializations (mimetic, impulse) for timm Vision Transformers.

Importing this package registers its models with timm, so `timm.create_model('vit_tiny_patch2_32_mimetic')` works.
"""
from .inits import apply_init, list_inits, make_init_cfg, register_init
from .vision_transformer import CIFAR10_MEAN, CIFAR10_STD, StructVisionTransformer

__version__ = '0.1.0'
