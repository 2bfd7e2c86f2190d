"""Refusals of the doors of tiled.py (mha_ref/guards/tiled.py) and of the
checks the tiled loop runs on what a mask_rule returns."""

import functools

import numpy as np
import pytest
import torch
from test_tiled import (
    as_torch,
    qkv,
)
from test_tiled_mask_rule import (
    TOL,
    inputs,
    rules,
    run,
)

from mha_ref import numpy_ref, tiled, torch_ref


@pytest.fixture(params=["numpy", "torch"])
def attend(request):
    """The tiled function of one framework, taking NumPy inputs."""
    if request.param == "numpy":
        return tiled.tiled_attention_numpy

    def torch_version(q, k, v, mask=None, **kw):
        mask = None if mask is None else torch.from_numpy(np.asarray(mask))
        return tiled.tiled_attention_torch(*as_torch(q, k, v), mask, **kw)

    return torch_version


@pytest.fixture(params=["numpy", "torch"])
def ref(request):
    return numpy_ref if request.param == "numpy" else torch_ref


@pytest.mark.parametrize("name", ["block_q", "block_k"])
@pytest.mark.parametrize("bad", [0, -3])
def test_tiled_rejects_non_positive_blocks(attend, name, bad):
    with pytest.raises(ValueError, match=f"{name} must be at least 1"):
        attend(*qkv(4, 4), **{name: bad})


@pytest.mark.parametrize("bad", [2.0, True, "8"])
def test_tiled_rejects_non_int_blocks(attend, bad):
    with pytest.raises(TypeError, match="block_k must be an int"):
        attend(*qkv(4, 4), block_k=bad)


def test_tiled_rejects_mismatched_shapes(attend):
    q, k, v = qkv(4, 6)
    with pytest.raises(ValueError, match="same last dim"):
        attend(q[..., :3], k, v)
    with pytest.raises(ValueError, match="same number of keys"):
        attend(q, k, v[..., :5, :])


@pytest.mark.parametrize(("tq", "tk"), [(0, 4), (4, 0)])
def test_tiled_rejects_empty_sequences(attend, tq, tk):
    with pytest.raises(ValueError, match=f"Tq={tq}, Tk={tk}"):
        attend(*qkv(tq, tk))


def test_tiled_rejects_a_fully_masked_row(attend):
    q, k, v = qkv(5, 6)
    mask = np.zeros((5, 6), dtype=bool)
    mask[3] = True  # query row 3 may see no key
    with pytest.raises(ValueError, match=r"index \(0, 0, 3\).*every key"):
        attend(q, k, v, mask, block_q=2, block_k=4)


def test_tiled_rejects_queries_before_every_key(attend):
    # Tq > Tk with the default alignment puts query 0 at position -2
    with pytest.raises(ValueError, match="every key masked"):
        attend(*qkv(6, 4), causal=True)


def test_tiled_rejects_bad_masks(attend):
    q, k, v = qkv(4, 6)
    with pytest.raises(TypeError, match="boolean"):
        attend(q, k, v, np.zeros((4, 6)))
    with pytest.raises(ValueError, match="does not broadcast"):
        attend(q, k, v, np.zeros((6, 4), dtype=bool))


def test_tiled_rejects_bad_positions(attend):
    q, k, v = qkv(4, 6)
    with pytest.raises(ValueError, match=r"query_positions must have shape"):
        attend(q, k, v, causal=True, query_positions=np.arange(5))
    with pytest.raises(ValueError, match=r"key_positions must have shape"):
        attend(q, k, v, causal=True, key_positions=np.arange(4))
    with pytest.raises(ValueError, match="need causal=True"):
        attend(q, k, v, key_positions=np.arange(6))


def test_tiled_rejects_overflowing_scores_naming_the_row(attend):
    # finite q and k whose product overflows: the reference refuses it
    q, k, v = qkv(4, 6)
    q[1, 2, 3] = k[1, 2] = 1e200  # row 3 of batch 1, head 2 overflows
    with (
        np.errstate(over="ignore", invalid="ignore"),
        pytest.raises(
            ValueError,
            match=r"query row at index \(1, 2, 3\) "
            r"hold (inf|nan): q @ k\^T overflowed",
        ),
    ):
        attend(q, k, v, block_q=2, block_k=4)


def test_tiled_rejects_non_finite_inputs(attend):
    q, k, v = qkv(4, 6)
    k[0, 1, 2, 3] = np.nan
    where = r"k of shape .* index \(0, 1, 2, 3\)"
    with pytest.raises(ValueError, match=where):
        attend(q, k, v)


def huge_negative_scores():
    q = np.array([[1.0, 0.0], [1e200, 0.0]])  # row 1: scores -1e400
    k = np.array([[-1e200, 0.0], [-1e200, 1.0]])
    v = np.ones((2, 3))
    return q, k, v


def test_tiled_all_minus_inf_row_names_overflow(attend):
    # a row of -inf scores without a mask: an overflow, not "every key
    # masked"
    with (
        np.errstate(over="ignore"),
        pytest.raises(
            ValueError,
            match=r"query row at index \(1,\) has "
            r"allowed keys, but every score overflowed to -inf",
        ),
    ):
        attend(*huge_negative_scores(), block_q=1, block_k=1)


