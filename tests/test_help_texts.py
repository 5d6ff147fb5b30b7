""" Every help text says each option's default once, and only when there is one (no `(default: None)`), and speaks
of its own command: show's options say what show does with them, not export's; `python -m timm_structinit.run --help`
says what it adds to timm's scripts; `timm-structinit recipes` lists what each recipe trains; `--workers` and
`--dataset` say what a run on this machine does. """
import argparse
import os
import re

import pytest
import yaml

from timm_structinit import cli
from timm_structinit import train as train_mod
from timm_structinit.data.dataset_factory import check_dataset_name
from timm_structinit.train.loaders import loader_workers
from timm_structinit.recipes import list_recipes, recipe_path
from timm_structinit.run import main as run_main
from timm_structinit_cli.parsing import OneDefaultHelpFormatter


def _subcommands(parser: argparse.ArgumentParser) -> dict:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def _parsers() -> dict:
    main = cli.build_parser()
    return {'timm-structinit': main, **{f'timm-structinit {name}': sub for name, sub in _subcommands(main).items()},
            'timm-structinit-train': train_mod.build_parser()}


def _option_helps(parser: argparse.ArgumentParser) -> dict:
    """ Each option's help as `--help` prints it (the formatter's default added), by its longest name. """
    formatter = parser._get_formatter()
    return {max(a.option_strings, key=len) if a.option_strings else a.dest: formatter._expand_help(a)
            for a in parser._actions if a.help not in (None, argparse.SUPPRESS)}


@pytest.mark.parametrize('command', sorted(_parsers()))
def test_every_option_names_its_default_at_most_once(command):
    parser = _parsers()[command]
    helps = _option_helps(parser)
    assert helps
    twice = {option: text for option, text in helps.items() if len(re.findall(r'\bdefault\b', text, re.I)) > 1}
    assert twice == {}
    printed = ' '.join(parser.format_help().split())
    for empty in ('(default: None)', '(default: )', '(default: [])', '(default: {})', '(default: False)'):
        assert empty not in printed, command


def test_the_formatter_leaves_a_written_default_and_adds_a_missing_one():
    parser = argparse.ArgumentParser(formatter_class=OneDefaultHelpFormatter)
    parser.add_argument('--a', default=3, help='a number')
    parser.add_argument('--b', default='x', help='a name (default: the model\'s)')
    parser.add_argument('--c', help='unset')
    parser.add_argument('--d', nargs='+', default=[0.5, 1.0], help='a range')
    parser.add_argument('--e', action='store_true', help='a flag')
    parser.add_argument('--f', default='', help='empty')
    helps = _option_helps(parser)
    assert helps == {'--help': 'show this help message and exit', '--a': 'a number (default: 3)',
                     '--b': "a name (default: the model's)", '--c': 'unset', '--d': 'a range (default: 0.5 1.0)',
                     '--e': 'a flag', '--f': 'empty'}


# what each of the three build commands does with the weights it builds, in the words its options use
VERBS = {'export': 'export', 'push': 'upload', 'show': 'show'}


@pytest.mark.parametrize('command', sorted(VERBS))
def test_the_build_options_speak_of_their_own_command(command):
    helps = _option_helps(_subcommands(cli.build_parser())[command])
    for option in ('--checkpoint', '--use-ema'):
        assert helps[option].split()[0] == VERBS[command], (option, helps[option])
    others = {verb for name, verb in VERBS.items() if name != command}
    assert [(o, h) for o, h in helps.items() if h.split()[0] in others and o != '--help'] == []


def test_show_takes_any_timm_model_or_an_export():
    model = _option_helps(_subcommands(cli.build_parser())['show'])['model']
    assert 'any timm model' in model and 'local-dir:DIR' in model and 'hf-hub:ORG/NAME' in model


def test_run_help_says_what_it_adds(capsys):
    assert run_main(['--help']) == 0
    text = ' '.join(capsys.readouterr().out.split())
    assert text.startswith('usage: python -m timm_structinit.run SCRIPT [ARGS ...]')
    for added in ("a packaged recipe's name", '--device cpu', 'CUDA is not available', 'local-dir:DIR',
                  'Pillow >= 13'):
        assert added in text, added


def test_recipes_lists_what_each_recipe_trains(capsys):
    assert cli.main(['recipes']) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ['RECIPE', 'MODEL', 'DATA', 'IMAGE', 'EPOCHS', 'BATCH']
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:] if line.strip() and not line[0].isdigit()}
    assert set(rows) == set(list_recipes())
    for name, row in rows.items():
        cfg = yaml.safe_load(recipe_path(name).read_text())
        assert row[0] == cfg['model'] and row[-2:] == [str(cfg['epochs']), str(cfg['batch_size'])], name
    # data and image side, as the recipes' own files give them
    assert rows['impulse2025_vit_tiny_patch16_224_food101'][1:3] == ['torch/food101', '224']
    assert rows['digits'][1:3] == ['sklearn/digits', '16']
    assert rows['impulse_vit_tiny_patch2_cifar10'][1:3] == ['torch/cifar10', '32']  # the model's own 32 px
    assert rows['quick_cifar10'][1:3] == ['ImageFolder', '32']  # an image folder under --data-dir


def test_compare_help_shows_the_arms_a_comparison_trains():
    """ The light parser's default arms (it cannot import the plan, which imports the package) are the plan's. """
    from timm_structinit.compare.plan import DEFAULT_ARMS
    compare = _subcommands(cli.build_parser())['compare']
    assert compare.get_default('inits') == list(DEFAULT_ARMS)
    assert f'(default: {" ".join(DEFAULT_ARMS)})' in _option_helps(compare)['--inits']


@pytest.mark.parametrize('cores', [1, 2, 4, 16])
def test_workers_help_says_how_many_loader_processes_a_run_starts_here(cores, monkeypatch):
    """ timm's default of 4 workers, at most one per core the process may use: a run on 2 cores starts 2 (its log
    says so, tests/test_cpu_defaults.py), and its help says 2. """
    monkeypatch.setattr(os, 'sched_getaffinity', lambda pid: set(range(cores)), raising=False)
    text = ' '.join(_option_helps(train_mod.build_parser())['--workers'].split())
    assert f'at most one per core it may use ({cores} here)' in text
    assert text.endswith('(default: 4)' if cores >= 4 else f'(default: 4, so {cores} on this machine)')
    assert loader_workers(train_mod.parse_args([]).workers) == min(4, cores)  # what the run starts


def test_dataset_help_names_its_default():
    text = ' '.join(_option_helps(train_mod.build_parser())['--dataset'].split())
    assert train_mod.parse_args([]).dataset == '' and check_dataset_name('') == 'folder'
    assert text.endswith("(default: '', the image folder)") and "'' for an image folder under --data-dir" in text
    assert 'sklearn/digits' in text and 'torch/cifar10' in text
