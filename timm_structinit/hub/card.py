""" The README.md of an export: a Hugging Face model card whose metadata huggingface_hub writes and parses.

Metadata (`ModelCardData`): library_name timm, license, pipeline tag, tags, and for trained weights the datasets,
the base model they were fine-tuned from, and a model-index entry (`EvalResult`) with the top-1 / top-5 the
checkpoint recorded on its evaluation split. The text says how to load the weights (plain timm first), how they
were made (init method, every hyperparameter, seed, solver, training recipe) and what to cite. Only portable facts
are written: file and folder names, never local paths of data or outputs.
"""
import json
import os
from typing import Any, List, Mapping, Optional, Sequence, Tuple

import timm
from huggingface_hub import EvalResult, ModelCard, ModelCardData
from torch import nn

from .plain_timm import CONFIG_KEY
from .provenance import Provenance
from .text import PAPERS, fmt, kwargs_cli, paper_ids, per_layer_entries, summarize_objective, table

# the training arguments a card lists first, when the checkpoint has them; all others follow in a details block
_RECIPE_KEYS = (
    'dataset', 'train_split', 'val_split', 'train_subset', 'val_subset', 'model', 'model_kwargs', 'num_classes',
    'img_size', 'input_size', 'epochs', 'batch_size', 'opt', 'lr', 'weight_decay', 'momentum', 'layer_decay',
    'sched', 'warmup_epochs', 'warmup_lr', 'min_lr', 'clip_grad', 'smoothing', 'aa', 'reprob', 'mixup', 'cutmix',
    'drop', 'drop_path', 'model_ema', 'model_ema_decay', 'amp', 'seed',
)
_METRIC_NAMES = {'top1': 'top-1 accuracy', 'top5': 'top-5 accuracy'}


def _eval_results(training: Optional[Mapping[str, Any]], title: str) -> Optional[List[EvalResult]]:
    ev, data = (training or {}).get('eval'), (training or {}).get('dataset')
    if not ev or not data or not ev['of_these_weights'] or ev['metric'] not in _METRIC_NAMES:
        return None
    return [EvalResult(
        task_type='image-classification', task_name='Image Classification', dataset_type=data['type'],
        dataset_name=data['name'], dataset_split=ev['split'], metric_type='accuracy',
        metric_name=_METRIC_NAMES[ev['metric']], metric_value=round(ev['value'], 4),
        dataset_args={'num_samples': ev['subset']} if ev['subset'] else None)]


def card_data(config: Mapping[str, Any], prov: Provenance, title: str) -> ModelCardData:
    method = (prov.init_record or {}).get('method')
    training = prov.training or {}
    hub_id = (training.get('dataset') or {}).get('hub_id')
    base = training.get('base_model')
    return ModelCardData(
        model_name=title, library_name='timm', pipeline_tag='image-classification',
        license=config.get('pretrained_cfg', {}).get('license', 'apache-2.0'),
        tags=['image-classification', 'timm', 'timm-structinit', 'vision-transformer']
        + ([f'{method}-init'] if method else []),
        datasets=[hub_id] if hub_id else None, base_model=base, eval_results=_eval_results(training, title))


def _load_blocks(config: Mapping[str, Any], prov: Provenance, load_id: str, sincos: bool) -> List[str]:
    line = f'model = timm.create_model("{load_id}", pretrained=True)'
    plugin = f'```python\nimport timm\nimport timm_structinit  # registers the architecture with timm\n\n{line}\n```'
    registered = (config.get(CONFIG_KEY) or {}).get('architecture')
    needs = (f'Needs timm >= 1.0.16 for `local-dir:` (written with timm {timm.__version__}); the plugin is '
             f'`timm-structinit` (this export: version {(config.get(CONFIG_KEY) or {}).get("version")}).')
    if registered is None:  # no plain timm equivalent: the registered architecture only
        return ['## How to load', f'timm knows `{prov.model_name}` only after `timm_structinit` is imported (timm '
                'has no plugin discovery), so import it before creating the model:', plugin,
                '`pretrained=True` loads these weights bit for bit; without it timm builds the same architecture '
                'with a fresh init. ' + needs]
    gains = ['the sin-cos position table stays frozen and is regenerated, not interpolated, when the input size '
             'changes'] if sincos else []
    gains += ['without `pretrained=True` the same init is drawn again'] if prov.training is None else []
    return [
        '## How to load',
        f'Plain timm builds `{config["architecture"]}` with the `model_args` of config.json (a `VisionTransformer` '
        'of this geometry) and loads these weights strictly; its outputs are the same:',
        f'```python\nimport timm\n\n{line}\n```',
        f'With `timm_structinit` imported first, the same line builds the registered `{registered}` (a '
        f'`StructVisionTransformer`{": " + " and ".join(gains) if gains else ""}):',
        plugin, needs]


