"""Refusals of the doors of latent_torch.py (mha_ref/guards/latent_torch.py)
that only the torch mirror has."""

import re

import numpy as np
import pytest
import torch
from test_latent import SHAPES, random_mla, random_x

from mha_ref import (
    kv_cache,
    latent_torch,
)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (
            lambda m, x: kv_cache.cached_forward(m, x, [7], window=3),
            ValueError,
            "window=3",
        ),
        (
            lambda m, x: kv_cache.cached_forward(m, x.tolist(), [7]),
            TypeError,
            "x must be a torch.Tensor",
        ),
        (
            lambda m, x: latent_torch.cached_latent_forward(m, "x", [7]),
            TypeError,
            "x must be a torch.Tensor",
        ),
    ],
)
def test_cached_latent_paths_refuse_a_window_and_a_non_tensor(
    call, error, match
):
    with pytest.raises(error, match=match):
        call(random_mla(), random_x())


def test_mla_state_dict_check_names_parameter_inside_a_parent_module():
    # a layer inside a model: the shape check still names the parameter
    parent = torch.nn.ModuleDict({"attn": random_mla()})
    state = parent.state_dict()
    state["attn.o_proj.weight"] = torch.zeros(24, 14)
    with pytest.raises(ValueError, match=r"o_proj.*\(24, 14\).*\(24, 15\)"):
        parent.load_state_dict(state)


def test_mla_state_dict_with_query_bottleneck_needs_q_lora_rank():
    with pytest.raises(ValueError, match="q_lora_rank"):
        random_mla().load_state_dict(random_mla(q_lora_rank=7).state_dict())
    # strict=False takes what fits, as torch does
    result = random_mla().load_state_dict(
        random_mla(q_lora_rank=7).state_dict(), strict=False
    )
    assert result.missing_keys == ["q_proj.weight"]


def test_mla_refuses_absorbed_that_is_not_a_bool():
    with pytest.raises(TypeError, match="absorbed"):
        random_mla()(random_x(), absorbed="yes")


def test_latent_cache_bytes_per_token_refuses_other_arguments():
    with pytest.raises(TypeError, match="MultiHeadLatentAttention"):
        latent_torch.latent_cache_bytes_per_token([512, 64])
    with pytest.raises(ValueError, match="qk_rope_head_dim"):
        latent_torch.latent_cache_bytes_per_token(
            {**latent_torch.DEEPSEEK_V3, "qk_rope_head_dim": 63}
        )


def test_rope_on_the_content_keys_refuses_nan():
    module = random_mla(shapes=(24, 3, 10, 6, 4, 5))
    x = random_x()
    x[0, 0, 0] = float("nan")  # gave NaN scores, silently
    with pytest.raises(ValueError, match="holds nan"):
        latent_torch.rope_on_the_content_keys(module, x, torch.arange(7))


def test_decode_step_flops_refuse_absorbed_that_is_not_a_bool():
    # "no" is truthy: it counted the absorbed form
    with pytest.raises(TypeError, match="absorbed must be True or False"):
        latent_torch.decode_step_flops(latent_torch.DEEPSEEK_V3, 8, "no")


@pytest.mark.parametrize(
    ("factor", "mscale", "error"),
    [
        (float("nan"), 1.0, ValueError),  # nan <= 1 is False: returned nan
        (40.0, float("nan"), ValueError),
        (float("inf"), 1.0, ValueError),
        ("40", 1.0, TypeError),
    ],
)
def test_yarn_mscale_names_a_bad_input(factor, mscale, error):
    with pytest.raises(error, match=r"factor|mscale"):
        latent_torch.yarn_mscale(factor, mscale)


NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="has CUDA")


@NO_CUDA
@pytest.mark.parametrize("make", ["RMSNorm", "MultiHeadLatentAttention"])
def test_latent_constructors_refuse_cuda_without_it(make):
    # RMSNorm raised torch's AssertionError "Torch not compiled with
    # CUDA enabled"
    args = (4,) if make == "RMSNorm" else SHAPES
    with pytest.raises(ValueError, match=re.escape("device='cuda' asks")):
        getattr(latent_torch, make)(*args, device="cuda")


@NO_CUDA
@pytest.mark.parametrize("device", ["cuda", "cuda:0", 0, np.int64(0)])
def test_each_cuda_device_is_refused_without_cuda(device):
    # np.int64(0) raised a RuntimeError
    with pytest.raises(ValueError, match=re.escape(f"device={device!r} asks")):
        latent_torch.RMSNorm(4, device=device)
