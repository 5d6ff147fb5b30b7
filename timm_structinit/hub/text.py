""" Markdown pieces of a model card: compact values, tables, command lines, and the papers to cite. """
import ast
import json
import shlex
from typing import Any, Dict, List, Mapping, Optional, Sequence

from .provenance import to_plain

PAPERS = {
    'arXiv:2305.09828': (
        'Trockman & Kolter, "Mimetic Initialization of Self-Attention Layers", ICML 2023',
        '@inproceedings{trockman2023mimetic,\n'
        '  title={Mimetic Initialization of Self-Attention Layers},\n'
        '  author={Trockman, Asher and Kolter, J. Zico},\n'
        '  booktitle={International Conference on Machine Learning (ICML)},\n'
        '  year={2023},\n'
        '  eprint={2305.09828},\n'
        '  archivePrefix={arXiv}\n'
        '}'),
    'arXiv:2404.01139': (
        'Zheng, Li, Saratchandran & Lucey, "Structured Initialization for Attention in Vision Transformers", 2024',
        '@article{zheng2024structured,\n'
        '  title={Structured Initialization for Attention in Vision Transformers},\n'
        '  author={Zheng, Jianqiao and Li, Xueqian and Saratchandran, Hemanth and Lucey, Simon},\n'
        '  journal={arXiv preprint arXiv:2404.01139},\n'
        '  year={2024}\n'
        '}'),
    'arXiv:2505.19985': (
        'Zheng, Li, Saratchandran & Lucey, "Structured Initialization for Vision Transformers", 2025',
        '@article{zheng2025structured,\n'
        '  title={Structured Initialization for Vision Transformers},\n'
        '  author={Zheng, Jianqiao and Li, Xueqian and Saratchandran, Hemanth and Lucey, Simon},\n'
        '  journal={arXiv preprint arXiv:2505.19985},\n'
        '  year={2025}\n'
        '}'),
}
_METHOD_PAPERS = {
    'mimetic': ('arXiv:2305.09828',),
    'impulse': ('arXiv:2404.01139', 'arXiv:2505.19985'),
}


def paper_ids(method: Optional[str], pretrained_cfg: Mapping[str, Any]) -> List[str]:
    ids: List[str] = []
    if method:
        base = next((m for m in _METHOD_PAPERS if method.startswith(m)), None)
        ids += list(_METHOD_PAPERS.get(base, ()))
    return ids + [p for p in pretrained_cfg.get('paper_ids') or () if p not in ids]


def _round(value: Any) -> Any:
    """ Floats at 6 significant digits, inside containers too, so long records stay readable. """
    if isinstance(value, float):
        return float(f'{value:.6g}')
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_round(v) for v in value]
    return value


def fmt(value: Any) -> str:
    """ A compact inline rendering: JSON in code spans for strings and containers, plain numbers. """
    value = _round(to_plain(value))
    if isinstance(value, float):
        return f'{value:.6g}'
    if isinstance(value, (dict, list)):
        return f'`{json.dumps(value, separators=(", ", ": "))}`'
    return f'`{value}`' if isinstance(value, str) else str(value)


def table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    lines = ['| ' + ' | '.join(header) + ' |', '|' + ' --- |' * len(header)]
    # a '|' inside a cell would end it
    return '\n'.join(lines + ['| ' + ' | '.join(str(c).replace('|', '\\|') for c in row) + ' |' for row in rows])


def _py_literal(value: Any) -> str:
    """ A Python literal for `value` that uses double quotes, so the shell command can wrap it in single ones. """
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        items = ', '.join(_py_literal(v) for v in value)
        return f'({items},)' if isinstance(value, tuple) and len(value) == 1 else (
            f'({items})' if isinstance(value, tuple) else f'[{items}]')
    if isinstance(value, Mapping):
        return '{' + ', '.join(f'{_py_literal(k)}: {_py_literal(v)}' for k, v in value.items()) + '}'
    return repr(value)


def kwargs_cli(kwargs: Mapping[str, Any]) -> str:
    """ `--model-kwargs` items that parse back to `kwargs`; plain words stay unquoted, as the parser allows. """
    items = []
    for key, value in kwargs.items():
        text = _py_literal(value)
        if isinstance(value, str):
            try:
                ast.literal_eval(value)
            except (ValueError, SyntaxError):
                text = value  # not a literal, so the parser keeps it as the string it is
        items.append(shlex.quote(f'{key}={text}'))
    return ' '.join(items)


def _flat_numbers(value: Any) -> List[float]:
    if isinstance(value, list):
        return [x for v in value for x in _flat_numbers(v)]
    return [float(value)] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


def summarize_objective(objective: Any, per_layer: bool) -> str:
    """ One cell for the solver's final objective: the value, or mean and worst over heads when it is per head. """
    values = _flat_numbers(objective)
    if not isinstance(objective, list) or not values:
        return fmt(objective)
    mean = sum(values) / len(values)
    where = 'per layer below' if per_layer else f'all: {fmt(objective)}'
    return f'mean {mean:.6g}, worst {max(values):.6g} over {len(values)} heads ({where})'


def per_layer_entries(record: Mapping[str, Any], num_layers: int) -> Dict[str, List[Any]]:
    """ Record entries holding one list per layer (offsets, objective per head, ...): shown as a table by layer. """
    return {k: v for k, v in record.items()
            if k not in ('method', 'seed', 'cfg') and isinstance(v, list) and num_layers > 0
            and len(v) == num_layers and all(isinstance(x, list) for x in v)}
