"""The helpers the doors share: shapes, dtypes and values of arrays (and
of tensors, read without importing torch), masks, positions and the
score modifiers' arguments. mha_ref/checks.py is its old name.

Every check raises ``ValueError`` or ``TypeError`` with the offending
shape, index or row in its message; none uses ``assert``, which
``python -O`` removes. Each public function's door is in
guards/<module>.py (numpy_ref.py, torch_ref.py, tiled.py, ...); the
tensor helpers are in tensors.py, the tiled passes' in tiles.py.
"""

from collections.abc import Iterator

import numpy as np


def integer(value, name):
    """Raise TypeError unless ``value`` is an int (bool is refused)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an int, got {value!r}")


def positive_integer(value, name):
    """Raise unless ``value`` is an int greater than zero."""
    integer(value, name)
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")


def cuda_device(device, cuda_available):
    """Refuse a CUDA device when torch sees none, naming what was asked."""
    wants_cuda = str(device).startswith("cuda") or (
        isinstance(device, int | np.integer) and not isinstance(device, bool)
    )
    if device is not None and wants_cuda and not cuda_available:
        raise ValueError(
            f"device={device!r} asks for CUDA, but "
            f"torch.cuda.is_available() is False here (no GPU, or a "
            f"CPU-only torch build); use device='cpu' or None"
        )


def layer_sizes(
    d_model, n_head, n_kv_head, rope, base, device=None, cuda=False
):
    """The guards of a MultiHeadAttention's sizes, in one call.

    d_model splits into n_head heads; n_kv_head (None: n_head) divides
    n_head; the RoPE base > 0 (base ** (-2i / d) is finite), with rope
    the head size is even; a CUDA ``device`` only where ``cuda`` (torch
    sees a GPU; the NumPy layer has no device). Returns (n_kv_head,
    d_head).
    """
    head_split(d_model, n_head)
    n_kv_head = n_head if n_kv_head is None else n_kv_head
    kv_head_split(n_head, n_kv_head)
    rope_base(base)
    d_head = d_model // n_head
    if rope:
        rope_head_size(d_head)
    cuda_device(device, cuda)
    return n_kv_head, d_head


def head_split(d_model, n_head):
    """Check that ``d_model`` splits evenly into ``n_head`` heads."""
    positive_integer(d_model, "d_model")
    positive_integer(n_head, "n_head")
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
            f"q and k need the same last dim (the head size d): q {q} vs k {k}"
        )
    if k[-2] != v[-2]:
        raise ValueError(
            f"k and v need the same number of keys Tk: k {k} vs v {v}"
        )
    if q[-2] < 1 or k[-2] < 1:  # no key: no weighted mean to take
        raise ValueError(
            f"attention needs at least one query and one key, got "
            f"Tq={q[-2]}, Tk={k[-2]} (q {q}, k {k})"
        )
    if q[-1] < 1:  # the scale 1 / sqrt(d) needs d >= 1
        raise ValueError(
            f"the head size d (last dim of q and k) must be at least 1, "
            f"got q {q} and k {k}"
        )
    try:
        return np.broadcast_shapes(q[:-2], k[:-2], v[:-2])
    except ValueError:
        raise ValueError(
            f"batch dims of q {q}, k {k} and v {v} do not broadcast"
        ) from None


def mask_shape(mask_shape, scores_shape):
    """Check that a mask broadcasts to the scores (..., Tq, Tk)."""
    broadcasts_to(mask_shape, scores_shape, "mask")


def mask_dtype(dtype):
    """Masks are boolean (True = blocked); refuse 0/1 or additive masks.

    ``dtype``: a NumPy or torch dtype, or a NumPy kind ("b", "f", ...).
    """
    if str(dtype) not in ("b", "bool", "torch.bool"):
        raise TypeError(
            f"mask must be boolean with True = blocked, got dtype "
            f"{dtype}; for a 0/1 mask use mask != 0 (1 = blocked), for "
            f"an additive 0/-inf mask use mask == -inf"
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


EMPTY_ROWS = ("raise", "zero")


def empty_rows_option(empty_rows):
    """Check the ``empty_rows`` keyword: "raise" or "zero"."""
    if not isinstance(empty_rows, str) or empty_rows not in EMPTY_ROWS:
        raise ValueError(
            f"empty_rows must be 'raise' (refuse a query row with every "
            f"key masked) or 'zero' (output 0, as SDPA and flash-attn), "
            f"got {empty_rows!r}"
        )


def rows_without_keys(row_blocked, empty_rows, what="query row"):
    """Rows with every key blocked: refused, unless empty_rows="zero".

    ``row_blocked`` as for every_row_has_a_key. With "zero" such a row
    is allowed: its weights and output are 0, as SDPA's boolean mask
    and flash-attn define them.
    """
    empty_rows_option(empty_rows)
    if empty_rows == "raise":
        every_row_has_a_key(row_blocked, what)


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
    for name, shape in (
        ("query_positions", query_shape),
        ("key_positions", key_shape),
    ):
        if len(tuple(shape)) != 1:
            raise ValueError(
                f"{name} must be 1-D (one position per row), got shape "
                f"{tuple(shape)}"
            )


def array_of(value, name, as_array):
    """``value`` through ``as_array`` (np.asarray or torch.as_tensor).

    An iterator (a generator, say) is read once, into a list, so both
    frameworks see the same numbers; a tensor given to NumPy comes
    detached, on the CPU (bfloat16 as float32, exactly); what neither
    can read as numbers raises TypeError naming the argument, not the
    library's own error.
    """
    if isinstance(value, Iterator):
        value = list(value)
    if as_array is np.asarray and is_tensor(value):
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":  # NumPy has no bfloat16
            value = value.float()
    try:
        return as_array(value)
    except (TypeError, ValueError, RuntimeError) as error:
        raise TypeError(
            f"{name} must be numbers (a list, an array or a tensor), got "
            f"{type(value).__name__} {value!r:.60}: {error}"
        ) from None


def position_array(value, name, as_array):
    """One argument of positions: real numbers, finite, not bool.

    Ints of any width and floats (fractional positions) are kept as
    they are and compared as they are. torch has no comparison or max
    for uint16/32/64, so such tensors come back as int64, values kept.
    """
    positions = array_of(value, name, as_array)
    kind = _kind(positions)
    if kind not in "iuf":
        raise TypeError(
            f"{name} must hold integers or real numbers, one position "
            f"per row, got dtype {positions.dtype} and shape "
            f"{tuple(positions.shape)}"
        )
    if kind == "f":
        finite(_numbers_of(positions), name)
    return _widened(positions, name)


def mask_positions(query_positions, key_positions, as_array):
    """The guards of causal_mask_for_positions: two 1-D real arrays.

    Returns (query, key) positions through ``as_array``; torch key
    positions follow the query positions' device.
    """
    q_pos = position_array(query_positions, "query_positions", as_array)
    k_pos = position_array(key_positions, "key_positions", as_array)
    positions(q_pos.shape, k_pos.shape)  # one per row: 1-D each
    if is_tensor(q_pos) and k_pos.device != q_pos.device:
        k_pos = k_pos.to(q_pos.device)
    return q_pos, k_pos


def _kind(values):
    # a NumPy kind letter for an array or a tensor
    if is_tensor(values):
        return tensor_kind(values.dtype)
    return np.asarray(values).dtype.kind


def _all_finite(values):
    # one pass, on the values' own device
    if is_tensor(values):
        return tensor_finite(values)
    return bool(np.isfinite(values).all())


def tensor_finite(tensor):
    """True when a floating tensor holds no NaN and no infinity.

    A sum is NaN or infinite when any element is, and one reduction costs
    a twentieth of an elementwise test (no bool tensor is made); only a
    sum that overflows, or a NaN found, needs the elementwise answer.
    """
    tensor = tensor.detach()
    if tensor.is_floating_point() and bool(tensor.sum().isfinite()):
        return True
    return bool(tensor.isfinite().all())


def _numbers_of(values):
    # a tensor as a NumPy array (floats as float64: NumPy has no bf16)
    if not is_tensor(values):
        return np.asarray(values)
    values = values.detach().cpu()
    return (values.double() if values.is_floating_point() else values).numpy()


def _widened(values, name):
    # torch lacks most kernels for uint16/32/64: int64 holds their values
    wide_unsigned = ("torch.uint16", "torch.uint32", "torch.uint64")
    if not is_tensor(values) or str(values.dtype) not in wide_unsigned:
        return values
    numbers = values.cpu().numpy()
    if numbers.size and numbers.max() >= 2**63:
        raise ValueError(
            f"{name} holds {numbers.max()}, beyond int64 (2**63 - 1); "
            f"positions and lengths must fit in int64"
        )
    return values.long()


def model_input(shape, d_model, name="x"):
    """Check an input of shape (B, T, d_model)."""
    shape = tuple(shape)
    if len(shape) != 3 or shape[-1] != d_model:
        raise ValueError(
            f"{name} must have shape (B, T, d_model={d_model}), got {shape}"
        )
    if shape[1] < 1:
        raise ValueError(
            f"{name} must hold at least one position, got shape {shape} "
            f"(T = 0); attention needs at least one query and one key"
        )


def context_input(x_shape, context_shape, d_model):
    """Check cross-attention context (B, Tk, d_model) against x."""
    model_input(context_shape, d_model, name="context")
    if context_shape[0] != x_shape[0]:  # both are (B, T, d_model) here
        raise ValueError(
            f"context batch {tuple(context_shape)} does not match "
            f"x batch {tuple(x_shape)}"
        )


def real_logits(logits, axis=None):
    """Return logits as a float array, or raise on what softmax can't use.

    Accepts bool, int and float dtypes; rejects complex and object, and
    torch tensors (use torch's softmax). Integers must be exactly
    representable in the float dtype used (NumPy's promotion with
    float32: int64 -> float64, int16 -> float32). NaN and +inf are
    rejected; -inf is allowed and means "masked". With ``axis``, that
    axis must exist and hold at least one value.
    """
    not_a_tensor(logits, "logits", "torch.softmax(logits, dim=-1)")
    values = np.asarray(logits)
    if axis is not None:
        _nonempty_axis(values.shape, axis)
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


def upstream(dout_shape, out_shape, name="dout"):
    """Check that an upstream gradient has the output's shape."""
    if tuple(dout_shape) != tuple(out_shape):
        raise ValueError(
            f"{name} of shape {tuple(dout_shape)} must match the output "
            f"it is the gradient of, of shape {tuple(out_shape)}"
        )


def linear_arrays(x, weight, dy):
    """The guards of numpy_ref.linear_backward: y = x W, given dL/dy.

    x (..., d_in), weight (d_in, d_out), dy (..., d_out) with x's
    leading dims, as float arrays of one dtype (see float_arrays).
    """
    x, weight, dy = float_arrays(x=x, weight=weight, dy=dy)
    if weight.ndim != 2 or x.ndim < 1 or x.shape[-1] != weight.shape[0]:
        raise ValueError(
            f"x {x.shape} and weight {weight.shape} do not fit y = x W: "
            f"x must be (..., d_in) and weight (d_in, d_out)"
        )
    upstream(dy.shape, (*x.shape[:-1], weight.shape[1]), "dy")
    return x, weight, dy


def kv_heads(q_shape, k_shape, v_shape):
    """Query heads per key/value head, G = H // H_kv (grouped queries).

    Heads are axis -3. k and v may hold H_kv heads, fewer than q's H,
    when H % H_kv == 0: query head h then reads key/value head h // G.
    Returns 1 when there is nothing to group: the same heads, a single
    head that broadcasts, no heads axis, or more heads in k or v than
    in q (qkv_shapes then reports the shapes that do not broadcast).
    """
    q, k, v = (tuple(s) for s in (q_shape, k_shape, v_shape))
    if min(len(q), len(k), len(v)) < 3:
        return 1  # no heads axis: plain broadcasting
    h, h_kv, h_v = q[-3], k[-3], v[-3]
    if {h_kv, h_v} <= {1, h} or max(h_kv, h_v) > h:
        return 1  # the same heads, one that broadcasts, or no grouping
    if h_kv != h_v:
        raise ValueError(
            f"k and v need the same number of heads (axis -3) to group "
            f"queries: k {k} has {h_kv}, v {v} has {h_v}"
        )
    if h % h_kv:
        raise ValueError(
            f"q has H={h} heads and k, v have H_kv={h_kv} (axis -3): "
            f"grouped-query attention needs H % H_kv == 0"
        )
    return h // h_kv


def kv_head_split(n_head, n_kv_head):
    """Check that ``n_head`` query heads share ``n_kv_head`` evenly."""
    positive_integer(n_kv_head, "n_kv_head")
    if n_head % n_kv_head:
        raise ValueError(
            f"n_head={n_head} is not a multiple of n_kv_head={n_kv_head}: "
            f"each key/value head serves n_head / n_kv_head query heads"
        )


def rope_head_size(d_head):
    """RoPE rotates pairs of features: the head size must be even."""
    if d_head % 2:
        raise ValueError(
            f"RoPE rotates pairs of features and needs an even head "
            f"size, got d_head={d_head}"
        )


def sequence_positions(shape, t, name="positions"):
    """One position per row: a 1-D array of length T."""
    if tuple(shape) != (t,):
        raise ValueError(
            f"{name} must have shape (T,) = ({t},), one position per "
            f"row, got shape {tuple(shape)}"
        )


def rope_positions(positions, t, name="positions"):
    """RoPE positions: T real numbers, one per row, finite, not bool.

    ``positions``: a NumPy array or a torch tensor. Any integer dtype
    (uint8 to int64) or float dtype is accepted; bool is refused, as
    True and False are no positions.
    """
    if is_tensor(positions):
        dtype, kind = positions.dtype, tensor_kind(positions.dtype)
        values = positions.detach().cpu()
        values = values.double() if kind == "f" else values
        values = values.numpy()
    else:
        values = np.asarray(positions)
        dtype, kind = values.dtype, values.dtype.kind
    if kind not in "iuf":
        raise TypeError(
            f"{name} must hold integers (or real numbers), one position "
            f"per row, got dtype {dtype} and shape {tuple(values.shape)}"
        )
    sequence_positions(values.shape, t, name)
    if kind == "f":
        finite(values, name)


def tensor_kind(dtype):
    # a NumPy-like kind letter for a torch dtype, without importing torch
    if dtype.is_complex:
        return "c"
    if dtype.is_floating_point:
        return "f"
    if str(dtype) == "torch.bool":
        return "b"
    return "u" if str(dtype).startswith("torch.uint") else "i"


def rope_inputs(x_shape, positions, base, base_name="base"):
    """The guards of apply_rope: even d_head, (T,) positions, base > 0."""
    if len(tuple(x_shape)) < 2:
        raise ValueError(
            f"x must have at least 2 dims (..., T, d_head), got shape "
            f"{tuple(x_shape)}"
        )
    rope_head_size(x_shape[-1])
    rope_positions(positions, x_shape[-2])
    rope_base(base, base_name)


def rope_arguments(x, positions, base, as_array):
    """The guards of every apply_rope: x, positions and base, checked.

    ``as_array``: np.asarray (NumPy: x array-like, not a tensor) or
    torch.as_tensor (x must be a tensor). x real and finite: bool and
    int compute in float, as the callers convert them. Positions: any
    iterable of reals, fractional ones too (position interpolation),
    read once; torch ones come back on x's device. Returns (x,
    positions).
    """
    if as_array is np.asarray:
        not_a_tensor(x, "x", "torch_ref.apply_rope")
        x = np.asarray(x)
    elif not is_tensor(x):
        raise TypeError(
            f"x must be a torch.Tensor, got {type(x).__name__}; convert "
            f"with torch.as_tensor(x), or use numpy_ref.apply_rope"
        )
    if _kind(x) not in "biuf":
        raise TypeError(
            f"x must hold real numbers (bool, int or float), got dtype "
            f"{x.dtype}"
        )
    if _kind(x) == "f" and not _all_finite(x):  # NaN would pass unseen
        finite(_numbers_of(x), "x")
    positions = array_of(positions, "positions", as_array)
    if is_tensor(x):
        positions = positions.to(x.device)
    rope_inputs(x.shape, positions, base)
    return x, positions


def rotary_arguments(x, positions, base, as_array, inv_freq, rotary_dim):
    """The guards of apply_rope: rope_arguments, then the rotated slice.

    rotary_dim: None (every feature) or an even int 2 .. d_head.
    inv_freq: None (base^(-2i / r)) or r / 2 finite reals; without
    rotary_dim, r = 2 * len(inv_freq). Returns (x, positions,
    inv_freq as float64 through as_array or None, r).
    """
    x, positions = rope_arguments(x, positions, base, as_array)
    d_head = x.shape[-1]
    r = d_head
    if rotary_dim is not None:
        integer(rotary_dim, "rotary_dim")
        if rotary_dim < 2 or rotary_dim > d_head or rotary_dim % 2:
            raise ValueError(
                f"rotary_dim must be even and 2 .. d_head={d_head}, got "
                f"rotary_dim={rotary_dim}"
            )
        r = int(rotary_dim)
    if inv_freq is None:
        return x, positions, None, r
    if as_array is np.asarray:
        not_a_tensor(inv_freq, "inv_freq", "torch_ref.apply_rope")
    freq = array_of(inv_freq, "inv_freq", as_array)
    if _kind(freq) not in "iuf" or freq.ndim != 1:
        raise TypeError(
            f"inv_freq must be 1-D real numbers (rope_frequencies' first "
            f"output), got dtype {freq.dtype} and shape {tuple(freq.shape)}"
        )
    finite(_numbers_of(freq), "inv_freq")
    want = r // 2 if rotary_dim is not None else None
    if (
        not len(freq)
        or 2 * len(freq) > d_head
        or want not in (None, len(freq))
    ):
        raise ValueError(
            f"inv_freq must hold one frequency per rotated pair: "
            f"{want or 'd_head / 2 at most'} (rotary_dim={rotary_dim}, "
            f"d_head={d_head}), got {len(freq)}"
        )
    if is_tensor(freq):
        freq = freq.to(x.device).double()
    else:
        freq = freq.astype(np.float64)
    return x, positions, freq, 2 * len(freq)


def rope_base(base, name="rope_base"):
    """The RoPE base (theta, 10000 in RoFormer): a finite number > 0."""
    if isinstance(base, bool) or not isinstance(
        base, int | float | np.integer | np.floating
    ):
        raise TypeError(
            f"{name} must be a real number (10000.0 by default), got {base!r}"
        )
    if not np.isfinite(base) or base <= 0:
        raise ValueError(
            f"{name} must be positive and finite, got {base}: the "
            f"frequencies {name} ** (-2 i / d_head) need a base > 0"
        )


def rope_self_attention(rope, has_context):
    """RoPE rotates q and k at the positions of x: no context."""
    if rope and has_context:
        raise ValueError(
            "rope=True rotates q and k at the positions of x, so it "
            "supports self-attention only; got a context"
        )


# Inputs of the NumPy and PyTorch layers: types, dtypes, one call each.


def is_tensor(value):
    """True for a torch.Tensor (or subclass), without importing torch."""
    return any(
        cls.__name__ == "Tensor" and cls.__module__ == "torch"
        for cls in type(value).__mro__
    )


def not_a_tensor(value, name, instead):
    """Refuse a torch tensor where NumPy code expects an array."""
    if is_tensor(value):
        raise TypeError(
            f"{name} is a torch.Tensor of dtype {value.dtype}, but this "
            f"NumPy function expects a NumPy array: pass "
            f"{name}.detach().cpu().numpy(), or use {instead}"
        )


def _nonempty_axis(shape, axis):
    shape = tuple(shape)
    if not -len(shape) <= axis < len(shape):
        raise ValueError(
            f"axis {axis} does not exist for logits of shape {shape}"
        )
    if shape[axis] == 0:
        raise ValueError(
            f"logits of shape {shape} hold no value along axis {axis}: "
            f"softmax needs at least one"
        )


def float_arrays(**arrays):
    """NumPy inputs as arrays of one float dtype, at least float32.

    Lists and other array-likes go through np.asarray. bool and int
    inputs are promoted as NumPy promotes them with float32 (bool, int8,
    int16 -> float32; int32, int64 -> float64) and float16 computes in
    float32, so q @ k^T never wraps around (int8) or turns into a
    logical OR (bool). Raises TypeError for a torch tensor or a complex,
    string or object array, ValueError for NaN or an infinity. Returns
    the arrays in the order given. One call: the helpers it names are
    called only to raise.
    """
    converted = {}
    for name, value in arrays.items():
        if not isinstance(value, np.ndarray) and is_tensor(value):
            not_a_tensor(value, name, "the torch_ref version")
        array = np.asarray(value)
        if array.dtype.kind not in "biuf":
            raise TypeError(
                f"{name} must hold real numbers (bool, int or float), got "
                f"dtype {array.dtype}"
            )
        converted[name] = array
    ftype = np.result_type(*(a.dtype for a in converted.values()), np.float32)
    for name, array in converted.items():
        converted[name] = array.astype(ftype, copy=False)
        if not np.isfinite(converted[name]).all():
            finite(converted[name], name)
    return tuple(converted.values())


def scores_shape(q_shape, k_shape, v_shape):
    """The shape (..., Tq, Tk) of q @ k^T, after checking q, k and v.

    k and v may hold fewer heads than q (grouped queries, kv_heads).
    """
    return grouped_scores_shape(q_shape, k_shape, v_shape)[0]


def grouped_scores_shape(q_shape, k_shape, v_shape):
    """scores_shape and G = H // H_kv (kv_heads), checked once."""
    q, k, v = (tuple(s) for s in (q_shape, k_shape, v_shape))
    group = kv_heads(q, k, v)
    if group > 1:  # as if each key/value head were repeated G times
        k = (*k[:-3], k[-3] * group, *k[-2:])
        v = (*v[:-3], v[-3] * group, *v[-2:])
    lead = qkv_shapes(q, k, v)
    return (*lead, q[-2], k[-2]), group


def mask_array(mask, scores_shape, empty_rows="raise"):
    """A NumPy bool mask broadcast to the scores, every row with a key.

    With empty_rows="zero", rows with every key masked are allowed (the
    caller may look at them with the bias and sinks: empty_rows_left).
    """
    if not isinstance(mask, np.ndarray) and is_tensor(mask):
        not_a_tensor(mask, "mask", "torch_ref with a torch mask")
    mask = np.asarray(mask)
    if mask.dtype != bool:
        mask_dtype(mask.dtype)
    try:
        mask = np.broadcast_to(mask, scores_shape)  # a view, no copy
    except ValueError:
        mask_shape(mask.shape, scores_shape)  # raises, naming both
    if mask.shape != tuple(scores_shape):
        mask_shape(mask.shape, scores_shape)
    if empty_rows != "zero":
        rows_without_keys(np.all(mask, axis=-1), empty_rows)
    return mask


# Score modifiers of attention (scale, softcap, bias, sinks): guards.


def real_number(value, name):
    """A Python or NumPy real number (bool refused), as a float."""
    if isinstance(value, bool) or not isinstance(
        value, int | float | np.integer | np.floating
    ):
        raise TypeError(
            f"{name} must be a real number, got {type(value).__name__} "
            f"{value!r}"
        )
    return float(value)


def score_scale(scale):
    """The scale of q k^T: None (1 / sqrt(d_k)) or a finite number."""
    if scale is None:
        return
    if not np.isfinite(real_number(scale, "scale")):
        raise ValueError(
            f"scale must be finite, got {scale}; None gives the default "
            f"1 / sqrt(d_k)"
        )


def softcap_value(softcap):
    """The soft-cap: None (off) or a positive finite number (Gemma 2: 50)."""
    if softcap is None:
        return
    cap = real_number(softcap, "softcap")
    if not (np.isfinite(cap) and cap > 0):
        raise ValueError(
            f"softcap must be positive and finite (Gemma 2 uses 50.0), "
            f"got {softcap}; None turns soft-capping off"
        )


def broadcasts_to(shape, scores_shape, name):
    shape, scores_shape = tuple(shape), tuple(scores_shape)
    try:
        full = np.broadcast_shapes(shape, scores_shape)
    except ValueError:
        full = None
    if full != scores_shape:
        raise ValueError(
            f"{name} of shape {shape} does not broadcast to the scores "
            f"(..., Tq, Tk) = {scores_shape}"
        )


def no_nan_or_posinf(values, name, allowed):
    # values: a NumPy float array; -inf is allowed and means `allowed`
    bad = np.isnan(values) | np.isposinf(values)
    if np.any(bad):
        first = first_index(bad)
        raise ValueError(
            f"{name} of shape {tuple(values.shape)} holds {values[first]} "
            f"at index {first}; use finite values, or -inf for {allowed}"
        )


def beyond_range(values, dtype, name):
    """Refuse finite values (a NumPy array) that overflow ``dtype``.

    A bias or sink computed in float32 turns a float64 1e300 into an
    infinity: +inf would read as an overflow of q @ k^T, -inf as a
    blocked key. Neither is what the caller wrote, so both mirrors say so.
    """
    values = np.asarray(values, np.float64)
    with np.errstate(over="ignore"):
        lost = np.isfinite(values) & ~np.isfinite(values.astype(dtype))
    if np.any(lost):
        first = first_index(lost)
        raise ValueError(
            f"{name} of shape {tuple(values.shape)} holds {values[first]} "
            f"at index {first}, beyond {np.dtype(dtype).name} (the dtype "
            f"attention computes in); use -inf for a blocked key (bias) "
            f"or no sink (sinks), or a value within range"
        )


def modifier_kind(name, kind, dtype, shape):
    if kind == "b":
        raise TypeError(
            f"{name} must hold real numbers, got a boolean {name} of shape "
            f"{shape}; a boolean mask goes in mask (True = blocked)"
        )
    if kind not in "iuf":
        raise TypeError(
            f"{name} must hold real numbers, got dtype {dtype} and shape "
            f"{shape}"
        )


def sinks_shape(shape, scores_shape):
    """One sink logit per query head: shape (H,) for scores (.., H, Tq, Tk)."""
    shape, scores_shape = tuple(shape), tuple(scores_shape)
    if len(scores_shape) < 3:
        raise ValueError(
            f"sinks need a heads axis: q (..., H, Tq, d) gives scores "
            f"(..., H, Tq, Tk), got scores {scores_shape}"
        )
    if shape != (scores_shape[-3],):
        raise ValueError(
            f"sinks must hold one logit per query head, shape (H,) = "
            f"({scores_shape[-3]},) for scores {scores_shape}, got shape "
            f"{shape}"
        )


def modifier_options(empty_rows, scale, softcap):
    """attention's keywords in one call: empty_rows "raise" or "zero",
    scale None or a finite number, softcap None or a positive finite
    number (the helpers named are called only to raise)."""
    if not isinstance(empty_rows, str) or empty_rows not in EMPTY_ROWS:
        empty_rows_option(empty_rows)
    reals = int | float | np.integer | np.floating
    for value, check in ((scale, score_scale), (softcap, softcap_value)):
        if value is None:
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, reals)
            or not np.isfinite(value)
            or (check is softcap_value and value <= 0)
        ):
            check(value)  # raises, naming the keyword and its value


