""" Building blocks the models and the inits share: the fixed sin-cos position table (`pos_embed`). """
