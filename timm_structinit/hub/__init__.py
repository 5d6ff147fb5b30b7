""" Export and push initialized or trained models in timm's Hugging Face Hub layout, with a model card.

An export is a folder of `config.json` (written by timm's `save_for_hf`), `model.safetensors` and a `README.md` model
card. Plain timm loads it, `timm.create_model('local-dir:DIR', pretrained=True)` or `'hf-hub:ORG/NAME'`, as its own
`VisionTransformer` with the same outputs; inside `registered_exports()` (or after `install_config_hook()`) the same
call builds the registered model (see `plain_timm`). Uploads use huggingface_hub with the token it finds itself
(`HF_TOKEN` or `hf auth login`). `probe` checks, before any work, that the weights a model names can be reached.
"""
from ..errors import HubError
from ..utils.checkpoints import state_dict_mismatch
from .card import model_card
from .export import EXPORT_FILES, PushResult, build_model, export_model, list_export_files, push_model
from .plain_timm import install_config_hook, registered_exports

__all__ = ['HubError', 'PushResult', 'build_model', 'export_model', 'push_model', 'list_export_files',
           'EXPORT_FILES', 'state_dict_mismatch', 'model_card', 'install_config_hook',
           'registered_exports']

