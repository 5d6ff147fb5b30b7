""" The package's layout, read from its source: its modules import each other without a circle (a name taken from
a parent package's `__init__` counts, as it needs that `__init__` to have run), no module imports a command's module
but the command itself, the top level holds only the face, the version, the errors, the commands' entry points and
the modules that must stay importable where they are, and modules and functions stay short enough to read as one
idea. The commands' light package beside it (`timm_structinit_cli`: the parsers and the console entry points) imports
neither torch, timm nor the package, but for the entry points' run after parsing. """
import ast
from pathlib import Path
from typing import Dict, List, Set

PACKAGE = Path(__file__).resolve().parents[1] / 'timm_structinit'
LIGHT = PACKAGE.parent / 'timm_structinit_cli'
# what `--help`, `--version` and a usage error must not wait for (seconds of imports); the entry points import the
# package, once the arguments are parsed, inside the functions that run it
HEAVY = ('torch', 'timm', 'timm_structinit')
ENTRY_POINTS = 'timm_structinit_cli.entry'
# the commands' own modules: what they hold is the command's, and what two parts share lives below them
COMMAND_MODULES = ('timm_structinit.cli', 'timm_structinit.train.__main__')
# the top level: the face and the version, the error types, the `timm-structinit` entry point, `python -m
# timm_structinit.run` and `--device-modules timm_structinit.patched`; everything else lives in a folder of its kind
TOP_LEVEL_MODULES = {'__init__.py', 'version.py', 'errors.py', 'cli.py', 'run.py', 'patched.py'}
TOP_LEVEL_FOLDERS = {'models', 'inits', 'layers', 'data', 'diagnostics', 'hub', 'train', 'compare', 'recipes',
                     'utils'}
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix('').parts
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


def _modules() -> Dict[str, Path]:
    return {_module_name(p): p for package in (PACKAGE, LIGHT) for p in sorted(package.rglob('*.py'))}


def _imports(name: str, path: Path, known: Set[str]) -> Set[str]:
    """ The package's modules that `path` imports, anywhere in it (function-level imports too). A name taken from a
    package (`from .. import __version__`) is an import of that package's `__init__`, a parent's included: the name
    exists only once that `__init__` has run that far. """
    return _imports_source(name, path, path.read_text(), known)


def _imports_source(name: str, path: Path, source: str, known: Set[str]) -> Set[str]:
    package = name if path.name == '__init__.py' else name.rpartition('.')[0]
    found: Set[str] = set()
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                anchor = package.split('.')[:len(package.split('.')) - (node.level - 1)]
                base = '.'.join(anchor + ([base] if base else []))
            # `from pkg import mod` imports the module pkg.mod where there is one
            targets = [f'{base}.{alias.name}' if f'{base}.{alias.name}' in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `import a.b.c` also imports a and a.b
                target = target.rpartition('.')[0]
            if target and target != name:
                found.add(target)
                # the packages a submodule lies in run their `__init__` first, but those this module lies in: they
                # are already running
                found.update(p for p in _parents(target) if p in known and p not in _parents(name) and p != name)
    return found


def import_graph() -> Dict[str, Set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def _parents(name: str) -> Set[str]:
    """ The packages `name` lies in. """
    parts = name.split('.')
    return {'.'.join(parts[:i]) for i in range(1, len(parts))}


def find_cycle(graph: Dict[str, Set[str]]) -> List[str]:
    """ One import circle among the package's modules (the modules in order, the first repeated), or []. """
    state: Dict[str, int] = {}
    stack: List[str] = []

    def visit(node: str) -> List[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return []


def test_no_import_circle():
    assert find_cycle(import_graph()) == []


def test_a_name_from_the_package_face_is_a_circle():
    """ The check sees the circle a submodule makes by taking a name from the face that imports it. """
    graph = {'timm_structinit': {'timm_structinit.hub'}, 'timm_structinit.hub': {'timm_structinit.hub.export'},
             'timm_structinit.hub.export': {'timm_structinit'}}
    assert find_cycle(graph) == ['timm_structinit', 'timm_structinit.hub', 'timm_structinit.hub.export',
                                 'timm_structinit']
    source = 'from .. import __version__\n'
    known = {'timm_structinit', 'timm_structinit.hub', 'timm_structinit.hub.export'}
    path = PACKAGE / 'hub' / 'export.py'
    assert _imports_source('timm_structinit.hub.export', path, source, known) == {'timm_structinit'}


def test_the_top_level_holds_the_face_and_folders_by_kind():
    entries = {p.name for p in PACKAGE.iterdir() if p.name != '__pycache__' and not p.name.startswith('.')}
    modules = {name for name in entries if name.endswith('.py')}
    folders = {name for name in entries if (PACKAGE / name).is_dir()}
    assert modules - TOP_LEVEL_MODULES == set()
    assert folders - TOP_LEVEL_FOLDERS == set()
    assert all((PACKAGE / folder / '__init__.py').is_file() for folder in folders)


def test_no_module_imports_a_command_module():
    graph = import_graph()
    wrong = sorted(f'{name} imports {command}' for name, imported in graph.items() for command in COMMAND_MODULES
                   if command in imported and name not in (command, ENTRY_POINTS) and name not in _parents(command))
    assert wrong == []


def _imported_names(tree: ast.AST, top_level_only: bool) -> Set[str]:
    """ The absolute module names a module imports: those at its top level (outside every function), or all. """
    names: Set[str] = set()
    stack = list(ast.iter_child_nodes(tree))
    while stack:
        node = stack.pop()
        if top_level_only and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names.add(node.module or '')
        stack.extend(ast.iter_child_nodes(node))
    return names


def _heavy(names: Set[str]) -> List[str]:
    return sorted(n for n in names if n.split('.')[0] in HEAVY)


def test_the_light_package_imports_neither_torch_timm_nor_the_package():
    """ At import, no module of it does; the entry points alone import the package, inside the functions that run
    it once the arguments are parsed. """
    modules = {name: path for name, path in _modules().items() if name.split('.')[0] == LIGHT.name}
    assert {f'{LIGHT.name}.entry', f'{LIGHT.name}.train_parser', f'{LIGHT.name}.structinit_parser'} <= set(modules)
    wrong = {name: _heavy(_imported_names(ast.parse(path.read_text()), top_level_only=True))
             for name, path in modules.items()}
    assert {name: found for name, found in wrong.items() if found} == {}
    late = {name: _heavy(_imported_names(ast.parse(path.read_text()), top_level_only=False))
            for name, path in modules.items() if name != ENTRY_POINTS}
    assert {name: found for name, found in late.items() if found} == {}


def test_the_light_check_sees_an_import_at_the_top_and_in_a_function():
    source = 'import os\nfrom timm.layers import Mlp\ndef f():\n    import torch\n'
    assert _heavy(_imported_names(ast.parse(source), top_level_only=True)) == ['timm.layers']
    assert _heavy(_imported_names(ast.parse(source), top_level_only=False)) == ['timm.layers', 'torch']


def test_no_module_over_the_line_limit():
    long = sorted(f'{name}: {len(path.read_text().splitlines())} lines' for name, path in _modules().items()
                  if len(path.read_text().splitlines()) > MAX_MODULE_LINES)
    assert long == []


def test_no_function_over_the_line_limit():
    """ Lines from a function's first decorator to its last line, docstring included. """
    long = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                if node.end_lineno - start + 1 > MAX_FUNCTION_LINES:
                    long.append(f'{name}.{node.name}: {node.end_lineno - start + 1} lines')
    assert sorted(long) == []
