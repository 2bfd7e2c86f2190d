"""Refusals of the doors of latent_numpy.py (mha_ref/guards/latent_numpy.py),
each beside its latent_torch mirror: both refuse the same inputs."""

import numpy as np
import pytest
import torch
from test_latent import SHAPES, random_mla, random_x

from mha_ref import (
    checks_latent,
    latent_numpy,
    latent_torch,
)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"kv_lora_rank": 0}, ValueError),
        ({"qk_nope_head_dim": -1}, ValueError),
        ({"v_head_dim": 0}, ValueError),
        ({"qk_rope_head_dim": 0}, ValueError),
        ({"qk_rope_head_dim": 5}, ValueError),  # odd: RoPE turns pairs
        ({"q_lora_rank": 0}, ValueError),
        ({"n_head": 0}, ValueError),
        ({"kv_lora_rank": 2.0}, TypeError),
        ({"v_head_dim": True}, TypeError),
        ({"rope_base": 0.0}, ValueError),
        ({"rope_interleave": "yes"}, TypeError),
    ],
)
def test_mla_refuses_bad_shapes_in_both_mirrors(change, error):
    names = ("d_model", "n_head", *checks_latent.SHAPE_NAMES)
    kwargs = {**dict(zip(names, SHAPES, strict=True)), **change}
    name = next(iter(change))
    for mirror in (latent_numpy, latent_torch):  # the same refusal
        with pytest.raises(error, match=name):
            mirror.MultiHeadLatentAttention(**kwargs)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_mla_refuses_positions_that_are_not_finite_in_both_mirrors(bad):
    x = random_x()
    positions = np.arange(7.0)
    positions[3] = bad
    mirror = latent_numpy.MultiHeadLatentAttention(*SHAPES)
    with pytest.raises(ValueError, match="positions"):
        mirror(x.numpy(), positions=positions)
    with pytest.raises(ValueError, match="positions"):
        random_mla()(x, positions=torch.as_tensor(positions))


@pytest.mark.parametrize("framework", ["torch", "numpy"])
def test_mla_refuses_positions_of_the_wrong_shape(framework):
    if framework == "numpy":
        mirror = latent_numpy.MultiHeadLatentAttention(*SHAPES)
        with pytest.raises(ValueError, match="positions"):
            mirror(random_x().numpy(), positions=np.arange(6))
    else:
        with pytest.raises(ValueError, match="positions"):
            random_mla()(random_x(), positions=torch.arange(6))


@pytest.mark.parametrize("framework", ["torch", "numpy"])
def test_mla_state_dict_of_wrong_shape_names_parameter_and_shapes(framework):
    state = random_mla().state_dict()
    state["kv_b_proj.weight"] = torch.zeros(33, 10)  # 3 * (6 + 5) = 33 ok
    state["kv_a_proj_with_mqa.weight"] = torch.zeros(13, 24)  # not 14
    expected = r"kv_a_proj_with_mqa\.weight.*\(13, 24\).*\(14, 24\)"
    if framework == "numpy":
        mirror = latent_numpy.MultiHeadLatentAttention(*SHAPES)
        state = {n: w.numpy() for n, w in state.items()}
        with pytest.raises(ValueError, match=expected):
            mirror.load_state_dict(state)
    else:
        with pytest.raises(ValueError, match=expected):
            random_mla().load_state_dict(state)
