"""Hypothesis strategies for adversarial softmax and attention inputs.

Hypothesis draws a small, JSON-able *spec*; the tensor is built from it
deterministically (``case.build(device)``), so counterexamples shrink to short
readable descriptions (``case.describe()``) and replay bit for bit
(``case_from_dict(case.spec.to_dict())``).

Public API::

    softmax_cases(dtypes=..., caps=..., max_length=..., max_rows=...,
                  special_values=..., masks=..., elementwise=..., index_widths=...,
                  long_rows=..., many_rows=..., four_d=..., probe=None)
                                                                  -> SearchStrategy[SoftmaxCase]
    attention_cases(dtypes=..., caps=..., max_seq=..., max_batch=..., max_heads=...,
                    head_dims=..., special_values=..., index_widths=...,
                    probes=..., probe=None)                       -> SearchStrategy[AttentionCase]
    softmax_probes(**kw), attention_probes(**kw)                  -> the probes ``probe=`` may force
                                                                     (SOFTMAX_PROBES, ATTENTION_PROBES)
    case_from_dict(d)                                             -> SoftmaxCase | AttentionCase
    FEATURES, SOFTMAX_FEATURES, ATTENTION_FEATURES                 the feature vocabulary

Modules: ``lengths`` (adversarial lengths), ``values`` (value recipes), ``masks``
(mask recipes), ``specials`` (NaN/+inf/-0.0 entries), ``layouts`` (memory
layouts), ``rounding`` (float64 -> storage dtype), ``softmax`` and ``attention``
(specs, cases, strategies), ``replay`` (``case_from_dict``), ``features`` (the
vocabulary).
"""

from strategies.attention import (
    ATTENTION_PROBES,
    INTERESTING_HEAD_DIMS,
    AttentionCase,
    AttentionInputs,
    AttentionSpec,
    attention_cases,
    attention_probes,
)
from strategies.features import ATTENTION_FEATURES, FEATURES, SOFTMAX_FEATURES
from strategies.lengths import LENGTH_KINDS, length_features, lengths
from strategies.masks import MASK_KINDS, MaskSpec, mask_specs
from strategies.replay import case_from_dict
from strategies.softmax import SOFTMAX_PROBES, SoftmaxCase, SoftmaxSpec, softmax_cases, softmax_probes
from strategies.specials import SPECIAL_KINDS, SpecialSpec
from strategies.values import ValueRecipe, magnitudes, value_recipes

__all__ = [
    "ATTENTION_FEATURES",
    "ATTENTION_PROBES",
    "FEATURES",
    "INTERESTING_HEAD_DIMS",
    "LENGTH_KINDS",
    "MASK_KINDS",
    "SOFTMAX_FEATURES",
    "SOFTMAX_PROBES",
    "SPECIAL_KINDS",
    "AttentionCase",
    "AttentionInputs",
    "AttentionSpec",
    "MaskSpec",
    "SoftmaxCase",
    "SoftmaxSpec",
    "SpecialSpec",
    "ValueRecipe",
    "attention_cases",
    "attention_probes",
    "case_from_dict",
    "length_features",
    "lengths",
    "magnitudes",
    "mask_specs",
    "softmax_cases",
    "softmax_probes",
    "value_recipes",
]
