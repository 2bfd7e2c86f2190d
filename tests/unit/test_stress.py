"""The new APIs under stress: backward, RoPE, the KV cache, empty rows.

Each test pins a case of an adversarial pass that used to give a silent
wrong answer, keep state after a failure or fail with a foreign error:
now a right answer (against float64 autograd, SDPA or a hand-written
reference) or a ValueError/TypeError naming the argument. empty_rows=
"zero" is held to SDPA's boolean mask, which defines a query row with
no allowed key as 0 (flash-attn's reference does the same).
"""

import copy
import math
import warnings
from functools import partial

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mha_ref import kv_cache, numpy_ref, tiled, torch_ref
from mha_ref.tolerances import atol

ATOL64 = 1e-10  # float64 against SDPA or autograd: ~1e-15 in practice


def t(array):
    """A NumPy array (or None) as a torch tensor, sharing its memory."""
    if array is None:
        return None
    return torch.from_numpy(np.ascontiguousarray(array))


def draw(shape, seed, scale=1.0):
    return np.random.default_rng(seed).standard_normal(shape) * scale


def as_numpy(x):
    return x.detach().double().numpy() if isinstance(x, torch.Tensor) else x


def sdpa_reference(q, k, v, dout, mask=None):
    """Output and dq, dk, dv by SDPA and autograd, in float64.

    mask: NumPy bool, True = blocked (None: no mask). SDPA's boolean
    mask means True = allowed, and a row with none allowed gives 0.
    """
    q, k, v = (
        t(np.asarray(a, np.float64)).requires_grad_() for a in (q, k, v)
    )
    allowed = None if mask is None else ~t(np.asarray(mask))
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=allowed, enable_gqa=k.shape[-3] != q.shape[-3]
    )
    out.backward(t(np.asarray(dout, np.float64)))
    return as_numpy(out), [as_numpy(x.grad) for x in (q, k, v)]


def assert_close(got, expected, tol=ATOL64, names=("dq", "dk", "dv")):
    for name, g, e in zip(names, got, expected, strict=True):
        g = as_numpy(g)
        assert g.shape == e.shape, (name, g.shape, e.shape)
        np.testing.assert_allclose(g, e, rtol=0, atol=tol, err_msg=name)


# The forward and backward passes, each taking NumPy inputs

TILES = {"block_q": 2, "block_k": 3}  # ragged last blocks


def forward_numpy_ref(q, k, v, mask=None, **kw):
    return numpy_ref.attention(q, k, v, mask, **kw)[0]


def forward_torch_ref(q, k, v, mask=None, **kw):
    return torch_ref.attention(t(q), t(k), t(v), t(mask), **kw)[0]


def forward_tiled_numpy(q, k, v, mask=None, **kw):
    return tiled.tiled_attention_numpy(q, k, v, mask, **TILES, **kw)


def forward_tiled_torch(q, k, v, mask=None, **kw):
    return tiled.tiled_attention_torch(
        t(q), t(k), t(v), t(mask), **TILES, **kw
    )


def backward_numpy_ref(q, k, v, dout, mask=None, **kw):
    return numpy_ref.attention_backward(q, k, v, dout, mask, **kw)


def backward_torch_ref(q, k, v, dout, mask=None, **kw):
    return torch_ref.attention_backward(
        t(q), t(k), t(v), t(dout), t(mask), **kw
    )


def backward_tiled_numpy(q, k, v, dout, mask=None, **kw):
    return tiled.tiled_attention_backward_numpy(
        q, k, v, dout, mask, **TILES, **kw
    )


def backward_tiled_torch(q, k, v, dout, mask=None, **kw):
    return tiled.tiled_attention_backward_torch(
        t(q), t(k), t(v), t(dout), t(mask), **TILES, **kw
    )


FORWARDS = {
    "numpy_ref": forward_numpy_ref,
    "torch_ref": forward_torch_ref,
    "tiled_numpy": forward_tiled_numpy,
    "tiled_torch": forward_tiled_torch,
}
BACKWARDS = {
    "numpy_ref": backward_numpy_ref,
    "torch_ref": backward_torch_ref,
    "tiled_numpy": backward_tiled_numpy,
    "tiled_torch": backward_tiled_torch,
}


@pytest.fixture(params=list(FORWARDS))
def forward(request):
    return FORWARDS[request.param]


@pytest.fixture(params=list(BACKWARDS))
def backward(request):
    return BACKWARDS[request.param]


# 1. The backward passes compute in float32 for float16 and bfloat16


def constant_40():
    """q = k = 0, v = dO = 40 over 64 features: dO V^T = 102,400."""
    zeros = np.zeros((1, 1, 3, 64))
    forty = np.full((1, 1, 3, 64), 40.0)
    return zeros, zeros, forty, forty


def random_60():
    """Random inputs at scale 60, d = 64: |dO V^T| beyond 65,504."""
    return tuple(draw((1, 2, 6, 64), seed, scale=60.0) for seed in range(4))


