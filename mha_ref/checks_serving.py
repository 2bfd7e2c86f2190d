"""Old names of serving.py's guards, kept importable: the doors are in
guards/serving.py (one per public function of serving.py)."""

# ruff: noqa: F401 (each name is re-exported)

from mha_ref.guards.serving import _int_values as int_values
from mha_ref.guards.serving import _known as known
from mha_ref.guards.serving import _offsets as offsets
from mha_ref.guards.serving import _sequence_id as sequence_id
from mha_ref.guards.serving import append as append_inputs
from mha_ref.guards.serving import fork as fork_ids
from mha_ref.guards.serving import merge_partials as partials
from mha_ref.guards.serving import paged_attention as paged_inputs
from mha_ref.guards.serving import paged_kv_cache as cache_sizes
from mha_ref.guards.serving import split_kv_decode as split_inputs
from mha_ref.guards.serving import tree_mask as tree_inputs
from mha_ref.guards.serving import varlen_attention as varlen_inputs
from mha_ref.guards.serving import verify_greedy as verify_inputs
