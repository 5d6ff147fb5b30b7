""" The package's version, as exports and model cards record it. A module of its own, so that what records it imports
nothing else of the package. It is written once, in `timm_structinit_cli/version.py`, where `pyproject.toml` reads
it and `--version` prints it without importing torch or timm. """
from timm_structinit_cli.version import __version__  # noqa: F401

__all__ = ['__version__']
