"""Edge inputs: a right answer or a clear error, never a silent wrong one.

Each test pins one case of issue 10 that used to give NaN, zeros, a
wrong answer or a confusing error: overflowing fp16 scores, integer and
bool inputs, no keys, 1-D masks in SDPA, foreign types and dtypes, a NaN
in x, and padding masks that a 2-D shape cannot tell apart.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mha_ref import kv_cache, numpy_ref, tiled, torch_ref
from mha_ref.tolerances import atol

B, T, D_MODEL, N_HEAD = 2, 4, 8, 2
TOL64 = {"atol": atol("float64"), "rtol": 0}


def forwards(module):
    """The module's three PyTorch forwards as (x, mask, context) -> y."""
    library = torch_ref.library_version(module)
    return {
        "module": lambda x, m=None, c=None: module(x, m, c)[0],
        "sdpa": lambda x, m=None, c=None: torch_ref.sdpa_forward(
            module, x, m, c
        ),
        "library": lambda x, m=None, c=None: torch_ref.library_forward(
            library, x, m, c
        ),
    }


@pytest.fixture(params=["module", "sdpa", "library"])
def forward(request, make_module):
    return forwards(make_module(D_MODEL, N_HEAD))[request.param]


# fp16 scores: computed in float32, as SDPA computes them


def overflowing_fp16(requires_grad=False):
    """q . k = -99,000 and -102,000: beyond fp16's 65,504 for both keys."""
    q = torch.tensor([[300.0, 0.0]], dtype=torch.float16)
    k = torch.tensor([[-330.0, 0.0], [-340.0, 0.0]], dtype=torch.float16)
    v = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float16)
    return [t.requires_grad_(requires_grad) for t in (q, k, v)]


def test_attention_fp16_overflowing_row_matches_sdpa_not_nan():
    q, k, v = overflowing_fp16()
    out, weights = torch_ref.attention(q, k, v)
    sdpa = F.scaled_dot_product_attention(q[None], k[None], v[None])[0]
    expected, _ = torch_ref.attention(q.double(), k.double(), v.double())
    assert out.dtype == weights.dtype == torch.float16
    # the larger score (-99,000) takes all the weight: out = v[0]
    torch.testing.assert_close(out.double(), expected, atol=0, rtol=0)
    torch.testing.assert_close(out, sdpa, atol=0, rtol=0)
    torch.testing.assert_close(
        weights, torch.tensor([[1.0, 0.0]], dtype=torch.float16)
    )


def test_attention_fp16_overflowing_row_has_finite_gradients():
    q, k, v = overflowing_fp16(requires_grad=True)
    out, _ = torch_ref.attention(q, k, v)
    out.sum().backward()
    for grad in (q.grad, k.grad, v.grad):
        assert grad.dtype == torch.float16
        assert grad.isfinite().all()
    # all the weight on key 0: v[0] gets the whole upstream gradient
    torch.testing.assert_close(
        v.grad, torch.tensor([[1.0, 1.0], [0.0, 0.0]], dtype=torch.float16)
    )


# A row of -inf scores without a mask: an overflow, not "every key masked"


def huge_negative_scores(to_torch=False):
    q = np.array([[1.0, 0.0], [1e200, 0.0]])  # row 1: scores -1e400
    k = np.array([[-1e200, 0.0], [-1e200, 1.0]])
    v = np.ones((2, 3))
    return [torch.from_numpy(a) for a in (q, k, v)] if to_torch else (q, k, v)


@pytest.mark.parametrize("to_torch", [False, True], ids=["numpy", "torch"])
def test_attention_all_minus_inf_row_names_overflow(to_torch):
    attend = torch_ref.attention if to_torch else numpy_ref.attention
    with (
        np.errstate(over="ignore"),
        pytest.raises(
            ValueError,
            match=r"row at index \(1,\) is -inf, "
            r"though the row has unmasked keys: q @ k\^T "
            r"overflowed float64 to -inf",
        ) as error,
    ):
        attend(*huge_negative_scores(to_torch))
    assert "every key masked" not in str(error.value)


@pytest.mark.parametrize("to_torch", [False, True], ids=["numpy", "torch"])
def test_tiled_all_minus_inf_row_names_overflow(to_torch):
    attend = (
        tiled.tiled_attention_torch
        if to_torch
        else tiled.tiled_attention_numpy
    )
    with (
        np.errstate(over="ignore"),
        pytest.raises(
            ValueError,
            match=r"query row at index \(1,\) has "
            r"allowed keys, but every score overflowed to -inf",
        ),
    ):
        attend(*huge_negative_scores(to_torch), block_q=1, block_k=1)