def test_tiled_causal_row_before_every_key_still_says_masked(attend):
    q, k, v = huge_negative_scores()
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


def test_tiled_default_query_positions_refuse_more_queries_than_keys(
    attend,
):
    with pytest.raises(ValueError, match=r"last Tq = 6 .* pass query_pos"):
        attend(*qkv(6, 4), causal=True, key_positions=np.arange(4))


@pytest.mark.parametrize("which", ["query_positions", "key_positions"])
def test_tiled_rejects_nan_positions(attend, which):
    positions = {
        "query_positions": np.arange(2.0, 6.0),
        "key_positions": np.arange(6.0),
    }
    positions[which][1] = np.nan
    with pytest.raises(ValueError, match=rf"{which} .* holds nan at"):
        attend(*qkv(4, 6), causal=True, block_k=2, **positions)


def test_tiled_mask_rule_refuses_what_is_not_a_rule(ref):
    q, k, v, _ = inputs(tq=4, tk=4, lead=(1,))
    with pytest.raises(TypeError, match="mask_rule must be a function"):
        run(ref, q, k, v, mask_rule=np.zeros((4, 4), bool))
    with pytest.raises(TypeError, match="mask_rule must return a boolean"):
        run(ref, q, k, v, mask_rule=lambda a, b: np.zeros((4, 4)))
    with pytest.raises(ValueError, match=r"mask_rule returned shape \(3,"):
        run(ref, q, k, v, mask_rule=lambda a, b: np.zeros((3, 3), bool))


def test_tiled_mask_rule_row_with_no_key_is_refused_or_zero(ref):
    # queries before every key: the rule empties those rows
    q, k, v, _ = inputs(tq=3, tk=6, lead=(1,))
    rule = rules(ref)["sliding_window"]
    kw = {
        "mask_rule": rule,
        "query_positions": np.array([0, 1, 12]),
        "key_positions": np.arange(6),
        "block_q": 2,
        "block_k": 2,
    }
    with pytest.raises(ValueError, match=r"query row at index \(0, 2\) has"):
        run(ref, q, k, v, **kw)
    got = run(ref, q, k, v, empty_rows="zero", **kw)
    dense = rules(numpy_ref)["sliding_window"](np.array([0, 1, 12]), range(6))
    want, _ = numpy_ref.attention(q, k, v, dense, empty_rows="zero")
    np.testing.assert_allclose(got, want, **TOL)
    assert not got[0, 2].any()


def test_tiles_computed_refuses_bad_inputs():
    rule = functools.partial(numpy_ref.chunked_mask, chunk=2)
    with pytest.raises(TypeError, match="mask_rule must be a function"):
        tiled.tiles_computed(None, range(4), range(4))
    with pytest.raises(ValueError, match="block_q must be at least 1"):
        tiled.tiles_computed(rule, range(4), range(4), block_q=0)
    with pytest.raises(ValueError, match="query_positions must be 1-D"):
        tiled.tiles_computed(rule, np.zeros((2, 2), int), range(4))


@pytest.mark.parametrize(
    ("broken", "error", "words"),
    [
        (lambda q, k: 0, TypeError, "must return a boolean mask"),
        (
            lambda q, k: np.zeros((len(q), len(k)), dtype=np.int64),
            TypeError,
            "must return a boolean mask",
        ),
        (
            lambda q, k: np.zeros((len(q) + 1, len(k)), dtype=bool),
            ValueError,
            "must broadcast to the tile",
        ),
    ],
)
def test_tiles_computed_checks_what_the_rule_returns(broken, error, words):
    # the count took any answer: 0.all() raised AttributeError, and an
    # int or misfit mask was counted as if it were the tile's
    with pytest.raises(error, match=words):
        tiled.tiles_computed(broken, range(4), range(4), 2, 2)


def test_tiled_rule_with_more_queries_than_keys_names_query_positions(ref):
    # the default positions Tk - Tq .. Tk - 1 start at -2: the rule's
    # guard named "query_positions = -2", which the caller never passed
    q, k, v, _ = inputs(tq=4, tk=2)
    rule = rules(ref)["sliding_window"]
    with pytest.raises(ValueError, match=r"Tq = 4 of the Tk = 2 .* at -2"):
        run(ref, q, k, v, mask_rule=rule)
    # with positions given, it is the dense pass under the rule's mask
    q_pos, k_pos = np.array([0, 1, 2, 3]), np.array([1, 2])
    got = run(
        ref,
        q,
        k,
        v,
        mask_rule=rule,
        query_positions=iter(q_pos),
        key_positions=k_pos,
        block_q=3,
        block_k=1,
        empty_rows="zero",
    )
    blocked = numpy_ref.sliding_window_mask(q_pos, k_pos, window=5)
    want, _ = numpy_ref.attention(q, k, v, blocked, empty_rows="zero")
    np.testing.assert_allclose(got, want, **TOL)  # row 0 has no key: 0
