"""The doors of numpy_ref.py: one guard per public function, same name.

Each checks its function's inputs in one call and returns them
converted (float arrays, a mask broadcast to the scores), nothing new;
the helpers they share with torch_ref's doors are in arrays.py.
"""

import numpy as np

from mha_ref.guards.arrays import (
    alibi_inputs,
    array_of,
    causal_shape,
    empty_rows_left,
    float_arrays,
    grouped_scores_shape,
    key_padding,
    kv_heads,
    layer_sizes,
    linear_arrays,
    mask_array,
    mask_positions,
    model_arrays,
    model_backward_arrays,
    modifier_arrays,
    modifier_kind,
    modifier_options,
    no_nan_or_posinf,
    not_a_tensor,
    positive_integer,
    qkv_shapes,
    real_logits,
    rotary_arguments,
    rows_without_keys,
    rule_arrays,
    scores_finite,
    sinks_shape,
    torch_module,
    upstream,
)
from mha_ref.guards.arrays import document_lengths as _lengths


def softmax(logits, axis, empty_rows):
    """Real logits (float, no NaN, no +inf; see real_logits) with
    ``axis`` holding a value; a row of only -inf refused unless
    empty_rows="zero". Returns the logits as a float array."""
    values = real_logits(logits, axis)  # float; no NaN, no +inf
    empty = np.all(np.isneginf(values), axis=axis)
    rows_without_keys(empty, empty_rows, "logits row")
    return values


def dot_product_attention(q, k, v, mask):
    """q, k and v as float_arrays makes them, with the same heads (one
    head broadcasts; attention groups fewer key/value heads); the mask
    broadcast to the scores (..., Tq, Tk), every row with a key; and
    q @ k^T that cannot overflow (looked at only when max|q| max|k| d
    comes near the dtype's range). Returns q, k, v and the mask."""
    q, k, v = float_arrays(q=q, k=k, v=v)
    if kv_heads(q.shape, k.shape, v.shape) > 1:
        raise ValueError(
            f"k {k.shape} and v {v.shape} have fewer heads (axis -3) than "
            f"q {q.shape}: repeat them (repeat_kv_heads) or call attention"
        )
    lead = qkv_shapes(q.shape, k.shape, v.shape)
    shape = (*lead, q.shape[-2], k.shape[-2])
    if mask is not None:
        mask = mask_array(mask, shape)
    top = [float(np.max(np.abs(a), initial=0.0)) for a in (q, k)]
    if top[0] * top[1] * q.shape[-1] >= float(np.finfo(q.dtype).max) / 2:
        with np.errstate(over="ignore", invalid="ignore"):
            scores = q @ np.swapaxes(k, -2, -1) / np.sqrt(q.shape[-1])
        if mask is not None:
            scores = np.where(mask, -np.inf, scores)
        scores_finite(scores, mask)
    return q, k, v, mask


def softmax_with_sinks(scores, sinks, empty_rows):
    """Real scores (..., H, Tq, Tk) and real sinks (H,), not bool, as
    float arrays, with -inf the only infinity (a masked key, no sink); a
    row with no key and no sink refused unless empty_rows="zero"."""
    arrays = {}
    for name, value in (("scores", scores), ("sinks", sinks)):
        not_a_tensor(value, name, "torch_ref.softmax_with_sinks")
        array = np.asarray(value)
        modifier_kind(name, array.dtype.kind, array.dtype, array.shape)
        array = array.astype(np.result_type(array.dtype, np.float32))
        why = "a masked key" if name == "scores" else "no sink"
        no_nan_or_posinf(array, name, why)
        arrays[name] = array
    scores, sinks = arrays["scores"], arrays["sinks"]
    sinks_shape(sinks.shape, scores.shape)
    no_key = (
        np.all(np.isneginf(scores), axis=-1) & np.isneginf(sinks)[:, None]
    )  # (..., H, Tq): no key and no sink
    rows_without_keys(no_key, empty_rows, "logits row")
    return scores, sinks


def softmax_backward(probabilities, upstream):
    """p and dL/dp as arrays of one shape."""
    p, g = np.asarray(probabilities), np.asarray(upstream)
    if p.shape != g.shape:
        raise ValueError(
            f"probabilities {p.shape} and upstream {g.shape} must match"
        )
    return p, g


def attention(q, k, v, mask, empty_rows, scale, softcap, bias, sinks):
    """q, k, v as float_arrays makes them (k and v may hold H_kv heads,
    H % H_kv == 0); the mask broadcast to the scores (..., Tq, Tk), as
    given; bias (broadcasting to the scores) and sinks (H,) in q's
    dtype, or None. A row with every key blocked (mask, or bias -inf)
    is refused unless its head has a sink or empty_rows="zero"."""
    modifier_options(empty_rows, scale, softcap)
    q, k, v = float_arrays(q=q, k=k, v=v)
    shape = grouped_scores_shape(q.shape, k.shape, v.shape)[0]
    bias, sinks = modifier_arrays(bias, sinks, shape, q.dtype)
    if mask is not None:
        mask = mask_array(mask, shape, "zero")  # (..., Tq, Tk), a view
    empty_rows_left(mask, bias, sinks, shape, empty_rows)
    return q, k, v, mask, bias, sinks


