"""The doors of torch_ref.py: one guard per public function, same name.

Each checks its function's inputs in one call and returns them
converted (a mask expanded to the scores, positions as tensors),
nothing new. They refuse what numpy_ref's doors refuse, with the same
error types; the helpers they share are in arrays.py and tensors.py.
"""

import torch

from mha_ref.guards.arrays import (
    alibi_inputs,
    array_of,
    causal_shape,
    empty_rows_left,
    grouped_scores_shape,
    key_padding,
    layer_sizes,
    mask_positions,
    modifier_options,
    positive_integer,
    rotary_arguments,
    rows_without_keys,
    upstream,
)
from mha_ref.guards.arrays import document_lengths as _lengths

# The mask rules take positions, not tensors: their doors are numpy_ref's
# (the same checks, the same int64 arrays returned), one definition.
from mha_ref.guards.numpy_ref import (  # noqa: F401 (re-exported doors)
    chunked_mask,
    document_mask,
    position_pairs,
    prefix_lm_mask,
    sliding_window_mask,
)
from mha_ref.guards.tensors import (
    attention_tensors,
    dot_product_attention_tensors,
    float_tensors,
    library_can_express,
    library_inputs,
    mask_tensor,
    model_tensors,
    modifier_tensors,
    sinks_tensors,
)


def dot_product_attention(q, k, v, mask):
    """q, k, v floating tensors of one dtype and device, the same heads;
    returns the mask expanded to the scores (every row with a key)."""
    return dot_product_attention_tensors(q, k, v, mask)


def softmax_with_sinks(scores, sinks, empty_rows):
    """Floating scores (..., H, Tq, Tk) and sinks (H,), -inf the only
    infinity; a row with no key and no sink refused unless
    empty_rows="zero"."""
    sinks_tensors(scores, sinks)  # sinks (H,), no NaN, no +inf
    no_key = scores.isneginf().all(dim=-1) & sinks.isneginf().view(-1, 1)
    rows_without_keys(no_key.cpu().numpy(), empty_rows, "logits row")


def softmax_backward(probabilities, upstream):
    """p and dL/dp: tensors of one shape."""
    p, g = probabilities, upstream
    if p.shape != g.shape:
        raise ValueError(
            f"probabilities {tuple(p.shape)} and upstream "
            f"{tuple(g.shape)} must match"
        )


def attention(q, k, v, mask, empty_rows, scale, softcap, bias, sinks):
    """q, k, v floating tensors of one dtype and device (k and v may
    hold H_kv heads, H % H_kv == 0); bias and sinks as modifier_tensors
    checks them. Returns the mask expanded to the scores (..., Tq, Tk),
    or None. A row with every key blocked (mask, or bias -inf) is
    refused unless its head has a sink or empty_rows="zero"."""
    modifier_options(empty_rows, scale, softcap)
    float_tensors(q=q, k=k, v=v)
    shape = grouped_scores_shape(q.shape, k.shape, v.shape)[0]
    modifier_tensors(bias, sinks, shape, q)
    if mask is not None:
        mask = mask_tensor(mask, shape, q.device, "zero")  # a view
    if empty_rows == "raise" and (mask is not None or bias is not None):
        empty_rows_left(
            None if mask is None else mask.cpu().numpy(),
            None if bias is None else bias.detach().cpu().double().numpy(),
            None if sinks is None else sinks.detach().cpu().double().numpy(),
            shape,
            empty_rows,
        )
    return mask


def attention_backward(
    q, k, v, dout, mask, empty_rows, scale, softcap, bias, sinks
):
    """The inputs of attention, checked as attention checks them, and
    dout (..., Tq, dv) a finite floating tensor on q's device (of any
    floating dtype). Returns the mask as attention does."""
    mask = attention(q, k, v, mask, empty_rows, scale, softcap, bias, sinks)
    float_tensors(dout=dout)
    shape = grouped_scores_shape(q.shape, k.shape, v.shape)[0]
    upstream(dout.shape, (*shape[:-1], v.shape[-1]))  # (..., Tq, dv)
    if dout.device != q.device:
        raise ValueError(
            f"dout is on {dout.device} but q, k and v are on {q.device}; "
            f"move it with dout.to({str(q.device)!r})"
        )
    return mask


def causal_mask(t, tk, align, device):
    """t >= 1, tk >= 1 (None: t), align for tk != t, a CUDA device only
    where torch sees one. Returns tk."""
    cuda = torch.cuda.is_available()  # a CUDA device needs one
    return causal_shape(t, tk, align, device, cuda)[0]


def causal_mask_for_positions(query_positions, key_positions):
    """Two 1-D tensors of finite real positions, the keys on the
    queries' device."""
    return mask_positions(query_positions, key_positions, torch.as_tensor)


def key_padding_mask(lengths, tk):
    """Lengths (B,) of ints in 1 .. tk, or a (B, Tk) bool padding mask."""
    return key_padding(lengths, tk, torch.as_tensor)


def document_ids(lengths):
    """(n,) positive integer lengths, n >= 1."""
    _lengths(lengths)


def apply_rope(x, positions, base, inv_freq, rotary_dim):
    """As numpy_ref's door, for a tensor x; positions on x's device."""
    return rotary_arguments(
        x, positions, base, torch.as_tensor, inv_freq, rotary_dim
    )


def alibi_slopes(n_head):
    """An int n_head >= 1."""
    positive_integer(n_head, "n_head")


def alibi_bias(slopes, query_positions, key_positions, as_array):
    """(H,) finite slopes and 1-D finite positions, through as_array."""
    return alibi_inputs(slopes, query_positions, key_positions, as_array)


def multi_head_attention(d_model, n_head, n_kv_head, rope, rope_base, device):
    """The constructor's sizes and device; returns (n_kv_head, d_head)."""
    cuda = torch.cuda.is_available()  # a CUDA device needs one
    return layer_sizes(
        d_model, n_head, n_kv_head, rope, rope_base, device, cuda
    )


def forward(x, context, d_model, weight, rope):
    """x (B, Tq, d_model), context or None: the module's dtype, device."""
    model_tensors(x, context, d_model, weight, rope)


def project(x, context, d_model, weight, rope):
    """As forward."""
    model_tensors(x, context, d_model, weight, rope)


def rotate(positions):
    """RoPE positions as a tensor (an iterator read once)."""
    return array_of(positions, "positions", torch.as_tensor)


def sdpa_forward(q, k, v, mask):
    """The projected q, k, v and the mask, as attention checks them."""
    return attention_tensors(q, k, v, mask)


def library_version(module):
    """A module nn.MultiheadAttention can hold: no GQA, no RoPE."""
    library_can_express(module)


def library_forward(library, x, mask, context):
    """x and context for the library module, a mask (B, H, Tq, Tk)."""
    library_inputs(library, x, mask, context)
