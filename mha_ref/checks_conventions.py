"""Old names of conventions.py's guards, kept importable: the doors are
in guards/conventions.py (one per public function of conventions.py)."""

# ruff: noqa: F401 (each name is re-exported)

from mha_ref.guards.conventions import (
    HEAD_LAYOUTS,
    SCALE_CONVENTIONS,
)
from mha_ref.guards.conventions import _alibi_row as alibi_row
from mha_ref.guards.conventions import _layout as layout
from mha_ref.guards.conventions import _layout_shape as layout_shape
from mha_ref.guards.conventions import additive_mask as fill_value
from mha_ref.guards.conventions import default_scale as scale_convention
from mha_ref.guards.conventions import (
    interleaved_to_rotate_half as rope_weight,
)
from mha_ref.guards.conventions import kv_head_of as head_layout
from mha_ref.guards.conventions import learned_sink_as_key as sink_key_inputs
from mha_ref.guards.conventions import mask_then_softcap as softcap_inputs
from mha_ref.guards.conventions import rows_without_keys as bool_mask
from mha_ref.guards.conventions import to_mask_mod as flex_mask
from mha_ref.guards.conventions import (
    window_from_hugging_face as window_convention,
)
from mha_ref.guards.conventions import (
    window_to_hugging_face as window_value,
)
