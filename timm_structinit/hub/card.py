""" The README.md of an export: a model card whose metadata huggingface_hub writes (`ModelCardData`, `EvalResult`).

The text says how to load the weights (plain timm first), how they were made (init method, every hyperparameter,
seed, solver, training recipe) and what to cite. It is built from config.json, so it holds only what config.json
holds: file, dataset and recipe names, never a local path.
"""
import json
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence

import timm
from huggingface_hub import EvalResult, ModelCard, ModelCardData
from torch import nn

from ..utils.kwargs import format_kwargs
from .plain_timm import CONFIG_KEY

# arXiv id -> (authors, title, year) of the papers the inits come from
_PAPERS = {
    '2305.09828': ('Trockman, Asher and Kolter, J. Zico', 'Mimetic Initialization of Self-Attention Layers', 2023),
    '2404.01139': ('Zheng, Jianqiao and Li, Xueqian and Saratchandran, Hemanth and Lucey, Simon',
                   'Structured Initialization for Attention in Vision Transformers', 2024),
    '2505.19985': ('Zheng, Jianqiao and Li, Xueqian and Saratchandran, Hemanth and Lucey, Simon',
                   'Structured Initialization for Vision Transformers', 2025),
}
_METHOD_PAPERS = {'mimetic': ['2305.09828'], 'impulse': ['2404.01139', '2505.19985']}
_METRIC_NAMES = {'top1': 'top-1 accuracy', 'top5': 'top-5 accuracy'}


class ModelKind(NamedTuple):
    name: str  # in prose
    timm_class: str  # the timm class the package model subclasses
    tag: str  # the Hub tag


def model_kind(model: nn.Module) -> ModelKind:
    from timm.models import MlpMixer, SwinTransformer
    if isinstance(model, SwinTransformer):
        return ModelKind('Swin Transformer', 'SwinTransformer', 'swin-transformer')
    if isinstance(model, MlpMixer):
        return ModelKind('MLP-Mixer', 'MlpMixer', 'mlp-mixer')
    return ModelKind('Vision Transformer', 'VisionTransformer', 'vision-transformer')


def fmt(value: Any) -> str:
    """ A compact inline rendering: numbers as they are (floats at 6 significant digits, in containers too), any
    other value as JSON in a code span. """
    def rounded(v: Any) -> Any:
        if isinstance(v, (list, dict)):
            return {k: rounded(x) for k, x in v.items()} if isinstance(v, dict) else [rounded(x) for x in v]
        return float(f'{v:.6g}') if isinstance(v, float) else v
    value = rounded(value)
    if isinstance(value, (int, float)):
        return f'{value:.6g}' if isinstance(value, float) else str(value)
    return f'`{value}`' if isinstance(value, str) else f'`{json.dumps(value, separators=(", ", ": "))}`'


def table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    return '\n'.join('| ' + ' | '.join(str(c).replace('|', '\\|') for c in row) + ' |'  # a bare '|' ends a cell
                     for row in [header, ['---'] * len(header), *rows])


def _card_data(config: Mapping[str, Any], own: Mapping[str, Any], title: str, kind: ModelKind) -> ModelCardData:
    trained, method = own['trained'] or {}, (own['struct_init'] or {}).get('method')
    ev, data = trained.get('eval'), trained.get('dataset') or {}
    results = None
    if ev and data and ev['of_these_weights'] and ev['metric'] in _METRIC_NAMES:
        results = [EvalResult(
            task_type='image-classification', task_name='Image Classification', dataset_type=data['type'],
            dataset_name=data['name'], dataset_split=ev['split'], metric_type='accuracy',
            metric_name=_METRIC_NAMES[ev['metric']], metric_value=round(ev['value'], 4),
            dataset_args={'num_samples': ev['subset']} if ev['subset'] else None)]
    return ModelCardData(
        model_name=title, library_name='timm', pipeline_tag='image-classification', eval_results=results,
        license=config['pretrained_cfg'].get('license', 'apache-2.0'), base_model=trained.get('base_model'),
        tags=['image-classification', 'timm', 'timm-structinit', kind.tag] + (
            [f'{method}-init'] if method else []), datasets=[data['hub_id']] if data.get('hub_id') else None)