def _dtype_name(dtype):
    return (
        str(dtype).removeprefix("torch.")
        if isinstance(dtype, torch.dtype)
        else np.dtype(dtype).name
    )


LOW_PRECISION = [
    ("numpy_ref", np.float16),
    ("tiled_numpy", np.float16),
    ("torch_ref", torch.float16),
    ("torch_ref", torch.bfloat16),
    ("tiled_torch", torch.float16),
    ("tiled_torch", torch.bfloat16),
]


@pytest.mark.parametrize("inputs", [constant_40, random_60])
@pytest.mark.parametrize(
    ("name", "dtype"),
    LOW_PRECISION,
    ids=lambda case: case if isinstance(case, str) else _dtype_name(case),
)
def test_backward_low_precision_computes_in_float32(name, dtype, inputs):
    arrays = inputs()
    if isinstance(dtype, torch.dtype):  # bfloat16: no NumPy twin
        low = [torch.from_numpy(a).to(dtype) for a in arrays]
        fn = {
            "torch_ref": torch_ref.attention_backward,
            "tiled_torch": partial(
                tiled.tiled_attention_backward_torch, **TILES
            ),
        }[name]
        grads = fn(*low)
        rounded = [x.double().numpy() for x in low]
        expected_dtype = dtype  # the forward's output dtype
    else:
        rounded = [a.astype(dtype) for a in arrays]
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no overflow warning either
            grads = BACKWARDS[name](*rounded)
        expected_dtype = np.float32  # numpy_ref computes fp16 in float32
    _, expected = sdpa_reference(*rounded)
    scale = max(np.abs(e).max() for e in expected)  # |dv| ~ 40 or ~ 240
    for g in grads:
        assert g.dtype == expected_dtype
        assert np.isfinite(as_numpy(g)).all()
    # rounding the outputs (bf16: 2**-8 relative) and float32 sums
    tol = (1e-2 if dtype == torch.bfloat16 else 2e-3) * scale
    assert_close(grads, expected, tol=tol)


@pytest.mark.parametrize(
    ("q_dtype", "grad_dtype"),
    [
        (np.int8, np.float32),
        (np.int64, np.float64),
        (np.bool_, np.float32),
        (np.float16, np.float32),
    ],
    ids=["int8", "int64", "bool", "float16"],
)
def test_tiled_backward_numpy_returns_the_forward_dtype(q_dtype, grad_dtype):
    # integer inputs compute in float: the true dk is far from zero
    q = np.array([[[1, 2], [0, 1]]])  # (1, Tq=2, d=2)
    k = np.array([[[0, 1], [1, 0], [2, 2]]])  # (1, Tk=3, d=2)
    v = np.array([[[1, 0], [0, 3], [2, 1]]])
    dout = np.array([[[1, -1], [2, 0]]])
    q, k, v, dout = (a.astype(q_dtype) for a in (q, k, v, dout))
    out = tiled.tiled_attention_numpy(q, k, v)
    got = tiled.tiled_attention_backward_numpy(q, k, v, dout, block_k=2)
    plain = numpy_ref.attention_backward(q, k, v, dout)
    _, expected = sdpa_reference(q, k, v, dout)
    assert out.dtype == grad_dtype
    for g, p in zip(got, plain, strict=True):
        assert g.dtype == p.dtype == grad_dtype
    assert np.abs(expected[1]).max() > 0.1  # not a case where 0 is right
    assert_close(got, expected, tol=atol("float32"))
    assert_close(plain, expected, tol=atol("float32"))


# 2. RoPE: positions of any integer dtype, angles in float64


POSITION_DTYPES = [
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
]


def rope_module(n_kv_head=2, dtype=torch.float64, seed=11):
    module = torch_ref.MultiHeadAttention(
        16, 4, n_kv_head=n_kv_head, bias=True, rope=True, dtype=dtype
    )
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randn(param.shape, generator=gen) * 0.25)
    return module


def torch_layer_grads(module, x, dy, positions, mask=None):
    """numpy_ref-style gradients of the torch module, by autograd."""
    x = t(x).clone().requires_grad_()
    y, _ = module(
        x, mask=None if mask is None else t(mask), positions=positions
    )
    y.backward(t(dy))
    grads = {"x": x.grad.numpy()}
    for name in ("q", "k", "v", "o"):
        linear = getattr(module, f"w{name}")
        grads[f"W{name}"] = linear.weight.grad.numpy().T  # x @ W layout
        grads[f"b{name}"] = linear.bias.grad.numpy()
    module.zero_grad()
    return grads


