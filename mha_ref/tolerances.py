"""Absolute tolerances for comparing two implementations, per dtype.

An attention forward pass rounds at every stored result: the
projections (sums of d_model products), the scores (sums of d_head),
the softmax, the weighted sum over Tk values and the output projection.
Each rounding is at most the unit roundoff u of the dtype (half its
machine epsilon) times the size of the value, and the values here stay
within a few units of 1.

float32 and float64 accumulate in their own dtype, so the sums matter:
kernels add in different orders and each of the d_model or Tk additions
can round. 1e-5 is about 84 float32 eps (eps32 = 1.2e-7) and 1e-12 about
4,500 float64 eps (eps64 = 2.2e-16): ample for the short sums of the
tests, and still far below a real bug (a wrong head split moves outputs
by about 2, a wrong scale by about 0.08, in the parity tests).

float16 and bfloat16 accumulate in float32 (our references, SDPA and
the CPU kernels alike), so the long sums cost almost nothing; what
counts is that every stored value is rounded to the small dtype. The
output alone is rounded by up to u |y| with |y| up to about 4 here, and
the stored q, k, v, weights and attention output add about as much
again: about 10 u in all. Measured against float64 on the same inputs,
the worst error is about 4.5 u for every path (forward, tiled, SDPA,
nn.MultiheadAttention), for d_model up to 256 and T up to 256.
"""

import numpy as np

ATOL = {
    # u = 2**-11 = 4.9e-4 (11 significant bits); 5e-3 is about 10 u
    "float16": 5e-3,
    # u = 2**-8 = 3.9e-3 (8 significant bits); 4e-2 is about 10 u. A
    # wrong scale (0.08) is only twice this: catch bugs in float32/64
    "bfloat16": 4e-2,
    "float32": 1e-5,  # ~84 eps32: summation order differs between kernels
    "float64": 1e-12,  # ~4,500 eps64: same argument, far below any bug
}


def atol(dtype):
    """The tolerance for a NumPy or torch dtype, by its name.

    >>> atol("float32"), atol(np.float64), atol("bfloat16")
    (1e-05, 1e-12, 0.04)
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
