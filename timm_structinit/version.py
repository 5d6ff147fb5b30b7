""" The package's one version: `pyproject.toml` reads it, both commands print it (`--version`), exports and model
cards record it. A module of its own, so that what records it imports nothing else of the package. """
__version__ = '0.1.0'
