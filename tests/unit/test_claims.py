"""Every factual claim of the source text, checked against the code.

One test per claim, in the order the text makes them.
"""

import math

import numpy as np
import pytest
import torch

from mha_ref import kv_cache, numpy_ref, pitfalls, torch_ref
from mha_ref.tolerances import atol

TOL64 = {"atol": atol(np.float64), "rtol": 0}


def test_claim_opening_weighted_sum_is_one_point_five_and_one():
    # scores ln 3 and 0 give weights 0.75 and 0.25
    q = np.array([[1.0]])  # (Tq, d) with d = 1: no scaling
    k = np.array([[math.log(3.0)], [0.0]])
    v = np.array([[2.0, 0.0], [0.0, 4.0]])
    out, weights = numpy_ref.attention(q, k, v)
    np.testing.assert_allclose(weights, [[0.75, 0.25]], **TOL64)
    np.testing.assert_allclose(out, [[1.5, 1.0]], **TOL64)


def test_claim_equal_weights_give_score_gradients_quarter_minus_quarter():
    p, upstream = np.array([0.5, 0.5]), np.array([1.0, 0.0])
    np.testing.assert_allclose(
        numpy_ref.softmax_backward(p, upstream), [0.25, -0.25], **TOL64
    )
    # the loss is the first weight: autograd finds the same, not (0.25, 0)
    scores = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    scores.softmax(dim=-1)[0].backward()
    np.testing.assert_allclose(scores.grad.numpy(), [0.25, -0.25], **TOL64)


def test_claim_upstream_of_ones_gives_zero_score_gradient():
    p = np.array([0.5, 0.5])
    np.testing.assert_allclose(
        numpy_ref.softmax_backward(p, np.ones(2)), [0.0, 0.0], **TOL64
    )
    scores = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    scores.softmax(dim=-1).sum().backward()  # upstream of ones
    np.testing.assert_allclose(scores.grad.numpy(), [0.0, 0.0], **TOL64)


def test_claim_thousand_thousand_gives_half_half():
    with np.errstate(over="raise", invalid="raise"):  # no inf, no NaN
        weights = numpy_ref.softmax(np.array([1000.0, 1000.0]))
    np.testing.assert_array_equal(weights, [0.5, 0.5])


def test_claim_subtracting_a_constant_keeps_the_weights():
    scores = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(
        numpy_ref.softmax(scores - 1234.5),
        numpy_ref.softmax(scores),
        **TOL64,
    )


def test_claim_dividing_by_a_constant_changes_the_weights():
    scores = np.array([1.0, -2.0, 0.5])
    gap = numpy_ref.softmax(scores / 2.0) - numpy_ref.softmax(scores)
    assert np.abs(gap).max() > 0.05


def test_claim_mask_before_softmax_gives_one_zero():
    blocked = np.array([False, True])  # allow only the first position
    scores = np.zeros(2)
    np.testing.assert_array_equal(numpy_ref.softmax(scores), [0.5, 0.5])
    before = numpy_ref.softmax(np.where(blocked, -np.inf, scores))
    np.testing.assert_array_equal(before, [1.0, 0.0])
    after = pitfalls.wrong_mask_after_softmax(scores, blocked)
    np.testing.assert_array_equal(after, [0.5, 0.0])
    renormalised = pitfalls.wrong_mask_after_softmax(
        scores, blocked, renormalise=True
    )
    np.testing.assert_array_equal(renormalised, [1.0, 0.0])  # in exact maths


def test_claim_renormalising_after_can_give_nan_masking_before_cannot():
    # the allowed key's weight underflows to 0 before it is renormalised
    scores = np.array([0.0, 2000.0])
    blocked = np.array([False, True])
    with np.errstate(invalid="ignore"):
        after = pitfalls.wrong_mask_after_softmax(
            scores, blocked, renormalise=True
        )
    assert np.isnan(after).all()
    before = numpy_ref.softmax(np.where(blocked, -np.inf, scores))
    np.testing.assert_array_equal(before, [1.0, 0.0])


def test_claim_fully_masked_row_is_rejected_not_nan():
    q = k = v = np.zeros((2, 2))
    with pytest.raises(ValueError, match=r"index \(1,\).*every key masked"):
        numpy_ref.attention(q, k, v, np.array([[False, True], [True, True]]))


def test_claim_unscaled_eight_minus_eight_puts_all_weight_on_first():
    weights = numpy_ref.softmax(np.array([8.0, -8.0]))
    assert weights[0] > 0.9999998


def test_claim_scaling_by_head_size_64_gives_softmax_one_minus_one():
    d_head = 64
    q = np.zeros((1, d_head))
    k = np.zeros((2, d_head))
    q[0, 0], k[0, 0], k[1, 0] = 8.0, 1.0, -1.0  # raw scores [8, -8]
    v = np.eye(2)
    _, weights = numpy_ref.attention(q, k, v)  # divides by sqrt(64) = 8
    expected = numpy_ref.softmax(np.array([1.0, -1.0]))
    np.testing.assert_allclose(weights[0], expected, **TOL64)
    np.testing.assert_allclose(weights[0], [0.8808, 0.1192], atol=5e-5)
    assert weights[0, 1] > 0.1  # the second position still contributes


