"""Old names of the KV cache's guards, kept importable: the doors are
in guards/kv_cache.py (one per public function of kv_cache.py)."""

# ruff: noqa: F401 (each name is re-exported)

from mha_ref.guards.chunks import chunk_lengths, rolling_window
from mha_ref.guards.kv_cache import _new_queries as new_queries
from mha_ref.guards.kv_cache import _step_cache as step_cache
from mha_ref.guards.kv_cache import cached_forward as cached_input
from mha_ref.guards.kv_cache import cross_keys_values as cross_context
from mha_ref.guards.kv_cache import extended as kv_chunk
from mha_ref.guards.latent_torch import latent_cache_extended as latent_chunk
