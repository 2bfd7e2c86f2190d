"""torch_ref.MultiHeadAttention and its helpers: weights, copies, errors.

The module's three forwards (module, sdpa_forward, library_forward) take
the same masks, (Tk,) and 0-d included, and refuse the same bad x and
context naming them; the uneven head split is checked in both mirrors.
"""

import numpy as np
import pytest
import torch
from torch import nn

from mha_ref import numpy_ref, torch_ref
from mha_ref.tolerances import atol

B, TQ, TK, D_MODEL, N_HEAD = 2, 4, 6, 12, 3
LINEARS = ("wq", "wk", "wv", "wo")


def paths(module):
    """The three PyTorch forwards, as functions (x, mask, context) -> y."""
    library = torch_ref.library_version(module)
    return {
        "module": lambda x, m, c: module(x, m, c)[0],
        "sdpa": lambda x, m, c: torch_ref.sdpa_forward(module, x, m, c),
        "library": lambda x, m, c: torch_ref.library_forward(library, x, m, c),
    }


def test_mha_has_four_square_linears_with_optional_bias():
    module = torch_ref.MultiHeadAttention(D_MODEL, N_HEAD, bias=True)
    assert (module.d_model, module.n_head, module.d_head) == (12, 3, 4)
    for name in LINEARS:
        linear = getattr(module, name)
        assert isinstance(linear, nn.Linear)
        assert linear.weight.shape == (D_MODEL, D_MODEL)
        assert linear.bias.shape == (D_MODEL,)
    plain = torch_ref.MultiHeadAttention(D_MODEL, N_HEAD)
    assert all(getattr(plain, name).bias is None for name in LINEARS)


def test_mha_with_bias_counts_as_many_parameters_as_gpt2_attention():
    # multiple-heads.md: the layer of its exercise, biases included, has
    # as many parameters as transformers' GPT2Attention (c_attn packs
    # W_Q, W_K, W_V; c_proj is W_O), models/gpt2/modeling_gpt2.py
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Attention

    config = GPT2Config(n_embd=768, n_head=12)  # GPT-2 small's width
    with torch.device("meta"):
        theirs = GPT2Attention(config)
    ours = torch_ref.MultiHeadAttention(768, 12, bias=True, device="meta")
    assert sum(p.numel() for p in ours.parameters()) == sum(
        p.numel() for p in theirs.parameters()
    )


def test_mha_follows_dtype_argument(make_tensor):
    module = torch_ref.MultiHeadAttention(D_MODEL, N_HEAD, dtype=torch.float64)
    assert all(p.dtype == torch.float64 for p in module.parameters())
    y, weights = module(make_tensor((B, TQ, D_MODEL)))
    assert y.dtype == weights.dtype == torch.float64


def test_mha_forward_matches_explicit_formula(make_module, make_tensor):
    module = make_module(D_MODEL, N_HEAD, bias=True)
    x = make_tensor((B, TQ, D_MODEL), seed=1)
    context = make_tensor((B, TK, D_MODEL), seed=2)
    y, weights = module(x, context=context)
    dh = D_MODEL // N_HEAD
    outs = []
    for h in range(N_HEAD):
        rows = slice(h * dh, (h + 1) * dh)  # nn.Linear is (out, in)

        def project(linear, a, rows=rows):
            return a @ linear.weight[rows].T + linear.bias[rows]

        q = project(module.wq, x)
        k, v = project(module.wk, context), project(module.wv, context)
        a = torch.softmax(q @ k.transpose(-2, -1) / dh**0.5, dim=-1)
        torch.testing.assert_close(weights[:, h], a, atol=1e-12, rtol=0)
        outs.append(a @ v)
    expected = module.wo(torch.cat(outs, dim=-1))
    torch.testing.assert_close(y, expected, atol=1e-12, rtol=0)


def test_library_version_copies_weights_into_packed_layout(make_module):
    module = make_module(D_MODEL, N_HEAD, bias=True)
    library = torch_ref.library_version(module)
    assert library.batch_first
    assert library.num_heads == N_HEAD
    q, k, v = library.in_proj_weight.chunk(3)
    for ours, theirs in zip(
        LINEARS, (q, k, v, library.out_proj.weight), strict=True
    ):
        torch.testing.assert_close(
            theirs, getattr(module, ours).weight, atol=0, rtol=0
        )
    bq, bk, bv = library.in_proj_bias.chunk(3)
    for ours, theirs in zip(
        LINEARS, (bq, bk, bv, library.out_proj.bias), strict=True
    ):
        torch.testing.assert_close(
            theirs, getattr(module, ours).bias, atol=0, rtol=0
        )
    assert library.in_proj_weight.data_ptr() != module.wq.weight.data_ptr()


def test_library_version_without_bias_has_no_bias(make_module):
    library = torch_ref.library_version(
        make_module(D_MODEL, N_HEAD, bias=False)
    )
    assert library.in_proj_bias is None
    assert library.out_proj.bias is None


def test_to_numpy_transposes_linear_weights(make_module):
    module = make_module(D_MODEL, N_HEAD, bias=True)
    twin = numpy_ref.MultiHeadAttention.from_torch(module)
    assert isinstance(twin, numpy_ref.MultiHeadAttention)
    for ours, w, b in zip(
        LINEARS,
        ("Wq", "Wk", "Wv", "Wo"),
        ("bq", "bk", "bv", "bo"),
        strict=True,
    ):
        linear = getattr(module, ours)
        np.testing.assert_array_equal(
            getattr(twin, w), linear.weight.detach().numpy().T
        )
        np.testing.assert_array_equal(
            getattr(twin, b), linear.bias.detach().numpy()
        )
    twin.Wq[0, 0] += 1.0  # a copy: the module is untouched
    assert module.wq.weight[0, 0] != twin.Wq[0, 0]


