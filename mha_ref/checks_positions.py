"""Old names of positions.py's guards, kept importable: the doors are in
guards/positions.py (one per public function of positions.py)."""

# ruff: noqa: F401 (each name is re-exported)

from mha_ref.guards.positions import (
    REQUIRED,
    ROPE_KEYS,
    ROPE_TYPES,
    SHARED_KEYS,
)
from mha_ref.guards.positions import _t5_buckets as t5_buckets
from mha_ref.guards.positions import query_temperature as temperature
from mha_ref.guards.positions import rope_frequencies as rope_scaling
from mha_ref.guards.positions import sinusoidal_encoding as sinusoid
from mha_ref.guards.positions import t5_bias as t5_table
from mha_ref.guards.positions import t5_relative_bucket as t5_relative
from mha_ref.guards.values import count, even_size, integers
