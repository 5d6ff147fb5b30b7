""" Every command in the README and in docs/ keeps working as written: each option exists in the program it is given to,
each recipe, model, script and file it names exists, each link points to a file and heading that exist, and each
Python example runs. """
import re
import shlex
from pathlib import Path

import pytest
import timm
import torch

import timm_structinit  # noqa: F401
from timm_structinit import cli
from timm_structinit import train as train_mod

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / 'README.md', *sorted((REPO / 'docs').glob('*.md'))]
TIMM_SCRIPTS = REPO.parent / 'shared' / 'timm-scripts'
# commands a user runs that are not this project's programs, or that fetch or install things
OTHER_PROGRAMS = ('pip', 'git', 'bash', 'cd', 'hf', 'ln', 'timeout')


def _blocks(path: Path, language: str):
    return re.findall(rf'```{language}\n(.*?)```', path.read_text(encoding='utf-8'), flags=re.S)


def _without_substitutions(line: str) -> str:
    """ `line` with each `$(...)` (balanced parentheses, quotes inside) replaced by the word SUBST. """
    while '$(' in line:
        start = line.index('$(')
        depth, end = 0, start + 1
        for end in range(start + 1, len(line)):
            depth += {'(': 1, ')': -1}.get(line[end], 0)
            if depth == 0:
                break
        line = line[:start] + 'SUBST' + line[end + 1:]
    return line


def _commands():
    """ (doc, command tokens) of every shell command in a bash block: continuations joined, comments dropped,
    `a && b` split. """
    for path in DOCS:
        for block in _blocks(path, 'bash'):
            for line in block.replace('\\\n', ' ').splitlines():
                line = line.split(' #')[0].strip()
                if not line or line.startswith('#'):
                    continue
                for part in line.split('&&'):
                    tokens = shlex.split(_without_substitutions(part))
                    while tokens and re.fullmatch(r'[A-Z_]+=\S*', tokens[0]):  # VAR=value prefixes
                        tokens = tokens[1:]
                    if tokens:
                        yield path.relative_to(REPO), tokens


COMMANDS = list(_commands())


def _module_args(tokens, module):
    """ The arguments after `-m MODULE` (python or torchrun), or None. """
    if '-m' in tokens and tokens[tokens.index('-m') + 1] == module:
        return tokens[tokens.index('-m') + 2:]
    return None


def _known_model(name: str) -> bool:
    return name.startswith(('local-dir:', 'hf-hub:')) or timm.is_model(name)


def _script_options(script: Path):
    return set(re.findall(r"add_argument\(\s*'(-[^']+)'", script.read_text())) | set(
        re.findall(r"add_argument\(\s*'-[^']+',\s*'(-[^']+)'", script.read_text()))


def _check_options(tokens, options, what):
    for token in tokens:
        if token.startswith('--'):
            assert token.split('=')[0] in options, f'{token} is not an option of {what}'


def test_the_docs_show_commands():
    programs = {tokens[0] for _, tokens in COMMANDS}
    assert {'timm-structinit-train', 'timm-structinit', 'python', 'torchrun'} <= programs
    assert len(COMMANDS) > 40


@pytest.mark.parametrize('doc,tokens', COMMANDS, ids=[f'{d}:{" ".join(t)[:60]}' for d, t in COMMANDS])
def test_documented_command(doc, tokens):
    program = tokens[0]
    train_args = _module_args(tokens, 'timm_structinit.train')
    if program == 'timm-structinit-train' or train_args is not None:
        args = train_mod.parse_args(tokens[1:] if train_args is None else train_args)
        assert _known_model(args.model), f'{doc}: unknown model {args.model}'
        return
    if program == 'timm-structinit':
        args = cli.build_parser().parse_args(tokens[1:])
        if getattr(args, 'model', None):
            assert _known_model(args.model), f'{doc}: unknown model {args.model}'
        if args.command == 'recipes' and args.name:
            timm_structinit.recipes.recipe_path(args.name)
        return
    if program == 'python' and tokens[1:3] == ['-m', 'pytest'] or program in OTHER_PROGRAMS:
        return
    run_args = _module_args(tokens, 'timm_structinit.run')
    script_args = run_args if run_args is not None else tokens[1:] if program == 'python' else None
    assert script_args, f'{doc}: unexpected command {" ".join(tokens)}'
    script = script_args[0]
    if script.startswith('benchmarks/'):
        assert (REPO / script).is_file(), f'{doc}: no {script}'
        _check_options(script_args[1:], _script_options(REPO / script) | {'--help'}, script)
    else:  # one of timm's scripts, wherever the user keeps them: its options as timm publishes them
        shared = TIMM_SCRIPTS / Path(script).name
        if not shared.is_file():
            pytest.skip(f"needs timm's {Path(script).name} at {shared} (../shared beside the repository); not found")
        _check_options(script_args[1:], _script_options(shared), f"timm's {shared.name}")
        if '--model' in script_args:
            assert _known_model(script_args[script_args.index('--model') + 1])
        if '-c' in script_args and script_args[script_args.index('-c') + 1] != 'SUBST':
            timm_structinit.recipes.recipe_path(script_args[script_args.index('-c') + 1].split('/')[-1])


def _slug(heading: str) -> str:
    return re.sub(r'[^\w\- ]', '', heading.strip().lower()).replace(' ', '-')


def test_links_and_images_point_to_existing_files_and_headings():
    checked = 0
    for path in DOCS:
        text = path.read_text(encoding='utf-8')
        for target in re.findall(r'\]\(([^)\s]+)\)', text):
            if target.startswith(('http://', 'https://')):
                continue
            file, _, anchor = target.partition('#')
            linked = (path.parent / file).resolve() if file else path
            assert linked.exists(), f'{path.name}: link to missing {target}'
            if anchor:
                headings = {_slug(h) for h in re.findall(r'^#+ (.+)$', linked.read_text(encoding='utf-8'), re.M)}
                assert anchor in headings, f'{path.name}: no heading #{anchor} in {linked.name}'
            checked += 1
    assert checked > 20


PYTHON_EXAMPLES = [(path.relative_to(REPO), code) for path in DOCS for code in _blocks(path, 'python')
                   if 'local-dir:' not in code and 'hf-hub:' not in code]  # those need an export or the Hub


@pytest.mark.parametrize('doc,code', PYTHON_EXAMPLES, ids=[f'{d}:{i}' for i, (d, _) in enumerate(PYTHON_EXAMPLES)])
def test_python_example_runs(doc, code):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        exec(compile(code, str(doc), 'exec'), {'__name__': '__doc_example__'})
    finally:
        torch.set_num_threads(threads)
