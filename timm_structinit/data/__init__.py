""" Datasets: the training command's dataset factory (`dataset_factory`), ImageFolder datasets checked file by file
(`image_folder`), reading one image (`images`), split names and folders (`splits`), the torchvision datasets timm's
factory lacks (`torchvision_data`), scikit-learn's digits (`digits`), and timm's RandAugment on Pillow >= 13
(`pillow_compat`). Every name the factory exports is importable from here. """
from .dataset_factory import (  # noqa: F401
    CIFAR10_FOLDER_HINT, EVAL_SPLITS, TIMM_TORCH_DATASETS, TORCH_DATASETS, TRAIN_SPLITS, CheckedImageDataset,
    ClassBalancedSubset, DataError, DigitsDataset, ImageReadError, build_dataset, check_dataset_name, dataset_classes,
    dataset_targets, folder_dataset, item_file, named_item_reads, read_image, resolve_split_folder)
from .dataset_factory import __all__ as _factory_names

__all__ = list(_factory_names)
