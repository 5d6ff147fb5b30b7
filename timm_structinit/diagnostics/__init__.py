""" What an init does to attention: products, attention maps and target mass of a ViT (`attention`), the window
attention of Swin and the token mixing of Mixer (`family_maps`), and the target mass followed through training
(`mass_tracking`). The ViT diagnostics are importable from here. """
from .attention import (  # noqa: F401
    format_summary, image_attention_maps, impulse_offsets, layer_image_mass, load_images, plot_layer, plot_target_mass,
    product_stats, pseudo_input_maps, qk_products, summarize, vproj_product)
from .attention import __all__ as _attention_names

__all__ = list(_attention_names)
