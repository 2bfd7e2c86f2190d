"""Refusals of the doors of cost.py (mha_ref/guards/cost.py)."""

import pytest

from mha_ref import cost

LAYER = {"batch": 1, "tq": 4, "tk": 4, "d_model": 8, "n_head": 2}
CACHE = {"n_layer": 2, "n_kv_head": 2, "d_head": 4, "tokens": 5}
SIZES = {  # each door: good arguments, then the sizes it must name
    cost.attention_flops: (LAYER, (*LAYER, "n_kv_head", "d_head")),
    cost.useful_flops: (LAYER, (*LAYER, "n_kv_head", "d_head")),
    cost.causal_tiles: (
        {"tq": 4, "tk": 4},
        ("tq", "tk", "block_q", "block_k"),
    ),
    cost.tiled_flops: (
        LAYER,
        (*LAYER, "n_kv_head", "d_head", "block_q", "block_k"),
    ),
    cost.kv_cache_bytes: (
        {**CACHE, "bytes_per_value": 2},
        (*CACHE, "window"),
    ),
    cost.saved_activation_bytes: (
        {"batch": 1, "t": 4, "d_model": 8, "n_head": 2, "bytes_per_value": 2},
        ("batch", "t", "d_model", "n_head"),
    ),
    cost.bytes_moved: (LAYER, (*LAYER, "n_kv_head")),
    cost.arithmetic_intensity: (LAYER, (*LAYER, "n_kv_head")),
    cost.memory_bound_from: (
        {"d_model": 8, "n_head": 2, "ridge": 100.0},
        ("d_model", "n_head", "n_kv_head"),
    ),
}


@pytest.mark.parametrize("door", SIZES, ids=lambda f: f.__name__)
def test_each_cost_function_names_each_size_it_refuses(door):
    good, names = SIZES[door]
    assert door(**good)  # the good arguments pass
    for name in names:  # one size at a time: 0 is no size
        with pytest.raises(ValueError, match=rf"^{name} must be positive"):
            door(**{**good, name: 0})


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        (0, "must be positive, got 0"),
        (-3, "must be positive, got -3"),
        (2.5, "must be a positive int, got 2.5"),
        (4.0, "must be a positive int, got 4.0"),  # no float, even whole
        ("8", "must be a positive int, got '8'"),
        (True, "must be a positive int, got True"),
        (None, "must be a positive int, got None"),
    ],
)
def test_a_size_that_is_not_a_positive_int_is_refused(bad, words):
    error = ValueError if isinstance(bad, int) else cost.NotAnIntegerError
    with pytest.raises(error, match=f"^batch {words}"):
        cost.attention_flops(**{**LAYER, "batch": bad})
    if error is cost.NotAnIntegerError:  # a TypeError too
        with pytest.raises(TypeError):
            cost.attention_flops(**{**LAYER, "batch": bad})


@pytest.mark.parametrize("func", [cost.attention_flops, cost.useful_flops])
def test_cost_refuses_head_counts_that_do_not_split(func):
    with pytest.raises(ValueError, match="n_head=3"):
        func(1, 4, 4, 8, 3)  # 8 columns into 3 heads
    with pytest.raises(ValueError, match="n_kv_head=3"):
        func(1, 4, 4, 12, 4, 3)  # 4 query heads into 3 groups
    # with d_head given, d_model need not split into the heads
    assert func(1, 4, 4, 8, 3, d_head=5)["total"] > 0


def test_cost_refuses_more_new_queries_than_keys():
    with pytest.raises(ValueError, match="tq=5"):
        cost.attention_flops(1, 5, 4, 8, 2, cached=True)
    with pytest.raises(ValueError, match="tq=5"):
        cost.useful_flops(1, 5, 4, 8, 2)
    with pytest.raises(ValueError, match="bytes_per_value"):
        cost.kv_cache_bytes(1, 1, 1, 1, 0)
    with pytest.raises(TypeError, match="backward"):
        cost.attention_flops(1, 4, 4, 8, 2, backward="yes")