def _init_rows(record: Mapping[str, Any], prov: Provenance) -> List[Tuple[str, Any]]:
    method, training = record.get('method'), prov.training
    rows: List[Tuple[str, Any]] = [('method', f'`{method}`' if method else "none (timm's default init)")]
    if training is None:
        rows.append(('seed', f'{prov.seed} (`torch.manual_seed`)'
                     + (f', struct_init_seed {record.get("seed", prov.seed)}' if method else '')))
    elif training.get('started_from'):
        rows.append(('initial weights', f'loaded from {training["started_from"]}, whose own record tells its '
                                        f'init and seed'))
    elif method and prov.init_seed_known:
        rows.append(('init seed', f"struct_init_seed {record.get('seed')} (from the training run's model_kwargs)"))
    elif method:
        seed = (training.get('args') or {}).get('seed')
        note = f'; the run seeded torch with {seed}' if seed is not None else ''
        rows.append(('init seed', f'not recorded in the checkpoint (struct_init_seed was not fixed{note})'))
    return rows


def _init_blocks(record: Mapping[str, Any], prov: Provenance, num_layers: int) -> List[str]:
    method = record.get('method')
    rows = _init_rows(record, prov)
    # a rebuilt init is the training run's own only if its seed is known
    solution = bool(method) and (prov.training is None or prov.init_seed_known)
    per_layer = per_layer_entries(record, num_layers) if solution else {}
    if solution and 'solver' in record:
        rows.append(('solver', fmt(record['solver'])))
    if solution and 'objective' in record:
        rows.append(('final objective', summarize_objective(record['objective'], 'objective' in per_layer)))
    blocks = ['## Initialization', table(rows, ('field', 'value'))]
    if method:
        blocks += ['Hyperparameters (every field of the init config):',
                   table([(f'`{k}`', fmt(v)) for k, v in (record.get('cfg') or {}).items()], ('name', 'value'))]
        shown = {'method', 'seed', 'cfg', 'solver', 'objective', *per_layer}
        extra = {k: v for k, v in record.items() if k not in shown}
        if solution and extra:
            blocks += ['Init record:', table([(f'`{k}`', fmt(v)) for k, v in extra.items()], ('entry', 'value'))]
    if per_layer:
        what = 'offsets (dy, dx) and ' if 'offsets' in per_layer else ''
        body = [(str(i), *(fmt(v[i]) for v in per_layer.values())) for i in range(num_layers)]
        blocks += [f"Per layer, one value per head ({what}the solver's results):", table(body, ('layer', *per_layer))]
    if prov.training is None:
        cmd = f'timm-structinit export {prov.model_name} DIR --seed {prov.seed}'
        cmd += f' --model-kwargs {kwargs_cli(prov.model_kwargs)}' if prov.model_kwargs else ''
        blocks += ['To write these weights again:', f'```bash\n{cmd}\n```']
    return blocks


def _architecture_blocks(model: nn.Module, config: Mapping[str, Any]) -> List[str]:
    pcfg, own = config.get('pretrained_cfg', {}), config.get(CONFIG_KEY) or {}
    rows = [('architecture', f'`{config.get("architecture")}`'), ('model_args', fmt(config.get('model_args', {})))]
    if own.get('architecture'):
        rows += [('registered architecture', f'`{own["architecture"]}` (with `import timm_structinit`)'),
                 ('its model_args', fmt(own.get('model_args', {})))]
    rows += [('num_classes', config.get('num_classes')), ('num_features', config.get('num_features')),
             ('parameters', f'{sum(p.numel() for p in model.parameters()):,}')]
    if pcfg.get('input_size'):
        rows.append(('input size', 'x'.join(str(s) for s in pcfg['input_size'])))
    if pcfg.get('mean') and pcfg.get('std'):
        rows.append(('normalization', f'mean {fmt(pcfg["mean"])}, std {fmt(pcfg["std"])}'))
    if pcfg.get('label_names'):
        rows.append(('class names', fmt(pcfg['label_names'])))
    if getattr(model, 'sincos_pos_embed', False):
        rows.append(('position embedding', 'fixed 2D sin-cos (frozen, stored with the weights as `pos_embed`)'))
    return ['## Architecture', table(rows, ('field', 'value'))]