def attention_backward(
    q, k, v, dout, mask, empty_rows, scale, softcap, bias, sinks
):
    """The inputs of attention, checked as attention checks them, and
    dout (..., Tq, dv), the gradient of its output, as a finite array of
    q's dtype. Returns q, k, v, dout, mask, bias, sinks."""
    q, k, v, mask, bias, sinks = attention(
        q, k, v, mask, empty_rows, scale, softcap, bias, sinks
    )
    (dout,) = float_arrays(dout=dout)
    shape = grouped_scores_shape(q.shape, k.shape, v.shape)[0]
    upstream(dout.shape, (*shape[:-1], v.shape[-1]))  # (..., Tq, dv)
    dout = dout.astype(q.dtype, copy=False)
    return q, k, v, dout, mask, bias, sinks


def causal_mask(t, tk, align):
    """t >= 1, tk >= 1 (None: t), align for tk != t. Returns tk."""
    return causal_shape(t, tk, align)[0]


def causal_mask_for_positions(query_positions, key_positions):
    """Two 1-D arrays of finite real positions."""
    return mask_positions(query_positions, key_positions, np.asarray)


def key_padding_mask(lengths, tk):
    """Lengths (B,) of ints in 1 .. tk, or a (B, Tk) bool padding mask."""
    return key_padding(lengths, tk, np.asarray)


def position_pairs(query_positions, key_positions):
    """Positions 1-D or (B, T), whole numbers (any sign), as int64."""
    return rule_arrays(query_positions, key_positions, ids=True)


def sliding_window_mask(query_positions, key_positions, window, sink_tokens):
    """Positions as position_pairs takes them, window >= 1 and
    sink_tokens >= 0 (ints). Returns the positions as int64 arrays."""
    sizes = {"window": (window, 1), "sink_tokens": (sink_tokens, 0)}
    return rule_arrays(query_positions, key_positions, **sizes)


def chunked_mask(query_positions, key_positions, chunk):
    """Positions as position_pairs takes them and an int chunk >= 1."""
    return rule_arrays(query_positions, key_positions, chunk=(chunk, 1))


def prefix_lm_mask(query_positions, key_positions, prefix):
    """Positions as position_pairs takes them and an int prefix >= 0."""
    return rule_arrays(query_positions, key_positions, prefix=(prefix, 0))


def document_mask(query_documents, key_documents):
    """Two arrays of integer document ids (1-D or (B, T)), as int64."""
    names = ("query_documents", "key_documents")
    return rule_arrays(query_documents, key_documents, True, names)


def document_ids(lengths):
    """(n,) positive integer lengths, n >= 1, as an int64 array."""
    _lengths(lengths)
    return np.asarray(lengths).astype(np.int64)


def apply_rope(x, positions, base, inv_freq, rotary_dim):
    """x real and finite (..., T, d_head); positions (T,); base > 0;
    rotary_dim and inv_freq as rotary_arguments checks them. Returns x,
    positions, inv_freq (float64 or None) and the rotated width r."""
    return rotary_arguments(
        x, positions, base, np.asarray, inv_freq, rotary_dim
    )


def alibi_slopes(n_head):
    """An int n_head >= 1."""
    positive_integer(n_head, "n_head")


def alibi_bias(slopes, query_positions, key_positions):
    """(H,) finite slopes and 1-D finite positions, as NumPy arrays."""
    return alibi_inputs(slopes, query_positions, key_positions, np.asarray)


def multi_head_attention(d_model, n_head, n_kv_head, rope, rope_base):
    """The constructor's sizes; returns (n_kv_head, d_head)."""
    return layer_sizes(d_model, n_head, n_kv_head, rope, rope_base)


def from_torch(module):
    """A torch_ref.MultiHeadAttention."""
    torch_module(module)


def forward(x, context, d_model, rope):
    """MultiHeadAttention's call: x (B, Tq, d_model) and context (B, Tk,
    d_model) or None, as float arrays (model_arrays)."""
    return model_arrays(x, context, d_model, rope)


def rotate(positions):
    """RoPE positions as a NumPy array (an iterator read once)."""
    return array_of(positions, "positions", np.asarray)


def backward(x, context, dy, d_model, rope, positions):
    """MultiHeadAttention.backward: x and context as forward checks
    them, dy of y's shape; positions (with rope) as an array."""
    x, context, dy = model_backward_arrays(x, context, dy, d_model, rope)
    if rope and positions is not None:
        positions = array_of(positions, "positions", np.asarray)
    return x, context, dy, positions


def linear_backward(x, weight, dy):
    """x (..., d_in), weight (d_in, d_out), dy (..., d_out), floats."""
    return linear_arrays(x, weight, dy)