def _load_section(config: Mapping[str, Any], own: Mapping[str, Any], model_name: str, load_id: str,
                  sincos: bool, kind: ModelKind) -> List[str]:
    line = f'model = timm.create_model("{load_id}", pretrained=True)'
    plugin = f'```python\nimport timm\nimport timm_structinit  # registers the architecture with timm\n\n{line}\n```'
    hooked = (f'```python\nimport timm\nfrom timm_structinit.hub import registered_exports\n\n'
              f'with registered_exports():  # timm\'s loader builds the registered architecture\n    {line}\n```')
    needs = (f'`local-dir:` needs timm >= 1.0.16; written with timm {timm.__version__} and timm-structinit '
             f'{own["version"]}.')
    if 'architecture' not in own:  # no plain timm equivalent: the registered architecture only
        return ['## How to load', f'timm knows `{model_name}` only after `timm_structinit` is imported (timm has no '
                'plugin discovery), so import it before creating the model:', plugin, needs]
    gains = ['a fixed sin-cos table, regenerated rather than interpolated at other input sizes'] if sincos else []
    gains += [] if own['trained'] else [f'after `torch.manual_seed({own["seed"]})`, the line without '
                                        '`pretrained=True` draws these weights again']
    return [
        '## How to load',
        f'Plain timm builds `{config["architecture"]}` with the `model_args` of config.json (a `{kind.timm_class}` of '
        'this geometry) and loads these weights strictly; its outputs are the same:',
        f'```python\nimport timm\n\n{line}\n```',
        f'Inside `timm_structinit.hub.registered_exports()`, the same line builds the registered `{model_name}` (a '
        f'`Struct{kind.timm_class}`{": " + "; ".join(gains) if gains else ""}):', hooked, needs]


def rest_init_text(weight_init: str) -> str:
    """ How the weights a structured init does not write were initialized, from the model's `weight_init`. """
    if weight_init == 'reset':
        return ("PyTorch's default init (`weight_init='reset'`: each layer's `reset_parameters`, Linear and Conv "
                "within +-1/sqrt(fan_in)), as the structured-init authors' `weight_init=skip` runs")
    return "timm's init" + (f" (`weight_init='{weight_init}'`)" if weight_init else '')


def _init_seed_text(record: Mapping[str, Any], trained: Mapping[str, Any]) -> str:
    """ The seed of the init a run started from: fixed by its model_kwargs, or drawn from torch's generator, which
    the run's --seed seeds (recorded by the run, or, by an older one, not). """
    seed = (trained.get('recipe') or {}).get('seed')
    run_seed = f"the run's --seed {seed}" if seed is not None else "the run's seed"
    if 'seed' not in record:
        return (f"not recorded in the checkpoint: the run did not fix struct_init_seed, so its init drew one from "
                f"torch's generator, seeded with {run_seed}, and this run did not record it")
    if trained.get('init_seed_drawn'):
        return (f"struct_init_seed {record['seed']}, drawn from torch's generator seeded with {run_seed} (the run "
                f"did not fix one; it recorded the one drawn)")
    return f"struct_init_seed {record['seed']} (from the training run's model_kwargs)"


def _init_section(own: Mapping[str, Any], model_name: str, model_kwargs: Mapping[str, Any],
                  num_layers: int) -> List[str]:
    record, trained = own['struct_init'] or {}, own['trained']
    method = record.get('method')
    rows = [('method', f'`{method}`' if method else 'none (no structured init)'),
            ('other weights', rest_init_text(own.get('weight_init', '')))]
    if trained is None:
        init_seed = f', struct_init_seed {record["seed"]}' if method else ''
        rows.append(('seed', f'{own["seed"]} (`torch.manual_seed`){init_seed}'))
    elif trained['started_from']:
        rows.append(('initial weights', f'loaded from {trained["started_from"]}, whose own record tells its init'))
    elif method:
        rows.append(('init seed', _init_seed_text(record, trained)))
    per_layer = {k: v for k, v in record.items() if isinstance(v, list) and num_layers > 0 and len(v) == num_layers
                 and all(isinstance(x, list) for x in v)}
    rows += [('solver', fmt(record['solver']))] if 'solver' in record else []
    rows += [('final objective', f'{fmt(record["objective_mean"])} (mean over heads'
              + (', per layer below)' if 'objective' in per_layer else ')'))] if 'objective_mean' in record else []
    blocks = ['## Initialization', table(rows, ('field', 'value'))]
    if method:
        blocks += ['Hyperparameters (every field of the init config):',
                   table([(f'`{k}`', fmt(v)) for k, v in record['cfg'].items()], ('name', 'value'))]
    if per_layer:
        rows = [(str(i), *(fmt(v[i]) for v in per_layer.values())) for i in range(num_layers)]
        blocks += ["Per layer, one value per head (the solver's results):", table(rows, ('layer', *per_layer))]
    if trained is None:
        cmd = f'timm-structinit export {model_name} DIR --seed {own["seed"]}'
        cmd += f' --model-kwargs {format_kwargs(model_kwargs)}' if model_kwargs else ''
        blocks += ['To write these weights again:', f'```bash\n{cmd}\n```']
    return blocks