@pytest.mark.parametrize("dtype", POSITION_DTYPES, ids=lambda d: d.__name__)
def test_mha_backward_rope_positions_of_any_integer_dtype(dtype):
    module = rope_module()
    twin = numpy_ref.MultiHeadAttention.from_torch(module)
    x, dy = draw((2, 6, 16), 1), draw((2, 6, 16), 2)
    mask = numpy_ref.causal_mask(6)
    positions = np.arange(3, 9)  # int64: the reference
    expected = torch_layer_grads(
        module, x, dy, torch.from_numpy(positions), mask
    )
    typed = positions.astype(dtype)
    got = twin.backward(x, dy, mask, positions=typed)
    assert sorted(got) == sorted(expected)
    for name, value in expected.items():
        np.testing.assert_allclose(
            got[name], value, rtol=0, atol=ATOL64, err_msg=name
        )
    # the forwards agree with int64 positions, in both mirrors
    y_ref, _ = twin(x, mask, positions=positions)
    np.testing.assert_allclose(
        twin(x, mask, positions=typed)[0], y_ref, rtol=0, atol=0
    )
    with torch.no_grad():
        y_torch, _ = module(t(x), t(mask), positions=torch.as_tensor(typed))
    np.testing.assert_allclose(y_torch.numpy(), y_ref, rtol=0, atol=ATOL64)


@pytest.mark.parametrize(
    "entry",
    [
        "numpy.apply_rope",
        "torch.apply_rope",
        "numpy.forward",
        "numpy.backward",
        "torch.forward",
    ],
)
def test_rope_bool_positions_are_refused_by_every_entry_point(entry):
    module = rope_module()
    twin = numpy_ref.MultiHeadAttention.from_torch(module)
    x = draw((1, 3, 16), 0)
    positions = np.array([True, False, True])
    run = {
        "numpy.apply_rope": lambda: numpy_ref.apply_rope(x[0], positions),
        "torch.apply_rope": lambda: torch_ref.apply_rope(
            t(x[0]), t(positions)
        ),
        "numpy.forward": lambda: twin(x, positions=positions),
        "numpy.backward": lambda: twin.backward(x, x, positions=positions),
        "torch.forward": lambda: module(t(x), positions=t(positions)),
    }[entry]
    with pytest.raises(
        TypeError,
        match=r"positions must hold integers \(or real numbers\), one "
        r"position per row, got dtype (torch\.)?bool",
    ):
        run()


@pytest.mark.parametrize("ref", [numpy_ref, torch_ref], ids=["numpy", "torch"])
def test_apply_rope_refuses_nan_positions_naming_them(ref):
    x = np.ones((3, 4)) if ref is numpy_ref else torch.ones(3, 4)
    positions = np.array([0.0, np.nan, 2.0])
    if ref is torch_ref:
        positions = t(positions)
    with pytest.raises(
        ValueError,
        match=r"positions of shape \(3,\) holds nan at index \(1,\)",
    ):
        ref.apply_rope(x, positions)


def test_apply_rope_torch_integer_input_rotates_in_float():
    # [4, 5, 6, 7] at position 1: cos and sin must not become integers
    x = [[4, 5, 6, 7]]
    expected = numpy_ref.apply_rope(np.array(x, dtype=np.float64), [1])
    got = torch_ref.apply_rope(torch.tensor(x), [1])
    assert got.dtype == torch.float32
    np.testing.assert_allclose(
        got.numpy(), expected, rtol=0, atol=atol("float32")
    )
    twin = numpy_ref.apply_rope(np.array(x), [1])  # int64 -> float64
    np.testing.assert_allclose(twin, expected, rtol=0, atol=ATOL64)
    assert np.abs(expected).min() > 1  # far from the zeros of int cos


FAR = np.arange(131072, 131078)  # a 128k-token window


@pytest.mark.parametrize("ref", [numpy_ref, torch_ref], ids=["numpy", "torch"])
def test_apply_rope_float32_angles_at_128k_positions_match_float64(ref):
    x = draw((2, 6, 64), 4).astype(np.float32)
    if ref is torch_ref:
        got = torch_ref.apply_rope(t(x), t(FAR)).numpy()
    else:
        got = numpy_ref.apply_rope(x, FAR)
    expected = numpy_ref.apply_rope(x.astype(np.float64), FAR)
    assert got.dtype == np.float32
    # float32 angles would be off by up to 128k * 6e-8 = 8e-3 radians
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)


def test_mha_rope_float32_at_128k_matches_float64_and_the_numpy_twin():
    module = rope_module(dtype=torch.float32)
    wide = copy.deepcopy(module).double()
    x = draw((2, 6, 16), 3)
    positions = torch.from_numpy(FAR)
    with torch.no_grad():
        y, _ = module(t(x).float(), positions=positions)
        y64, _ = wide(t(x), positions=positions)
    twin = numpy_ref.MultiHeadAttention.from_torch(module)
    y_np, _ = twin(x.astype(np.float32), positions=FAR)
    tol = {"rtol": 0, "atol": atol("float32")}
    np.testing.assert_allclose(y.double().numpy(), y64.numpy(), **tol)
    np.testing.assert_allclose(y.numpy(), y_np, **tol)


