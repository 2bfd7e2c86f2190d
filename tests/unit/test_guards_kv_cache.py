"""Refusals of the doors of kv_cache.py (mha_ref/guards/kv_cache.py): one
case per door, plus one per bad value."""

import numpy as np
import pytest
import torch
from test_kv_cache import assert_cache_is
from test_kv_cache_decoding import D_MODEL, N_HEAD, T, random_module, random_x
from test_rolling_cache import TOL, full_pass, module

from mha_ref import kv_cache

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
def test_kv_cache_examples_refuse_values_that_are_not_numbers(example, n_new):
    with pytest.raises(TypeError, match=r"values must be a sequence of real"):
        example(("a", "b", "c"))


@pytest.mark.parametrize(
    ("values", "error", "words"),
    [
        ((1.0, float("nan"), 2.0), ValueError, r"values .* holds nan"),
        (("a", "b", "c"), TypeError, r"values must be a sequence of real"),
        (((1.0, 2.0), (3.0, 4.0)), TypeError, r"one per key"),
    ],
)
def test_each_value_that_is_not_a_number_is_refused(values, error, words):
    with pytest.raises(error, match=words):
        kv_cache.cached_attention_example(values)


def test_cached_attention_example_needs_a_key_per_new_query():
    with pytest.raises(
        ValueError,
        match=r"values holds 1 value\(s\), "
        r"\(10.0,\), but the 2 new queries",
    ):
        kv_cache.cached_attention_example((10.0,))
    aligned, upper_left = kv_cache.cached_attention_example((10.0, 20.0))
    assert aligned.tolist() == upper_left.tolist() == [10.0, 15.0]


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
    k_shape, v_shape, dtypes, error, words, make_tensor
):
    k_dtype, v_dtype = dtypes or (torch.float64, torch.float64)
    empty, held = kv_cache.KVCache(), kv_cache.KVCache()
    held.append(
        make_tensor((1, 2, 3, 4), seed=2), make_tensor((1, 2, 3, 4), seed=3)
    )
    keys, values = held.keys, held.values
    for cache in (empty, held):  # refused before anything is compared
        with pytest.raises(error, match=words):
            cache.append(
                make_tensor(k_shape, dtype=k_dtype),
                make_tensor(v_shape, dtype=v_dtype, seed=1),
            )
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
    k_shape, dtype, error, words, make_tensor
):
    cache = kv_cache.KVCache()
    cache.append(make_tensor((1, 2, 5, 4)), make_tensor((1, 2, 5, 4), seed=1))
    keys, values = cache.keys, cache.values
    with pytest.raises(error, match=words):
        cache.append(
            make_tensor(k_shape, dtype=dtype),
            make_tensor(k_shape, dtype=dtype, seed=1),
        )
    assert_cache_is(cache, keys, values)
    cache.append(
        make_tensor((1, 2, 3, 4), seed=2), make_tensor((1, 2, 3, 4), seed=3)
    )
    assert cache.length == 8
    torch.testing.assert_close(
        cache.keys[..., 5:, :], make_tensor((1, 2, 3, 4), seed=2)
    )


@pytest.mark.parametrize(
    ("chunks", "error", "words"),
    [
        ([4, 4], ValueError, "sum to 8, but x holds T=9"),
        ([5, 0, 4], ValueError, r"chunks\[1\] = 0"),
        ([5, -1, 5], ValueError, r"chunks\[1\] = -1"),
        ([4.5, 4.5], TypeError, r"chunks\[0\] must be an int"),
        (9, TypeError, "sequence of lengths"),
    ],
)
def test_cached_forward_bad_chunks_raise(chunks, error, words):
    module = random_module(N_HEAD, False)
    with pytest.raises(error, match=words):
        kv_cache.cached_forward(module, random_x(), chunks)


def test_cached_forward_bad_input_shape_raises():
    module = random_module(N_HEAD, False)
    with pytest.raises(ValueError, match=r"\(B, T, d_model=16\)"):
        kv_cache.cached_forward(module, torch.zeros(T, D_MODEL), [T])


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
    module, x = random_module(2, True), random_x(t=7)
    with pytest.raises(error, match=words):
        kv_cache.cached_forward(module, x, chunks())


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"window": 0}, ValueError, "window must be at least 1"),
        ({"window": 2.5}, TypeError, "window must be an int"),
        ({"window": 3, "sink_tokens": -1}, ValueError, "sink_tokens must"),
        ({"sink_tokens": 2}, ValueError, "sink_tokens=2 needs a window"),
    ],
)
def test_cached_forward_refuses_bad_window_arguments(kwargs, error, match):
    m, x = module(), torch.randn(1, 4, 16, dtype=torch.float64)
    with pytest.raises(error, match=match):
        kv_cache.cached_forward(m, x, [4], **kwargs)
    if "window" in kwargs:
        with pytest.raises(error, match=match):
            kv_cache.RollingKVCache(**kwargs)


def test_rolling_step_refuses_a_plain_cache_by_name():
    # it raised AttributeError: 'KVCache' object has no attribute
    # 'extended_positions'
    m, x = module(), torch.randn(1, 2, 16, dtype=torch.float64)
    cache = kv_cache.KVCache()
    with pytest.raises(TypeError, match=r"rolling_step needs a kv_cache\.Rol"):
        kv_cache.rolling_step(m, cache, x)
    assert cache.length == 0


def test_cached_step_refuses_a_rolling_cache_by_name():
    # it took one, never advanced its length and applied no window: six
    # steps were off the windowed pass by 0.70, without an error
    m, x = module(), torch.randn(1, 6, 16, dtype=torch.float64)
    cache = kv_cache.RollingKVCache(window=2)
    with pytest.raises(TypeError, match=r"cached_step needs a kv_cache\.KVCa"):
        kv_cache.cached_step(m, cache, x[:, :1])
    assert cache.length == 0
    assert cache.keys is None
    # the step that goes with it equals the windowed pass
    y = torch.cat(
        [kv_cache.rolling_step(m, cache, x[:, [t]]) for t in range(6)], 1
    )
    torch.testing.assert_close(y, full_pass(m, x, 2), **TOL)
