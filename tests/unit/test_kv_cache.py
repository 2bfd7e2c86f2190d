"""mha_ref.kv_cache: where the causal mask starts with cached keys."""

import numpy as np
import pytest
import torch

from mha_ref import kv_cache, torch_ref
from mha_ref.tolerances import atol

TOL = {"atol": atol(torch.float64), "rtol": 0}


# the default values (25, 30 against 10, 15) are a claim of the text:
# tests/test_claims.py checks them


@pytest.mark.parametrize(
    ("values", "aligned", "upper_left"),
    [
        ((1.0, 2.0, 3.0, 4.0, 5.0, 6.0), [3.0, 3.5], [1.0, 1.5]),
        ((-4.0, 8.0, 2.0), [2.0, 2.0], [-4.0, 2.0]),
    ],
)
def test_kv_cache_example_is_running_mean_for_any_values(
    values, aligned, upper_left
):
    # the new queries are the last two positions
    got_aligned, got_upper_left = kv_cache.cached_attention_example(values)
    np.testing.assert_allclose(got_aligned.numpy(), aligned, **TOL)
    np.testing.assert_allclose(got_upper_left.numpy(), upper_left, **TOL)


def test_kv_cache_aligned_rows_equal_full_causal_rows(make_tensor):
    # with the position mask, new queries reproduce the uncached rows
    t, n_new, d = 7, 3, 4
    q = make_tensor((2, 2, t, d), seed=1)
    k = make_tensor((2, 2, t, d), seed=2)
    v = make_tensor((2, 2, t, d), seed=3)
    full, _ = torch_ref.attention(q, k, v, torch_ref.causal_mask(t))
    positions = torch.arange(t)
    blocked = torch_ref.causal_mask_for_positions(
        positions[-n_new:], positions
    )
    cached, _ = torch_ref.attention(q[..., -n_new:, :], k, v, blocked)
    torch.testing.assert_close(cached, full[..., -n_new:, :], **TOL)
    # the upper-left square mask gives different, wrong rows
    upper_left = torch_ref.causal_mask(t)[:n_new]
    wrong, _ = torch_ref.attention(q[..., -n_new:, :], k, v, upper_left)
    assert (wrong - full[..., -n_new:, :]).abs().max() > 1e-2


@pytest.mark.parametrize(
    "values", [(10.0, 20.0, 30.0, 40.0, 50.0), (-1.0, 7.0, 2.0)]
)
def test_kv_cache_single_new_query_same_masked_and_unmasked(values):
    masked, unmasked, blocked = kv_cache.single_new_query(values)
    assert blocked.shape == (1, len(values))
    assert not blocked.any()
    torch.testing.assert_close(masked, unmasked, atol=0, rtol=0)
    np.testing.assert_allclose(masked.numpy(), [np.mean(values)], **TOL)


EXAMPLES = pytest.mark.parametrize(
    ("example", "n_new"),
    [
        (kv_cache.cached_attention_example, 2),
        (kv_cache.single_new_query, 1),
        (kv_cache.single_query_is_causal, 1),
    ],
    ids=["cached_attention_example", "single_new_query", "single_query"],
)


@EXAMPLES
def test_kv_cache_examples_refuse_too_few_values(example, n_new):
    # no value: the mean of nothing is no answer (it was 0 for one)
    for values in [(), (1.0,)][:n_new]:
        with pytest.raises(ValueError, match=r"give at least \d values"):
            example(values)


@EXAMPLES
@pytest.mark.parametrize(
    ("values", "error", "words"),
    [
        ((1.0, float("nan"), 2.0), ValueError, r"values .* holds nan"),
        (("a", "b", "c"), TypeError, r"values must be a sequence of real"),
        (((1.0, 2.0), (3.0, 4.0)), TypeError, r"one per key"),
    ],
)
def test_kv_cache_examples_refuse_values_that_are_not_numbers(
    example, n_new, values, error, words
):
    with pytest.raises(error, match=words):
        example(values)