@pytest.mark.parametrize("to_torch", [False, True], ids=["numpy", "torch"])
def test_tiled_causal_row_before_every_key_still_says_masked(to_torch):
    q, k, v = huge_negative_scores(to_torch)
    attend = (
        tiled.tiled_attention_torch
        if to_torch
        else tiled.tiled_attention_numpy
    )
    with pytest.raises(
        ValueError,
        match=r"index \(0,\) has every key "
        r"masked",
    ):
        attend(
            q[:1] * 0,
            k * 0,
            v,
            causal=True,
            query_positions=[-1],
            key_positions=[0, 1],
        )


# Integer and bool inputs to the NumPy layer compute in float

INT8_Q = np.array([[10, 10]], dtype=np.int8)  # q . k = 200 wraps in int8
INT8_K = np.array([[10, 10], [-10, 10]], dtype=np.int8)
INT8_V = np.array([[1, 0], [0, 1]], dtype=np.int8)
BOOL_Q = np.array([[True, True]])  # q . k = 2 and 1; bool @ gives OR
BOOL_K = np.array([[True, True], [True, False]])
BOOL_V = np.array([[True, False], [False, True]])


@pytest.mark.parametrize(
    ("q", "k", "v"),
    [(INT8_Q, INT8_K, INT8_V), (BOOL_Q, BOOL_K, BOOL_V)],
    ids=["int8", "bool"],
)
@pytest.mark.parametrize(
    "attend",
    [
        lambda q, k, v: numpy_ref.attention(q, k, v)[0],
        tiled.tiled_attention_numpy,
    ],
    ids=["attention", "tiled"],
)
def test_numpy_attention_upcasts_int_and_bool_inputs(attend, q, k, v):
    expected, _ = numpy_ref.attention(
        *(a.astype(np.float64) for a in (q, k, v))
    )
    out = attend(q, k, v)
    assert out.dtype == np.float32  # NumPy's promotion with float32
    np.testing.assert_allclose(out, expected, atol=atol("float32"), rtol=0)
    assert abs(out[0, 0] - out[0, 1]) > 0.1  # not the 50/50 of a wrap


# No keys (Tk = 0), no queries (Tq = 0), no head size (d = 0)


def test_attention_without_keys_raises_naming_tk():
    for attend, zeros in (
        (torch_ref.attention, torch.zeros),
        (numpy_ref.attention, np.zeros),
    ):
        with pytest.raises(
            ValueError,
            match=r"at least one query and one "
            r"key, got Tq=2, Tk=0 \(q \(2, 4\), k \(0, 4\)\)",
        ):
            attend(zeros((2, 4)), zeros((0, 4)), zeros((0, 3)))


def test_mha_forwards_without_keys_raise_naming_context(forward, make_tensor):
    x = make_tensor((B, T, D_MODEL))
    context = make_tensor((B, 0, D_MODEL))
    with pytest.raises(
        ValueError,
        match=r"context must hold at least one "
        r"position, got shape \(2, 0, 8\)",
    ):
        forward(x, None, context)


def test_numpy_layer_rejects_empty_sequences_and_head_size():
    module = numpy_ref.MultiHeadAttention(D_MODEL, N_HEAD)
    with pytest.raises(
        ValueError,
        match=r"x must hold at least one "
        r"position, got shape \(1, 0, 8\)",
    ):
        module(np.zeros((1, 0, D_MODEL)))
    with pytest.raises(ValueError, match=r"got Tq=0, Tk=0"):
        numpy_ref.attention(*(np.zeros((0, 4)),) * 3)
    for attend, zeros in (
        (numpy_ref.attention, np.zeros),
        (torch_ref.attention, torch.zeros),
    ):
        with pytest.raises(
            ValueError,
            match=r"head size d .* must be at "
            r"least 1, got q \(2, 0\) and k \(3, 0\)",
        ):
            attend(zeros((2, 0)), zeros((3, 0)), zeros((3, 1)))


def test_softmax_rejects_empty_and_scalar_logits():
    with pytest.raises(
        ValueError,
        match=r"logits of shape \(0,\) hold no "
        r"value along axis -1",
    ):
        numpy_ref.softmax([])
    with pytest.raises(ValueError, match=r"shape \(2, 0\) hold no value"):
        numpy_ref.softmax(np.zeros((2, 0)))
    with pytest.raises(
        ValueError,
        match=r"axis -1 does not exist for "
        r"logits of shape \(\)",
    ):
        numpy_ref.softmax(np.float64(1.0))


