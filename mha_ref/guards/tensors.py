"""Input checks of the PyTorch side: tensors (their devices, dtypes and
values, read without importing torch) for torch_ref and latent_torch.

Each raises ``ValueError`` or ``TypeError`` naming the argument and its
shape or value; the checks both frameworks share are in arrays.py.
"""

import numpy as np

from mha_ref.guards.arrays import (
    beyond_range,
    broadcasts_to,
    context_input,
    empty_rows_option,
    every_row_has_a_key,
    finite,
    integer,
    is_tensor,
    kv_heads,
    mask_dtype,
    mask_shape,
    model_input,
    modifier_kind,
    no_nan_or_posinf,
    qkv_shapes,
    rope_self_attention,
    scores_finite,
    scores_shape,
    sinks_shape,
    tensor_finite,
    tensor_kind,
)


def is_tensor_scalar(value):
    """True for a 0-d torch tensor (iterating over one fails)."""
    return is_tensor(value) and value.dim() == 0


def as_index(value, name):
    # an int, a NumPy integer or a 0-d integer tensor, as a Python int
    if is_tensor_scalar(value):
        value = value.item()  # an int, float or bool: integer() decides
    integer(value, name)
    return int(value)


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
        if not tensor_finite(tensor):
            # .double(): NumPy has no bfloat16
            finite(tensor.detach().cpu().double().numpy(), name)


def mask_tensor(mask, scores_shape, device=None, empty_rows="raise"):
    """A torch bool mask expanded to the scores, every row with a key.

    With empty_rows="zero", rows with every key masked are allowed.
    """
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
    if empty_rows == "raise":  # no need to look at the rows otherwise
        every_row_has_a_key(mask.all(dim=-1).cpu().numpy())
    return mask


def attention_tensors(q, k, v, mask=None, empty_rows="raise"):
    """The guards of a PyTorch attention function, in one call.

    Checks q, k and v (see float_tensors) and their shapes; returns the
    mask expanded to the scores (..., Tq, Tk), or None. A (Tk,) or 0-d
    mask becomes a full one, which SDPA needs. Rows with every key
    masked are refused unless empty_rows="zero".
    """
    empty_rows_option(empty_rows)
    float_tensors(q=q, k=k, v=v)
    shape = scores_shape(q.shape, k.shape, v.shape)
    if mask is None:
        return None
    return mask_tensor(mask, shape, q.device, empty_rows)


def modifier_tensors(bias, sinks, scores_shape, q):
    """attention's bias (broadcasting to the scores) and sinks (H,):
    floating tensors on q's device, of any floating dtype, with -inf
    the only infinity and finite values within the compute dtype (q's,
    at least float32). Each None or checked; nothing is returned."""
    for name, value in (("bias", bias), ("sinks", sinks)):
        if value is None:
            continue
        if not is_tensor(value):
            raise TypeError(
                f"{name} must be a torch.Tensor, got "
                f"{type(value).__name__}; convert with "
                f"torch.as_tensor({name}, dtype=q.dtype)"
            )
        kind = tensor_kind(value.dtype)
        modifier_kind(name, kind, value.dtype, tuple(value.shape))
        if kind != "f":
            raise TypeError(
                f"{name} has dtype {value.dtype}; expected a floating "
                f"dtype: convert with {name}.to(q.dtype)"
            )
        if name == "bias":
            broadcasts_to(value.shape, scores_shape, "bias")
        else:
            sinks_shape(value.shape, scores_shape)
        if value.device != q.device:
            raise ValueError(
                f"{name} is on {value.device} but q, k and v are on "
                f"{q.device}; move it with {name}.to({str(q.device)!r})"
            )
        if bool((value.isnan() | value.isposinf()).any()):
            no_nan_or_posinf(
                value.detach().cpu().double().numpy(),
                name,
                "a blocked key" if name == "bias" else "no sink",
            )
        # computed in q's dtype, at least float32 (attention's ``wide``)
        wide = value.double() if q.dtype.itemsize == 8 else value.float()
        if bool((value.isfinite() & ~wide.isfinite()).any()):
            beyond_range(
                value.detach().cpu().double().numpy(),
                "float64" if q.dtype.itemsize == 8 else "float32",
                name,
            )


def model_tensors(x, context, d_model, weight, rope=False):
    """The guards of a torch module's forward: x and context (or None).

    x (B, Tq, d_model), context (B, Tk, d_model), both of the dtype and
    on the device of ``weight``, finite, with T >= 1; a layer with rope
    takes no context (rope_self_attention).
    """
    rope_self_attention(rope, context is not None)
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


