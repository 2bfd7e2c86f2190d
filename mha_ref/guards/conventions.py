"""The doors of conventions.py: one guard per public function, same
name (layouts, windows, scales and fill values as each library names
them)."""

import numpy as np
import torch

from mha_ref.guards.arrays import (
    alibi_inputs,
    causal_shape,
    integer,
    is_tensor,
    kv_head_split,
    mask_dtype,
    no_nan_or_posinf,
    positive_integer,
    real_number,
    rope_head_size,
    rotary_arguments,
    scores_shape,
    sinks_shape,
    softcap_value,
)
from mha_ref.guards.tensors import float_tensors, mask_tensor


def window_from_hugging_face(window, library, libraries):
    """A Hugging Face sliding window W >= 1 and a library to express it in."""
    positive_integer(window, "window")
    if library not in libraries:
        raise ValueError(
            f"library must be one of {libraries}, got {library!r}"
        )


def window_to_hugging_face(value, library, libraries):
    """Another library's causal window: (left >= 0, 0) or an int >= 0."""
    if library not in libraries:
        raise ValueError(
            f"library must be one of {libraries}, got {library!r}"
        )
    if library in ("flash_attn", "jax"):
        if not isinstance(value, tuple | list) or len(value) != 2:
            raise TypeError(
                f"{library}'s window is a pair (left, right), got {value!r}"
            )
        integer(value[0], "left")
        integer(value[1], "right")
        if value[0] < 0 or value[1] != 0:
            raise ValueError(
                f"a causal sliding window is (left >= 0, right = 0) in "
                f"{library}'s terms, got {tuple(value)}; right > 0 lets a "
                f"query see later keys, -1 means unlimited"
            )
        return
    integer(value, "window")
    least = 0 if library == "attention_gym" else 1
    if value < least:
        raise ValueError(
            f"{library}'s window must be at least {least}, got {value}"
        )


def _layout_shape(shape, ndim, layout):
    """A tensor of the layout named, e.g. 4-D for (B, T, H, d)."""
    if len(tuple(shape)) != ndim:
        raise ValueError(
            f"expected a {ndim}-D tensor {layout}, got shape {tuple(shape)}"
        )


def _layout(x, ndim, layout):
    """A tensor or a NumPy array of the layout named (layout_shape)."""
    if not (is_tensor(x) or isinstance(x, np.ndarray)):
        raise TypeError(
            f"x must be a torch.Tensor or a NumPy array {layout}, got "
            f"{type(x).__name__}"
        )
    _layout_shape(x.shape, ndim, layout)


def rows_without_keys(mask):
    """A boolean mask (True = blocked), a tensor or a NumPy array."""
    if not (is_tensor(mask) or isinstance(mask, np.ndarray)):
        raise TypeError(
            f"mask must be a boolean torch.Tensor or NumPy array, got "
            f"{type(mask).__name__}"
        )
    mask_dtype(mask.dtype)
    if len(tuple(mask.shape)) < 1:
        raise ValueError("mask must have a keys axis (..., Tk), got 0-d")


def learned_sink_as_key(k, v, sinks):
    """k, v as float_tensors checks them, agreeing in shape; sinks a 1-D
    float tensor (H,), one per head, of one dtype with them, -inf
    allowed (no sink), no NaN or +inf."""
    float_tensors(k=k, v=v)
    if not is_tensor(sinks) or sinks.dtype != k.dtype or sinks.dim() != 1:
        shape = tuple(getattr(sinks, "shape", ()))
        raise TypeError(
            f"sinks must be a 1-D tensor (H,) of k's dtype {k.dtype}, got "
            f"{type(sinks).__name__} {getattr(sinks, 'dtype', '')} {shape}"
        )
    no_nan_or_posinf(sinks.detach().cpu().double().numpy(), "sinks", "none")
    sinks_shape(sinks.shape, scores_shape(k.shape, k.shape, v.shape))


def to_mask_mod(mask):
    """A mask for to_mask_mod: bool (True = blocked), (Tq, Tk)."""
    mask_dtype(mask.dtype)
    _layout_shape(mask.shape, 2, "(Tq, Tk)")


def mask_then_softcap(scores, mask, softcap):
    """The inputs: finite float scores, a bool mask that
    broadcasts to them (returned expanded), a positive finite softcap."""
    softcap_value(softcap)
    float_tensors(scores=scores)  # the raw scores: finite
    return mask_tensor(mask, scores.shape, scores.device, "zero")