# SDPA takes the (Tk,) and 0-d masks the other paths take


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
    x = make_tensor((B, T, D_MODEL), seed=1)
    expected, _ = module(x, mask)
    for name, run in forwards(module).items():
        torch.testing.assert_close(run(x, mask), expected, **TOL64, msg=name)


# Foreign types and dtypes: TypeError naming what was passed


def test_numpy_attention_takes_lists_and_refuses_torch_tensors(rng):
    q, k, v = (rng.standard_normal((3, 4)) for _ in range(3))
    expected, _ = numpy_ref.attention(q, k, v)
    out, _ = numpy_ref.attention(q.tolist(), k.tolist(), v.tolist())
    np.testing.assert_allclose(out, expected, **TOL64)
    tensor = torch.from_numpy(k)
    pattern = (
        r"k is a torch.Tensor of dtype torch.float64, but this NumPy "
        r"function expects a NumPy array"
    )
    with pytest.raises(TypeError, match=pattern):
        numpy_ref.attention(q, tensor, v)
    with pytest.raises(TypeError, match=pattern):
        tiled.tiled_attention_numpy(q, tensor, v)
    with pytest.raises(TypeError, match=r"logits is a torch.Tensor"):
        numpy_ref.softmax(tensor)
    with pytest.raises(
        TypeError,
        match=r"q must hold real numbers .* got "
        r"dtype complex128",
    ):
        numpy_ref.attention(q + 1j, k, v)


def test_numpy_mha_takes_a_list_and_names_nan_in_x(rng):
    module = numpy_ref.MultiHeadAttention(D_MODEL, N_HEAD)
    x = rng.standard_normal((B, T, D_MODEL))
    np.testing.assert_allclose(module(x.tolist())[0], module(x)[0], **TOL64)
    x[1, 2, 3] = np.nan
    with pytest.raises(
        ValueError,
        match=r"x of shape \(2, 4, 8\) holds "
        r"nan at index \(1, 2, 3\)",
    ):
        module(x)


@pytest.mark.parametrize(
    ("dtypes", "pattern"),
    [
        (
            (torch.int64,) * 3,
            r"q has dtype torch.int64; expected a real "
            r"floating dtype",
        ),
        ((torch.bool,) * 3, r"q has dtype torch.bool; expected"),
        ((torch.complex64,) * 3, r"q has dtype torch.complex64; expected"),
        (
            (torch.float32, torch.float64, torch.float32),
            r"q, k, v must share one dtype, got q torch.float32, "
            r"k torch.float64, v torch.float32",
        ),
    ],
    ids=["int", "bool", "complex", "mixed"],
)
@pytest.mark.parametrize(
    "attend",
    [
        torch_ref.attention,
        tiled.tiled_attention_torch,
    ],
    ids=["attention", "tiled"],
)
def test_torch_attention_rejects_non_float_dtypes_naming_them(
    attend, dtypes, pattern
):
    q, k, v = (torch.ones(2, 3).to(dtype) for dtype in dtypes)
    with pytest.raises(TypeError, match=pattern):
        attend(q, k, v)


def test_torch_attention_refuses_numpy_inputs_naming_type():
    with pytest.raises(
        TypeError,
        match=r"v must be a torch.Tensor, got "
        r"ndarray",
    ):
        torch_ref.attention(
            torch.ones(2, 3), torch.ones(2, 3), np.ones((2, 3))
        )


def test_mha_forwards_reject_bad_x_naming_it(forward, make_tensor):
    x = make_tensor((B, T, D_MODEL))  # float64, as the module
    with pytest.raises(
        TypeError,
        match=r"x has dtype torch.int64; "
        r"expected a real floating dtype",
    ):
        forward(x.long())
    with pytest.raises(
        TypeError,
        match=r"x has dtype torch.float32 but "
        r"the module's weights are torch.float64",
    ):
        forward(x.float())
    with pytest.raises(
        ValueError,
        match=r"x must have shape \(B, T, "
        r"d_model=8\), got \(2, 4, 6\)",
    ):
        forward(x[..., :6])
    with pytest.raises(
        ValueError,
        match=r"context batch \(1, 4, 8\) does "
        r"not match x batch \(2, 4, 8\)",
    ):
        forward(x, None, x[:1])
    x[1, 2, 0] = float("nan")
    with pytest.raises(
        ValueError,
        match=r"x of shape \(2, 4, 8\) holds "
        r"nan at index \(1, 2, 0\)",
    ):
        forward(x)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is present")
def test_mha_on_missing_cuda_raises_naming_device():
    with pytest.raises(
        ValueError,
        match=r"device='cuda' asks for CUDA, "
        r"but torch.cuda.is_available\(\) is False",
    ):
        torch_ref.MultiHeadAttention(D_MODEL, N_HEAD, device="cuda")


