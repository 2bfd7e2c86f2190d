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


def positive_integer(value, name):
    """Raise unless ``value`` is an int greater than zero."""
    integer(value, name)
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")


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


def rope_self_attention(rope, has_context):
    """RoPE rotates q and k at the positions of x: no context."""
    if rope and has_context:
        raise ValueError(
            "rope=True rotates q and k at the positions of x, so it "
            "supports self-attention only; got a context"
        )


def chunk_lengths(chunks, t):
    """Chunk lengths for a cached forward: positive ints summing to T."""
    if isinstance(chunks, int | np.integer):
        raise TypeError(
            f"chunks must be a sequence of lengths, e.g. [{t}], "
            f"got the int {chunks}"
        )
    chunks = list(chunks)
    for i, n in enumerate(chunks):
        integer(n, f"chunks[{i}]")
        if n <= 0:
            raise ValueError(f"chunks[{i}] = {n}: a chunk needs >= 1 row")
    if sum(chunks) != t:
        raise ValueError(
            f"chunks {chunks} sum to {sum(chunks)}, but x holds T={t} "
            f"positions"
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
    the arrays in the order given.
    """
    converted = {}
    for name, value in arrays.items():
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
        finite(converted[name], name)
    return tuple(converted.values())


def float_tensors(**tensors):
    """Torch inputs: tensors of one floating dtype, on one device, finite.

    Raises TypeError naming the type or the dtypes (int, bool or complex
    tensors, NumPy arrays, a mix of dtypes), ValueError for tensors on
    different devices or holding NaN or an infinity.
    """
    for name, tensor in tensors.items():
        if not is_tensor(tensor):
            raise TypeError(
                f"{name} must be a torch.Tensor, got "
                f"{type(tensor).__name__}; convert with "
                f"torch.as_tensor({name})"
            )
        if not tensor.dtype.is_floating_point:
            raise TypeError(
                f"{name} has dtype {tensor.dtype}; expected a real "
                f"floating dtype (torch.float16, torch.bfloat16, "
                f"torch.float32 or torch.float64): convert with "
                f"{name}.float()"
            )
    listed = ", ".join(f"{n} {t.dtype}" for n, t in tensors.items())
    if len({t.dtype for t in tensors.values()}) > 1:
        raise TypeError(
            f"{', '.join(tensors)} must share one dtype, got {listed}; "
            f"convert with .to(dtype)"
        )
    if len({t.device for t in tensors.values()}) > 1:
        where = ", ".join(f"{n} {t.device}" for n, t in tensors.items())
        raise ValueError(
            f"{', '.join(tensors)} must be on one device, got {where}"
        )
    for name, tensor in tensors.items():
        if not bool(tensor.isfinite().all()):
            # .double(): NumPy has no bfloat16
            finite(tensor.detach().cpu().double().numpy(), name)


def scores_shape(q_shape, k_shape, v_shape):
    """The shape (..., Tq, Tk) of q @ k^T, after checking q, k and v.

    k and v may hold fewer heads than q (grouped queries, kv_heads).
    """
    q, k, v = (tuple(s) for s in (q_shape, k_shape, v_shape))
    group = kv_heads(q, k, v)
    if group > 1:  # as if each key/value head were repeated G times
        k = (*k[:-3], k[-3] * group, *k[-2:])
        v = (*v[:-3], v[-3] * group, *v[-2:])
    lead = qkv_shapes(q, k, v)
    return (*lead, q[-2], k[-2])


def mask_array(mask, scores_shape):
    """A NumPy bool mask broadcast to the scores, every row with a key."""
    not_a_tensor(mask, "mask", "torch_ref with a torch mask")
    mask = np.asarray(mask)
    mask_dtype(mask.dtype)
    mask_shape(mask.shape, scores_shape)
    mask = np.broadcast_to(mask, scores_shape)  # a view, no copy
    every_row_has_a_key(np.all(mask, axis=-1))
    return mask


def mask_tensor(mask, scores_shape, device=None):
    """A torch bool mask expanded to the scores, every row with a key."""
    if not is_tensor(mask):
        raise TypeError(
            f"mask must be a torch.Tensor of dtype torch.bool, got "
            f"{type(mask).__name__}; convert with torch.as_tensor(mask)"
        )
    mask_dtype(mask.dtype)
    mask_shape(mask.shape, scores_shape)
    if device is not None and mask.device != device:
        raise ValueError(
            f"mask is on {mask.device} but the inputs are on {device}; "
            f"move it with mask.to({str(device)!r})"
        )
    mask = mask.expand(*scores_shape)  # a view, no copy
    every_row_has_a_key(mask.all(dim=-1).cpu().numpy())
    return mask


def attention_arrays(q, k, v, mask=None):
    """The guards of a NumPy attention function, in one call.

    Returns q, k and v as float arrays (see float_arrays) and the mask
    broadcast to the scores (..., Tq, Tk), or None. Raises if a shape
    does not fit, or a row has every key masked. A key-padding mask is
    (B, 1, 1, Tk): a 2-D mask always means (Tq, Tk).
    """
    q, k, v = float_arrays(q=q, k=k, v=v)
    shape = scores_shape(q.shape, k.shape, v.shape)
    if mask is not None:
        mask = mask_array(mask, shape)
    return q, k, v, mask


def attention_tensors(q, k, v, mask=None):
    """The guards of a PyTorch attention function, in one call.

    Checks q, k and v (see float_tensors) and their shapes; returns the
    mask expanded to the scores (..., Tq, Tk), or None. A (Tk,) or 0-d
    mask becomes a full one, which SDPA needs.
    """
    float_tensors(q=q, k=k, v=v)
    shape = scores_shape(q.shape, k.shape, v.shape)
    return None if mask is None else mask_tensor(mask, shape, q.device)


def scores_finite(scores):
    """Raise if q @ k^T overflowed although q and k were finite.

    ``scores``: NumPy (..., Tq, Tk), after masking, with every row known
    to keep at least one allowed key. NaN or +inf anywhere, or a row of
    nothing but -inf, means scores beyond the dtype's range.
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
    if np.any(lost):
        raise ValueError(
            f"every score of query row at index {first_index(lost)} is "
            f"-inf, though the row has unmasked keys: q @ k^T overflowed "
            f"{scores.dtype} to -inf; scale q and k down"
        )


def model_arrays(x, context, d_model):
    """The guards of numpy_ref.MultiHeadAttention: x and context (or None).

    Returns them as float arrays (see float_arrays), x (B, Tq, d_model)
    and context (B, Tk, d_model) with T >= 1.
    """
    if context is None:
        (x,) = float_arrays(x=x)
    else:
        x, context = float_arrays(x=x, context=context)
    model_input(x.shape, d_model)
    if context is not None:
        context_input(x.shape, context.shape, d_model)
    return x, context


def model_tensors(x, context, d_model, weight):
    """The guards of a torch module's forward: x and context (or None).

    x (B, Tq, d_model), context (B, Tk, d_model), both of the dtype and
    on the device of ``weight``, finite, with T >= 1.
    """
    named = {"x": x} if context is None else {"x": x, "context": context}
    float_tensors(**named)
    if x.dtype != weight.dtype:
        raise TypeError(
            f"x has dtype {x.dtype} but the module's weights are "
            f"{weight.dtype}: convert with x.to({weight.dtype}) or "
            f"module.to({x.dtype})"
        )
    if x.device != weight.device:
        raise ValueError(
            f"x is on {x.device} but the module's weights are on "
            f"{weight.device}: move one with .to(device)"
        )
    model_input(x.shape, d_model)
    if context is not None:
        context_input(x.shape, context.shape, d_model)


def device(device, cuda_available):
    """Refuse a CUDA device when torch sees none, naming what was asked."""
    wants_cuda = str(device).startswith("cuda") or (
        isinstance(device, int) and not isinstance(device, bool)
    )
    if device is not None and wants_cuda and not cuda_available:
        raise ValueError(
            f"device={device!r} asks for CUDA, but "
            f"torch.cuda.is_available() is False here (no GPU, or a "
            f"CPU-only torch build); use device='cpu' or None"
        )


def new_queries(values, n_new):
    """At least one cached or new key per new query (kv_cache example)."""
    if len(values) < n_new:
        raise ValueError(
            f"values holds {len(values)} value(s), {tuple(values)}, but "
            f"the {n_new} new queries sit at the last {n_new} positions: "
            f"give at least {n_new} values"
        )


def key_padding(lengths, tk):
    """Lengths (B,) of ints in 1 .. tk, or a (B, Tk) bool padding mask."""
    shape = tuple(lengths.shape)
    values = np.asarray(lengths.cpu() if is_tensor(lengths) else lengths)
    if tk is not None:
        integer(tk, "tk")
    if values.dtype == bool:
        if len(shape) != 2 or (tk is not None and shape[1] != tk):
            raise ValueError(
                f"a boolean padding mask must be (B, Tk), True = padding"
                f"{'' if tk is None else f', with Tk = {tk}'}; got shape "
                f"{shape}"
            )
        return
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