HEAD_LAYOUTS = ("consecutive", "strided")


def kv_head_of(n_head, n_kv_head, layout):
    """n_head query heads sharing n_kv_head key/value heads (it divides
    n_head), consecutive or strided."""
    positive_integer(n_head, "n_head")
    kv_head_split(n_head, n_kv_head)
    if layout not in HEAD_LAYOUTS:
        raise ValueError(
            f"layout must be one of {HEAD_LAYOUTS}, got {layout!r}"
        )


SCALE_CONVENTIONS = ("sqrt", "gemma", "t5")


def default_scale(d_head, convention, query_pre_attn_scalar):
    """A scale convention and what it needs: Gemma's query_pre_attn_scalar."""
    positive_integer(d_head, "d_head")
    if convention not in SCALE_CONVENTIONS:
        raise ValueError(
            f"convention must be one of {SCALE_CONVENTIONS}, got "
            f"{convention!r}"
        )
    if convention == "gemma":
        value = real_number(query_pre_attn_scalar, "query_pre_attn_scalar")
        if not (np.isfinite(value) and value > 0):
            raise ValueError(
                f"query_pre_attn_scalar must be positive and finite, got "
                f"{query_pre_attn_scalar}"
            )


def additive_mask(mask, fill, dtype):
    """A fill for blocked scores: "-inf", "min" or a number, as a float,
    for a bool mask (True = blocked).

    ``dtype``: a torch floating dtype; a number it cannot hold (-1e9 in
    float16) is refused, where masked_fill would raise a RuntimeError.
    """
    if not is_tensor(mask):
        raise TypeError(
            f"mask must be a torch.Tensor of dtype torch.bool (the result "
            f"is a {dtype} tensor), got {type(mask).__name__}; convert "
            f"with torch.as_tensor(mask)"
        )
    mask_dtype(mask.dtype)

    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(f"dtype must be a torch floating dtype, got {dtype}")
    info = torch.finfo(dtype)
    if fill == "-inf":
        return float("-inf")
    if fill == "min":
        return info.min
    value = real_number(fill, "fill")
    if not np.isfinite(value) or not info.min <= value <= info.max:
        raise ValueError(
            f"fill {fill!r} does not fit {dtype} (finite values from "
            f"{info.min} to {info.max}); use '-inf' or 'min'"
        )
    return value