@pytest.mark.parametrize("bad", [0, -10000.0, float("nan"), float("inf")])
@pytest.mark.parametrize(
    "make",
    [
        lambda base: numpy_ref.MultiHeadAttention(
            8, 2, rope=True, rope_base=base
        ),
        lambda base: torch_ref.MultiHeadAttention(
            8, 2, rope=True, rope_base=base
        ),
    ],
    ids=["numpy", "torch"],
)
def test_mha_rope_base_must_be_positive_naming_it(make, bad):
    with pytest.raises(ValueError, match=r"rope_base must be positive"):
        make(bad)
    with pytest.raises(TypeError, match=r"rope_base must be a real number"):
        make("10000")


@pytest.mark.parametrize("ref", [numpy_ref, torch_ref], ids=["numpy", "torch"])
def test_apply_rope_base_must_be_positive_naming_it(ref):
    x = np.ones((2, 4)) if ref is numpy_ref else torch.ones(2, 4)
    with pytest.raises(ValueError, match=r"base must be positive.* got -1"):
        ref.apply_rope(x, [0, 1], base=-1)


# 3. The KV cache: transactional steps, checked appends, a reset


B, T, D_MODEL = 2, 7, 16


def cache_inputs(n_kv_head=2, seed=22):
    module = rope_module(n_kv_head)
    x = torch.from_numpy(draw((B, T, D_MODEL), seed))
    return module, x


def full_forward(module, x):
    return module(x, mask=torch_ref.causal_mask(x.shape[1]))[0]


def assert_cache_is(cache, keys, values):
    assert cache.length == keys.shape[-2]
    assert torch.equal(cache.keys, keys)
    assert torch.equal(cache.values, values)


@pytest.mark.parametrize(
    ("bad_chunk", "error", "words"),
    [
        (lambda x: x[:, 3:5] * 1e200, ValueError, "overflowed"),
        (lambda x: x[:1, 3:5], ValueError, r"k \(1, 2, 2, 4\) does not fit"),
        (lambda x: x[:, 3:5].float(), TypeError, "x has dtype torch.float32"),
        (lambda x: x[:, 3:5, :8], ValueError, r"x must have shape"),
    ],
    ids=["overflow", "batch", "dtype", "width"],
)
def test_cached_step_that_raises_leaves_the_cache_unchanged(
    bad_chunk, error, words
):
    module, x = cache_inputs()
    cache = kv_cache.KVCache()
    with torch.no_grad(), np.errstate(over="ignore", invalid="ignore"):
        kv_cache.cached_step(module, cache, x[:, :3])
        keys, values = cache.keys.clone(), cache.values.clone()
        with pytest.raises(error, match=words):
            kv_cache.cached_step(module, cache, bad_chunk(x))
        assert_cache_is(cache, keys, values)  # still 3 positions
        # the next step attends to positions 0 .. 4, none of the failed
        rest = kv_cache.cached_step(module, cache, x[:, 3:5])
        full = full_forward(module, x[:, :5])
    assert cache.length == 5
    torch.testing.assert_close(rest, full[:, 3:5], rtol=0, atol=ATOL64)


def kv(shape, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)


@pytest.mark.parametrize(
    ("k_shape", "v_shape", "dtypes", "error", "words"),
    [
        (
            (1, 2, 6, 4),
            (1, 2, 5, 4),
            None,
            ValueError,
            r"k \(1, 2, 6, 4\) and v \(1, 2, 5, 4\) must agree in batch, "
            r"heads and length",
        ),
        ((2, 2, 5, 4), (1, 2, 5, 4), None, ValueError, "must agree in batch"),
        ((1, 2, 5, 4), (1, 1, 5, 4), None, ValueError, "must agree in batch"),
        (
            (1, 2, 5, 4),
            (1, 2, 5, 4),
            (torch.float64, torch.float32),
            TypeError,
            r"k and v must share one dtype and device, got k torch.float64",
        ),
        ((1, 2, 5), (1, 2, 5), None, ValueError, r"k must be a 4-D tensor"),
    ],
    ids=["length", "batch", "heads", "dtype", "3-d"],
)
def test_kv_cache_append_refuses_keys_and_values_that_disagree(
    k_shape, v_shape, dtypes, error, words
):
    k_dtype, v_dtype = dtypes or (torch.float64, torch.float64)
    empty, held = kv_cache.KVCache(), kv_cache.KVCache()
    held.append(kv((1, 2, 3, 4), seed=2), kv((1, 2, 3, 4), seed=3))
    keys, values = held.keys, held.values
    for cache in (empty, held):  # refused before anything is compared
        with pytest.raises(error, match=words):
            cache.append(kv(k_shape, k_dtype), kv(v_shape, v_dtype, 1))
    assert empty.length == 0
    assert empty.keys is None
    assert_cache_is(held, keys, values)