def modifier_arrays(bias, sinks, scores_shape, dtype):
    """attention's bias (broadcasting to the scores (..., Tq, Tk)) and
    sinks (H,) as NumPy arrays of the compute ``dtype``, or None: real
    numbers, not bool, with -inf the only infinity (a blocked key, no
    sink), finite values within ``dtype``'s range. The helpers named
    are called only to raise."""
    arrays = {"bias": bias, "sinks": sinks}
    for name, value in arrays.items():
        if value is None:
            continue
        if not isinstance(value, np.ndarray) and is_tensor(value):
            not_a_tensor(value, name, f"torch_ref with a torch {name}")
        array = np.asarray(value)
        if array.dtype.kind not in "iuf":
            modifier_kind(name, array.dtype.kind, array.dtype, array.shape)
        if name == "bias":
            broadcasts_to(array.shape, scores_shape, "bias")
        elif len(scores_shape) < 3 or array.shape != (scores_shape[-3],):
            sinks_shape(array.shape, scores_shape)
        if array.dtype.kind == "f" and array.dtype.itemsize > dtype.itemsize:
            beyond_range(array, dtype, name)  # a float64 1e300: inf
        array = array.astype(dtype, copy=False)
        if np.any(np.isnan(array) | np.isposinf(array)):
            why = "a blocked key" if name == "bias" else "no sink"
            no_nan_or_posinf(array, name, why)
        arrays[name] = array
    return arrays["bias"], arrays["sinks"]


