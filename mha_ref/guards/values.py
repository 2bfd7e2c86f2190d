"""Numbers and sequences the doors share: a length, an even feature
count, an array of integers."""

import numpy as np

from mha_ref.guards.arrays import integer, is_tensor


def count(value, name, least=0):
    """An int (not bool, not float) of at least ``least``: a length."""
    integer(value, name)
    if value < least:
        raise ValueError(f"{name} must be an int >= {least}, got {value}")
    return int(value)


def even_size(value, name, least=2):
    """A feature count that RoPE or a sinusoid splits into pairs."""
    count(value, name, least)
    if value % 2:
        raise ValueError(
            f"{name} must be even (features come in sin/cos or rotated "
            f"pairs), got {name}={value}"
        )
    return int(value)


def integers(values, name, least=None):
    """An int array (NumPy, list, scalar, tensor), as int64; floats only
    when every value is a whole number; bool refused."""
    if is_tensor(values):
        values = values.detach().cpu().numpy()
    array = np.asarray(values)
    whole = array.dtype.kind == "f" and np.isfinite(array).all()
    if array.dtype.kind not in "iu" and not (
        whole and (array == np.round(array)).all()
    ):
        raise TypeError(
            f"{name} must hold integers, got dtype {array.dtype} and "
            f"shape {array.shape}"
        )
    array = array.astype(np.int64)
    if least is not None and array.size and array.min() < least:
        raise ValueError(
            f"{name} must be >= {least}, got {array.min()} (shape "
            f"{array.shape})"
        )
    return array
