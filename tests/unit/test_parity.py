"""The four implementations agree on the same weights.

From-scratch PyTorch, F.scaled_dot_product_attention (sdpa_forward),
nn.MultiheadAttention (library_version + library_forward) and the NumPy
reference (to_numpy), over dtypes, bias, and every mask layout.
"""

import numpy as np
import pytest
import torch

from mha_ref import numpy_ref, torch_ref
from mha_ref.tolerances import atol

B, N_HEAD, D_MODEL = 2, 3, 12  # d_head = 4
T, TQ, TK = 5, 4, 6  # self-attention length; cross-attention lengths

DTYPES = [torch.float32, torch.float64]
CASES = [
    "none",
    "causal",
    "per-head",
    "key-padding",
    "cross",
    "cross-per-batch",
]


def make_case(case, make_tensor, make_mask, dtype, device="cpu"):
    """x, context (None for self-attention) and mask for a named case."""
    cross = case.startswith("cross")
    tq, tk = (TQ, TK) if cross else (T, T)
    x = make_tensor((B, tq, D_MODEL), dtype=dtype, device=device, seed=1)
    context = None
    if cross:
        context = make_tensor(
            (B, tk, D_MODEL), dtype=dtype, device=device, seed=2
        )
    if case in ("none", "cross"):
        mask = None
    elif case == "causal":
        mask = torch_ref.causal_mask(T)  # (T, T), shared by all
    elif case == "per-head":
        mask = make_mask((B, N_HEAD, tq, tk), seed=3)
    elif case == "key-padding":
        lengths = torch.tensor([T, T - 2])  # batch 1 pads its last 2 keys
        mask = torch.arange(T)[None, :] >= lengths[:, None]  # (B, Tk)
        mask = mask[:, None, None, :]  # (B, 1, 1, Tk)
    else:  # cross-per-batch
        mask = make_mask((B, 1, tq, tk), seed=4)
    if mask is not None:
        mask = mask.to(device)
    return x, context, mask


def numpy_or_none(tensor):
    return None if tensor is None else tensor.detach().cpu().numpy()


def library_weights(library, x, mask, context):
    """nn.MultiheadAttention's per-head weights (B, H, Tq, Tk)."""
    context = x if context is None else context
    b, tq, tk = x.shape[0], x.shape[1], context.shape[1]
    if mask is not None:
        mask = mask.expand(b, N_HEAD, tq, tk).reshape(b * N_HEAD, tq, tk)
    _, weights = library(
        x,
        context,
        context,
        attn_mask=mask,
        need_weights=True,
        average_attn_weights=False,
    )
    return weights


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_parity_four_implementations_agree(
    case, bias, dtype, make_module, make_tensor, make_mask
):
    module = make_module(D_MODEL, N_HEAD, bias=bias, dtype=dtype)
    x, context, mask = make_case(case, make_tensor, make_mask, dtype)
    tol = {"atol": atol(dtype), "rtol": 0}

    y, weights = module(x, mask, context)
    y_sdpa = torch_ref.sdpa_forward(module, x, mask, context)
    library = torch_ref.library_version(module)
    y_library = torch_ref.library_forward(library, x, mask, context)
    y_numpy, weights_numpy = numpy_ref.MultiHeadAttention.from_torch(module)(
        numpy_or_none(x), numpy_or_none(mask), numpy_or_none(context)
    )

    torch.testing.assert_close(y_sdpa, y, **tol)
    torch.testing.assert_close(y_library, y, **tol)
    np_dtype = np.dtype(str(dtype).removeprefix("torch."))
    assert y_numpy.dtype == weights_numpy.dtype == np_dtype
    np.testing.assert_allclose(y_numpy, numpy_or_none(y), **tol)
    np.testing.assert_allclose(weights_numpy, numpy_or_none(weights), **tol)
    torch.testing.assert_close(
        library_weights(library, x, mask, context), weights, **tol
    )


@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
def test_parity_biases_are_nonzero_and_matter(bias, make_module, make_tensor):
    # guards the fixture: a zero bias would let a misplaced bias pass
    module = make_module(D_MODEL, N_HEAD, bias=bias)
    x = make_tensor((B, T, D_MODEL), seed=1)
    y, _ = module(x)
    if not bias:
        assert module.wq.bias is None
        return
    for linear in (module.wq, module.wk, module.wv, module.wo):
        assert linear.bias.abs().min() > 0
    with torch.no_grad():
        module.wk.bias.zero_()  # adds q . b_k to a whole row: no effect
    y_no_bk, _ = module(x)
    torch.testing.assert_close(y_no_bk, y, atol=atol(y.dtype), rtol=0)
    with torch.no_grad():
        module.wq.bias.zero_()  # changes every score differently
    y_no_bq, _ = module(x)
    assert (y - y_no_bq).abs().max() > 1e-2


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_parity_mismatched_weights_are_detected(
    dtype, make_module, make_tensor
):
    # the tolerance is far below a real bug: one perturbed weight fails
    module = make_module(D_MODEL, N_HEAD, dtype=dtype)
    x = make_tensor((B, T, D_MODEL), dtype=dtype, seed=1)
    library = torch_ref.library_version(module)
    with torch.no_grad():
        library.in_proj_weight[0, 0] += 0.1
    y, _ = module(x)
    gap = (torch_ref.library_forward(library, x) - y).abs().max()
    assert gap > 100 * atol(dtype)


cuda = [
    pytest.mark.cuda,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA device"
    ),
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
@pytest.mark.parametrize("device", [pytest.param("cuda", marks=cuda)])
def test_parity_on_cuda_matches_numpy(
    device, bias, dtype, case, make_module, make_tensor, make_mask
):
    module = make_module(
        D_MODEL, N_HEAD, bias=bias, dtype=dtype, device=device
    )
    x, context, mask = make_case(
        case, make_tensor, make_mask, dtype, device=device
    )
    tol = {"atol": atol(dtype), "rtol": 0}
    y, weights = module(x, mask, context)
    assert y.device.type == weights.device.type == "cuda"
    y_sdpa = torch_ref.sdpa_forward(module, x, mask, context)
    y_library = torch_ref.library_forward(
        torch_ref.library_version(module), x, mask, context
    )
    y_numpy, weights_numpy = numpy_ref.MultiHeadAttention.from_torch(module)(
        numpy_or_none(x), numpy_or_none(mask), numpy_or_none(context)
    )
    torch.testing.assert_close(y_sdpa, y, **tol)
    torch.testing.assert_close(y_library, y, **tol)
    np.testing.assert_allclose(y_numpy, numpy_or_none(y), **tol)
    np.testing.assert_allclose(weights_numpy, numpy_or_none(weights), **tol)
