""" The package's registered models: a ViT with a fixed sin-cos table (`vision_transformer`), Swin (`swin_transformer`)
and MLP-Mixer (`mlp_mixer`), each taking the `struct_init` arguments (`struct_init_args`); what their variants share
(`variant_config`); the checks of a model's own arguments (`model_args`) and the checks made through timm's registry
(`registry`). timm files each model under its module's last name (`timm.list_models(module='vision_transformer')`). """
from .mlp_mixer import StructMlpMixer
from .registry import check_model_args, is_package_model, list_models, valid_model_args
from .swin_transformer import StructSwinTransformer
from .variant_config import CIFAR10_MEAN, CIFAR10_STD
from .vision_transformer import StructVisionTransformer

__all__ = ['StructVisionTransformer', 'StructSwinTransformer', 'StructMlpMixer', 'CIFAR10_MEAN', 'CIFAR10_STD',
           'list_models', 'is_package_model', 'check_model_args', 'valid_model_args']
