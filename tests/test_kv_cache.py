"""mha_ref.kv_cache: where the causal mask starts with cached keys."""

import numpy as np
import pytest
import torch

from mha_ref import kv_cache, torch_ref
from mha_ref.tolerances import atol

TOL = dict(atol=atol(torch.float64), rtol=0)


def test_kv_cache_example_aligned_and_upper_left_values():
    aligned, upper_left = kv_cache.cached_attention_example()
    torch.testing.assert_close(
        aligned, torch.tensor([25.0, 30.0], dtype=torch.float64), **TOL
    )
    torch.testing.assert_close(
        upper_left, torch.tensor([10.0, 15.0], dtype=torch.float64), **TOL
    )


def test_kv_cache_example_is_running_mean_for_any_values():
    values = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0)  # new queries at 4 and 5
    aligned, upper_left = kv_cache.cached_attention_example(values)
    np.testing.assert_allclose(aligned.numpy(), [3.0, 3.5], **TOL)
    np.testing.assert_allclose(upper_left.numpy(), [1.0, 1.5], **TOL)


def test_kv_cache_aligned_rows_equal_full_causal_rows(make_tensor):
    # with the position mask, new queries reproduce the uncached rows
    t, n_new, d = 7, 3, 4
    q = make_tensor((2, 2, t, d), seed=1)
    k = make_tensor((2, 2, t, d), seed=2)
    v = make_tensor((2, 2, t, d), seed=3)
    full, _ = torch_ref.attention(q, k, v, torch_ref.causal_mask(t))
    positions = torch.arange(t)
    blocked = torch_ref.causal_mask_for_positions(positions[-n_new:],
                                                  positions)
    cached, _ = torch_ref.attention(q[..., -n_new:, :], k, v, blocked)
    torch.testing.assert_close(cached, full[..., -n_new:, :], **TOL)
    # the upper-left square mask gives different, wrong rows
    upper_left = torch_ref.causal_mask(t)[:n_new]
    wrong, _ = torch_ref.attention(q[..., -n_new:, :], k, v, upper_left)
    assert (wrong - full[..., -n_new:, :]).abs().max() > 1e-2


@pytest.mark.parametrize("values", [(10.0, 20.0, 30.0, 40.0, 50.0),
                                    (-1.0, 7.0, 2.0)])
def test_kv_cache_single_new_query_same_masked_and_unmasked(values):
    masked, unmasked, blocked = kv_cache.single_new_query(values)
    assert blocked.shape == (1, len(values)) and not blocked.any()
    torch.testing.assert_close(masked, unmasked, atol=0, rtol=0)
    np.testing.assert_allclose(masked.numpy(), [np.mean(values)], **TOL)
