""" Every command in the README and in docs/ keeps working as written: each option exists in the program it is given to,
each recipe, model, script and file it names exists, each link points to a file and heading that exist, each Python
example runs, and each command that can run here runs, shrunk through options a user could add (one epoch on a few
images); the others are skipped with the reason.

Each document's commands run in a folder of its own (standing for the repository's root), in the order the document
gives them: a later command may use what an earlier one of the same document wrote, and its test first runs the
earlier ones this process has not run yet. So each test holds on its own, in any process of pytest-xdist (`-n 2`);
`--dist loadgroup` keeps a document's commands in one process (their xdist_group), so none runs twice. """
import logging
import re
import shlex
from pathlib import Path

import pytest
import timm
import torch
from PIL import Image

import timm_structinit  # noqa: F401
from timm_structinit import cli
from timm_structinit import run as run_mod
from timm_structinit import train as train_mod
from timm_structinit_cli.structinit_parser import parse as parse_structinit

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / 'README.md', *sorted((REPO / 'docs').glob('*.md'))]
TIMM_SCRIPTS = REPO.parent / 'shared' / 'timm-scripts'
# commands a user runs that are not this project's programs, or that fetch or install things
OTHER_PROGRAMS = ('pip', 'git', 'bash', 'cd', 'hf', 'ln', 'timeout', '.', 'scontrol', 'scancel')


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


def _command_lines():
    """ (doc, command line, command tokens) of every shell command in a bash block: continuations joined, comments
    dropped, `a && b` split. """
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
                        yield path.relative_to(REPO), ' '.join(part.split()), tokens


COMMAND_LINES = list(_command_lines())
COMMANDS = [(doc, tokens) for doc, _, tokens in COMMAND_LINES]


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
        args = parse_structinit(tokens[1:])  # as the command parses it: compare leaves the training options
        if args.command == 'compare':  # ... to the training command's parser
            train_mod.build_parser().parse_args(args.train_options)
        if getattr(args, 'model', None):
            assert _known_model(args.model), f'{doc}: unknown model {args.model}'
        if args.command == 'recipes' and args.name:
            timm_structinit.recipes.recipe_path(args.name)
        return
    if program == 'python' and tokens[1:3] in (['-m', 'pytest'], ['-m', 'venv']) or program in OTHER_PROGRAMS:
        return
    if program == 'sbatch':  # a job script of the repository; the arguments after it are the training command's
        script = next(i for i, token in enumerate(tokens[1:], 1) if not token.startswith('-'))
        assert (REPO / tokens[script]).is_file(), f'{doc}: no {tokens[script]}'
        args = train_mod.parse_args(tokens[script + 1:])
        assert _known_model(args.model), f'{doc}: unknown model {args.model}'
        return
    run_args = _module_args(tokens, 'timm_structinit.run')
    script_args = run_args if run_args is not None else tokens[1:] if program == 'python' else None
    assert script_args, f'{doc}: unexpected command {" ".join(tokens)}'
    script = script_args[0]
    if script.startswith(('benchmarks/', 'docs/')):
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


@pytest.mark.slow
@pytest.mark.parametrize('doc,code', PYTHON_EXAMPLES, ids=[f'{d}:{i}' for i, (d, _) in enumerate(PYTHON_EXAMPLES)])
def test_python_example_runs(doc, code):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        exec(compile(code, str(doc), 'exec'), {'__name__': '__doc_example__'})
    finally:
        torch.set_num_threads(threads)


# --- running the documented commands -------------------------------------------------------------------------------

