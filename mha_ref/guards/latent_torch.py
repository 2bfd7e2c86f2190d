"""The doors of latent_torch.py: one guard per public function, same
name (constructors: rms_norm, multi_head_latent_attention; RMSNorm's
forward: rms_norm_forward; LatentCache.extended:
latent_cache_extended). latent_numpy's doors refuse the same inputs."""

import math
import sys

from mha_ref.guards.arrays import (
    array_of,
    cuda_device,
    is_tensor,
    positive_integer,
    real_number,
    rope_positions,
)
from mha_ref.guards.chunks import chunk_lengths
from mha_ref.guards.shapes import (
    SHAPE_NAMES,
    latent_shapes,
    rms_norm_inputs,
    state_dict_shapes,
)
from mha_ref.guards.tensors import float_tensors, mask_tensor, model_tensors


def rms_norm(d, eps, device=None, cuda=False):
    """RMSNorm's constructor: d an int >= 1, eps a positive finite
    number, a CUDA ``device`` only where ``cuda`` (torch sees a GPU)."""
    positive_integer(d, "d")
    rms_norm_inputs((d,), eps)
    cuda_device(device, cuda)


def rms_norm_forward(x, weight, eps):
    """RMSNorm's forward: x a finite float tensor (..., d) for the gain
    (d,), eps a positive finite number."""
    float_tensors(x=x)
    rms_norm_inputs(weight.shape, eps, x.shape)


def multi_head_latent_attention(*sizes, device=None, cuda=False):
    """The constructor's sizes (shapes.latent_shapes), and a CUDA
    ``device`` only where ``cuda`` (torch sees a GPU)."""
    latent_shapes(*sizes, device, cuda)


def load_state_dict(expected, given, strict, where):
    """The names and shapes {name: shape} of a state_dict, as the
    module's ``expected`` ones (shapes.state_dict_shapes)."""
    state_dict_shapes(expected, given, strict, where)


def forward(module, x, mask, positions, absorbed):
    """forward's inputs: x (B, T, d_model) of the module's dtype and
    device, mask expanded to (B, H, T, T) or None, positions (T,) on x's
    device (default 0 .. T - 1), absorbed a bool. Returns mask and
    positions."""
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


def rope_on_the_content_keys(module, x, positions):
    """forward's x and positions (no mask): returns the positions."""
    return forward(module, x, None, positions, False)[1]


def cached_latent_step(module, x, positions, absorbed):
    """forward's x, the chunk's positions and absorbed (no mask)."""
    forward(module, x, None, positions, absorbed)


def cached_latent_forward(module, x, chunks, absorbed):
    """x (B, T, d_model) for the module, and its chunks (positive ints
    summing to T, returned as a list); absorbed a bool."""
    model_tensors(x, None, module.d_model, module.kv_a_proj_with_mqa.weight)
    chunks = chunk_lengths(chunks, x.shape[1])
    if not isinstance(absorbed, bool):
        raise TypeError(f"absorbed must be True or False, got {absorbed!r}")
    return chunks


def latent_cache_extended(cache, c_kv, k_rope):
    """A chunk (B, Tc, d_c) and (B, Tc, d_rope) that fits the latent
    cache (LatentCache.extended)."""
    for name, x in (("c_kv", c_kv), ("k_rope", k_rope)):
        if not is_tensor(x) or x.dim() != 3:
            got = tuple(x.shape) if is_tensor(x) else type(x)
            raise ValueError(f"{name} must be (B, Tc, d), got {got}")
    if c_kv.shape[:2] != k_rope.shape[:2]:
        raise ValueError(
            f"c_kv {tuple(c_kv.shape)} and k_rope {tuple(k_rope.shape)} "
            f"must agree in batch and length (B, Tc)"
        )
    if cache.latent is None:
        return
    for name, new, old in (
        ("c_kv", c_kv, cache.latent),
        ("k_rope", k_rope, cache.rope_key),
    ):
        n, o = tuple(new.shape), tuple(old.shape)
        if (n[0], n[2]) != (o[0], o[2]) or new.dtype != old.dtype:
            raise ValueError(
                f"{name} {n} ({new.dtype}) does not fit the cached {o} "
                f"({old.dtype}): batch, size and dtype must match"
            )


def cache_bytes_per_token(cache, stored):
    """A cache that holds a position at least (``stored``: its tensors)."""
    if not stored or cache.length == 0:
        raise ValueError("the cache is empty: decode a token first")


def _module_or_shapes(module_or_shapes):
    # a MultiHeadLatentAttention (its sizes were checked when it was
    # built), or a dict of its constructor's sizes (DEEPSEEK_V3)
    if hasattr(module_or_shapes, "kv_a_proj_with_mqa"):
        return
    if not isinstance(module_or_shapes, dict):
        raise TypeError(
            f"expected a MultiHeadLatentAttention or a dict of its "
            f"shapes (such as DEEPSEEK_V3), got "
            f"{type(module_or_shapes).__name__}"
        )
    shapes = {"q_lora_rank": None, **module_or_shapes}
    latent_shapes(
        *(shapes.get(n) for n in ("d_model", "n_head", *SHAPE_NAMES)),
        shapes.get("q_lora_rank"),
        10000.0,  # rope_base and rope_interleave: no size
        True,
    )


def latent_cache_bytes_per_token(module_or_shapes):
    """A MultiHeadLatentAttention or a dict of its sizes."""
    _module_or_shapes(module_or_shapes)


def expanded_kv_bytes_per_token(module_or_shapes):
    """A MultiHeadLatentAttention or a dict of its sizes."""
    _module_or_shapes(module_or_shapes)


def decode_step_flops(module_or_shapes, n_key, absorbed):
    """A module or a dict of its sizes, n_key an int >= 1, absorbed a
    bool."""
    _module_or_shapes(module_or_shapes)
    positive_integer(n_key, "n_key")
    if not isinstance(absorbed, bool):  # as forward: True or False
        raise TypeError(f"absorbed must be True or False, got {absorbed!r}")


def yarn_mscale(factor, mscale):
    """factor and mscale: finite real numbers."""
    for name, value in (("factor", factor), ("mscale", mscale)):
        if not math.isfinite(real_number(value, name)):
            raise ValueError(f"{name} must be finite, got {value}")
