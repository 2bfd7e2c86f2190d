"""Old names of multi-head latent attention's guards, kept importable:
the doors are in guards/latent_numpy.py and guards/latent_torch.py, the
sizes both mirrors check in guards/shapes.py."""

# ruff: noqa: F401 (each name is re-exported)

from mha_ref.guards.latent_numpy import forward as forward_arrays
from mha_ref.guards.latent_numpy import load_state_dict as state_dict_arrays
from mha_ref.guards.latent_numpy import rms_norm as rms_norm_arrays
from mha_ref.guards.latent_torch import forward as forward_tensors
from mha_ref.guards.latent_torch import rms_norm as rms_norm_size
from mha_ref.guards.latent_torch import rms_norm_forward as rms_norm_tensor
from mha_ref.guards.shapes import (
    SHAPE_NAMES,
    latent_shapes,
    rms_norm_inputs,
    state_dict_shapes,
)