def test_claim_kv_cache_aligned_mask_gives_25_30_is_causal_10_15():
    aligned, upper_left = kv_cache.cached_attention_example()
    np.testing.assert_allclose(aligned.numpy(), [25.0, 30.0], **TOL64)
    np.testing.assert_allclose(upper_left.numpy(), [10.0, 15.0], **TOL64)


def test_claim_single_new_query_needs_no_causal_mask():
    masked, unmasked, blocked = kv_cache.single_new_query()
    assert not blocked.any()
    np.testing.assert_array_equal(masked.numpy(), unmasked.numpy())
    np.testing.assert_allclose(masked.numpy(), [30.0], **TOL64)


@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
def test_claim_parameters_are_four_d_model_squared_for_any_head_count(bias):
    d_model = 24
    for n_head in (1, 2, 3, 4, 6, 8, 12, 24):
        module = torch_ref.MultiHeadAttention(d_model, n_head, bias=bias)
        count = sum(p.numel() for p in module.parameters())
        assert count == 4 * d_model**2 + (4 * d_model if bias else 0)


def test_claim_eight_heads_of_64_columns_make_one_512_square():
    assert 8 * (512 * 64) == 512 * 512
    module = numpy_ref.MultiHeadAttention(512, 8)
    assert module.d_head == 64
    assert module.Wq.shape == (512, 512)


def test_claim_one_gemm_then_split_equals_separate_heads(
    make_module, make_tensor
):
    # head_i = Attention(X W_i^Q, X W_i^K, X W_i^V), W_i = columns of W
    module = numpy_ref.MultiHeadAttention.from_torch(
        make_module(12, 3, bias=False)
    )
    x = make_tensor((2, 5, 12), seed=1).numpy()
    y, _ = module(x)
    dh = module.d_head
    heads = []
    for i in range(module.n_head):
        cols = slice(i * dh, (i + 1) * dh)
        head, _ = numpy_ref.attention(
            x @ module.Wq[:, cols],
            x @ module.Wk[:, cols],
            x @ module.Wv[:, cols],
        )
        heads.append(head)  # (B, T, dh)
    concat = np.concatenate(heads, axis=-1)  # (B, T, d_model)
    np.testing.assert_allclose(concat @ module.Wo, y, **TOL64)


def test_claim_direct_view_gives_right_shape_wrong_numbers(make_tensor):
    b, t, n_head, d_model = 2, 5, 3, 12
    module = numpy_ref.MultiHeadAttention(d_model, n_head)
    x = make_tensor((b, t, d_model), seed=1).numpy()
    right = module.split_heads(x)
    wrong = pitfalls.wrong_split_heads(x, n_head)
    assert wrong.shape == right.shape == (b, n_head, t, d_model // n_head)
    assert np.abs(wrong - right).max() > 0.1
    # the right split: head h at time t is x's columns for head h
    np.testing.assert_array_equal(right[1, 2, 3], x[1, 3, 8:12])


def test_claim_every_row_of_weights_sums_to_one(make_module, make_tensor):
    module = make_module(12, 3)
    x = make_tensor((2, 6, 12), seed=1)
    _, weights = module(x, torch_ref.causal_mask(6))
    torch.testing.assert_close(
        weights.sum(dim=-1),
        torch.ones(2, 3, 6, dtype=torch.float64),
        atol=atol(torch.float64),
        rtol=0,
    )


def test_claim_causal_mask_puts_exactly_zero_weight_on_the_future(
    make_module, make_tensor
):
    module = make_module(12, 3)
    x = make_tensor((2, 6, 12), seed=1)
    future = torch_ref.causal_mask(6)
    _, weights = module(x, future)
    assert torch.all(weights[..., future] == 0)
    assert torch.all(weights[..., ~future] > 0)


def test_claim_causal_mask_lets_a_position_see_itself_and_the_past():
    mask = numpy_ref.causal_mask(5)
    for i in range(5):
        allowed = np.flatnonzero(~mask[i])
        np.testing.assert_array_equal(allowed, np.arange(i + 1))


@pytest.mark.parametrize("mask", [None, "causal"])
def test_claim_attention_is_permutation_equivariant_without_a_mask(
    mask, make_module, make_tensor
):
    module = make_module(12, 3)
    t = 6
    x = make_tensor((2, t, 12), seed=1)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    blocked = None if mask is None else torch_ref.causal_mask(t)
    y, _ = module(x, blocked)
    y_perm, _ = module(x[:, perm], blocked)
    if mask is None:  # the outputs follow the inputs' order
        torch.testing.assert_close(
            y_perm, y[:, perm], atol=atol(torch.float64), rtol=0
        )
    else:  # a causal mask already tells earlier from later
        assert (y_perm - y[:, perm]).abs().max() > 1e-2