def empty_rows_left(mask, bias, sinks, scores_shape, empty_rows):
    """Refuse a query row whose every key is blocked (mask True or bias
    -inf) when its head has no sink (None, or -inf), unless
    empty_rows="zero". NumPy mask (broadcast to the scores), bias and
    sinks (H,), each or None; nothing is returned or rewritten."""
    if empty_rows == "zero" or (mask is None and bias is None):
        return
    blocked = mask
    if bias is not None and np.any(np.isneginf(bias)):  # -inf blocks
        by_bias = np.broadcast_to(np.isneginf(bias), scores_shape)
        blocked = by_bias if mask is None else mask | by_bias
    if blocked is None:
        return
    row_blocked = np.all(blocked, axis=-1)  # (..., H, Tq)
    if sinks is not None:  # a head with a sink has no empty row
        row_blocked = row_blocked & np.isneginf(sinks)[:, None]
    if np.any(row_blocked):
        every_row_has_a_key(row_blocked)


def _numpy_values(values):
    # a NumPy array or a torch tensor as (kind letter, NumPy values)
    if is_tensor(values):
        kind = tensor_kind(values.dtype)
        array = values.detach().cpu()
        return kind, (array.double() if kind == "f" else array).numpy()
    array = np.asarray(values)
    return array.dtype.kind, array


