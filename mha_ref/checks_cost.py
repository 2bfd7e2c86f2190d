"""Input checks of the cost model (cost.py): sizes, head counts, flags.

Each raises ``ValueError`` or ``TypeError`` naming the argument and its
value; a size that is not an int raises NotAnIntegerError, both at once.
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


def checked(
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


def roofline_inputs(sizes, heads, bytes_per_value, rates):
    """checked(sizes, heads, bytes_per_value=...), and rates
    {name: value}: positive finite numbers (a bandwidth in bytes per
    second, a ridge point in FLOP per byte), returned as floats after
    what checked returns."""
    layer = checked(sizes, heads, bytes_per_value=bytes_per_value)
    for name, value in rates.items():
        if isinstance(value, bool) or not isinstance(value, Real):
            raise TypeError(f"{name} must be a number, got {value!r}")
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be positive, got {value}")
    return (*layer, *(float(value) for value in rates.values()))
