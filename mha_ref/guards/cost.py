"""The doors of cost.py: one guard per public function, same name.

Each raises ``ValueError`` or ``TypeError`` naming the argument and its
value; a size that is not an int raises NotAnIntegerError, both at once.
Each returns its sizes as Python ints, so that products never wrap
around as NumPy's int64 would.
"""

import math
from numbers import Integral, Real


class NotAnIntegerError(ValueError, TypeError):
    """A size that is not an int: a ValueError, and a TypeError too."""


def _size(value, name):
    # a Python int, returned: the counts stay exact however large they
    # grow, where NumPy's int64 would wrap around past 2**63 unsaid
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise NotAnIntegerError(
            f"{name} must be a positive int, got {value!r}"
        )
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return int(value)


def _heads(d_model, n_head, n_kv_head, d_head):
    # (n_kv_head, d_head): d_head defaults to d_model / n_head, which
    # must then be whole; n_kv_head (default n_head) divides n_head
    if d_head is None:
        if d_model % n_head:
            raise ValueError(
                f"d_model={d_model} is not divisible by n_head={n_head}: "
                f"give d_head, or a head count that divides d_model"
            )
        d_head = d_model // n_head
    n_kv_head = n_head if n_kv_head is None else n_kv_head
    d_head = _size(d_head, "d_head")
    n_kv_head = _size(n_kv_head, "n_kv_head")
    if n_head % n_kv_head:
        raise ValueError(
            f"n_kv_head={n_kv_head} does not divide n_head={n_head}: "
            f"each key/value head serves n_head / n_kv_head query heads"
        )
    return n_kv_head, d_head


def _checked(
    sizes, heads=None, flags=None, bytes_per_value=1, last=False, optional=()
):
    """Every argument of a cost function, checked in one call.

    sizes {name: value}: positive ints (a float, even 4.0, is refused),
    returned in their order as Python ints, so that products never wrap
    around as NumPy's int64 would; a name in ``optional`` may be None.
    heads (n_kv_head, d_head) of the layer sizes["d_model"] and
    sizes["n_head"]: returned after the sizes, d_head defaulting to
    d_model / n_head and n_kv_head to n_head. flags {name: value}: True
    or False. bytes_per_value: a positive number (0.5 for 4-bit
    values). last: the tq queries are the last tq of the tk positions,
    so tq <= tk.
    """
    sizes = {
        name: None
        if value is None and name in optional
        else _size(value, name)
        for name, value in sizes.items()
    }
    for name, value in (flags or {}).items():
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False, got {value!r}")
    if isinstance(bytes_per_value, bool) or not isinstance(
        bytes_per_value, Real
    ):
        raise TypeError(
            f"bytes_per_value must be a number, got {bytes_per_value!r}"
        )
    if not (math.isfinite(bytes_per_value) and bytes_per_value > 0):
        raise ValueError(
            f"bytes_per_value must be positive, got {bytes_per_value}"
        )
    if last and sizes["tq"] > sizes["tk"]:
        raise ValueError(
            f"tq={sizes['tq']} new queries cannot exceed tk={sizes['tk']} "
            f"keys: the queries are the last tq of the tk positions"
        )
    if heads is None:
        return tuple(sizes.values())
    layer = _heads(sizes["d_model"], sizes["n_head"], *heads)
    return (*sizes.values(), *layer)


def attention_flops(
    batch, tq, tk, d_model, n_head, n_kv_head, d_head, backward, cached
):
    """Sizes (ints >= 1), flags (bools); cached: tq <= tk. Returns batch,
    tq, tk, d_model, n_head, n_kv_head, d_head as ints."""
    sizes = {"batch": batch, "tq": tq, "tk": tk, "d_model": d_model}
    return _checked(
        {**sizes, "n_head": n_head},
        (n_kv_head, d_head),
        {"backward": backward, "cached": cached},
        last=cached,  # a cached step: tq new rows after tk - tq cached
    )


def useful_flops(batch, tq, tk, d_model, n_head, n_kv_head, d_head):
    """Sizes (ints >= 1), tq <= tk. Returns them as attention_flops."""
    sizes = {"batch": batch, "tq": tq, "tk": tk, "d_model": d_model}
    return _checked(
        {**sizes, "n_head": n_head}, (n_kv_head, d_head), last=True
    )