def interleaved_to_rotate_half(shape, n_head, rotary_dim=None):
    """W_Q or W_K, (n_head * d_head, d_model), or its bias (n_head *
    d_head,): whole heads of an even size, for the RoPE pair reorder;
    rotary_dim, None or an even int 2 .. d_head."""
    shape = tuple(shape)
    positive_integer(n_head, "n_head")
    if len(shape) not in (1, 2) or shape[0] % n_head:
        raise ValueError(
            f"a W_Q or W_K weight (n_head * d_head, d_model) or its bias "
            f"(n_head * d_head,) with n_head = {n_head}: the rows must "
            f"split into n_head heads, got shape {shape}"
        )
    rope_head_size(shape[0] // n_head)
    if rotary_dim is not None:
        d_head = shape[0] // n_head
        integer(rotary_dim, "rotary_dim")
        if rotary_dim < 2 or rotary_dim > d_head or rotary_dim % 2:
            raise ValueError(
                f"rotary_dim must be even and 2 .. d_head={d_head}, got "
                f"rotary_dim={rotary_dim}"
            )


def _alibi_row(slopes, t):
    """A one-row ALiBi form's inputs: (H,) finite slopes, returned as
    float64, and t >= 1 keys."""
    positive_integer(t, "t")
    slopes, _, _ = alibi_inputs(slopes, range(t), range(t), np.asarray)
    return slopes.astype(np.float64)


def alibi_bias_key_only(slopes, t):
    """(H,) finite slopes, returned as float64, and t >= 1 keys."""
    return _alibi_row(slopes, t)


def alibi_bias_last_key(slopes, t):
    """(H,) finite slopes, returned as float64, and t >= 1 keys."""
    return _alibi_row(slopes, t)


def from_bthd(x):
    """A 4-D tensor or NumPy array (B, T, H, d)."""
    _layout(x, 4, "(B, T, H, d)")


def from_sequence_first(x):
    """A 3-D tensor or NumPy array (T, B, E)."""
    _layout(x, 3, "(T, B, E)")


def apply_rope_interleaved(x, positions, base, rotary_dim):
    """x (..., T, d_head) and positions (T,) as tensors, base, rotary_dim
    (None, or even, 2 .. d_head): returns x, positions and r."""
    x, positions, _, r = rotary_arguments(
        x, positions, base, torch.as_tensor, None, rotary_dim
    )
    return x, positions, r


def causal_query_positions(tq, tk, align):
    """Lengths and an alignment: returns the offset of the first query
    (None: square only)."""
    return causal_shape(tq, tk, align)[1]


def to_sdpa_mask(mask):
    """A boolean mask (True = blocked)."""
    mask_dtype(mask.dtype)


def alibi_slopes_attention_gym(n_head):
    """n_head: an int >= 1."""
    positive_integer(n_head, "n_head")


def checkpoint_to_rotate_half(state, d_head):
    """A dict of name -> tensor (module.param names) and a positive int
    d_head whose multiple every q/k tensor's first axis is."""
    if not isinstance(state, dict):
        raise TypeError(
            f"state must be a dict of name -> tensor, got "
            f"{type(state).__name__}"
        )
    positive_integer(d_head, "d_head")
    for name, tensor in state.items():
        if not isinstance(name, str) or name.count(".") < 1:
            raise ValueError(
                f"state's names must be 'module.parameter', got {name!r}"
            )
        shape = tuple(getattr(tensor, "shape", ()))
        qk = name.split(".")[-2] in ("q_proj", "k_proj", "q_norm", "k_norm")
        if qk and (not shape or shape[0] % d_head):
            raise ValueError(
                f"state[{name!r}] must have whole heads of d_head = "
                f"{d_head} on its first axis, got shape {shape}"
            )


def softcap_mod(cap):
    """A soft-cap for a score_mod: a positive finite number."""
    if cap is None:
        raise TypeError("cap must be a positive number, got None")
    softcap_value(cap)


def _table(table, name, ndim):
    # a torch tensor of ``ndim`` dimensions, indexed by head first
    if not is_tensor(table):
        raise TypeError(
            f"{name} must be a torch.Tensor (a score_mod indexes it with "
            f"tensors), got {type(table).__name__}"
        )
    if table.ndim != ndim:
        raise ValueError(
            f"{name} must have {ndim} dimension(s), head first, got shape "
            f"{tuple(table.shape)}"
        )


def alibi_mod(slopes):
    """(H,) slopes, a torch tensor."""
    _table(slopes, "slopes", 1)


def relative_bias_mod(table):
    """A (H, 2 Tk - 1) table of biases, a torch tensor."""
    _table(table, "table", 2)


def document_mod(ids):
    """(T,) document ids, a torch tensor."""
    _table(ids, "ids", 1)


def with_sinks(out, lse, sinks):
    """FlexAttention's out (B, H, T, d), its lse (B, H, T) and sinks (H,),
    torch tensors."""
    for value, name in ((out, "out"), (lse, "lse"), (sinks, "sinks")):
        if not is_tensor(value):
            raise TypeError(
                f"{name} must be a torch.Tensor, got {type(value).__name__}"
            )
    shapes = tuple(out.shape), tuple(lse.shape), tuple(sinks.shape)
    if (
        out.ndim != 4
        or shapes[1] != shapes[0][:3]
        or shapes[2] != (shapes[0][1],)
    ):
        raise ValueError(
            f"out (B, H, T, d), lse (B, H, T) and sinks (H,) must agree, "
            f"got out {shapes[0]}, lse {shapes[1]}, sinks {shapes[2]}"
        )


def _mask_mod_sizes(**sizes):
    # a mask_mod's sizes: ints, window/chunk >= 1, the others >= 0
    for name, value in sizes.items():
        integer(value, name)
        least = 1 if name in ("window", "chunk") else 0
        if value < least:
            raise ValueError(f"{name} must be at least {least}, got {value}")


def sliding_window_mod(window, sink_tokens):
    """A window >= 1 and sink_tokens >= 0, ints."""
    _mask_mod_sizes(window=window, sink_tokens=sink_tokens)


def chunked_mod(chunk):
    """A chunk length >= 1, an int."""
    _mask_mod_sizes(chunk=chunk)


def prefix_lm_mod(prefix):
    """A prefix length >= 0, an int."""
    _mask_mod_sizes(prefix=prefix)