def alibi_inputs(slopes, query_positions, key_positions, as_array):
    """The guards of alibi_bias: (n_head,) finite slopes, 1-D positions.

    Any sequence, array or tensor (an iterator is read once); slopes
    and positions of any int or float dtype (bool refused), finite.
    Returns the three through ``as_array`` (np.asarray, torch.as_tensor).
    """
    slopes = array_of(slopes, "slopes", as_array)
    query_positions = array_of(query_positions, "query_positions", as_array)
    key_positions = array_of(key_positions, "key_positions", as_array)
    for name, value in (
        ("slopes", slopes),
        ("query_positions", query_positions),
        ("key_positions", key_positions),
    ):
        kind, values = _numpy_values(value)
        if kind not in "iuf":
            raise TypeError(
                f"{name} must hold real numbers, got dtype {value.dtype} "
                f"and shape {tuple(values.shape)}"
            )
        if values.ndim != 1 or len(values) < 1:
            what = "one slope per head" if name == "slopes" else "one per row"
            raise ValueError(
                f"{name} must be 1-D and not empty ({what}), got shape "
                f"{tuple(values.shape)}"
            )
        if kind == "f":
            finite(values, name)
    return slopes, query_positions, key_positions


def scores_finite(scores, mask=None, bias=None):
    """Raise if q @ k^T overflowed although q and k were finite.

    ``scores``: NumPy (..., Tq, Tk), after masking. NaN or +inf
    anywhere, or a row of nothing but -inf that the mask (NumPy, True =
    blocked, or None) and a bias of -inf (or None) left a key, means
    scores beyond the dtype's range.
    """
    bad = np.isnan(scores) | np.isposinf(scores)
    if np.any(bad):
        first = first_index(bad)
        raise ValueError(
            f"scores of shape {scores.shape} hold {scores[first]} at "
            f"index {first}: q @ k^T overflowed {scores.dtype} though q "
            f"and k are finite; scale q and k down"
        )
    lost = np.all(np.isneginf(scores), axis=-1)  # (..., Tq)
    if not np.any(lost):
        return
    blocked = np.False_ if mask is None else mask
    if bias is not None:  # a bias of -inf blocks its key too
        blocked = blocked | np.isneginf(bias)
    lost &= ~np.all(np.broadcast_to(blocked, scores.shape), axis=-1)
    if np.any(lost):
        raise ValueError(
            f"every score of query row at index {first_index(lost)} is "
            f"-inf, though the row has unmasked keys: q @ k^T overflowed "
            f"{scores.dtype} to -inf; scale q and k down"
        )


