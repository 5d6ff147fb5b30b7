""" Track the impulse structure through training: per epoch, the mass each layer puts on its heads' impulse
targets, measured on one fixed batch of evaluation images (ViT and Swin attention in the real forward pass; Mixer's
token mixing linearized at zero input, which the images do not change).

An impulse init gives every head a local filter at step 0; whether training keeps that locality or lets it fade is
what decides whether the init was worth it, and it shows in this curve long before it shows in accuracy.
"""
import csv
import logging
import os
import statistics
from typing import Dict, List, Optional

import torch
from torch import nn
from timm.data import create_loader

from ..data import ClassBalancedSubset
from ..utils.atomic import atomic_file
from ..utils.command_line import error_line
from .attention import layer_image_mass, plot_target_mass
from .family_maps import family_summary

__all__ = ['TargetMassTracker', 'mass_columns', 'MASS_IMAGES']

MASS_IMAGES = 64  # class-balanced, fixed for the whole run
_logger = logging.getLogger('train')


class TargetMassTracker:
    """ Measures `layer_image_mass` on a fixed evaluation batch and keeps `target_mass.csv` (epoch 0 is the model
    before training, epoch e after e epochs; one column per layer and their mean) and, on request, a figure. """

    def __init__(self, dataset_eval, loader_kwargs: Dict, output_dir: str, start_epoch: int = 0) -> None:
        count = min(MASS_IMAGES, len(dataset_eval))
        # an evaluation split whose small classes hold fewer than their share gives them all they hold (the batch
        # is a diagnostic: it measures, where a --val-subset refuses)
        fixed = ClassBalancedSubset(dataset_eval, count, seed=0, flag='target-mass batch', fill=True)
        # read once, in this process: a worker for 64 images is only one more process for a stop signal to reach
        loader = create_loader(fixed, batch_size=count, is_training=False,
                               **{**loader_kwargs, 'distributed': False, 'num_workers': 0})
        self.images = next(iter(loader))[0]
        self.csv_path = os.path.join(output_dir, 'target_mass.csv')
        self.rows = [r for r in _read_rows(self.csv_path) if r['epoch'] <= start_epoch]  # a resumed run's history
        self.off = False

    @staticmethod
    def applies_to(model: nn.Module) -> bool:
        """ Whether the model has an impulse record (ViT, Swin and Mixer records all carry per-layer, per-head target
        offsets) that the tracking can follow: measured once on a blank image of the model's input size, a model
        it cannot measure (an option it does not follow) gets one line saying the tracking is off. """
        if not (getattr(model, 'struct_init_record', None) or {}).get('offsets'):
            return False
        stem = getattr(model, 'patch_embed', None) or getattr(model, 'stem', None)
        try:
            probe = torch.zeros(1, stem.proj.in_channels, *stem.img_size, device=next(model.parameters()).device)
            _layer_masses(model, probe)
        except Exception as e:  # whatever the model's forward or the measurement meets
            _logger.warning(f'target mass: not tracked for this model ({type(e).__name__}: {error_line(e)[:200]})')
            return False
        return True

    def measure(self, model: nn.Module, epoch: int) -> Optional[Dict[str, float]]:
        """ Measure after `epoch` epochs (0: before training), append to the CSV, return the row; None, after one
        line saying so, once the tracking cannot follow the model. """
        if self.off:
            return None
        try:
            masses = _layer_masses(model, self.images.to(next(model.parameters()).device))
        except (ValueError, RuntimeError) as e:
            if 'out of memory' in str(e).lower():
                raise
            self.off = True
            _logger.warning(f'target mass: tracking is off from epoch {epoch} on ({error_line(e)[:200]})')
            return None
        row = {'epoch': epoch, 'mean': sum(masses) / len(masses),
               **{f'layer{i + 1}': m for i, m in enumerate(masses)}}
        self.rows = [r for r in self.rows if r['epoch'] < epoch] + [row]
        with atomic_file(self.csv_path) as tmp, open(tmp, 'w', newline='') as f:
            writer = csv.DictWriter(f, fieldnames=list(row))
            writer.writeheader()
            writer.writerows(self.rows)
        return row

    def plot(self, png_path: str, title: str = '') -> str:
        return plot_target_mass(self.rows, png_path, title)


def _layer_masses(model: nn.Module, images) -> List[float]:
    if 'family' not in model.struct_init_record:
        return layer_image_mass(model, images)
    rows = family_summary(model, images)
    return [statistics.fmean(r['mass'] for r in rows if r['layer'] == layer)
            for layer in sorted({r['layer'] for r in rows})]


def _read_rows(path: str) -> List[Dict[str, float]]:
    """ The rows of `target_mass.csv`, held to its schema (`TargetMassRow`; a resumed run's checks read it first). """
    if not os.path.exists(path):
        return []
    from ..utils.file_schema import TargetMassRow, read_csv
    return [row.model_dump() for row in read_csv(path, TargetMassRow, 'delete it: the tracking then starts again')]


def mass_columns(row: Optional[Dict[str, float]]) -> Dict[str, float]:
    """ The row as summary-CSV eval columns: target_mass (the layer mean) and target_mass_layerN. """
    if row is None:
        return {}
    return {('target_mass' if k == 'mean' else f'target_mass_{k}'): v for k, v in row.items() if k != 'epoch'}
