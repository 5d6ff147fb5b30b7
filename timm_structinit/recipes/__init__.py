""" Training recipes that ship with the package: YAML files of timm train.py's option names (underscored), each with
a header that cites its source line by line and says what the source left open.

A recipe is addressed by its name from any folder: `timm-structinit-train -c impulse_vit_tiny_patch2_cifar10` (a
path to any YAML file still works), `python -m timm_structinit.run train.py -c NAME` hands timm's own train.py the
packaged file, and `timm-structinit recipes` lists what each trains (`recipe_summary`).
"""
import difflib
import os
from pathlib import Path
from typing import Dict, List, Optional

__all__ = ['RECIPES_DIR', 'list_recipes', 'recipe_path', 'recipe_source', 'recipe_summary', 'resolve_config',
           'unknown_config']

RECIPES_DIR = Path(__file__).resolve().parent


def list_recipes() -> List[str]:
    """ The names of the packaged recipes, sorted. """
    return sorted(p.stem for p in RECIPES_DIR.glob('*.yaml'))


def _unknown(name: str) -> str:
    close = difflib.get_close_matches(name, list_recipes(), n=3, cutoff=0.5)
    return (f'{name!r} is neither a file nor a packaged recipe' + (f'; did you mean {", ".join(close)}?' if close
            else '') + ' (`timm-structinit recipes` lists them)')


def recipe_path(name: str) -> Path:
    """ The file of packaged recipe `name` (with or without `.yaml`); ValueError naming close names otherwise. """
    stem = name[:-len('.yaml')] if name.endswith('.yaml') else name
    path = RECIPES_DIR / f'{stem}.yaml'
    if os.sep in stem or '/' in stem or not path.is_file():
        raise ValueError(_unknown(name))
    return path


def recipe_source(name: str) -> str:
    """ The source a recipe's header cites (its `# Source:` line, else its first line), on one line. """
    lines = [line[1:].strip() for line in recipe_path(name).read_text(encoding='utf-8').splitlines()
             if line.startswith('#')]
    source = next((line for line in lines if line.lower().startswith('source:')), lines[0] if lines else '')
    return source.split(':', 1)[1].strip() if source.lower().startswith('source:') else source


def recipe_summary(name: str) -> Dict[str, object]:
    """ What a recipe trains, as the training command reads it: the model, the data (a `--dataset` name, or
    ImageFolder: an image folder under --data-dir), the image side, the epochs and the batch per process (the
    command's defaults where the recipe leaves one out; the image side is then the model's own). """
    import yaml
    from timm_structinit_cli.train_parser import build_parser
    cfg = yaml.safe_load(recipe_path(name).read_text(encoding='utf-8')) or {}
    defaults = build_parser()
    model = cfg.get('model', defaults.get_default('model'))
    model_kwargs = cfg.get('model_kwargs') or {}
    size = (cfg.get('input_size') or [None])[-1] or cfg.get('img_size') or model_kwargs.get('img_size')
    if size is None:
        import timm
        size = (timm.get_pretrained_cfg_value(model, 'input_size') or [None])[-1]
    return {'model': model, 'data': cfg.get('dataset') or 'ImageFolder', 'image': size,
            'epochs': cfg.get('epochs', defaults.get_default('epochs')),
            'batch': cfg.get('batch_size', defaults.get_default('batch_size'))}


def resolve_config(value: str) -> Optional[str]:
    """ The YAML file `-c VALUE` means: an existing file as given, else the packaged recipe of that name; None when
    it is neither (the caller reports it with `unknown_config`). """
    if os.path.isfile(value):
        return value
    try:
        return str(recipe_path(value))
    except ValueError:
        return None


def unknown_config(value: str) -> str:
    """ The error for a `-c VALUE` that `resolve_config` could not resolve. """
    return _unknown(value)