def _architecture_section(model: nn.Module, config: Mapping[str, Any], own: Mapping[str, Any]) -> List[str]:
    pcfg = config['pretrained_cfg']
    rows = [('architecture', f'`{config["architecture"]}`'), ('model_args', fmt(config.get('model_args', {})))]
    if 'architecture' in own:
        rows += [('registered architecture', f'`{own["architecture"]}` (with `import timm_structinit`)'),
                 ('its model_args', fmt(own['model_args']))]
    rows += [('parameters', f'{sum(p.numel() for p in model.parameters()):,}'),
             ('input size', 'x'.join(str(s) for s in pcfg['input_size'])),
             ('normalization', f'mean {fmt(pcfg["mean"])}, std {fmt(pcfg["std"])}')]
    rows += [('class names', fmt(config['label_names']))] if config.get('label_names') else []
    if getattr(model, 'sincos_pos_embed', False):
        rows.append(('position embedding', 'fixed 2D sin-cos (a buffer, stored with the weights as `pos_embed`)'))
    return ['## Architecture', table(rows, ('field', 'value'))]


def _training_section(trained: Mapping[str, Any]) -> List[str]:
    ema = 'ema' in trained['weights']
    rows = [('checkpoint', f'`{trained["checkpoint"]}`'), ('weights', f'`{trained["weights"]}`' + ' (EMA)' * ema)]
    data, ev = trained['dataset'], trained['eval']
    if trained['recipe_file']:
        rows.append(('recipe', f'`{trained["recipe_file"]}`'))
    if data:
        rows.append(('data', f'`{data["name"]}`' + (f' (Hub dataset `{data["hub_id"]}`)' if data['hub_id'] else '')))
    if trained['epoch'] is not None:
        rows.append(('epoch (timm counts from 0)', fmt(trained['epoch'])))
    if ev:
        where = f' on split `{ev["split"]}`' + (f' ({ev["subset"]} images, class-balanced)' if ev['subset'] else '')
        other = 'the weights without EMA' if ema else 'the EMA weights'
        whose = '' if ev['of_these_weights'] else f' (measured on {other}, not these)'
        rows.append((f'eval {ev["metric"]}', fmt(ev['value']) + where + whose))
    rows += [(f'`{k}`', fmt(v)) for k, v in trained['recipe'].items()]
    unknown = [] if trained['recipe'] else ['The checkpoint holds no training arguments, so the recipe is not known.']
    return ['## Training', table(rows, ('field', 'value'))] + unknown


def _citation_section(method: Optional[str], pretrained_cfg: Mapping[str, Any]) -> List[str]:
    ids = next((list(ids) for name, ids in _METHOD_PAPERS.items() if (method or '').startswith(name)), [])
    ids += [i for i in (p.split(':')[-1] for p in pretrained_cfg.get('paper_ids') or ()) if i not in ids]
    papers = {i: _PAPERS[i] for i in ids if i in _PAPERS}
    if not papers:
        return []
    links = [f'- {authors.split(",")[0]} et al., "{title}", {year}: https://arxiv.org/abs/{i}'
             for i, (authors, title, year) in papers.items()]
    bibtex = [f'```bibtex\n@article{{{authors.split(",")[0].lower()}{year},\n  title={{{title}}},\n'
              f'  author={{{authors}}},\n  journal={{arXiv preprint arXiv:{i}}},\n  year={{{year}}}\n}}\n```'
              for i, (authors, title, year) in papers.items()]
    return ['## Citation', '\n'.join(links), *bibtex]


def model_card(model: nn.Module, config: Dict[str, Any], model_name: str, model_kwargs: Mapping[str, Any],
               load_id: str) -> ModelCard:
    """ The model card of an export whose config.json is `config`, loaded from `load_id`; `model_kwargs` (the
    caller's) go into the command that writes an init again. """
    own = config[CONFIG_KEY]
    title = load_id.split(':', 1)[1].split('@')[0].split('/')[-1] if load_id.startswith('hf-hub:') else model_name
    method = (own['struct_init'] or {}).get('method')
    reset = own.get('weight_init') == 'reset'
    if method:
        init = f'{method} initialization' + (" and PyTorch's default init for the other weights" if reset else '')
    else:
        init = ("PyTorch's default initialization (`weight_init='reset'`)" if reset else
                "timm's default initialization") + ' (no structured init)'

    state = 'trained weights' if own['trained'] else \
        'initial weights, before any training: a run that loads them starts from exactly this point'
    kind = model_kind(model)
    blocks = [f'# {title}', f'A timm {kind.name} (`{model_name}`) with {init}. These are the {state}.']
    blocks += _load_section(config, own, model_name, load_id, bool(getattr(model, 'sincos_pos_embed', False)), kind)
    blocks += _init_section(own, model_name, model_kwargs, len(getattr(model, 'blocks', ())))
    blocks += _architecture_section(model, config, own)
    blocks += _training_section(own['trained']) if own['trained'] else []
    blocks += _citation_section(method, config['pretrained_cfg'])
    return ModelCard(f'---\n{_card_data(config, own, title, kind).to_yaml()}\n---\n\n' + '\n\n'.join(blocks) + '\n')
