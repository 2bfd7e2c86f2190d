"""Input checks of the conventions' translations (conventions.py):
layouts, windows, scales and fill values as each library names them.

Each raises ``ValueError`` or ``TypeError`` naming the argument and its
shape or value; the checks both frameworks share are in checks.py.
"""

import numpy as np

from mha_ref.checks import (
    alibi_inputs,
    integer,
    is_tensor,
    kv_head_split,
    mask_dtype,
    no_nan_or_posinf,
    positive_integer,
    real_number,
    rope_head_size,
    scores_shape,
    sinks_shape,
    softcap_value,
)
from mha_ref.checks_torch import float_tensors, mask_tensor


def window_convention(window, library, libraries):
    """A Hugging Face sliding window W >= 1 and a library to express it in."""
    positive_integer(window, "window")
    if library not in libraries:
        raise ValueError(
            f"library must be one of {libraries}, got {library!r}"
        )


def window_value(value, library, libraries):
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


def layout_shape(shape, ndim, layout):
    """A tensor of the layout named, e.g. 4-D for (B, T, H, d)."""
    if len(tuple(shape)) != ndim:
        raise ValueError(
            f"expected a {ndim}-D tensor {layout}, got shape {tuple(shape)}"
        )


def layout(x, ndim, layout):
    """A tensor or a NumPy array of the layout named (layout_shape)."""
    if not (is_tensor(x) or isinstance(x, np.ndarray)):
        raise TypeError(
            f"x must be a torch.Tensor or a NumPy array {layout}, got "
            f"{type(x).__name__}"
        )
    layout_shape(x.shape, ndim, layout)


def bool_mask(mask):
    """A boolean mask (True = blocked), a tensor or a NumPy array."""
    if not (is_tensor(mask) or isinstance(mask, np.ndarray)):
        raise TypeError(
            f"mask must be a boolean torch.Tensor or NumPy array, got "
            f"{type(mask).__name__}"
        )
    mask_dtype(mask.dtype)
    if len(tuple(mask.shape)) < 1:
        raise ValueError("mask must have a keys axis (..., Tk), got 0-d")


def sink_key_inputs(k, v, sinks):
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


def flex_mask(mask):
    """A mask for to_mask_mod: bool (True = blocked), (Tq, Tk)."""
    mask_dtype(mask.dtype)
    layout_shape(mask.shape, 2, "(Tq, Tk)")


def softcap_inputs(scores, mask, softcap):
    """mask_then_softcap's inputs: finite float scores, a bool mask that
    broadcasts to them (returned expanded), a positive finite softcap."""
    softcap_value(softcap)
    float_tensors(scores=scores)  # the raw scores: finite
    return mask_tensor(mask, scores.shape, scores.device, "zero")


HEAD_LAYOUTS = ("consecutive", "strided")


def head_layout(n_head, n_kv_head, layout):
    """n_head query heads sharing n_kv_head key/value heads (it divides
    n_head), consecutive or strided."""
    positive_integer(n_head, "n_head")
    kv_head_split(n_head, n_kv_head)
    if layout not in HEAD_LAYOUTS:
        raise ValueError(
            f"layout must be one of {HEAD_LAYOUTS}, got {layout!r}"
        )


SCALE_CONVENTIONS = ("sqrt", "gemma", "t5")


def scale_convention(d_head, convention, query_pre_attn_scalar):
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


def fill_value(mask, fill, dtype):
    """A fill for blocked scores: "-inf", "min" or a number, as a float,
    for a bool mask (True = blocked).

    ``dtype``: a torch floating dtype; a number it cannot hold (-1e9 in
    float16) is refused, where masked_fill would raise a RuntimeError.
    """
    import torch  # only the torch converters call this

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


def rope_weight(shape, n_head, rotary_dim=None):
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


def rope_checkpoint(state, d_head):
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


def score_mod_cap(cap):
    """A soft-cap for a score_mod: a positive finite number."""
    if cap is None:
        raise TypeError("cap must be a positive number, got None")
    softcap_value(cap)


def score_mod_table(table, name, ndim):
    """A torch tensor of ``ndim`` dimensions, indexed by head first."""
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


def sink_rescale(out, lse, sinks):
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


def mask_mod_sizes(**sizes):
    """A mask_mod's sizes: ints, window/chunk >= 1, the others >= 0."""
    for name, value in sizes.items():
        integer(value, name)
        least = 1 if name in ("window", "chunk") else 0
        if value < least:
            raise ValueError(f"{name} must be at least {least}, got {value}")


def alibi_row(slopes, t):
    """A one-row ALiBi form's inputs: (H,) finite slopes, returned as
    float64, and t >= 1 keys."""
    positive_integer(t, "t")
    slopes, _, _ = alibi_inputs(slopes, range(t), range(t), np.asarray)
    return slopes.astype(np.float64)