# (pattern in a command line, why the command is not run here)
NOT_RUN = (
    (r'^python -m venv|^\. \S+/activate', 'makes and enters a virtual environment; the tests run in the one they '
                                           'were installed into'),
    (r'^pip ', 'installs packages; the tests run in the environment they were installed into'),
    (r'^python -m pytest', 'the test suite itself'),
    (r'^bash \.ci/run', 'CI: a fresh install and the whole suite'),
    (r'^git clone', "needs internet; the tests take timm's scripts from ../shared/timm-scripts"),
    (r'benchmarks/compare_inits\.py', 'hours of training; the benchmark is checked by its own runs'),
    (r'--launcher slurm|^([A-Z_]+=\S* )*(sbatch|scontrol|scancel) ',
     "submits to SLURM: tests/test_slurm.py runs the cluster guide's commands on a one-node SLURM cluster it starts"),
    (r'^timm-structinit compare ', 'trains every arm x seed in its own process (minutes); tests/test_compare.py runs '
                                   'a tiny comparison, a second call, a resume and every refusal'),
    (r'benchmarks/(loader_parity|data_path|augment_cost|mnist5k_folder)\.py',
     'hours of training or a benchmark of the machine; their committed results are in benchmarks/results'),
    (r'benchmarks/mutations\.py', 'runs the init tests once per planted bug (minutes); its committed result is '
                                 'benchmarks/results/mutations.txt'),
    (r'benchmarks/learned_table_training\.py', "reads the runs of the compare command before it (an hour of "
                                               "training); its committed result is in benchmarks/results"),
    (r'--device cuda', 'needs a CUDA GPU; benchmarks/gpu/run.sh runs it there'),
    (r'benchmarks/gpu/', 'packs data and trains on a GPU machine (minutes of a GPU); tests/test_compare_inits.py '
                         'checks the protocol'),
    (r'--data-dir data/cifar100', 'downloads CIFAR-100 (the 2025 recipes fetch their data); tests/test_recipes.py '
                                  'checks the recipe'),
    (r'hf-hub:', "reads a model from the Hugging Face Hub; tests/test_hub.py covers the Hub's layout"),
    # each of these starts processes that import torch again (half a minute here); the same runs are tested
    (r'^torchrun ', 'several processes; tests/test_train.py trains the same way with two'),
    (r'^python train\.py --device-modules', "timm's train.py in its own process; tests/test_timm_scripts.py runs it "
                                            "with --device-modules timm_structinit"),
    (r'^python timm-scripts/validate\.py --model local-dir:',
     'plain timm, in a process without this package; tests/test_timm_scripts.py runs validate.py on an export'),
)
TIMM_SCRIPT = re.compile(r'(?<![\w/.-])(?:path/to/|timm-scripts/)?(train|validate|benchmark|inference)\.py\b')
CIFAR10_CLASSES = ('airplane', 'automobile', 'bird', 'cat', 'deer', 'dog', 'frog', 'horse', 'ship', 'truck')
# one epoch on a few images, the same for every training command
OUR_TRAINING = ['--epochs', '1', '--warmup-epochs', '0', '--train-subset', '64', '--val-subset', '32', '--batch-size',
                '16', '--workers', '0', '--log-interval', '1000']
TIMM_TRAINING = ['--epochs', '1', '--warmup-epochs', '0', '-b', '8', '--workers', '0', '--model-kwargs', 'depth=1']


def _skip_reason(line: str):
    return next((reason for pattern, reason in NOT_RUN if re.search(pattern, line)), None)


def _runnable():
    """ (doc, line) of each distinct command of each document, in the document's order (the README first). """
    seen = set()
    for doc, line, _ in COMMAND_LINES:
        if (doc, line) not in seen:
            seen.add((doc, line))
            yield doc, line


RUNNABLE = list(_runnable())


def _shrink(tokens):
    """ The options a user could add that make the command quick here. """
    train_args = _module_args(tokens, 'timm_structinit.train')
    if tokens[0] == 'timm-structinit-train' or train_args is not None:
        if '--resume' in tokens:
            return [*OUR_TRAINING, '--epochs', '2']  # one more epoch than the run it continues
        args = train_mod.parse_args(tokens[1:] if train_args is None else train_args)
        # a ViT at its registered depth (a paper recipe's 12 blocks): one block; a depth the docs give stays, as a
        # later command may load the checkpoint
        registered_depth = args.model.startswith('vit_') and 'depth' not in args.model_kwargs and not (
            args.pretrained or args.initial_checkpoint)
        return [*OUR_TRAINING, *(['--model-kwargs', 'depth=1'] if registered_depth else [])]
    script = next((Path(t).name for t in tokens if t.endswith('.py')), '')
    if script == 'train.py':
        return TIMM_TRAINING
    if script == 'benchmark.py':
        return ['-b', '2', '--num-warm-iter', '1', '--num-bench-iter', '5']  # timm logs every num_bench_iter // 5
    if script in ('validate.py', 'inference.py'):
        return ['--workers', '0']
    if tokens[:2] == ['timm-structinit', 'show'] and '--images' in tokens:
        return ['--num-images', '8']
    if tokens[:2] == ['timm-structinit', 'push'] and '--dry-run' not in tokens:
        return ['--dry-run']  # prints what would be sent; nothing leaves the machine
    return []