def model_arrays(x, context, d_model, rope=False):
    """The guards of numpy_ref.MultiHeadAttention: x and context (or None).

    Returns them as float arrays (see float_arrays), x (B, Tq, d_model)
    and context (B, Tk, d_model) with T >= 1; a layer with rope takes no
    context (rope_self_attention).
    """
    rope_self_attention(rope, context is not None)
    if context is None:
        (x,) = float_arrays(x=x)
    else:
        x, context = float_arrays(x=x, context=context)
    model_input(x.shape, d_model)
    if context is not None:
        context_input(x.shape, context.shape, d_model)
    return x, context


def model_backward_arrays(x, context, dy, d_model, rope=False):
    """The guards of numpy_ref.MultiHeadAttention.backward, in one call.

    x and context as model_arrays checks them; dy, the gradient of the
    output y (B, Tq, d_model), as a finite float array of x's shape.
    """
    x, context = model_arrays(x, context, d_model, rope)
    (dy,) = float_arrays(dy=dy)
    upstream(dy.shape, x.shape, "dy")  # y has x's shape
    return x, context, dy


def causal_shape(t, tk, align, device=None, cuda=False):
    """A causal mask's (Tk, offset): key j is blocked when j > i + offset.

    Square (tk None or t): offset 0. For tk != t the caller must say
    which corner the diagonal starts from: "top_left" (offset 0, SDPA's
    is_causal) or "bottom_right" (offset tk - t, flash-attn's causal and
    a KV cache: the t queries are the last t of the tk positions). A
    CUDA ``device`` only where ``cuda`` (torch_ref's mask).
    """
    positive_integer(t, "t")
    tk = t if tk is None else tk
    positive_integer(tk, "tk")
    if align not in (None, "top_left", "bottom_right"):
        raise ValueError(
            f"align must be 'top_left' (SDPA's is_causal) or "
            f"'bottom_right' (flash-attn, a KV cache), got {align!r}"
        )
    if align is None and tk != t:
        raise ValueError(
            f"a causal mask of shape (t, tk) = ({t}, {tk}) is not square: "
            f"say which corner it aligns to, align='top_left' (SDPA's "
            f"is_causal) or align='bottom_right' (flash-attn, a KV cache)"
        )
    cuda_device(device, cuda)  # torch_ref's mask: CUDA only where it is
    return tk, (tk - t if align == "bottom_right" else 0)


