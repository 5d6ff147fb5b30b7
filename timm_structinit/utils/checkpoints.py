""" What a checkpoint holds against the model it is loaded into; shared by training and export. """
from typing import Any, Mapping

import torch


def state_dict_mismatch(own: Mapping[str, torch.Tensor], loaded: Mapping[str, Any]) -> str:
    """ '' when `loaded` fits a model whose state dict is `own`, else one line naming the keys that differ. """
    missing, unexpected = sorted(set(own) - set(loaded)), sorted(set(loaded) - set(own))
    shape = {k: tuple(getattr(loaded[k], 'shape', ())) for k in set(own) & set(loaded)}
    mismatched = sorted(k for k in shape if shape[k] != tuple(own[k].shape))
    parts = [f'{len(keys)} {what}, e.g. {", ".join(keys[:3])}' for what, keys in
             (('missing', missing), ('unexpected', unexpected)) if keys]
    if mismatched:
        k = mismatched[0]
        parts.append(f'{len(mismatched)} of another shape, e.g. {k}: checkpoint {shape[k]} vs model '
                     f'{tuple(own[k].shape)}')
    return '; '.join(parts)
