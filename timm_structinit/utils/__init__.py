""" What every part of the package shares: writes under a staging name (`atomic`), seeds (`seeds`), `key=value` items
(`kwargs`), checkpoints against models (`checkpoints`), the command-line helpers (`command_line`), quiet start-up
stops (`startup`), a torchvision that does not match torch (`pytorch_install`), figures (`figures`) and the package's
two changes to timm (`timm_patches`). Nothing is imported here: the package's face imports `startup` and
`pytorch_install` before timm. """