@pytest.mark.parametrize(
    ("k_shape", "dtype", "error", "words"),
    [
        ((2, 2, 3, 4), torch.float64, ValueError, r"does not fit the cached"),
        ((1, 1, 3, 4), torch.float64, ValueError, r"does not fit the cached"),
        ((1, 2, 3, 8), torch.float64, ValueError, r"does not fit the cached"),
        ((1, 2, 3, 4), torch.float32, TypeError, "the cache holds"),
    ],
    ids=["batch", "heads", "head-size", "dtype"],
)
def test_kv_cache_append_refuses_chunks_that_do_not_fit_it(
    k_shape, dtype, error, words
):
    cache = kv_cache.KVCache()
    cache.append(kv((1, 2, 5, 4)), kv((1, 2, 5, 4), seed=1))
    keys, values = cache.keys, cache.values
    with pytest.raises(error, match=words):
        cache.append(kv(k_shape, dtype), kv(k_shape, dtype, 1))
    assert_cache_is(cache, keys, values)
    cache.append(kv((1, 2, 3, 4), seed=2), kv((1, 2, 3, 4), seed=3))
    assert cache.length == 8
    torch.testing.assert_close(
        cache.keys[..., 5:, :], kv((1, 2, 3, 4), seed=2)
    )


def test_kv_cache_reset_forgets_every_position():
    module, x = cache_inputs()
    cache = kv_cache.KVCache()
    with torch.no_grad():
        kv_cache.cached_step(module, cache, x[:, :4])
        cache.reset()
        assert cache.length == 0
        assert cache.keys is None
        assert cache.values is None
        # the next chunk starts again at position 0
        again = kv_cache.cached_step(module, cache, x[:, :3])
        full = full_forward(module, x[:, :3])
    assert cache.length == 3
    torch.testing.assert_close(again, full, rtol=0, atol=ATOL64)


@pytest.mark.parametrize(
    "chunks",
    [
        lambda: iter([3, 2, 2]),
        lambda: (n for n in (1, 4, 2)),
        lambda: (4, 3),
        lambda: np.array([2, 2, 3]),
        lambda: torch.tensor([5, 1, 1]),
        lambda: [1] * 7,
    ],
    ids=["iterator", "generator", "tuple", "numpy", "tensor", "list"],
)
def test_cached_forward_takes_any_iterable_of_chunks(chunks):
    module, x = cache_inputs()
    with torch.no_grad():
        cached = kv_cache.cached_forward(module, x, chunks())
        full = full_forward(module, x)
    torch.testing.assert_close(cached, full, rtol=0, atol=ATOL64)


@pytest.mark.parametrize(
    ("chunks", "error", "words"),
    [
        (lambda: iter([3, 0, 4]), ValueError, r"chunks\[1\] = 0"),
        (lambda: iter([3, 3]), ValueError, "sum to 6, but x holds T=7"),
        (lambda: np.array([3.5, 3.5]), TypeError, r"chunks\[0\] must be"),
        (lambda: torch.tensor([True] * 7), TypeError, r"chunks\[0\] must"),
        (lambda: torch.tensor(7), TypeError, "sequence of lengths"),
        (lambda: 7.0, TypeError, "chunks must be an iterable"),
    ],
)
def test_cached_forward_bad_chunks_name_them(chunks, error, words):
    module, x = cache_inputs()
    with pytest.raises(error, match=words):
        kv_cache.cached_forward(module, x, chunks())


# 4. The backward functions take what their forwards take


def small_case(tq=4, tk=5, seed=0):
    q, k = draw((2, 3, tq, 4), seed), draw((2, 3, tk, 4), seed + 1)
    v, dout = draw((2, 3, tk, 5), seed + 2), draw((2, 3, tq, 5), seed + 3)
    return q, k, v, dout


@pytest.mark.parametrize(
    "fn",
    [
        numpy_ref.attention_backward,
        partial(tiled.tiled_attention_backward_numpy, block_q=2, block_k=2),
    ],
    ids=["numpy_ref", "tiled_numpy"],
)
def test_numpy_backward_takes_lists_as_the_forward_does(fn):
    q, k, v, dout = small_case()
    mask = numpy_ref.causal_mask(4, 5, align="bottom_right")
    expected = fn(q, k, v, dout, mask)
    got = fn(q.tolist(), k.tolist(), v.tolist(), dout.tolist(), mask.tolist())
    assert_close(got, expected, tol=0)
    _, reference = sdpa_reference(q, k, v, dout, mask)
    assert_close(got, reference)


def test_mha_backward_takes_lists_and_names_nan_in_x():
    layer = numpy_ref.MultiHeadAttention(8, 2, bias=True, seed=1)
    x, dy = draw((2, 4, 8), 0), draw((2, 4, 8), 1)
    expected = layer.backward(x, dy)
    got = layer.backward(x.tolist(), dy.tolist())
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name])
    x[1, 2, 3] = np.nan
    with pytest.raises(
        ValueError,
        match=r"x of shape \(2, 4, 8\) holds nan at index \(1, 2, 3\)",
    ):
        layer.backward(x, dy)