def key_padding(lengths, tk, as_array=None):
    """Lengths (B,) of ints in 1 .. tk, or a (B, Tk) bool padding mask.

    Returns the lengths, through ``as_array`` (np.asarray or
    torch.as_tensor) when given; torch uint16/32/64 come back as int64.
    """
    if as_array is not None:
        lengths = array_of(lengths, "lengths", as_array)
    shape = tuple(lengths.shape)
    values = np.asarray(lengths.cpu() if is_tensor(lengths) else lengths)
    if tk is not None:
        positive_integer(tk, "tk")
    if shape[:1] == (0,):  # no sequence: nothing to take a length of
        raise ValueError(
            f"lengths must hold one length per sequence, shape (B,) "
            f"with B >= 1 (or a bool (B, Tk) mask), got shape {shape}"
        )
    if values.dtype == bool:
        if len(shape) != 2 or (tk is not None and shape[1] != tk):
            raise ValueError(
                f"a boolean padding mask must be (B, Tk), True = padding"
                f"{'' if tk is None else f', with Tk = {tk}'}; got shape "
                f"{shape}"
            )
        return lengths
    if values.dtype.kind not in "iu" or len(shape) != 1:
        raise TypeError(
            f"lengths must be ints of shape (B,), or a bool (B, Tk) "
            f"mask; got dtype {lengths.dtype} and shape {shape}"
        )
    if len(values) and values.min() < 1:
        b = int(np.argmin(values))
        raise ValueError(
            f"lengths[{b}] = {values[b]}: a sequence needs at least one "
            f"key, or its query rows have every key masked"
        )
    if tk is not None and len(values) and values.max() > tk:
        b = int(np.argmax(values))
        raise ValueError(f"lengths[{b}] = {values[b]} exceeds tk = {tk} keys")
    return _widened(lengths, "lengths")