def test_mask_dtype_error_names_the_dtype():
    q = np.zeros((2, 4))
    with pytest.raises(
        TypeError,
        match=r"boolean with True = blocked, got "
        r"dtype float64",
    ):
        numpy_ref.attention(q, q, q, np.zeros((2, 2)))
    qt = torch.zeros(2, 4)
    with pytest.raises(TypeError, match=r"got dtype torch.uint8"):
        torch_ref.attention(qt, qt, qt, torch.zeros(2, 2, dtype=torch.uint8))


def test_cached_attention_example_needs_a_key_per_new_query():
    with pytest.raises(
        ValueError,
        match=r"values holds 1 value\(s\), "
        r"\(10.0,\), but the 2 new queries",
    ):
        kv_cache.cached_attention_example((10.0,))
    aligned, upper_left = kv_cache.cached_attention_example((10.0, 20.0))
    assert aligned.tolist() == upper_left.tolist() == [10.0, 15.0]


# Key padding: (B, 1, 1, Tk), since a (B, Tk) mask reads as (Tq, Tk)

LENGTHS = [5, 2, 4]  # B = 3 sequences of keys, padded to Tk = 5


@pytest.mark.parametrize(
    "module", [numpy_ref, torch_ref], ids=["numpy", "torch"]
)
def test_key_padding_mask_blocks_keys_past_each_length(module):
    mask = np.asarray(module.key_padding_mask(LENGTHS))
    assert mask.shape == (3, 1, 1, 5)
    assert mask.dtype == bool
    expected = np.arange(5)[None, :] >= np.array(LENGTHS)[:, None]
    np.testing.assert_array_equal(mask[:, 0, 0], expected)
    again = np.asarray(
        module.key_padding_mask(
            np.asarray(module.key_padding_mask(LENGTHS, tk=7))[:, 0, 0]
        )
    )
    assert again.shape == (3, 1, 1, 7)
    assert again[:, 0, 0, 5:].all()


def test_key_padding_mask_matches_attention_on_each_sequence(rng):
    b = tq = len(LENGTHS)  # B == Tq: the case a (B, Tk) mask gets wrong
    q = rng.standard_normal((b, 2, tq, 4))  # (B, H, Tq, d)
    k = rng.standard_normal((b, 2, 5, 4))  # (B, H, Tk, d)
    v = rng.standard_normal((b, 2, 5, 3))  # (B, H, Tk, dv)
    padding = numpy_ref.key_padding_mask(LENGTHS)  # (B, 1, 1, Tk)
    out, _ = numpy_ref.attention(q, k, v, padding)
    for i, n in enumerate(LENGTHS):
        alone, _ = numpy_ref.attention(q[i], k[i, :, :n], v[i, :, :n])
        np.testing.assert_allclose(out[i], alone, **TOL64)
    torch_out, _ = torch_ref.attention(
        *(torch.from_numpy(a) for a in (q, k, v)),
        torch_ref.key_padding_mask(LENGTHS),
    )
    np.testing.assert_allclose(torch_out.numpy(), out, **TOL64)
    # the bare (B, Tk) mask broadcasts as (Tq, Tk): row i of every batch
    # gets sequence i's padding, which is silently a different answer
    bare = padding[:, 0, 0]  # (B, Tk)
    wrong, _ = numpy_ref.attention(q, k, v, bare)
    assert np.abs(wrong - out).max() > 0.1


@pytest.mark.parametrize(
    "module", [numpy_ref, torch_ref], ids=["numpy", "torch"]
)
def test_key_padding_mask_rejects_bad_lengths(module):
    with pytest.raises(
        ValueError,
        match=r"lengths\[1\] = 0: a sequence "
        r"needs at least one key",
    ):
        module.key_padding_mask([3, 0])
    with pytest.raises(ValueError, match=r"lengths\[0\] = 6 exceeds tk = 5"):
        module.key_padding_mask([6, 2], tk=5)
    with pytest.raises(
        TypeError,
        match=r"lengths must be ints of shape "
        r"\(B,\), or a bool \(B, Tk\) mask",
    ):
        module.key_padding_mask([2.5, 1.0])
    with pytest.raises(
        ValueError,
        match=r"boolean padding mask must be "
        r"\(B, Tk\)",
    ):
        module.key_padding_mask([True, False])


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is present")
def test_causal_mask_on_missing_cuda_raises_naming_device():
    with pytest.raises(ValueError, match="device='cuda'"):
        torch_ref.causal_mask(3, device="cuda")
