"""RoPE: rotate-half convention, absolute positions, relative scores.

After rotation, the score q . k of a query at position m and a key at
position n depends on the positions only through m - n. Positions of
any integer dtype (never bool or NaN) and bases that are positive real
numbers are taken, with the angles in float64 even for float32 inputs.
"""

import copy

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from mha_ref import numpy_ref, torch_ref
from mha_ref.tolerances import atol

TOL64 = {"atol": atol(np.float64), "rtol": 0}


@pytest.fixture
def rng():
    return np.random.default_rng(16)


def rotate_pairs_by_hand(x, positions, base=10000.0):
    """RoPE written as explicit 2-D rotations of (x_i, x_{i + d/2})."""
    t, d = x.shape
    out = np.empty_like(x)
    for row, pos in zip(range(t), positions, strict=True):
        for i in range(d // 2):
            angle = pos * base ** (-2 * i / d)
            c, s = np.cos(angle), np.sin(angle)
            a, b = x[row, i], x[row, i + d // 2]
            out[row, i], out[row, i + d // 2] = c * a - s * b, s * a + c * b
    return out


def test_apply_rope_matches_explicit_pair_rotations(rng):
    x = rng.standard_normal((5, 8))
    positions = [0, 3, 7, 100, 2]
    expected = rotate_pairs_by_hand(x, positions)
    np.testing.assert_allclose(
        numpy_ref.apply_rope(x, positions), expected, **TOL64
    )
    got = torch_ref.apply_rope(torch.from_numpy(x), positions)
    np.testing.assert_allclose(got.numpy(), expected, **TOL64)


def test_apply_rope_base_changes_the_frequencies(rng):
    x = rng.standard_normal((3, 4))
    got = numpy_ref.apply_rope(x, [1, 2, 3], base=500000.0)
    np.testing.assert_allclose(
        got, rotate_pairs_by_hand(x, [1, 2, 3], 500000.0), **TOL64
    )
    assert np.abs(got - numpy_ref.apply_rope(x, [1, 2, 3])).max() > 1e-3


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_apply_rope_numpy_and_torch_agree(rng, dtype):
    x = rng.standard_normal((2, 3, 6, 8)).astype(dtype)  # (B, H, T, dh)
    positions = np.arange(10, 16)
    got_np = numpy_ref.apply_rope(x, positions)
    got_torch = torch_ref.apply_rope(torch.from_numpy(x), positions)
    assert got_np.dtype == dtype
    assert got_torch.dtype == getattr(torch, dtype)
    np.testing.assert_allclose(
        got_torch.numpy(), got_np, atol=atol(dtype), rtol=0
    )


def test_apply_rope_position_zero_is_identity_and_norms_are_kept(rng):
    x = rng.standard_normal((4, 6))
    rotated = numpy_ref.apply_rope(x, [0, 1, 50, 1000])
    np.testing.assert_allclose(rotated[0], x[0], **TOL64)
    np.testing.assert_allclose(
        np.linalg.norm(rotated, axis=-1), np.linalg.norm(x, axis=-1), **TOL64
    )


vectors = arrays(np.float64, 8, elements=st.floats(-2, 2))
positions = st.integers(0, 512)


@settings(max_examples=60, deadline=None, database=None)
@given(
    q=vectors,
    k=vectors,
    m=positions,
    n=positions,
    shift=st.integers(-256, 512),
)
def test_apply_rope_scores_depend_on_m_minus_n_only(q, k, m, n, shift):
    def score(m, n):
        q_m = numpy_ref.apply_rope(q[None, :], [m])[0]
        k_n = numpy_ref.apply_rope(k[None, :], [n])[0]
        return q_m @ k_n

    # angles reach ~1000 radians: cos and sin round at ~1000 * eps64,
    # so allow 1e-11 per unit of |q| |k| rather than atol(float64)
    tol = 1e-11 * (1 + np.linalg.norm(q) * np.linalg.norm(k))
    assert abs(score(m, n) - score(m + shift, n + shift)) <= tol
    # the same score with the query unrotated, the key at n - m
    relative = q @ numpy_ref.apply_rope(k[None, :], [n - m])[0]
    assert abs(score(m, n) - relative) <= tol


def random_rope_module(n_kv_head, dtype=torch.float64):
    module = torch_ref.MultiHeadAttention(
        16, 4, n_kv_head=n_kv_head, bias=True, rope=True, dtype=dtype
    )
    gen = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randn(param.shape, generator=gen) * 0.25)
    return module


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    ("n_kv_head", "rope"), [(4, True), (2, True), (1, True), (2, False)]
)
def test_mha_numpy_and_torch_agree_with_n_kv_head_and_rope(
    dtype, n_kv_head, rope
):
    module = random_rope_module(n_kv_head, dtype)
    module.rope = rope
    twin = numpy_ref.MultiHeadAttention.from_torch(module)
    assert (twin.n_kv_head, twin.rope) == (n_kv_head, rope)
    gen = torch.Generator().manual_seed(12)
    x = torch.randn(2, 6, 16, generator=gen, dtype=torch.float64).to(dtype)
    mask = torch_ref.causal_mask(6)
    positions = torch.arange(4, 10)  # a window further into a sequence
    y, weights = module(x, mask=mask, positions=positions)
    y_np, weights_np = twin(
        x.numpy(), mask=mask.numpy(), positions=positions.numpy()
    )
    tol = {"atol": atol(dtype), "rtol": 0}
    np.testing.assert_allclose(y.detach().numpy(), y_np, **tol)
    np.testing.assert_allclose(weights.detach().numpy(), weights_np, **tol)


def test_mha_rope_default_positions_are_zero_to_t_minus_one():
    module = random_rope_module(n_kv_head=2)
    gen = torch.Generator().manual_seed(14)
    x = torch.randn(1, 5, 16, generator=gen, dtype=torch.float64)
    default, _ = module(x)
    explicit, _ = module(x, positions=torch.arange(5))
    torch.testing.assert_close(default, explicit, atol=0, rtol=0)


def test_mha_rope_output_is_invariant_to_a_common_shift():
    # self-attention with RoPE sees only relative positions
    module = random_rope_module(n_kv_head=2)
    gen = torch.Generator().manual_seed(13)
    x = torch.randn(2, 5, 16, generator=gen, dtype=torch.float64)
    at_zero, _ = module(x)
    shifted, _ = module(x, positions=torch.arange(5) + 37)
    torch.testing.assert_close(shifted, at_zero, atol=1e-12, rtol=0)
    # reordered positions are not a shift: the output changes
    swapped, _ = module(x, positions=torch.tensor([1, 0, 2, 3, 4]))
    assert (swapped - at_zero).abs().max() > 1e-3


# positions and inputs at the edges (issue 28)


def in_framework(ref, x):
    return x if ref is numpy_ref else torch.from_numpy(x)


@pytest.mark.parametrize("ref", [numpy_ref, torch_ref])
def test_apply_rope_takes_fractional_positions(ref, rng):
    # position interpolation: positions scaled down between the integers
    x = rng.standard_normal((4, 8))
    positions = np.array([0.0, 0.25, 1.5, 2.75])
    got = ref.apply_rope(in_framework(ref, x), in_framework(ref, positions))
    np.testing.assert_allclose(
        np.asarray(got), rotate_pairs_by_hand(x, positions), **TOL64
    )


@pytest.mark.parametrize("ref", [numpy_ref, torch_ref])
@pytest.mark.parametrize("dtype", [np.uint16, np.uint32, np.uint64])
def test_apply_rope_takes_unsigned_and_iterator_positions(ref, dtype, rng):
    x = rng.standard_normal((3, 4))
    expected = rotate_pairs_by_hand(x, [2, 0, 5])
    unsigned = in_framework(ref, np.array([2, 0, 5], dtype=dtype))
    for positions in (unsigned, iter([2, 0, 5])):
        got = ref.apply_rope(in_framework(ref, x), positions)
        np.testing.assert_allclose(np.asarray(got), expected, **TOL64)


@pytest.mark.parametrize("ref", [numpy_ref, torch_ref])
@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.int64])
def test_apply_rope_int_and_bool_inputs_compute_in_float(ref, dtype):
    # -x2 of int8 -128 wraps, and NumPy has no negative of a bool
    x = np.array([[1, -128], [0, 1]]).astype(dtype)  # (T, d_head) = (2, 2)
    got = ref.apply_rope(in_framework(ref, x), [0, 1])
    expected = rotate_pairs_by_hand(x.astype(np.float64), [0, 1])
    assert np.asarray(got).dtype.kind == "f"
    np.testing.assert_allclose(np.asarray(got), expected, atol=1e-4, rtol=0)


