"""Positions a cache holds: the chunks of a cached forward and a rolling
window. Shared by the doors of kv_cache.py and latent_torch.py."""

import numpy as np

from mha_ref.guards.arrays import model_input, rule_int
from mha_ref.guards.tensors import as_index, float_tensors, is_tensor_scalar


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


def chunked_input(module, x, chunks):
    """x a floating tensor (B, T, d_model) for the module, and its
    chunks (chunk_lengths, returned)."""
    float_tensors(x=x)
    model_input(x.shape, module.d_model)
    return chunk_lengths(chunks, x.shape[1])


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
