"""Absolute tolerances for comparing two implementations, per dtype.

One attention forward pass does a few reductions of length d_model and
Tk; each rounds at about the dtype's machine epsilon (float32: 1.2e-7,
float64: 2.2e-16) times the size of the values, which stay near 1 here.
The tolerances leave room for a few hundred such roundings, and are far
below any real bug (a wrong split or scale moves outputs by 1e-2 or more).
"""

import numpy as np

ATOL = {
    "float32": 1e-5,  # ~100 eps32: summation order differs between kernels
    "float64": 1e-12,  # ~5000 eps64: same argument, far below any bug
}


def atol(dtype):
    """The tolerance for a NumPy or torch dtype, by its name.

    >>> atol("float32"), atol(np.float64)
    (1e-05, 1e-12)
    """
    text = str(dtype)
    if text.startswith("torch."):  # torch.float32 -> "float32"
        dtype = text.removeprefix("torch.")
    try:
        name = np.dtype(dtype).name
    except TypeError:  # e.g. "bfloat16", which NumPy does not know
        name = str(dtype)
    if name not in ATOL:
        raise ValueError(
            f"no tolerance for dtype {dtype}; known: {list(ATOL)}"
        )
    return ATOL[name]
