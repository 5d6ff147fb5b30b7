""" The command lines of timm-structinit, without torch or timm: the argument parsers of `timm-structinit` (every
subcommand) and `timm-structinit-train`, and the two console entry points.

`import timm_structinit` imports timm (importing the package is what registers its models), and torch and timm take
seconds to import. An entry point that lived in that package would spend them before it read its arguments, so
`--help`, `--version` and a usage error would each take seconds. Here the arguments are parsed first, and only a
command line that is valid imports the package and runs (`entry.py`). Nothing in this package imports torch, timm or
`timm_structinit` at its top level (tests/test_layout.py holds it to that); the package's own modules import their
parsers from here.
"""
