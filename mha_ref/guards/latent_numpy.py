"""The doors of latent_numpy.py: one guard per public function, same
name (the constructor's: multi_head_latent_attention; __call__'s:
forward). latent_torch's doors refuse the same inputs."""

import numpy as np

from mha_ref.guards.arrays import (
    array_of,
    float_arrays,
    mask_array,
    model_arrays,
    not_a_tensor,
    rope_positions,
)
from mha_ref.guards.shapes import (
    latent_shapes,
    rms_norm_inputs,
    state_dict_shapes,
)


def rms_norm(x, weight, eps):
    """x (..., d) and weight (d,) as finite float arrays (returned), eps
    a positive finite number."""
    x, weight = float_arrays(x=x, weight=weight)
    rms_norm_inputs(weight.shape, eps, x.shape)
    return x, weight


def multi_head_latent_attention(*sizes):
    """The constructor's sizes (shapes.latent_shapes, no device)."""
    latent_shapes(*sizes)


def load_state_dict(expected, state_dict, where):
    """The names and shapes of ``expected`` (strict), each value an array
    (not a tensor), finite floats. Returns {name: float array}."""
    given = {n: np.shape(w) for n, w in state_dict.items()}
    state_dict_shapes(expected, given, where=where)
    arrays = {}
    for name, weight in state_dict.items():
        not_a_tensor(weight, name, "its .numpy()")
        (arrays[name],) = float_arrays(**{name: weight})
    return arrays


def forward(module, x, mask, positions, absorbed):
    """__call__'s inputs: x (B, T, d_model) as float arrays, mask
    broadcast to (B, H, T, T) or None, positions (T,) (default 0 ..
    T - 1), absorbed a bool."""
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
