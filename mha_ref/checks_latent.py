"""Input checks of multi-head latent attention (latent_numpy.py and
latent_torch.py): the constructor's sizes, a state_dict's shapes, the
RMS norm's inputs, and each mirror's forward.

Each raises ``ValueError`` or ``TypeError`` naming the argument and its
shape or value; the checks both frameworks share are in checks.py.
"""

import sys

import numpy as np

from mha_ref.checks import (
    array_of,
    cuda_device,
    float_arrays,
    is_tensor,
    mask_array,
    model_arrays,
    not_a_tensor,
    positive_integer,
    real_number,
    rope_positions,
)
from mha_ref.checks import (
    rope_base as rope_base_value,
)
from mha_ref.checks_torch import float_tensors, mask_tensor, model_tensors

SHAPE_NAMES = (
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
)


def latent_shapes(
    d_model,
    n_head,
    kv_lora_rank,
    qk_nope_head_dim,
    qk_rope_head_dim,
    v_head_dim,
    q_lora_rank,
    rope_base,
    rope_interleave,
    device=None,
    cuda=False,
):
    """The guards of MultiHeadLatentAttention's constructor, both mirrors.

    Every size an int >= 1 (q_lora_rank may be None: no query
    bottleneck), qk_rope_head_dim even (RoPE turns pairs), rope_base a
    finite number > 0, rope_interleave a bool; for latent_torch, a CUDA
    ``device`` only where ``cuda`` (torch sees a GPU).
    """
    sizes = {
        "d_model": d_model,
        "n_head": n_head,
        "kv_lora_rank": kv_lora_rank,
        "qk_nope_head_dim": qk_nope_head_dim,
        "qk_rope_head_dim": qk_rope_head_dim,
        "v_head_dim": v_head_dim,
    }
    if q_lora_rank is not None:
        sizes["q_lora_rank"] = q_lora_rank
    for name, value in sizes.items():
        positive_integer(value, name)
    if qk_rope_head_dim % 2:
        raise ValueError(
            f"qk_rope_head_dim={qk_rope_head_dim} must be even: RoPE "
            f"turns pairs of features (DeepSeek-V3 uses 64)"
        )
    rope_base_value(rope_base)  # finite, > 0
    if not isinstance(rope_interleave, bool | np.bool_):
        raise TypeError(
            f"rope_interleave must be True or False (the checkpoint's "
            f"rotary rows in adjacent pairs, or in halves), got "
            f"{rope_interleave!r}"
        )
    cuda_device(device, cuda)  # latent_torch: CUDA only where torch has it


def state_dict_shapes(expected, given, strict=True, where="module"):
    """Refuse a state_dict whose names or shapes do not fit the module.

    ``expected`` and ``given``: {name: shape}. A wrong shape names the
    parameter and both shapes; with ``strict``, a missing or extra name
    is refused too, with the hint when it is the query bottleneck.
    """
    for name, shape in expected.items():
        if name in given and tuple(given[name]) != tuple(shape):
            raise ValueError(
                f"state_dict[{name!r}] has shape {tuple(given[name])}, "
                f"but the {where} expects {tuple(shape)} for {name}"
            )
    if not strict:
        return
    missing = [n for n in expected if n not in given]
    extra = [n for n in given if n not in expected]
    if missing or extra:
        lora = any(n.startswith("q_a_proj") for n in (*missing, *extra))
        hint = (
            " (q_proj is used when q_lora_rank is None, q_a_proj, "
            "q_a_layernorm and q_b_proj when it is set)"
            if lora
            else ""
        )
        raise ValueError(
            f"state_dict does not fit the {where}: missing {missing}, "
            f"unexpected {extra}{hint}"
        )


def state_dict_arrays(expected, state_dict, where):
    """The guards of latent_numpy's load_state_dict: the names and shapes
    of ``expected`` (state_dict_shapes, strict), each value an array
    (not a tensor), finite floats. Returns {name: float array}."""
    given = {n: np.shape(w) for n, w in state_dict.items()}
    state_dict_shapes(expected, given, where=where)
    arrays = {}
    for name, weight in state_dict.items():
        not_a_tensor(weight, name, "its .numpy()")
        (arrays[name],) = float_arrays(**{name: weight})
    return arrays