def causal_tiles(tq, tk, block_q, block_k):
    """Sizes (ints >= 1), tq <= tk. Returns them as ints."""
    sizes = {"tq": tq, "tk": tk, "block_q": block_q, "block_k": block_k}
    return _checked(sizes, last=True)


def tiled_flops(
    batch,
    tq,
    tk,
    d_model,
    n_head,
    n_kv_head,
    d_head,
    block_q,
    block_k,
    backward,
):
    """Sizes (ints >= 1), tq <= tk, backward a bool. Returns batch, tq,
    tk, d_model, n_head, block_q, block_k, n_kv_head, d_head as ints."""
    sizes = {"batch": batch, "tq": tq, "tk": tk, "d_model": d_model}
    sizes.update(n_head=n_head, block_q=block_q, block_k=block_k)
    return _checked(
        sizes, (n_kv_head, d_head), {"backward": backward}, last=True
    )


def kv_cache_bytes(
    n_layer, n_kv_head, d_head, tokens, bytes_per_value, window
):
    """Sizes (ints >= 1; window may be None), bytes_per_value > 0.
    Returns n_layer, n_kv_head, d_head, tokens, window."""
    sizes = {
        "n_layer": n_layer,
        "n_kv_head": n_kv_head,
        "d_head": d_head,
        "tokens": tokens,
        "window": window,  # None: no window
    }
    return _checked(
        sizes, bytes_per_value=bytes_per_value, optional=("window",)
    )


def saved_activation_bytes(
    batch, t, d_model, n_head, bytes_per_value, weights
):
    """Sizes (ints >= 1, n_head divides d_model), bytes_per_value > 0,
    weights a bool. Returns batch, t, d_model, n_head as ints."""
    return _checked(
        {"batch": batch, "t": t, "d_model": d_model, "n_head": n_head},
        (None, None),  # d_model splits into n_head heads
        {"weights": weights},
        bytes_per_value,
    )[:4]


def bytes_moved(
    batch, tq, tk, d_model, n_head, n_kv_head, bytes_per_value, cached
):
    """Sizes (ints >= 1), bytes_per_value > 0, cached a bool (then tq <=
    tk). Returns batch, tq, tk, d_model, n_head, n_kv_head, d_head."""
    sizes = {"batch": batch, "tq": tq, "tk": tk, "d_model": d_model}
    return _checked(
        {**sizes, "n_head": n_head},
        (n_kv_head, None),
        {"cached": cached},
        bytes_per_value,
        last=cached,
    )


def arithmetic_intensity(
    batch, tq, tk, d_model, n_head, n_kv_head, bytes_per_value, cached
):
    """bytes_moved's inputs (attention_flops' then hold too). Returns
    batch, tq, tk, d_model, n_head, n_kv_head, d_head."""
    return bytes_moved(
        batch, tq, tk, d_model, n_head, n_kv_head, bytes_per_value, cached
    )


def _rate(value, name):
    # a positive finite number: a bandwidth (bytes per second), a ridge
    # point (FLOP per byte); returned as a float
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number, got {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be positive, got {value}")
    return float(value)


def decode_floor(
    batch, tk, d_model, n_head, n_kv_head, bytes_per_value, bandwidth
):
    """Sizes as _checked checks them, and a positive bandwidth. Returns
    batch, tk, d_model, n_head, n_kv_head, d_head, bandwidth."""
    layer = _checked(
        {"batch": batch, "tk": tk, "d_model": d_model, "n_head": n_head},
        (n_kv_head, None),
        bytes_per_value=bytes_per_value,
    )
    return (*layer, _rate(bandwidth, "bandwidth"))


def memory_bound_batch(tk, d_model, n_head, n_kv_head, bytes_per_value, ridge):
    """Sizes as _checked checks them, and a positive ridge point.
    Returns tk, d_model, n_head, n_kv_head, d_head, ridge."""
    layer = _checked(
        {"tk": tk, "d_model": d_model, "n_head": n_head},
        (n_kv_head, None),
        bytes_per_value=bytes_per_value,
    )
    return (*layer, _rate(ridge, "ridge"))


def memory_bound_from(d_model, n_head, n_kv_head, bytes_per_value, ridge):
    """Sizes as _checked checks them, and a positive ridge point.
    Returns d_model, n_head, n_kv_head, d_head, ridge."""
    layer = _checked(
        {"d_model": d_model, "n_head": n_head},
        (n_kv_head, None),
        bytes_per_value=bytes_per_value,
    )
    return (*layer, _rate(ridge, "ridge"))