def _training_blocks(training: Mapping[str, Any]) -> List[str]:
    weights = f'`{training["weights"]}`' + (' (EMA)' if 'ema' in training['weights'] else '')
    rows = [('checkpoint', f'`{training["checkpoint"]}`'), ('weights', weights)]
    args, ev, data = training.get('args') or {}, training.get('eval'), training.get('dataset')
    if args.get('config'):
        rows.append(('recipe', f'`{os.path.basename(str(args["config"]))}`'))
    if data:
        rows.append(('data', f'`{data["name"]}`' + (f' (Hub dataset `{data["hub_id"]}`)' if data['hub_id'] else '')))
    if training.get('epoch') is not None:
        rows.append(('epoch (timm counts from 0)', fmt(training['epoch'])))
    if ev:
        where = f' on split `{ev["split"]}`' + (f' ({ev["subset"]} images, class-balanced)' if ev['subset'] else '')
        whose = '' if ev['of_these_weights'] else f' (measured on {ev["measured_on"]}, not these)'
        rows.append((f'eval {ev["metric"]}', fmt(ev['value']) + where + whose))
    skip = {'dataset'} if data else set()
    skip |= set() if args.get('model_ema') else {'model_ema_decay'}  # a decay is part of the recipe with an EMA
    rows += [(f'`{k}`', fmt(args[k])) for k in _RECIPE_KEYS if args.get(k) not in (None, '') and k not in skip]
    blocks = ['## Training', table(rows, ('field', 'value'))]
    if args:
        blocks.append('<details><summary>All training arguments (local folders left out)</summary>\n\n```json\n'
                      + json.dumps(args, indent=2, sort_keys=True) + '\n```\n\n</details>')
    else:
        blocks.append('The checkpoint holds no training arguments, so the recipe is not known.')
    return blocks


def _citation_blocks(ids: Sequence[str]) -> List[str]:
    if not ids:
        return []
    links = [f'- {PAPERS.get(pid, (pid, None))[0]}: https://arxiv.org/abs/{pid.split(":", 1)[-1]}' for pid in ids]
    return ['## Citation', '\n'.join(links)] + [f'```bibtex\n{PAPERS[pid][1]}\n```' for pid in ids if pid in PAPERS]


def model_card(model: nn.Module, config: Mapping[str, Any], prov: Provenance, load_id: str) -> ModelCard:
    """ The model card of an export whose config.json is `config`, loaded from `load_id`. """
    record = prov.init_record or {}
    method = record.get('method')
    hub = load_id.startswith('hf-hub:')
    title = load_id.split(':', 1)[1].split('@')[0].split('/')[-1] if hub else prov.model_name
    init_text = f'{method} initialization' if method else "timm's default initialization (no structured init)"
    state = 'trained weights' if prov.training is not None else \
        'initial weights, before any training: a run that loads them starts from exactly this point'
    blocks = [f'# {title}', f'A timm Vision Transformer (`{prov.model_name}`) with {init_text}. These are the {state}.']
    blocks += _load_blocks(config, prov, load_id, bool(getattr(model, 'sincos_pos_embed', False)))
    blocks += _init_blocks(record, prov, len(getattr(model, 'blocks', ())))
    blocks += _architecture_blocks(model, config)
    blocks += _training_blocks(prov.training) if prov.training is not None else []
    blocks += _citation_blocks(paper_ids(method, config.get('pretrained_cfg', {})))
    front = card_data(config, prov, title).to_yaml()
    return ModelCard(f'---\n{front}\n---\n\n' + '\n\n'.join(blocks) + '\n')