def _make_workdir(root: Path) -> Path:
    """ A folder standing for the repository's root (with its docs/), with a tiny CIFAR-10 image folder (8 training
    and 4 test images a class) for `path/to/cifar10`. """
    (root / 'docs').mkdir(parents=True)
    g = torch.Generator().manual_seed(0)
    for split, count in (('train', 8), ('test', 4)):
        for c, name in enumerate(CIFAR10_CLASSES):
            (root / 'cifar10' / split / name).mkdir(parents=True)
            for i in range(count):
                pixels = torch.rand(32, 32, 3, generator=g) * 200 + c * 5
                Image.fromarray(pixels.byte().numpy()).save(root / 'cifar10' / split / name / f'{i}.png')
    return root


@pytest.fixture(scope='module')
def workdirs(tmp_path_factory):
    """ Each document's folder, made when its first command runs in this process, and the commands run there. """
    made = {}

    def workdir(doc: Path):
        if doc not in made:
            made[doc] = (_make_workdir(tmp_path_factory.mktemp(doc.stem)), set())
        return made[doc]
    return workdir


def _resolve(line: str, workdir: Path) -> str:
    """ The command line with its placeholders replaced by what stands for them here. """
    line = line.replace('path/to/cifar10', str(workdir / 'cifar10'))
    line = line.replace('output/train/<run>', 'output/train/resumable')
    return TIMM_SCRIPT.sub(lambda m: str(TIMM_SCRIPTS / f'{m.group(1)}.py'), line)


def _main_and_argv(tokens):
    """ The entry point a command calls and its arguments: this package's commands run in this process (each
    process would import torch and timm again). """
    for module, main in (('timm_structinit.train', train_mod.main), ('timm_structinit.run', run_mod.main)):
        if tokens[0] == 'python' and _module_args(tokens, module) is not None:
            return main, _module_args(tokens, module)
    if tokens[0] in ('timm-structinit-train', 'timm-structinit'):
        return (train_mod.main if tokens[0] == 'timm-structinit-train' else cli.main), tokens[1:]
    if tokens[0] == 'python' and tokens[1].startswith('docs/'):  # a script of this repository
        return (lambda argv: run_mod.run_script(str(REPO / argv[0]), argv[1:])), tokens[1:]
    raise AssertionError(f'no way to run {" ".join(tokens)!r} here: run it, or say in NOT_RUN why not')


def _run(tokens, capsys) -> None:
    main, argv = _main_and_argv(tokens)
    threads, handlers, level = torch.get_num_threads(), list(logging.root.handlers), logging.root.level
    torch.set_num_threads(1)
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    finally:  # timm's scripts log through handlers on this test's captured streams: leave none behind
        torch.set_num_threads(threads)
        logging.root.handlers[:], logging.root.level = handlers, level
    out, err = capsys.readouterr()
    assert code == 0, f'{" ".join(tokens)}\nexit status {code}\n{out[-3000:]}\n{err[-3000:]}'


def _run_line(line: str, workdir: Path, capsys) -> None:
    """ Run one documented command line in `workdir` (the document's folder, the working folder already). """
    tokens = shlex.split(_resolve(line, workdir))
    while re.fullmatch(r'[A-Z_]+=\S*', tokens[0]):  # VAR=value prefixes: the tests run on one thread anyway
        tokens = tokens[1:]
    if '--resume' in tokens:  # first the run it continues: one epoch of the same command
        _run([*tokens[:tokens.index('--resume')], *OUR_TRAINING, '--experiment', 'resumable'], capsys)
    _run([*tokens, *_shrink(tokens)], capsys)