def library_inputs(library, x, mask, context):
    """library_forward's inputs: x and context as model_tensors checks
    them for the nn.MultiheadAttention, and a mask (or None) that
    broadcasts to (B, H, Tq, Tk)."""
    weight = library.out_proj.weight  # the module's dtype and device
    model_tensors(x, context, library.embed_dim, weight)
    if mask is not None:
        tk = (x if context is None else context).shape[1]
        shape = (x.shape[0], library.num_heads, x.shape[1], tk)
        mask_tensor(mask, shape)


def finite_tensor(tensor, name):
    """finite for a tensor on any device and float dtype."""
    if not tensor_finite(tensor):
        # .double(): NumPy has no bfloat16
        finite(tensor.detach().cpu().double().numpy(), name)


def scores_no_overflow(scores, mask=None, bias=None):
    """Finite q and k can still overflow q @ k^T: no silent NaN rows.

    scores are float32 or float64 here, which NumPy holds as they are;
    a row the mask (or a bias of -inf) empties is not an overflow.
    """
    lost = scores.isneginf().all(dim=-1)  # a row of only -inf
    if mask is not None:  # a row the mask empties is not an overflow
        lost &= ~mask.all(dim=-1)
    if (scores.isnan() | scores.isposinf()).any() or lost.any():
        scores_finite(
            scores.detach().cpu().numpy(),
            None if mask is None else mask.cpu().numpy(),
            None if bias is None else bias.detach().cpu().double().numpy(),
        )


def sinks_tensors(scores, sinks):
    """softmax_with_sinks's inputs: floating tensors, sinks (H,) for the
    scores (..., H, Tq, Tk), and -inf the only infinity (masked, no sink).
    """
    for name, value in (("scores", scores), ("sinks", sinks)):
        if not is_tensor(value) or not value.is_floating_point():
            got = getattr(value, "dtype", type(value).__name__)
            raise TypeError(f"{name} must be a floating tensor, got {got}")
        bad = (value.isnan() | value.isposinf()).nonzero()
        if len(bad):
            at = tuple(bad[0].tolist())
            raise ValueError(
                f"{name} of shape {tuple(value.shape)} holds "
                f"{value[at].item()} at index {at}; use finite values, "
                f"or -inf for a masked key (scores) or no sink (sinks)"
            )
    sinks_shape(sinks.shape, scores.shape)


def library_can_express(module):
    """nn.MultiheadAttention can hold the module: no GQA, no RoPE."""
    if module.n_kv_head != module.n_head or module.rope:
        raise ValueError(
            f"nn.MultiheadAttention has neither grouped key/value heads "
            f"nor RoPE, but the module has n_head={module.n_head}, "
            f"n_kv_head={module.n_kv_head}, rope={module.rope}; compare "
            f"through sdpa_forward instead"
        )


def dot_product_attention_tensors(q, k, v, mask=None):
    """The guard of torch_ref.dot_product_attention, in one call.

    q, k and v as float_tensors checks them, with the same heads (one
    head broadcasts; attention groups fewer key/value heads); returns
    the mask expanded to the scores (..., Tq, Tk), every row with a key,
    or None. q @ k^T must not overflow the compute dtype (float32 for
    fp16 and bf16): looked at only when max|q| max|k| d comes near it.
    """
    float_tensors(q=q, k=k, v=v)
    if kv_heads(q.shape, k.shape, v.shape) > 1:
        raise ValueError(
            f"k {tuple(k.shape)} and v {tuple(v.shape)} have fewer heads "
            f"(axis -3) than q {tuple(q.shape)}: repeat them "
            f"(repeat_kv_heads) or call attention"
        )
    lead = qkv_shapes(q.shape, k.shape, v.shape)
    shape = (*lead, q.shape[-2], k.shape[-2])
    if mask is not None:
        mask = mask_tensor(mask, shape, q.device)
    narrow = q.dtype.itemsize <= 4  # fp16, bf16, fp32: float32's range
    top = [
        float(a.detach().abs().amax()) if a.numel() else 0.0 for a in (q, k)
    ]
    biggest = float(np.finfo(np.float32 if narrow else np.float64).max)
    if top[0] * top[1] * q.shape[-1] >= biggest / 2:
        q, k = (a.detach().float() if narrow else a.detach() for a in (q, k))
        scores = q @ k.transpose(-2, -1) / np.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(mask, float("-inf"))
        scores_no_overflow(scores, mask)
    return mask
