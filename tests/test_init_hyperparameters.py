""" Every hyperparameter of every init, on every model family, at the ends of what it takes: the ends of a range
(finite ones, and a large value for an open end) are taken and the nearest values outside are refused; each
choice is taken, and a value outside the choices or of another kind (a bool for a choice of integers) is refused; a
value the caller gives wins over the init's preset. Each refusal is one ValueError naming the hyperparameter. """
import dataclasses
import math

import pytest

from timm_structinit.inits import FAMILIES, _family_version, list_inits, make_init_cfg


def _hyperparameters():
    for name in list_inits():
        for family in FAMILIES:
            try:
                cls, preset = _family_version(name, family)
            except ValueError:  # no version of this init for the family
                continue
            for f in dataclasses.fields(cls):
                if 'range' in f.metadata or 'choices' in f.metadata:
                    yield pytest.param(name, family, f, preset, id=f'{name}-{family}-{f.name}')


def _make(name, family, **kwargs):
    try:
        return make_init_cfg(name, family, **kwargs)
    except ValueError as e:
        return e


def _outside(value, direction, integer):
    if integer:
        return value + direction
    return math.nextafter(value, direction * math.inf)


@pytest.mark.parametrize('name, family, field, preset', list(_hyperparameters()))
def test_each_hyperparameter_takes_exactly_what_it_declares(name, family, field, preset):
    meta, where = field.metadata, f'.{field.name}='
    if 'choices' in meta:
        for choice in meta['choices']:
            got = _make(name, family, **{field.name: choice})
            assert not isinstance(got, ValueError) and getattr(got, field.name) == choice, (choice, got)
        integers = isinstance(meta['choices'][0], int) and not isinstance(meta['choices'][0], bool)
        for other in ([True, False] if integers else []) + ['no such choice', None]:
            got = _make(name, family, **{field.name: other})
            assert isinstance(got, ValueError) and where in str(got), (other, got)
        return
    low, high = meta['range']
    integer = field.type in (int, 'int')
    ends = [low, high if math.isfinite(high) else 1e6 if not integer else 10 ** 6]
    for value in ends:
        got = _make(name, family, **{field.name: value})
        assert not isinstance(got, ValueError) and getattr(got, field.name) == value, (value, got)
    outside = [_outside(low, -1, integer)] + ([_outside(high, 1, integer)] if math.isfinite(high) else [])
    for value in [*outside, math.nan, True]:
        got = _make(name, family, **{field.name: value})
        assert isinstance(got, ValueError) and where in str(got), (value, got)


def _preset_overrides():
    for name in list_inits():
        for family in FAMILIES:
            try:
                cls, preset = _family_version(name, family)
            except ValueError:
                continue
            fields = {f.name: f for f in dataclasses.fields(cls)}
            for key, value in preset.items():
                meta = fields[key].metadata
                others = [c for c in meta.get('choices', ()) if c != value]
                if others:
                    yield pytest.param(name, family, key, others[0], id=f'{name}-{family}-{key}')
                elif 'range' in meta and isinstance(value, float):
                    yield pytest.param(name, family, key, value * 2, id=f'{name}-{family}-{key}')


@pytest.mark.parametrize('name, family, key, value', list(_preset_overrides()))
def test_a_callers_value_wins_over_the_inits_preset(name, family, key, value):
    """ impulse2025 presets the svd solver and the pos_embed pseudo input, among others: a caller's own value for
    each is the one taken. """
    got = _make(name, family, **{key: value})
    assert not isinstance(got, ValueError) and getattr(got, key) == value, got