def rms_norm_size(d, eps, device=None, cuda=False):
    """The guards of latent_torch.RMSNorm's constructor: d an int >= 1,
    eps as rms_norm_inputs checks it, a CUDA ``device`` only where
    ``cuda`` (torch sees a GPU)."""
    positive_integer(d, "d")
    rms_norm_inputs((d,), eps)
    cuda_device(device, cuda)


def rms_norm_arrays(x, weight, eps):
    """The guards of latent_numpy.rms_norm: x (..., d) and weight (d,)
    as finite float arrays (returned), eps as rms_norm_inputs checks it."""
    x, weight = float_arrays(x=x, weight=weight)
    rms_norm_inputs(weight.shape, eps, x.shape)
    return x, weight


def rms_norm_tensor(x, weight, eps):
    """The guards of latent_torch.RMSNorm's forward: x a finite float
    tensor (..., d) for the gain (d,), eps as rms_norm_inputs checks it."""
    float_tensors(x=x)
    rms_norm_inputs(weight.shape, eps, x.shape)


def rms_norm_inputs(weight_shape, eps, x_shape=None):
    """The guards of rms_norm and latent_torch.RMSNorm, both mirrors.

    A gain of shape (d,), d >= 1; eps a positive finite number (it
    keeps a row of zeros from 0 / 0); x (..., d) when given.
    """
    shape = tuple(weight_shape)
    if len(shape) != 1 or shape[0] < 1:
        raise ValueError(f"weight must be (d,) with d >= 1, got {shape}")
    value = real_number(eps, "eps")
    if not (np.isfinite(value) and value > 0):
        raise ValueError(f"eps must be positive and finite, got {eps}")
    if x_shape is not None and tuple(x_shape)[-1:] != shape:
        raise ValueError(
            f"x of shape {tuple(x_shape)} must end in the d = {shape[0]} "
            f"features of weight {shape}"
        )


def forward_arrays(module, x, mask, positions, absorbed):
    """The guards of latent_numpy's __call__, in one call: x (B, T,
    d_model) as float arrays, mask broadcast to (B, H, T, T) or None,
    positions (T,) (default 0 .. T - 1), absorbed a bool."""
    if not isinstance(absorbed, bool):  # as latent_torch: True or False
        raise TypeError(f"absorbed must be True or False, got {absorbed!r}")
    x, _ = model_arrays(x, None, module.d_model)
    b, t, _ = x.shape
    if positions is None:
        positions = np.arange(t)  # (T,): 0 .. T - 1
    # a list, an array, a tensor (as latent_torch takes) or an iterator
    positions = array_of(positions, "positions", np.asarray)
    rope_positions(positions, t)  # (T,), real, finite
    if mask is not None:
        mask = mask_array(mask, (b, module.n_head, t, t))
    return x, mask, positions


def forward_tensors(module, x, mask, positions, absorbed):
    """The guards of latent_torch's forward, in one call: x (B, T,
    d_model) of the module's dtype and device, mask expanded to (B, H,
    T, T) or None, positions (T,) on x's device (default 0 .. T - 1),
    absorbed a bool."""
    torch = sys.modules["torch"]  # loaded: the module holds tensors
    if not isinstance(absorbed, bool):
        raise TypeError(f"absorbed must be True or False, got {absorbed!r}")
    weight = module.kv_a_proj_with_mqa.weight  # the dtype and device
    model_tensors(x, None, module.d_model, weight)
    b, t, _ = x.shape
    if positions is None:
        positions = torch.arange(t, device=x.device)  # (T,): 0 .. T - 1
    if not is_tensor(positions):
        positions = array_of(positions, "positions", torch.as_tensor)
    rope_positions(positions, t)  # (T,), real, finite
    if mask is not None:
        mask = mask_tensor(mask, (b, module.n_head, t, t), x.device)
    return mask, positions.to(x.device)