# positions of any integer dtype, angles in float64, a positive base

ATOL64 = 1e-10  # float64 against autograd or the other mirror
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


def draw(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


def torch_layer_grads(module, x, dy, positions, mask=None):
    """numpy_ref-style gradients of the torch module, by autograd."""
    x = torch.from_numpy(x).clone().requires_grad_()
    mask = None if mask is None else torch.from_numpy(mask)
    y, _ = module(x, mask=mask, positions=positions)
    y.backward(torch.from_numpy(dy))
    grads = {"x": x.grad.numpy()}
    for name in ("q", "k", "v", "o"):
        linear = getattr(module, f"w{name}")
        grads[f"W{name}"] = linear.weight.grad.numpy().T  # x @ W layout
        grads[f"b{name}"] = linear.bias.grad.numpy()
    module.zero_grad()
    return grads


@pytest.mark.parametrize("dtype", POSITION_DTYPES, ids=lambda d: d.__name__)
def test_mha_backward_rope_positions_of_any_integer_dtype(dtype):
    module = random_rope_module(n_kv_head=2)
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
        y_torch, _ = module(
            torch.from_numpy(x),
            torch.from_numpy(mask),
            positions=torch.as_tensor(typed),
        )
    np.testing.assert_allclose(y_torch.numpy(), y_ref, rtol=0, atol=ATOL64)


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
    got = np.asarray(
        ref.apply_rope(in_framework(ref, x), in_framework(ref, FAR))
    )
    expected = numpy_ref.apply_rope(x.astype(np.float64), FAR)
    assert got.dtype == np.float32
    # float32 angles would be off by up to 128k * 6e-8 = 8e-3 radians
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)


def test_mha_rope_float32_at_128k_matches_float64_and_the_numpy_twin():
    module = random_rope_module(n_kv_head=2, dtype=torch.float32)
    wide = copy.deepcopy(module).double()
    x = draw((2, 6, 16), 3)
    positions = torch.from_numpy(FAR)
    with torch.no_grad():
        y, _ = module(torch.from_numpy(x).float(), positions=positions)
        y64, _ = wide(torch.from_numpy(x), positions=positions)
    twin = numpy_ref.MultiHeadAttention.from_torch(module)
    y_np, _ = twin(x.astype(np.float32), positions=FAR)
    tol = {"rtol": 0, "atol": atol("float32")}
    np.testing.assert_allclose(y.double().numpy(), y64.numpy(), **tol)
    np.testing.assert_allclose(y.numpy(), y_np, **tol)
