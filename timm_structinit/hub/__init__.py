""" Export and push initialized or trained models in timm's Hugging Face Hub layout, with a model card.

An export is a folder that plain timm loads, with or without this package:

* `config.json`, written by timm's own `save_for_hf`: a timm architecture (`vit_tiny_patch16_224`, ...) and the
  `model_args` that reproduce the weights' geometry, pretrained_cfg (with the class names of trained weights), and
  under `timm_structinit` the registered architecture and its model_args, the package version, the seed, the init
  record and a portable training summary,
* `model.safetensors`: the state dict, including the frozen sin-cos `pos_embed` of models that have one,
* `README.md`: a model card (metadata written by huggingface_hub: library, license, tags, datasets, model-index)
  with the init method and every hyperparameter, the seed, the solver and its final objective for impulse inits,
  the training recipe of trained weights, citations, and the lines that load it.

`timm.create_model('local-dir:DIR', pretrained=True)` (or `'hf-hub:ORG/NAME'`) in plain timm builds a timm
`VisionTransformer` that loads the weights strictly and computes the same outputs. After `import timm_structinit`
the same call builds the registered model (`StructVisionTransformer`, fixed sin-cos table) with bit-identical
weights, and without `pretrained=True` it redraws the same structured attention init (`struct_init_seed` is in the
registered model_args); every other weight then comes from torch's global generator, as for any timm model.

Uploads use huggingface_hub with the token it finds itself (`HF_TOKEN` or `hf auth login`); the token is never
printed or written. The folder is the same one `export_model` writes, so a dry run shows exactly what would be sent.
"""
from .card import model_card
from .errors import HubError
from .export import EXPORT_FILES, PushResult, build_model, export_model, list_export_files, load_lines, push_model
from .plain_timm import install_config_hook
from .provenance import state_dict_mismatch
from .text import fmt as _fmt, kwargs_cli as _kwargs_cli

__all__ = [
    'HubError', 'PushResult', 'build_model', 'export_model', 'push_model', 'list_export_files', 'EXPORT_FILES',
    'state_dict_mismatch', 'load_lines', 'model_card', 'install_config_hook',
]

install_config_hook()