@pytest.mark.parametrize(
    "fn",
    [
        torch_ref.attention_backward,
        partial(tiled.tiled_attention_backward_torch, block_q=2, block_k=2),
    ],
    ids=["torch_ref", "tiled_torch"],
)
@pytest.mark.parametrize(
    ("q_dtype", "dout_dtype"),
    [
        (torch.float32, torch.float64),
        (torch.float64, torch.float32),
        (torch.float16, torch.float32),
    ],
    ids=str,
)
def test_torch_backward_takes_dout_of_another_float_dtype(
    fn, q_dtype, dout_dtype
):
    q, k, v, dout = (t(a) for a in small_case())
    low = [x.to(q_dtype) for x in (q, k, v)]
    got = fn(*low, dout.to(dout_dtype))
    same = fn(*low, dout.to(q_dtype))
    _, expected = sdpa_reference(
        *(x.double().numpy() for x in low),
        dout.to(dout_dtype).double().numpy(),
    )
    for g, s in zip(got, same, strict=True):
        assert g.dtype == s.dtype == q_dtype  # the forward's output dtype
    tol = atol(q_dtype) * 4  # |grad| up to ~2
    assert_close(got, expected, tol=tol)


@pytest.mark.parametrize(
    "fn",
    [
        torch_ref.attention_backward,
        tiled.tiled_attention_backward_torch,
    ],
    ids=["torch_ref", "tiled_torch"],
)
def test_torch_backward_refuses_a_foreign_dout_naming_it(fn):
    q, k, v, dout = small_case()
    with pytest.raises(TypeError, match=r"dout must be a torch.Tensor"):
        fn(t(q), t(k), t(v), dout)
    with pytest.raises(TypeError, match=r"dout has dtype torch.int64"):
        fn(t(q), t(k), t(v), t(dout).long())
    with pytest.raises(ValueError, match=r"dout of shape \(2, 3, 4, 4\)"):
        fn(t(q), t(k), t(v), t(dout)[..., :4])


@pytest.mark.parametrize("ref", [numpy_ref, torch_ref], ids=["numpy", "torch"])
@pytest.mark.parametrize(
    "lengths",
    [
        lambda: [],
        lambda: np.array([], dtype=np.int64),
        lambda: np.zeros((0, 4), dtype=bool),
    ],
    ids=["list", "int-array", "bool-mask"],
)
def test_key_padding_mask_refuses_no_sequence_naming_lengths(ref, lengths):
    value = lengths()
    if ref is torch_ref and not isinstance(value, list):
        value = t(value)
    with pytest.raises(ValueError, match=r"lengths must hold one length per"):
        ref.key_padding_mask(value)
    with pytest.raises(ValueError, match=r"lengths must hold one length per"):
        ref.key_padding_mask(value, tk=4)


# 5. The tiled passes take grouped-query k and v


GQA_CASES = {
    "plain": {},
    "mask": {"mask": "random"},
    "causal": {"causal": True},
}


@pytest.mark.parametrize("case", GQA_CASES)
@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_tiled_passes_take_grouped_query_heads(framework, case):
    q, k, v = (
        draw((1, 4, 3, 8), 0),
        draw((1, 2, 5, 8), 1),
        draw((1, 2, 5, 8), 2),
    )
    dout = draw((1, 4, 3, 8), 3)
    kw = dict(GQA_CASES[case])
    mask = None
    if kw.pop("mask", None):
        mask = np.random.default_rng(4).random((1, 4, 3, 5)) < 0.5
        mask[..., 0] = False  # every row keeps key 0
    full = mask
    if kw.get("causal"):  # the queries are the last 3 of 5 positions
        full = numpy_ref.causal_mask(3, 5, align="bottom_right")
    out_ref, expected = sdpa_reference(q, k, v, dout, full)
    blocks = {"block_q": 2, "block_k": 2}
    if framework == "numpy":
        out = tiled.tiled_attention_numpy(q, k, v, mask, **kw, **blocks)
        grads = tiled.tiled_attention_backward_numpy(
            q, k, v, dout, mask, **kw, **blocks
        )
    else:
        out = tiled.tiled_attention_torch(
            t(q), t(k), t(v), t(mask), **kw, **blocks
        )
        grads = tiled.tiled_attention_backward_torch(
            t(q), t(k), t(v), t(dout), t(mask), **kw, **blocks
        )
    assert_close([out], [out_ref], names=["out"])
    assert_close(grads, expected)  # dk, dv: (1, 2, 5, 8), summed per group
    plain, _ = numpy_ref.attention(q, k, v, full)
    np.testing.assert_allclose(as_numpy(out), plain, rtol=0, atol=ATOL64)


# 6. empty_rows="zero": a row with no allowed key gives 0, as SDPA


def masked_row_case():
    """Query row 2 of 4 has every key blocked; the others keep some."""
    q, k, v, dout = small_case(tq=4, tk=5, seed=7)
    mask = np.random.default_rng(8).random((2, 3, 4, 5)) < 0.4
    mask[..., 4] = False  # every row keeps its last key ...
    mask[:, :, 2, :] = True  # ... but row 2, which keeps none
    return q, k, v, dout, mask