def _runs_here(line: str) -> bool:
    return _skip_reason(line) is None and not (TIMM_SCRIPT.search(line) and not (TIMM_SCRIPTS / 'train.py').is_file())


@pytest.mark.slow
@pytest.mark.parametrize('doc,line', [pytest.param(d, line, marks=pytest.mark.xdist_group(str(d)))
                                      for d, line in RUNNABLE], ids=[f'{d}:{line[:70]}' for d, line in RUNNABLE])
def test_documented_command_runs(doc, line, workdirs, monkeypatch, capsys):
    reason = _skip_reason(line)
    if reason:
        pytest.skip(reason)
    if not _runs_here(line):
        pytest.skip(f"timm's scripts not found at {TIMM_SCRIPTS}")
    workdir, done = workdirs(doc)
    monkeypatch.chdir(workdir)
    earlier = [other for d, other in RUNNABLE[:RUNNABLE.index((doc, line))] if d == doc and _runs_here(other)]
    for other in [*(o for o in earlier if o not in done), line]:
        done.add(other)  # tried once: a command that fails is reported by its own test, not run again
        _run_line(other, workdir, capsys)


# --- the main job's time ---------------------------------------------------------------------------------------------

RECIPE_HEADERS = [REPO / 'timm_structinit' / 'recipes' / 'digits.yaml']
MAIN_JOB = re.compile(r'main job|timm-structinit-train -c digits\b', re.I)
# the two ways its time is stated: the figure measured with the cores to itself, and beside one busy process (the
# benchmark's CPU-bound loop), each on the machine it was measured on
MAIN_JOB_TIME = {'idle': re.compile(r'\b(\d+) s on an idle 2-core machine'),
                 'busy': re.compile(r'\b(\d+) s beside one busy process')}
# a time as prose writes one: '75 s', '3.1-9.4 minutes', 'a minute', 'a few minutes', 'several minutes'
DURATION = re.compile(r'\b\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)? ?(?:s|secs?|seconds?|min|mins|minutes?|h|hours?)\b'
                      r'|\b(?:an?|one|few|several|two|three)(?: few)? (?:seconds?|minutes?|hours?)\b', re.I)


def _paragraphs(path: Path):
    """ The paragraphs of a document, or of a recipe's header comment, each on one line. """
    text = path.read_text(encoding='utf-8')
    if path.suffix == '.yaml':
        text = '\n'.join(line.lstrip('#') for line in text.splitlines() if line.startswith('#'))
    return [' '.join(paragraph.split()) for paragraph in re.split(r'\n\s*\n', text)]


def test_the_main_job_takes_one_stated_time_wherever_a_time_is_given_for_it():
    """ Wherever the main job's time is given, it is the one idle figure and the one busy figure, stated as such. """
    stated, other_times = {kind: {} for kind in MAIN_JOB_TIME}, []
    for path in [*DOCS, *RECIPE_HEADERS]:
        for paragraph in filter(MAIN_JOB.search, _paragraphs(path)):
            rest = paragraph
            for kind, pattern in MAIN_JOB_TIME.items():
                stated[kind].setdefault(path.relative_to(REPO).as_posix(), set()).update(pattern.findall(paragraph))
                rest = pattern.sub('', rest)
            other_times += [(path.name, t) for t in DURATION.findall(rest)]
    assert other_times == [], other_times  # a time given for the main job that is not a measured one
    for kind, figures in stated.items():
        assert len(set().union(*figures.values())) == 1, (kind, figures)
    assert {path for path, figures in stated['idle'].items() if figures} >= {
        'README.md', 'docs/training.md', 'timm_structinit/recipes/digits.yaml'}
    assert {path for path, figures in stated['busy'].items() if figures} >= {'README.md', 'docs/training.md'}