def test_to_numpy_without_bias_has_no_bias(make_module):
    twin = numpy_ref.MultiHeadAttention.from_torch(
        make_module(D_MODEL, N_HEAD, bias=False)
    )
    assert twin.bq is twin.bk is twin.bv is twin.bo is None


@pytest.mark.parametrize(
    "mask",
    [
        torch.tensor([False, False, True, False]),  # (Tk,): key 2 blocked
        torch.tensor(False),  # 0-d: nothing blocked
    ],
    ids=["Tk", "0-d"],
)
def test_sdpa_forward_accepts_1d_and_0d_masks(mask, make_module, make_tensor):
    module = make_module(D_MODEL, N_HEAD)
    x = make_tensor((B, TQ, D_MODEL), seed=1)  # self-attention: Tk = 4
    expected, _ = module(x, mask)
    tol = {"atol": atol(torch.float64), "rtol": 0}
    for name, run in paths(module).items():
        torch.testing.assert_close(
            run(x, mask, None), expected, **tol, msg=name
        )


def test_sdpa_forward_is_not_affected_by_train_mode(make_module, make_tensor):
    # dropout_p=0.0 is passed explicitly: train() and eval() agree
    module = make_module(D_MODEL, N_HEAD)
    x = make_tensor((B, TQ, D_MODEL), seed=1)
    module.train()
    y_train = torch_ref.sdpa_forward(module, x)
    module.eval()
    torch.testing.assert_close(
        torch_ref.sdpa_forward(module, x), y_train, atol=0, rtol=0
    )
    torch.testing.assert_close(
        module(x)[0], y_train, atol=atol(x.dtype), rtol=0
    )


# empty batches, bfloat16 twins, the first name of to_numpy (issue 28)


@pytest.mark.parametrize("path", ["module", "sdpa", "library", "numpy"])
@pytest.mark.parametrize("cross", [False, True])
def test_mha_empty_batch_gives_nn_multihead_attention_shapes(
    make_module, path, cross
):
    module = make_module(D_MODEL, N_HEAD)
    x = torch.zeros(0, TQ, D_MODEL, dtype=torch.float64)  # B = 0
    context = torch.zeros(0, TK, D_MODEL, dtype=torch.float64) if cross else x
    library = torch_ref.library_version(module)
    expected, _ = library(x, context, context)  # (0, Tq, d_model)
    if path == "numpy":
        y, weights = numpy_ref.MultiHeadAttention.from_torch(module)(
            x.numpy(), context=context.numpy() if cross else None
        )
        assert weights.shape == (0, N_HEAD, TQ, context.shape[1])
    else:
        y = paths(module)[path](x, None, context if cross else None)
    assert tuple(y.shape) == tuple(expected.shape) == (0, TQ, D_MODEL)


def test_to_numpy_converts_a_bfloat16_module_to_float32(make_module):
    module = make_module(D_MODEL, N_HEAD, dtype=torch.bfloat16)
    twin = numpy_ref.MultiHeadAttention.from_torch(module)
    for ours, w, b in zip(
        LINEARS,
        ("Wq", "Wk", "Wv", "Wo"),
        ("bq", "bk", "bv", "bo"),
        strict=True,
    ):
        linear = getattr(module, ours)
        assert getattr(twin, w).dtype == np.float32
        # exact: every bfloat16 is a float32
        np.testing.assert_array_equal(
            getattr(twin, w), linear.weight.detach().float().numpy().T
        )
        np.testing.assert_array_equal(
            getattr(twin, b), linear.bias.detach().float().numpy()
        )
    x = torch.randn(B, TQ, D_MODEL, dtype=torch.float64)
    oracle, _ = module.double()(x)  # the same weights, in float64
    y, _ = twin(x.numpy())
    np.testing.assert_allclose(y, oracle.detach().numpy(), atol=1e-5)


def test_torch_ref_does_not_import_numpy_ref():
    # the trained-heads page runs torch code only: its notebook must not
    # carry numpy_ref, which an import (even inside a function) would do
    import ast
    from pathlib import Path

    tree = ast.parse(Path(torch_ref.__file__).read_text("utf-8"))
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom | ast.Import)
        for alias in node.names
    }
    assert "numpy_ref" not in imported


@pytest.mark.parametrize("path", ["module", "sdpa"])
def test_mha_reads_iterator_positions_once(path):
    # q took the iterator's values, k found it empty: "0 positions"
    torch.manual_seed(0)
    m = torch_ref.MultiHeadAttention(
        D_MODEL, N_HEAD, rope=True, dtype=torch.float64
    )
    x = torch.randn(B, TQ, D_MODEL, dtype=torch.float64)
    at = [5, 2, 9, 7]
    mask = torch_ref.causal_mask(TQ)

    def run(positions):
        if path == "sdpa":
            return torch_ref.sdpa_forward(m, x, mask, positions=positions)
        return m(x, mask, positions=positions)[0]

    want = run(torch.tensor(at))
    torch.testing.assert_close(run(iter(at)), want, rtol=0, atol=0)
    # and the float64 oracle: numpy_ref's twin at the same positions
    twin = torch_ref.to_numpy(m)
    y = twin(x.numpy(), mask.numpy(), positions=np.array(at))[0]
    np.testing.assert_allclose(
        want.detach().numpy(), y, rtol=0, atol=atol(np.float64)
    )