def bottom_right_case():
    """Tq = 6 > Tk = 4, causal aligned bottom-right: rows 0, 1 see none."""
    q, k, v, dout = small_case(tq=6, tk=4, seed=9)
    return q, k, v, dout, numpy_ref.causal_mask(6, 4, align="bottom_right")


def left_padded_case():
    """A left-padded batch with a causal mask: padding rows see no key."""
    q, k, v, dout = small_case(tq=5, tk=5, seed=11)
    padding = np.array([[False] * 5, [True, True, False, False, False]])
    mask = numpy_ref.key_padding_mask(padding) | numpy_ref.causal_mask(5)
    return q, k, v, dout, mask  # (B, 1, 5, 5)


EMPTY_CASES = {
    "masked-row": masked_row_case,
    "bottom-right": bottom_right_case,
    "left-padded": left_padded_case,
}


@pytest.mark.parametrize("case", EMPTY_CASES)
def test_attention_empty_rows_zero_matches_sdpa(forward, case):
    q, k, v, dout, mask = EMPTY_CASES[case]()
    expected, _ = sdpa_reference(q, k, v, dout, mask)
    empty = mask.all(axis=-1)
    assert empty.any()
    assert not empty.all()
    out = as_numpy(forward(q, k, v, mask, empty_rows="zero"))
    np.testing.assert_allclose(out, expected, rtol=0, atol=ATOL64)
    rows = np.broadcast_to(empty, out.shape[:-1])
    assert (out[rows] == 0).all()  # exactly 0, not merely small
    assert np.abs(out[~rows]).min() > 0


@pytest.mark.parametrize("case", EMPTY_CASES)
def test_attention_backward_empty_rows_zero_matches_sdpa(backward, case):
    q, k, v, dout, mask = EMPTY_CASES[case]()
    _, expected = sdpa_reference(q, k, v, dout, mask)
    got = backward(q, k, v, dout, mask, empty_rows="zero")
    assert_close(got, expected)
    rows = np.broadcast_to(mask.all(axis=-1), q.shape[:-1])
    assert (as_numpy(got[0])[rows] == 0).all()  # no gradient for them


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_tiled_causal_more_queries_than_keys_is_bottom_right(framework):
    # the tiled default aligns the queries to the last keys: with
    # Tq > Tk the first Tq - Tk rows come before every key, as flash-attn
    q, k, v, dout, mask = bottom_right_case()
    out_ref, expected = sdpa_reference(q, k, v, dout, mask)
    kw = {"causal": True, "block_q": 4, "block_k": 3, "empty_rows": "zero"}
    if framework == "numpy":
        out = tiled.tiled_attention_numpy(q, k, v, **kw)
        grads = tiled.tiled_attention_backward_numpy(q, k, v, dout, **kw)
    else:
        out = tiled.tiled_attention_torch(t(q), t(k), t(v), **kw)
        grads = tiled.tiled_attention_backward_torch(
            t(q), t(k), t(v), t(dout), **kw
        )
    assert_close([out], [out_ref], names=["out"])
    assert_close(grads, expected)


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_tiled_empty_rows_zero_log_sum_exp_is_inf(framework):
    # L = +inf for a row with no key makes exp(S - L) = 0 in the backward
    q, k, v, _, mask = masked_row_case()
    kw = {"return_lse": True, "empty_rows": "zero", "block_k": 2}
    if framework == "numpy":
        _, lse = tiled.tiled_attention_numpy(q, k, v, mask, **kw)
    else:
        _, lse = tiled.tiled_attention_torch(t(q), t(k), t(v), t(mask), **kw)
        lse = lse.numpy()
    assert np.isposinf(lse[..., 2]).all()
    assert np.isfinite(lse[..., [0, 1, 3]]).all()


def test_torch_attention_empty_rows_zero_autograd_matches_sdpa():
    # the softmax of an empty row is NaN before it is zeroed: autograd
    # through torch_ref.attention must still give SDPA's gradients
    q, k, v, dout, mask = masked_row_case()
    _, expected = sdpa_reference(q, k, v, dout, mask)
    leaves = [t(a).clone().requires_grad_() for a in (q, k, v)]
    out, weights = torch_ref.attention(*leaves, t(mask), empty_rows="zero")
    out.backward(t(dout))
    assert_close([x.grad for x in leaves], expected)
    assert (weights[:, :, 2] == 0).all()
    torch.testing.assert_close(
        weights[:, :, [0, 1, 3]].sum(-1),
        torch.ones(2, 3, 3, dtype=torch.float64),
    )


