"""The doors of kv_cache.py: one guard per public function, same name.

A check runs before anything changes, so a refused step leaves its
cache as it was.
"""

import numpy as np

from mha_ref.guards.arrays import (
    finite,
    is_tensor,
    model_input,
    rope_self_attention,
)
from mha_ref.guards.chunks import chunked_input, rolling_window
from mha_ref.guards.tensors import float_tensors, model_tensors


def _new_queries(values, n_new):
    # one finite real number per key, and a key at least per new query
    numbers = np.asarray(values)
    if numbers.ndim != 1 or numbers.dtype.kind not in "biuf":
        raise TypeError(
            f"values must be a sequence of real numbers, one per key, "
            f"got {type(values).__name__} {values!r:.60}"
        )
    finite(numbers.astype(np.float64), "values")
    if len(values) < n_new:
        raise ValueError(
            f"values holds {len(values)} value(s), {tuple(values)}, but "
            f"the {n_new} new queries sit at the last {n_new} positions: "
            f"give at least {n_new} values"
        )


def cached_attention_example(values):
    """One finite real number per key, 2 keys at least (2 new queries)."""
    _new_queries(values, 2)


def single_new_query(values):
    """One finite real number per key, 1 key at least."""
    _new_queries(values, 1)


def single_query_is_causal(values):
    """One finite real number per key, 1 key at least."""
    _new_queries(values, 1)


def extended(keys, values, k, v):
    """KVCache.extended: a chunk k, v (B, H_kv, Tc, dh) that fits the
    cache's keys, values (None when empty).

    k and v must be 4-D tensors agreeing in batch, heads, length, dtype
    and device; with a cache holding keys and values, also in batch,
    heads, head sizes, dtype and device with those.
    """
    for name, x in (("k", k), ("v", v)):
        if not is_tensor(x) or x.dim() != 4:
            got = tuple(x.shape) if is_tensor(x) else type(x).__name__
            raise ValueError(
                f"{name} must be a 4-D tensor (B, H_kv, Tc, dh), got {got}"
            )
    ks, vs = tuple(k.shape), tuple(v.shape)
    if ks[:3] != vs[:3]:
        raise ValueError(
            f"k {ks} and v {vs} must agree in batch, heads and length "
            f"(B, H_kv, Tc)"
        )
    if k.dtype != v.dtype or k.device != v.device:
        raise TypeError(
            f"k and v must share one dtype and device, got k {k.dtype} "
            f"on {k.device}, v {v.dtype} on {v.device}"
        )
    if keys is None:
        return
    for name, new, old in (("k", k, keys), ("v", v, values)):
        n, o = tuple(new.shape), tuple(old.shape)
        if (n[0], n[1], n[3]) != (o[0], o[1], o[3]):
            raise ValueError(
                f"{name} {n} does not fit the cached {o}: batch, heads "
                f"and head size (B, H_kv, dh) must match"
            )
    if k.dtype != keys.dtype or k.device != keys.device:
        raise TypeError(
            f"k and v are {k.dtype} on {k.device}, but the cache holds "
            f"{keys.dtype} on {keys.device}"
        )


def rolling_kv_cache(window, sink_tokens):
    """RollingKVCache's window (None, or an int >= 1) and sink_tokens."""
    rolling_window(window, sink_tokens)


def _step_cache(cache, rolling):
    # cached_step takes a KVCache that keeps every position,
    # rolling_step a RollingKVCache; either other pairing: a TypeError
    is_kv = hasattr(cache, "extended") and hasattr(cache, "keys")
    is_rolling = is_kv and hasattr(cache, "keep")
    got = type(cache).__name__
    if rolling and not is_rolling:
        raise TypeError(
            f"rolling_step needs a kv_cache.RollingKVCache (a window, and "
            f"the positions it holds), got {got}; a KVCache goes with "
            f"cached_step"
        )
    if not rolling and (is_rolling or not is_kv):
        raise TypeError(
            f"cached_step needs a kv_cache.KVCache, got {got}; a "
            f"RollingKVCache goes with rolling_step, which applies its "
            f"window and advances its length"
        )


def cached_step(cache):
    """A KVCache (it keeps every position), not a RollingKVCache."""
    _step_cache(cache, rolling=False)


def rolling_step(cache):
    """A RollingKVCache (a window, and the positions it holds)."""
    _step_cache(cache, rolling=True)


def cached_forward(module, x, chunks, window=None, sink_tokens=0):
    """x a floating tensor (B, T, d_model) for the module, the chunks (a
    list of positive ints summing to T, returned), and a rolling window
    (None, or an int >= 1; sink_tokens only with a window, never for
    latent attention)."""
    chunks = chunked_input(module, x, chunks)
    latent = hasattr(module, "cached_forward")  # its own cache: MLA
    if latent and (window is not None or sink_tokens):
        raise ValueError(
            f"window={window!r}, sink_tokens={sink_tokens!r}: latent "
            f"attention decodes with its full latent cache only; leave "
            f"both out"
        )
    rolling_window(window, sink_tokens)
    return chunks


def cross_keys_values(rope, context, d_model, weight):
    """An encoder output for cross-attention: (B, S, d_model), no RoPE,
    of the dtype and on the device of the module's ``weight``."""
    rope_self_attention(rope, has_context=True)
    float_tensors(context=context)
    if context.dtype != weight.dtype or context.device != weight.device:
        raise TypeError(
            f"context is {context.dtype} on {context.device} but the "
            f"module's weights are {weight.dtype} on {weight.device}: "
            f"convert with context.to(module.wk.weight)"
        )
    model_input(context.shape, d_model, name="context")


def cross_step(x, d_model, weight):
    """Decoder rows x (B, Tc, d_model) of the module's dtype and device."""
    model_tensors(x, None, d_model, weight)
