"""Input checks shared by the NumPy and PyTorch references.

Every check raises ``ValueError`` or ``TypeError`` with the offending
shape, index or row in its message; none uses ``assert``, which
``python -O`` removes.
"""

import numpy as np


def integer(value, name):
    """Raise TypeError unless ``value`` is an int (bool is refused)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an int, got {value!r}")


def head_split(d_model, n_head):
    """Check that ``d_model`` splits evenly into ``n_head`` heads."""
    for name, value in (("d_model", d_model), ("n_head", n_head)):
        integer(value, name)
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")
    if d_model % n_head:
        raise ValueError(
            f"d_model={d_model} is not divisible by n_head={n_head}: "
            f"each head needs d_model / n_head columns"
        )


def qkv_shapes(q_shape, k_shape, v_shape):
    """Check q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv)."""
    shapes = {"q": tuple(q_shape), "k": tuple(k_shape), "v": tuple(v_shape)}
    for name, shape in shapes.items():
        if len(shape) < 2:
            raise ValueError(
                f"{name} must have at least 2 dims (..., T, d), "
                f"got shape {shape}"
            )
    q, k, v = shapes.values()
    if q[-1] != k[-1]:
        raise ValueError(
            f"q and k need the same last dim (the head size d): "
            f"q {q} vs k {k}"
        )
    if k[-2] != v[-2]:
        raise ValueError(
            f"k and v need the same number of keys Tk: k {k} vs v {v}"
        )
    try:
        return np.broadcast_shapes(q[:-2], k[:-2], v[:-2])
    except ValueError:
        raise ValueError(
            f"batch dims of q {q}, k {k} and v {v} do not broadcast"
        ) from None


def mask_shape(mask_shape, scores_shape):
    """Check that a mask broadcasts to the scores (..., Tq, Tk)."""
    mask_shape, scores_shape = tuple(mask_shape), tuple(scores_shape)
    try:
        full = np.broadcast_shapes(mask_shape, scores_shape)
    except ValueError:
        full = None
    if full != scores_shape:
        raise ValueError(
            f"mask of shape {mask_shape} does not broadcast to the "
            f"scores (..., Tq, Tk) = {scores_shape}"
        )


def mask_dtype(kind):
    """Masks are boolean (True = blocked); refuse 0/1 or additive masks."""
    if kind != "b":
        raise TypeError(
            "mask must be boolean with True = blocked; for an additive "
            "0/-inf mask, convert with mask = (additive == -inf)"
        )


def first_index(flags):
    """The index of the first True in a NumPy bool array, as Python ints."""
    return tuple(int(i) for i in np.argwhere(flags)[0])


def every_row_has_a_key(row_blocked, what="query row"):
    """Raise if any row has every key blocked.

    ``row_blocked`` is a NumPy bool array over the leading dims, True
    where the whole row of keys is masked: softmax has no denominator.
    """
    if np.any(row_blocked):
        first = first_index(row_blocked)
        count = int(np.count_nonzero(row_blocked))
        raise ValueError(
            f"{what} at index {first} (of {count} such rows, leading "
            f"shape {tuple(row_blocked.shape)}) has every key masked; "
            "each query needs at least one allowed key"
        )


def finite(array, name):
    """Raise if a NumPy array holds NaN or an infinity, naming where."""
    bad = ~np.isfinite(array)
    if np.any(bad):
        first = first_index(bad)
        raise ValueError(
            f"{name} of shape {tuple(array.shape)} holds "
            f"{array[first]} at index {first}; inputs must be finite"
        )


def positions(query_shape, key_shape):
    """Positions for a causal mask: one per query, one per key (1-D)."""
    for name, shape in (("query_positions", query_shape),
                        ("key_positions", key_shape)):
        if len(tuple(shape)) != 1:
            raise ValueError(
                f"{name} must be 1-D (one position per row), got shape "
                f"{tuple(shape)}"
            )


def model_input(shape, d_model, name="x"):
    """Check an input of shape (B, T, d_model)."""
    shape = tuple(shape)
    if len(shape) != 3 or shape[-1] != d_model:
        raise ValueError(
            f"{name} must have shape (B, T, d_model={d_model}), "
            f"got {shape}"
        )


def context_input(x_shape, context_shape, d_model):
    """Check cross-attention context (B, Tk, d_model) against x."""
    model_input(context_shape, d_model, name="context")
    if tuple(context_shape)[0] != tuple(x_shape)[0]:
        raise ValueError(
            f"context batch {tuple(context_shape)} does not match "
            f"x batch {tuple(x_shape)}"
        )


def real_logits(logits):
    """Return logits as a float array, or raise on what softmax can't use.

    Accepts bool, int and float dtypes; rejects complex and object.
    Integers must be exactly representable in the float dtype used
    (NumPy's promotion with float32: int64 -> float64, int16 -> float32).
    NaN and +inf are rejected; -inf is allowed and means "masked".
    """
    values = np.asarray(logits)
    if values.dtype.kind not in "biuf":
        raise TypeError(
            f"logits must be real (bool, int or float), got dtype "
            f"{values.dtype}"
        )
    ftype = np.result_type(values.dtype, np.float32)
    converted = values.astype(ftype)
    if values.dtype.kind in "iu":
        _exact_integers(values, converted)
    bad = np.isnan(converted) | np.isposinf(converted)
    if np.any(bad):
        first = first_index(bad)
        raise ValueError(
            f"logits of shape {values.shape} hold {converted[first]} at "
            f"index {first}; use finite values, or -inf for masked keys"
        )
    return converted


def _exact_integers(values, converted):
    # Integers up to 2**(mantissa bits + 1) are exact; check the rest one
    # by one with Python ints, which never overflow.
    limit = 2 ** (np.finfo(converted.dtype).nmant + 1)
    large = (values > limit) | (values < -limit)
    for index in np.argwhere(large):
        index = tuple(int(i) for i in index)
        if int(values[index]) != int(converted[index]):
            raise ValueError(
                f"integer logit {int(values[index])} at index {index} "
                f"is not exactly representable in {converted.dtype}"
            )
