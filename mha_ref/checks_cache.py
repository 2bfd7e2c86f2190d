"""Input checks of the KV cache (kv_cache.py): chunks, what a step adds
to the cache, a rolling window.

Each raises ``ValueError`` or ``TypeError`` naming the argument and its
shape or value; the checks both frameworks share are in checks.py.
"""

import numpy as np

from mha_ref.checks import (
    finite,
    is_tensor,
    model_input,
    rope_self_attention,
    rule_int,
)
from mha_ref.checks_torch import (
    as_index,
    float_tensors,
    is_tensor_scalar,
)


def chunk_lengths(chunks, t):
    """Chunk lengths for a cached forward: positive ints summing to T.

    ``chunks``: any iterable (a list, a range, a generator, an int
    array or tensor). Returns the lengths as a list of Python ints, so
    that a one-shot iterator is read once, here.
    """
    if isinstance(chunks, int | np.integer) or is_tensor_scalar(chunks):
        raise TypeError(
            f"chunks must be a sequence of lengths, e.g. [{t}], "
            f"got the int {chunks}"
        )
    try:
        chunks = list(chunks)
    except TypeError:
        raise TypeError(
            f"chunks must be an iterable of lengths, e.g. [{t}], got "
            f"{type(chunks).__name__} {chunks!r}"
        ) from None
    lengths = []
    for i, n in enumerate(chunks):
        n = as_index(n, f"chunks[{i}]")
        if n <= 0:
            raise ValueError(f"chunks[{i}] = {n}: a chunk needs >= 1 row")
        lengths.append(n)
    if sum(lengths) != t:
        raise ValueError(
            f"chunks {lengths} sum to {sum(lengths)}, but x holds T={t} "
            f"positions"
        )
    return lengths


def cached_input(module, x, chunks, window=None, sink_tokens=0):
    """The guards of a cached forward, in one call: x a floating tensor
    (B, T, d_model) for the module, the chunks (a list of positive ints
    summing to T, returned), and a rolling window (None, or an int >= 1;
    sink_tokens only with a window, never for latent attention)."""
    float_tensors(x=x)
    model_input(x.shape, module.d_model)
    chunks = chunk_lengths(chunks, x.shape[1])
    latent = hasattr(module, "cached_forward")  # its own cache: MLA
    if latent and (window is not None or sink_tokens):
        raise ValueError(
            f"window={window!r}, sink_tokens={sink_tokens!r}: latent "
            f"attention decodes with its full latent cache only; leave "
            f"both out"
        )
    rolling_window(window, sink_tokens)
    return chunks


def kv_chunk(keys, values, k, v):
    """A chunk k, v (B, H_kv, Tc, dh) that fits a KV cache's keys, values.

    k and v must be 4-D tensors agreeing in batch, heads, length, dtype
    and device; with a cache holding keys and values (None when empty),
    also in batch, heads, head sizes, dtype and device with those.
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


def step_cache(cache, rolling):
    """A cache that goes with the step: cached_step takes a KVCache that
    keeps every position, rolling_step a RollingKVCache (it has a window
    and forgets); either other pairing is a TypeError naming both."""
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


def new_queries(values, n_new):
    """At least one cached or new key per new query (kv_cache example).

    ``values``: one finite real number per key, a 1-D sequence.
    """
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


def rolling_window(window, sink_tokens):
    """A rolling cache's window (None: keep everything) and sink_tokens."""
    rule_int(sink_tokens, "sink_tokens", 0)
    if window is None:
        if sink_tokens:
            raise ValueError(
                f"sink_tokens={sink_tokens} needs a window: without one "
                f"the cache keeps every position anyway"
            )
        return
    rule_int(window, "window", 1)


def cross_context(rope, context, d_model, weight):
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


def latent_chunk(cache, c_kv, k_rope):
    """A chunk (B, Tc, d_c) and (B, Tc, d_rope) that fits the latent
    cache (latent_torch.LatentCache)."""
    for name, x in (("c_kv", c_kv), ("k_rope", k_rope)):
        if not is_tensor(x) or x.dim() != 3:
            got = tuple(x.shape) if is_tensor(x) else type(x)
            raise ValueError(f"{name} must be (B, Tc, d), got {got}")
    if c_kv.shape[:2] != k_rope.shape[:2]:
        raise ValueError(
            f"c_kv {tuple(c_kv.shape)} and k_rope {tuple(k_rope.shape)} "
            f"must agree in batch and length (B, Tc)"
        )
    if cache.latent is None:
        return
    for name, new, old in (
        ("c_kv", c_kv, cache.latent),
        ("k_rope", k_rope, cache.rope_key),
    ):
        n, o = tuple(new.shape), tuple(old.shape)
        if (n[0], n[2]) != (o[0], o[2]) or new.dtype != old.dtype:
            raise ValueError(
                f"{name} {n} ({new.dtype}) does not fit the cached {o} "
                f"({old.dtype}): batch, size and dtype must match"
            )