# Mask rules: functions of positions (numpy_ref / torch_ref, "masks").


def _rule_values(values, name, ids=False):
    # positions (or document ids) as a NumPy array, checked: 1-D (T,)
    # or (B, T), real whole numbers, finite, >= 0 unless they are ids
    if is_tensor(values):
        kind = tensor_kind(values.dtype)
        array = values.detach().cpu()
        array = (array.double() if kind == "f" else array).numpy()
    else:
        array = array_of(values, name, np.asarray)
        kind = array.dtype.kind
    what = "document ids" if ids else "positions"
    if kind not in "iuf":
        raise TypeError(
            f"{name} must hold integer {what}, got dtype "
            f"{getattr(values, 'dtype', array.dtype)} and shape "
            f"{tuple(array.shape)}"
        )
    if array.ndim not in (1, 2):
        raise ValueError(
            f"{name} must be 1-D (T,), shared by the batch, or (B, T), "
            f"one row per sequence; got shape {tuple(array.shape)}"
        )
    if kind == "f":
        finite(array, name)
        whole = array == np.round(array)
        if not np.all(whole):
            first = first_index(~whole)
            raise ValueError(
                f"{name} must hold whole numbers ({what}), got "
                f"{array[first]} at index {first}"
            )
    if not ids and array.size and array.min() < 0:
        first = first_index(array < 0)
        raise ValueError(
            f"{name} must be >= 0, got {array[first]} at index {first}"
        )
    if array.size and (array.max() >= 2**63 or array.min() < -(2**63)):
        far = array.max() if array.max() >= 2**63 else array.min()
        raise ValueError(
            f"{name} holds {far}, beyond int64 (|value| < 2**63); {what} "
            f"must fit in int64"
        )
    return array


