"""pitfalls.wrong_tiled_statistics_dtype: statistics in fp16/bf16 fail.

The tiled pass keeps its running max, sum and output in float32; the
wrong version keeps them in the input dtype. Each test shows the
symptom next to the right answer of tiled.tiled_attention_torch.
"""

import pytest
import torch

from mha_ref import pitfalls, tiled, torch_ref
from mha_ref.tolerances import atol

LOW = [torch.float16, torch.bfloat16]


def test_wrong_tiled_statistics_dtype_fp16_sum_overflows_to_inf():
    # equal scores: the output is the mean of v, 200. The running
    # output reaches 512 * 200 = 102,400, past fp16's 65,504
    q = torch.zeros(1, 1, 1, 8, dtype=torch.float16)  # (B, H, Tq, d)
    k = torch.zeros(1, 1, 512, 8, dtype=torch.float16)  # (B, H, Tk, d)
    v = torch.full((1, 1, 512, 1), 200.0, dtype=torch.float16)
    wrong = pitfalls.wrong_tiled_statistics_dtype(q, k, v)
    assert wrong.dtype == torch.float16
    assert wrong.isposinf().all()
    assert tiled.tiled_attention_torch(q, k, v).item() == 200.0


def test_wrong_tiled_statistics_dtype_bf16_sum_stops_at_256():
    # one key per step: in bf16, 256 + 1 rounds back to 256, so the sum
    # and the output stop growing and the mean 0.5 comes out as 1.0
    q = torch.zeros(1, 1, 1, 8, dtype=torch.bfloat16)
    k = torch.zeros(1, 1, 512, 8, dtype=torch.bfloat16)
    v = torch.cat([torch.zeros(256), torch.ones(256)])
    v = v.to(torch.bfloat16).view(1, 1, 512, 1)  # (B, H, Tk, dv)
    wrong = pitfalls.wrong_tiled_statistics_dtype(q, k, v, block_k=1)
    assert wrong.item() == 1.0
    right = tiled.tiled_attention_torch(q, k, v, block_k=1)
    assert right.item() == 0.5


@pytest.mark.slow
@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_wrong_tiled_statistics_dtype_is_several_times_less_accurate(
    dtype, make_tensor
):
    q, k, v = (
        make_tensor((1, 4, 256, 64), dtype=dtype, seed=s) for s in (1, 2, 3)
    )
    exact, _ = torch_ref.attention(q.double(), k.double(), v.double())

    def error(out):
        return (out.double() - exact).abs().max().item()

    right = error(tiled.tiled_attention_torch(q, k, v))
    wrong = error(pitfalls.wrong_tiled_statistics_dtype(q, k, v))
    assert right <= atol(dtype)
    assert wrong > 2 * right


def test_wrong_tiled_statistics_dtype_is_right_in_float64(make_tensor):
    # the loop itself is the online softmax: only the dtype is wrong
    q, k, v = (
        make_tensor((2, 3, 5, 4), dtype=torch.float64, seed=s)
        for s in (1, 2, 3)
    )
    expected, _ = torch_ref.attention(q, k, v)
    got = pitfalls.wrong_tiled_statistics_dtype(q, k, v, block_k=2)
    torch.testing.assert_close(got, expected, atol=atol("float64"), rtol=0)
