"""Sizes and shapes the doors share: multi-head latent attention's
constructor sizes, a state_dict's names and shapes, an RMS norm's gain
and eps (latent_numpy.py and latent_torch.py refuse the same inputs)."""

import numpy as np

from mha_ref.guards.arrays import cuda_device, positive_integer, real_number
from mha_ref.guards.arrays import rope_base as rope_base_value

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
