""" `import timm_structinit.patched`: the package's models, and its two changes to timm for the whole process
(`utils.timm_patches.patch_timm`). For timm's own train.py, whose `--device-modules` imports modules and calls nothing:

    python train.py --device-modules timm_structinit.patched -c RECIPE.yaml
"""
from .utils.timm_patches import patch_timm

patch_timm()
