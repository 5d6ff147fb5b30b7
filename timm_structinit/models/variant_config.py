""" What the registered variants of every family share: the pretrained_cfg of each input size (32 px CIFAR-style, 224
px ImageNet-style), the CIFAR-10 statistics the 32 px models normalize with, and a variant's arguments merged with the
caller's. """
from typing import Any, Dict, Mapping

from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

__all__ = ['CIFAR10_MEAN', 'CIFAR10_STD', 'cfg32', 'cfg224', 'merge_args']

# per-channel mean and std of the CIFAR-10 training images (pixel statistics, not the often-quoted batch-std values)
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)


def cfg32(**kwargs) -> Dict[str, Any]:
    return {
        'url': '', 'num_classes': 10, 'input_size': (3, 32, 32), 'pool_size': None, 'crop_pct': 1.0,
        'interpolation': 'bicubic', 'fixed_input_size': True, 'mean': CIFAR10_MEAN, 'std': CIFAR10_STD,
        'first_conv': 'patch_embed.proj', 'classifier': 'head', 'license': 'apache-2.0', **kwargs,
    }


def cfg224(**kwargs) -> Dict[str, Any]:
    return {
        'url': '', 'num_classes': 1000, 'input_size': (3, 224, 224), 'pool_size': None, 'crop_pct': 0.9,
        'interpolation': 'bicubic', 'fixed_input_size': True, 'mean': IMAGENET_DEFAULT_MEAN,
        'std': IMAGENET_DEFAULT_STD, 'first_conv': 'patch_embed.proj', 'classifier': 'head',
        'license': 'apache-2.0', **kwargs,
    }


def merge_args(model_args: Dict[str, Any], kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """ A variant's args overridden by the caller's; `struct_init_kwargs` are merged key by key, so that
    `struct_init_kwargs=dict(solver='adam')` on an impulse-5 model keeps its kernel_size=5. """
    merged = dict(model_args, **kwargs)
    given = kwargs.get('struct_init_kwargs', ())
    if 'struct_init_kwargs' in model_args and (given is None or isinstance(given, Mapping)):
        # (anything else is passed on as given, for the model to refuse with a message naming it)
        merged['struct_init_kwargs'] = {**model_args['struct_init_kwargs'], **(kwargs['struct_init_kwargs'] or {})}
    return merged
