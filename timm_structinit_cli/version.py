""" The package's one version: `pyproject.toml` reads it, both commands print it (`--version`), exports and model
cards record it (`timm_structinit.__version__` is this one). It lives in the commands' light package so that
`--version` answers without importing torch or timm. """
__version__ = '0.2.0'