def rule_arrays(query_values, key_values, ids=False, names=None, **sizes):
    """The guards of a mask rule's two position arrays, in one call.

    Each is 1-D (T,) or (B, T), of whole numbers (any int dtype, or
    floats holding whole numbers), finite and, for positions, >= 0
    (``ids=True``: document ids, any integers). Two (B, T) arrays need
    the same B, or B = 1; a 1-D array is shared by every sequence.
    Returns both as int64 NumPy arrays (an iterator is read once). An
    int64 NumPy array is looked at without a further call. ``sizes``:
    the rule's int sizes, name=(value, least), as rule_sizes checks them.
    """
    for name, (value, least) in sizes.items():
        if (
            isinstance(value, bool)
            or not isinstance(value, int | np.integer)
            or not least <= value < 2**63
        ):
            rule_int(value, name, least)
    names = names or ("query_positions", "key_positions")
    arrays = []
    for values, name in zip((query_values, key_values), names, strict=True):
        if (
            isinstance(values, np.ndarray)
            and values.dtype == np.int64
            and values.ndim in (1, 2)
            and (ids or not values.size or values.min() >= 0)
        ):
            arrays.append(values)  # the common case: nothing to convert
        else:
            arrays.append(_rule_values(values, name, ids))
    q, k = arrays
    q_name, k_name = names
    batch = {q.shape[0], k.shape[0]} - {1}  # B = 1 broadcasts
    if q.ndim == k.ndim == 2 and len(batch) > 1:
        raise ValueError(
            f"{q_name} {tuple(q.shape)} and {k_name} {tuple(k.shape)} "
            f"hold different batch sizes B = {q.shape[0]} and "
            f"{k.shape[0]}; a (B, T) pair needs the same B"
        )
    return q.astype(np.int64, copy=False), k.astype(np.int64, copy=False)


def rule_sizes(**sizes):
    """A mask rule's int sizes, name=(value, least): each an int of at
    least ``least``, within int64 (rule_int, called only to raise)."""
    for name, (value, least) in sizes.items():
        if (
            isinstance(value, bool)
            or not isinstance(value, int | np.integer)
            or not least <= value < 2**63
        ):
            rule_int(value, name, least)


def rule_int(value, name, least):
    """An int size of a mask rule: at least ``least``, within int64."""
    integer(value, name)
    if value < least:
        raise ValueError(f"{name} must be at least {least}, got {value}")
    if value >= 2**63:
        raise ValueError(
            f"{name}={value} is beyond int64 (2**63 - 1), which positions "
            f"are compared in; any size past the last position is the same"
        )


def document_lengths(lengths):
    """The guard of document_ids: (n,) positive integer lengths, n >= 1."""
    if is_tensor(lengths):
        kind, shape = tensor_kind(lengths.dtype), tuple(lengths.shape)
        values = lengths.detach().cpu().numpy() if kind in "iu" else lengths
    else:
        values = np.asarray(lengths)
        kind, shape = values.dtype.kind, values.shape
    if len(shape) != 1 or shape[0] < 1:
        raise ValueError(
            f"lengths must be 1-D (n_documents,) with at least one "
            f"document, got shape {shape}"
        )
    if kind not in "iu":
        raise TypeError(
            f"lengths must be positive integers, one per document, got "
            f"dtype {getattr(lengths, 'dtype', values.dtype)} and shape "
            f"{shape}"
        )
    if values.min() < 1:
        i = int(np.argmin(values))
        raise ValueError(
            f"lengths[{i}] = {values[i]}: a document holds at least one token"
        )


def torch_module(module):
    """A torch_ref.MultiHeadAttention (what from_torch copies), else a
    TypeError naming what it lacks."""
    names = ("d_model", "n_head", "n_kv_head", "rope", "rope_base")
    layers = ("wq", "wk", "wv", "wo")
    if not all(hasattr(module, name) for name in (*names, *layers)):
        raise TypeError(
            f"module must be a torch_ref.MultiHeadAttention (d_model, "
            f"n_head and the nn.Linear layers wq, wk, wv, wo), got "
            f"{type(module).__name__}"
        )