def test_numpy_attention_empty_rows_zero_weights_are_zero_rows():
    q, k, v, _, mask = masked_row_case()
    out, weights = numpy_ref.attention(q, k, v, mask, empty_rows="zero")
    assert (weights[:, :, 2] == 0).all()
    np.testing.assert_allclose(weights[:, :, [0, 1, 3]].sum(-1), 1.0)
    expected = np.where(mask, 0.0, weights) @ v  # blocked keys weigh 0
    np.testing.assert_allclose(out, expected, rtol=0, atol=ATOL64)


def test_softmax_empty_rows_zero_on_any_axis():
    logits = np.array([[0.0, -np.inf], [1.0, -np.inf], [-np.inf, -np.inf]])
    got = numpy_ref.softmax(logits.T, axis=0, empty_rows="zero").T
    np.testing.assert_array_equal(got, [[1.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    with pytest.raises(ValueError, match=r"logits row at index \(2,\)"):
        numpy_ref.softmax(logits)


def test_empty_rows_default_still_refuses(forward, backward):
    q, k, v, dout, mask = masked_row_case()
    where = r"index \(0, 0, 2\).*every key masked"
    with pytest.raises(ValueError, match=where):
        forward(q, k, v, mask)
    with pytest.raises(ValueError, match=where):
        backward(q, k, v, dout, mask)


@pytest.mark.parametrize("bad", ["ignore", "Zero", None, 0])
def test_empty_rows_unknown_value_is_refused_naming_it(forward, backward, bad):
    q, k, v, dout = small_case()
    words = r"empty_rows must be 'raise' .* or 'zero'"
    with pytest.raises(ValueError, match=words):
        forward(q, k, v, empty_rows=bad)
    with pytest.raises(ValueError, match=words):
        backward(q, k, v, dout, empty_rows=bad)


def test_empty_rows_zero_keeps_overflow_an_error(forward):
    # "zero" is for rows the mask empties, not for scores that overflow
    q, k, v, _ = small_case()
    q[0, 1, 2] = k[0, 1] = 1e200  # row 2 of batch 0, head 1 overflows
    mask = np.zeros((4, 5), dtype=bool)
    mask[3] = True  # row 3 is empty: allowed with "zero"
    with (
        np.errstate(over="ignore", invalid="ignore"),
        pytest.raises(ValueError, match="overflowed"),
    ):
        forward(q, k, v, mask, empty_rows="zero")


# 7. causal_mask says which corner it aligns to


@pytest.mark.parametrize("ref", [numpy_ref, torch_ref], ids=["numpy", "torch"])
@pytest.mark.parametrize(("tq", "tk"), [(3, 5), (5, 3), (4, 4)])
def test_causal_mask_alignments_match_sdpa_and_flash_attn(ref, tq, tk):
    ones = torch.ones(tq, tk, dtype=torch.bool)
    # SDPA's is_causal: allowed = tril(ones); flash-attn's causal (and
    # causal_lower_right): allowed = tril(ones, diagonal=tk - tq)
    top_left = ~ones.tril()
    bottom_right = ~ones.tril(diagonal=tk - tq)
    got_tl = np.asarray(ref.causal_mask(tq, tk, align="top_left"))
    got_br = np.asarray(ref.causal_mask(tq, tk, align="bottom_right"))
    np.testing.assert_array_equal(got_tl, top_left.numpy())
    np.testing.assert_array_equal(got_br, bottom_right.numpy())
    # and the KV-cache mask from positions is the bottom-right one
    from_positions = numpy_ref.causal_mask_for_positions(
        np.arange(tk - tq, tk), np.arange(tk)
    )
    np.testing.assert_array_equal(got_br, from_positions)


@pytest.mark.parametrize("ref", [numpy_ref, torch_ref], ids=["numpy", "torch"])
def test_causal_mask_not_square_needs_an_alignment(ref):
    with pytest.raises(
        ValueError, match=r"\(t, tk\) = \(3, 5\) is not square"
    ):
        ref.causal_mask(3, 5)
    with pytest.raises(ValueError, match=r"align must be 'top_left'"):
        ref.causal_mask(3, 5, align="lower_right")
    with pytest.raises(ValueError, match=r"tk must be positive, got 0"):
        ref.causal_mask(3, 0, align="top_left")
    square = np.asarray(ref.causal_mask(4, 4))
    np.testing.assert_array_equal(square, np.asarray(ref.causal_mask(4)))


def test_bottom_right_causal_matches_sdpa_causal_lower_right():
    from torch.nn.attention.bias import causal_lower_right

    q, k, v, _, mask = bottom_right_case()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "will produce NaNs": it gives 0
        bias = causal_lower_right(6, 4)
        expected = F.scaled_dot_product_attention(
            t(q), t(k), t(v), attn_mask=bias
        )
    for name, run in FORWARDS.items():
        out = as_numpy(run(q, k, v, mask, empty_rows="zero"))
        np.testing.assert_allclose(
            out, expected.numpy(), rtol=0, atol=ATOL64, err_msg=name
        )
    assert math.isclose(float(expected[..., :2, :].abs().max()), 0.0)
