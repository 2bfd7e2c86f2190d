"""float16 and bfloat16 on the CPU: every path within its named tolerance.

Each path (torch_ref forward, the tiled pass, SDPA, nn.MultiheadAttention)
runs in the low-precision dtype and is compared with the same weights and
inputs in float64, within tolerances.atol(dtype). The tiled pass keeps
its running max, sum and output in float32, as FlashAttention does: two
cases where statistics in the input dtype go wrong pin that down.
"""

import copy

import pytest
import torch

from mha_ref import tiled, torch_ref
from mha_ref.tolerances import atol

B, N_HEAD, D_MODEL = 2, 4, 32  # d_head = 8
T, TQ, TK = 24, 10, 24  # self-attention length; cross-attention lengths
LOW = [torch.float16, torch.bfloat16]
BLOCK = 8  # several tiles per row and per column


def tiled_forward(module, x, mask=None, context=None):
    """The module's weights through tiled_attention_torch."""
    q, k, v = module.project(x, context)  # (B, H, T, dh)
    out = tiled.tiled_attention_torch(
        q, k, v, mask, block_q=BLOCK, block_k=BLOCK
    )  # (B, H, Tq, dh)
    return module.wo(module.merge_heads(out))  # (B, Tq, d_model)


def paths(module):
    """Four forwards of one module, as (x, mask, context) -> y."""
    library = torch_ref.library_version(module)
    return {
        "forward": lambda x, m, c: module(x, m, c)[0],
        "tiled": lambda x, m, c: tiled_forward(module, x, m, c),
        "sdpa": lambda x, m, c: torch_ref.sdpa_forward(module, x, m, c),
        "library": lambda x, m, c: torch_ref.library_forward(library, x, m, c),
    }


def case_inputs(case, make_tensor, dtype):
    """x, context (None for self-attention) and mask for a named case."""
    cross = case == "cross"
    x = make_tensor((B, TQ if cross else T, D_MODEL), dtype=dtype, seed=1)
    context = None
    if cross:
        context = make_tensor((B, TK, D_MODEL), dtype=dtype, seed=2)
    mask = {
        "none": None,
        "cross": None,
        "causal": torch_ref.causal_mask(T),  # (T, T)
        "key-padding": torch_ref.key_padding_mask([T, T - 7]),  # (B,1,1,T)
    }[case]
    return x, context, mask


@pytest.mark.parametrize("path", ["forward", "tiled", "sdpa", "library"])
@pytest.mark.parametrize("case", ["none", "causal", "key-padding", "cross"])
@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_low_precision_paths_match_float64_within_atol(
    dtype, case, path, make_module, make_tensor
):
    module = make_module(D_MODEL, N_HEAD, bias=True, dtype=dtype)
    x, context, mask = case_inputs(case, make_tensor, dtype)
    y = paths(module)[path](x, mask, context)
    # the same rounded weights and inputs, in float64
    wide = copy.deepcopy(module).double()
    as64 = None if context is None else context.double()
    expected, _ = wide(x.double(), mask, as64)
    assert y.dtype == dtype
    error = (y.double() - expected).abs().max().item()
    assert error <= atol(dtype), f"{path} {case}: {error:.2e}"
    # and not trivially: the output is far from zero
    assert expected.abs().max() > 1


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_attention_low_precision_weights_match_float64(dtype, make_tensor):
    q, k, v = (
        make_tensor((B, N_HEAD, T, 8), dtype=dtype, seed=s) for s in (3, 4, 5)
    )
    out, weights = torch_ref.attention(q, k, v, torch_ref.causal_mask(T))
    out64, weights64 = torch_ref.attention(
        q.double(), k.double(), v.double(), torch_ref.causal_mask(T)
    )
    assert out.dtype == weights.dtype == dtype
    tol = {"atol": atol(dtype), "rtol": 0}
    torch.testing.assert_close(out.double(), out64, **tol)
    torch.testing.assert_close(weights.double(), weights64, **tol)


def test_tiled_fp16_mean_of_200_over_512_keys_is_200():
    # equal scores: the output is the mean of v. In fp16 the running
    # sum of 512 values of 200 (102,400) would overflow fp16's 65,504
    q = torch.zeros(1, 1, 1, 8, dtype=torch.float16)  # (B, H, Tq, d)
    k = torch.zeros(1, 1, 512, 8, dtype=torch.float16)  # (B, H, Tk, d)
    v = torch.full((1, 1, 512, 1), 200.0, dtype=torch.float16)
    out = tiled.tiled_attention_torch(q, k, v)
    assert out.dtype == torch.float16
    assert out.item() == 200.0


def test_tiled_bf16_block_k_1_counts_every_key():
    # one key per step: a bf16 running sum stops at 256 (256 + 1 rounds
    # back to 256), so the last 256 keys would weigh twice as much
    q = torch.zeros(1, 1, 1, 8, dtype=torch.bfloat16)
    k = torch.zeros(1, 1, 512, 8, dtype=torch.bfloat16)
    v = torch.cat([torch.zeros(256), torch.ones(256)]).to(torch.bfloat16)
    out = tiled.tiled_attention_torch(q, k, v.view(1, 1, 512, 1), block_k=1)
    assert out.item() == 0.5  # the mean of 256 zeros and 256 ones


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_tiled_bf16_and_fp16_block_k_1_match_float64(dtype, make_tensor):
    q, k, v = (
        make_tensor((1, 2, 4, 8), dtype=dtype, seed=6),
        make_tensor((1, 2, 300, 8), dtype=dtype, seed=7),
        make_tensor((1, 2, 300, 3), dtype=dtype, seed=8),
    )
    out = tiled.tiled_attention_torch(q, k, v, block_k=1)
    expected, _ = torch_ref.attention(q.double(), k.double(), v.double())
    torch.testing.assert_close(
        out.double(), expected, atol=atol(dtype), rtol=0
    )


@pytest.mark.parametrize(
    ("dtype", "stats"),
    [
        (torch.float16, torch.float32),
        (torch.bfloat16, torch.float32),
        (torch.float32, torch.float32),
        (torch.float64, torch.float64),
    ],
    ids=str,
)
def test_tiled_keeps_statistics_in_float32_or_wider(dtype, stats, make_tensor):
    q = make_tensor((1, 1, 3, 4), dtype=dtype)
    out, lse = tiled.tiled_attention_torch(q, q, q, return_lse=True)
    assert out.dtype == dtype  # cast once, at the end
    assert lse.dtype == stats  # the saved statistic stays wide
