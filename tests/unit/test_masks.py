"""The mask rules of numpy_ref and torch_ref: values, shapes, errors.

Each rule is checked against its definition written pair by pair in
plain Python (the issue's words), on 1-D and (B, T) positions, for
both mirrors through one parametrized fixture. causal_mask's two
alignments are SDPA's is_causal (top-left) and flash-attn's causal
(bottom-right); key_padding_mask gives (B, 1, 1, Tk), since a bare
(B, Tk) mask would broadcast as (Tq, Tk).
"""

import itertools
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mha_ref import kv_cache, numpy_ref, torch_ref
from mha_ref.tolerances import atol


@pytest.fixture(params=["numpy", "torch"])
def ref(request):
    """numpy_ref or torch_ref: both mirrors share every behaviour."""
    return numpy_ref if request.param == "numpy" else torch_ref


def as_numpy(mask):
    return mask.numpy() if isinstance(mask, torch.Tensor) else mask


def by_pairs(blocked, q_pos, k_pos):
    """The (Tq, Tk) mask of a per-pair definition: blocked(q, k) -> bool."""
    return np.array([[blocked(q, k) for k in k_pos] for q in q_pos])


# the definitions, one pair at a time: True = blocked
DEFINITIONS = {
    "sliding_window": lambda w, s: (
        lambda q, k: not (0 <= q - k < w or (k < s and k <= q))
    ),
    "chunked": lambda c: lambda q, k: not (q // c == k // c and k <= q),
    "prefix_lm": lambda p: lambda q, k: not (k < p or k <= q),
}

# unsorted, repeated and cache-like positions, as a tiled pass may pass
POSITIONS = [
    (np.arange(9), np.arange(9)),
    (np.arange(5, 9), np.arange(9)),  # queries after a cache
    (np.array([7, 2, 2, 0]), np.array([3, 0, 7, 1, 2, 9])),
]


@pytest.mark.parametrize(("q_pos", "k_pos"), POSITIONS)
@pytest.mark.parametrize(
    ("window", "sinks"), [(1, 0), (3, 0), (3, 2), (20, 1)]
)
def test_sliding_window_mask_matches_its_definition(
    ref, q_pos, k_pos, window, sinks
):
    got = ref.sliding_window_mask(q_pos, k_pos, window, sink_tokens=sinks)
    want = by_pairs(DEFINITIONS["sliding_window"](window, sinks), q_pos, k_pos)
    np.testing.assert_array_equal(as_numpy(got), want)


def test_sliding_window_mask_sees_itself_and_window_minus_one_keys(ref):
    # Hugging Face's sliding_window: W keys in all, the query included
    t, window = 12, 4
    got = as_numpy(ref.sliding_window_mask(range(t), range(t), window))
    allowed = (~got).sum(axis=-1)
    np.testing.assert_array_equal(allowed, np.minimum(np.arange(t) + 1, 4))
    assert not got[8, 5]
    assert got[8, 4]


@pytest.mark.parametrize(("q_pos", "k_pos"), POSITIONS)
@pytest.mark.parametrize("chunk", [1, 2, 4, 100])
def test_chunked_mask_matches_its_definition(ref, q_pos, k_pos, chunk):
    got = ref.chunked_mask(q_pos, k_pos, chunk)
    want = by_pairs(DEFINITIONS["chunked"](chunk), q_pos, k_pos)
    np.testing.assert_array_equal(as_numpy(got), want)


@pytest.mark.parametrize(("q_pos", "k_pos"), POSITIONS)
@pytest.mark.parametrize("prefix", [0, 1, 3, 50])
def test_prefix_lm_mask_matches_its_definition(ref, q_pos, k_pos, prefix):
    got = ref.prefix_lm_mask(q_pos, k_pos, prefix)
    want = by_pairs(DEFINITIONS["prefix_lm"](prefix), q_pos, k_pos)
    np.testing.assert_array_equal(as_numpy(got), want)


def test_prefix_lm_mask_of_prefix_zero_is_causal(ref):
    got = ref.prefix_lm_mask(range(6), range(6), 0)
    np.testing.assert_array_equal(as_numpy(got), numpy_ref.causal_mask(6))


def test_document_ids_label_each_token_with_its_document(ref):
    got = ref.document_ids([3, 1, 2])
    np.testing.assert_array_equal(as_numpy(got), [0, 0, 0, 1, 2, 2])
    # cu_seqlens = [0, 3, 4, 6]: document d holds cu[d] .. cu[d+1] - 1
    cu = np.cumsum([0, 3, 1, 2])
    want = np.searchsorted(cu, np.arange(6), side="right") - 1
    np.testing.assert_array_equal(as_numpy(got), want)


def test_document_mask_blocks_other_documents(ref):
    q_ids, k_ids = np.array([0, 1, 1, 5]), np.array([1, 5, 0, 0, 1])
    got = ref.document_mask(q_ids, k_ids)
    want = by_pairs(lambda a, b: a != b, q_ids, k_ids)
    np.testing.assert_array_equal(as_numpy(got), want)


def test_packed_causal_mask_is_causal_within_each_document(ref):
    lengths = [3, 1, 4]
    ids = np.repeat(np.arange(3), lengths)
    want = by_pairs(lambda i, j: ids[i] != ids[j] or j > i, range(8), range(8))
    np.testing.assert_array_equal(
        as_numpy(ref.packed_causal_mask(lengths)), want
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda ref, q, k: ref.sliding_window_mask(q, k, 3, sink_tokens=1),
        lambda ref, q, k: ref.chunked_mask(q, k, 3),
        lambda ref, q, k: ref.prefix_lm_mask(q, k, 2),
        lambda ref, q, k: ref.document_mask(q // 4, k // 4),
    ],
    ids=["sliding_window", "chunked", "prefix_lm", "document"],
)
def test_rules_of_batched_positions_give_one_mask_per_sequence(ref, make):
    # (B, T) positions -> (B, 1, Tq, Tk), row b from positions b alone
    q_pos = np.array([[0, 1, 2, 3, 4], [6, 7, 8, 9, 10]])
    k_pos = np.array([[0, 1, 2, 3, 4, 5, 6], [4, 5, 6, 7, 8, 9, 10]])
    got = as_numpy(make(ref, q_pos, k_pos))
    assert got.shape == (2, 1, 5, 7)
    for b in range(2):
        alone = as_numpy(make(ref, q_pos[b], k_pos[b]))
        np.testing.assert_array_equal(got[b, 0], alone)
    # a 1-D side is shared by every sequence
    shared = as_numpy(make(ref, q_pos, k_pos[1]))
    assert shared.shape == (2, 1, 5, 7)
    np.testing.assert_array_equal(
        shared[0, 0], as_numpy(make(ref, q_pos[0], k_pos[1]))
    )


def test_batched_rule_broadcasts_over_heads_in_attention(ref):
    # (B, 1, Tq, Tk) is what attention takes for (B, H, Tq, Tk) scores
    gen = np.random.default_rng(0)
    q, k, v = (gen.standard_normal((2, 3, 6, 4)) for _ in range(3))
    pos = np.array([np.arange(6), np.arange(6) + 10])
    mask = ref.sliding_window_mask(pos, pos, 2)
    if ref is torch_ref:
        q, k, v = (torch.from_numpy(a) for a in (q, k, v))
    out, _ = ref.attention(q, k, v, mask)
    one, _ = ref.attention(
        q[1], k[1], v[1], ref.sliding_window_mask(pos[1], pos[1], 2)
    )
    np.testing.assert_allclose(as_numpy(out[1]), as_numpy(one), atol=1e-14)


def test_rules_combine_with_or(ref):
    # a pair is blocked when any rule blocks it
    pos = np.arange(10)
    window = as_numpy(ref.sliding_window_mask(pos, pos, 4))
    chunks = as_numpy(ref.chunked_mask(pos, pos, 3))
    both = as_numpy(
        ref.sliding_window_mask(pos, pos, 4) | ref.chunked_mask(pos, pos, 3)
    )
    for i, j in itertools.product(range(10), repeat=2):
        assert both[i, j] == (window[i, j] or chunks[i, j])
    # a window of W >= T adds nothing to causal
    np.testing.assert_array_equal(
        as_numpy(ref.sliding_window_mask(pos, pos, 10)),
        numpy_ref.causal_mask(10),
    )


def test_rules_accept_whole_floats_and_any_int_dtype(ref):
    want = as_numpy(ref.chunked_mask(range(5), range(5), 2))
    for q in (np.arange(5.0), np.arange(5, dtype=np.uint8)):
        got = as_numpy(ref.chunked_mask(q, np.arange(5, dtype=np.int16), 2))
        np.testing.assert_array_equal(got, want)
    # uint8 positions must not wrap around in q - k
    got = as_numpy(
        ref.sliding_window_mask(
            np.array([0], np.uint8), np.array([3], np.uint8), 2
        )
    )
    assert got.tolist() == [[True]]


def test_torch_rules_follow_the_positions_device_and_give_bools():
    pos = torch.arange(4)
    for mask in (
        torch_ref.sliding_window_mask(pos, pos, 2),
        torch_ref.chunked_mask(pos, pos, 2),
        torch_ref.prefix_lm_mask(pos, pos, 1),
        torch_ref.document_mask(pos, pos),
    ):
        assert mask.dtype == torch.bool
        assert mask.device == pos.device


RULES = {
    "sliding_window": lambda ref, q, k: ref.sliding_window_mask(q, k, 2),
    "chunked": lambda ref, q, k: ref.chunked_mask(q, k, 2),
    "prefix_lm": lambda ref, q, k: ref.prefix_lm_mask(q, k, 1),
}


def test_cross_attention_reuses_source_keys_values_at_every_step():
    # the source's K and V projected once equal the full cross pass,
    # step by step, with the source padding and no causal mask
    torch.manual_seed(0)
    layer = torch_ref.MultiHeadAttention(
        16, 4, n_kv_head=2, bias=True, dtype=torch.float64
    )
    target = torch.randn(2, 5, 16, dtype=torch.float64)
    source = torch.randn(2, 9, 16, dtype=torch.float64)
    padding = torch_ref.key_padding_mask([9, 4])  # (B, 1, 1, S)
    full = layer(target, mask=padding, context=source)[0]
    keys_values = kv_cache.cross_keys_values(layer, source)
    assert keys_values[0].shape == (2, 2, 9, 4)  # (B, H_kv, S, dh)
    steps = [
        kv_cache.cross_step(layer, target[:, t : t + 1], keys_values, padding)
        for t in range(5)
    ]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=0, atol=1e-13)
    # what sits in the padding of the source changes nothing
    source[1, 4:] = 1e3
    again = kv_cache.cross_step(
        layer, target, kv_cache.cross_keys_values(layer, source), padding
    )
    torch.testing.assert_close(again, full, rtol=0, atol=1e-13)


def test_cross_keys_values_refuse_rope_and_a_bad_source():
    layer = torch_ref.MultiHeadAttention(8, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match="context must have shape"):
        kv_cache.cross_keys_values(layer, torch.zeros(1, 3, 4).double())
    with pytest.raises(TypeError, match=r"context is torch\.float32"):
        kv_cache.cross_keys_values(layer, torch.zeros(1, 3, 8))
    rope = torch_ref.MultiHeadAttention(8, 2, rope=True, dtype=torch.float64)
    with pytest.raises(ValueError, match="self-attention only"):
        kv_cache.cross_keys_values(rope, torch.zeros(1, 3, 8).double())


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32, np.uint64])
def test_document_ids_take_unsigned_lengths(ref, dtype):
    # torch has no repeat_interleave for uint16/32 (NotImplementedError),
    # NumPy's repeat refused uint64 counts with its own cast error
    lengths = np.array([2, 1, 3], dtype=dtype)
    if ref is torch_ref and dtype != np.uint64:
        lengths = torch.from_numpy(lengths)
    assert as_numpy(ref.document_ids(lengths)).tolist() == [0, 0, 1, 2, 2, 2]
    blocked = as_numpy(ref.packed_causal_mask(lengths))
    ids = [0, 0, 1, 2, 2, 2]
    want = by_pairs(lambda q, k: ids[q] != ids[k] or k > q, range(6), range(6))
    np.testing.assert_array_equal(blocked, want)


def test_position_pairs_of_empty_batched_positions_are_empty(ref):
    # (B, 0) positions: reshape(-1, 1, 0, 1) raised torch's own error
    q, k = ref.position_pairs(np.zeros((2, 0), int), np.zeros((2, 3), int))
    assert tuple(q.shape) == (2, 1, 0, 1)
    assert tuple(k.shape) == (2, 1, 1, 3)
    blocked = ref.sliding_window_mask(np.zeros((2, 0), int), [0, 1], 2)
    assert tuple(blocked.shape) == (2, 1, 0, 2)


# causal_mask says which corner it aligns to


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


def test_bottom_right_causal_matches_sdpa_causal_lower_right(
    forward_pass, bottom_right_case
):
    from torch.nn.attention.bias import causal_lower_right

    q, k, v, _, mask = bottom_right_case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "will produce NaNs": it gives 0
        bias = causal_lower_right(6, 4)
        expected = F.scaled_dot_product_attention(
            *(torch.from_numpy(a) for a in (q, k, v)), attn_mask=bias
        )
    out = as_numpy(forward_pass(q, k, v, mask, empty_rows="zero"))
    np.testing.assert_allclose(out, expected.numpy(), rtol=0, atol=1e-10)
    assert math.isclose(float(expected[..., :2, :].abs().max()), 0.0)


# key_padding_mask: (B, 1, 1, Tk), since a (B, Tk) mask reads as (Tq, Tk)

LENGTHS = [5, 2, 4]  # B = 3 sequences of keys, padded to Tk = 5


def test_key_padding_mask_blocks_keys_past_each_length(ref):
    mask = np.asarray(ref.key_padding_mask(LENGTHS))
    assert mask.shape == (3, 1, 1, 5)
    assert mask.dtype == bool
    expected = np.arange(5)[None, :] >= np.array(LENGTHS)[:, None]
    np.testing.assert_array_equal(mask[:, 0, 0], expected)
    again = np.asarray(
        ref.key_padding_mask(
            np.asarray(ref.key_padding_mask(LENGTHS, tk=7))[:, 0, 0]
        )
    )
    assert again.shape == (3, 1, 1, 7)
    assert again[:, 0, 0, 5:].all()


def test_key_padding_mask_matches_attention_on_each_sequence(rng):
    tol = {"atol": atol("float64"), "rtol": 0}
    b = tq = len(LENGTHS)  # B == Tq: the case a (B, Tk) mask gets wrong
    q = rng.standard_normal((b, 2, tq, 4))  # (B, H, Tq, d)
    k = rng.standard_normal((b, 2, 5, 4))  # (B, H, Tk, d)
    v = rng.standard_normal((b, 2, 5, 3))  # (B, H, Tk, dv)
    padding = numpy_ref.key_padding_mask(LENGTHS)  # (B, 1, 1, Tk)
    out, _ = numpy_ref.attention(q, k, v, padding)
    for i, n in enumerate(LENGTHS):
        alone, _ = numpy_ref.attention(q[i], k[i, :, :n], v[i, :, :n])
        np.testing.assert_allclose(out[i], alone, **tol)
    torch_out, _ = torch_ref.attention(
        *(torch.from_numpy(a) for a in (q, k, v)),
        torch_ref.key_padding_mask(LENGTHS),
    )
    np.testing.assert_allclose(torch_out.numpy(), out, **tol)
    # the bare (B, Tk) mask broadcasts as (Tq, Tk): row i of every batch
    # gets sequence i's padding, which is silently a different answer
    bare = padding[:, 0, 0]  # (B, Tk)
    wrong, _ = numpy_ref.attention(q, k, v, bare)
    assert np.abs(wrong - out).max() > 0.1


def test_rules_take_the_largest_int64_sizes(ref):
    # a size at the edge of int64 is a window or prefix that covers all
    big = 2**63 - 1
    got = ref.sliding_window_mask([0, 1], [0, 1], big, sink_tokens=big)
    assert as_numpy(got).tolist() == [[False, True], [False, False]]
    assert not as_numpy(ref.prefix_lm_mask([0, 1], [0, 1], big)).any()


ALL_RULES = {
    **RULES,
    "document": lambda ref, q, k: ref.document_mask(q, k),
    "pairs": lambda ref, q, k: np.not_equal(
        *(as_numpy(a) for a in ref.position_pairs(q, k))
    ),
}
FORMS = {
    "iterator": lambda p: iter(p.tolist()),
    "list": lambda p: p.tolist(),
    "bfloat16 tensor": lambda p: torch.tensor(p, dtype=torch.bfloat16),
    "float tensor with grad": lambda p: torch.tensor(
        p, dtype=torch.float32, requires_grad=True
    ),
    "uint8 tensor": lambda p: torch.tensor(p, dtype=torch.uint8),
}


@pytest.mark.parametrize("rule", list(ALL_RULES))
@pytest.mark.parametrize("form", list(FORMS))
def test_rules_take_positions_in_every_form(ref, rule, form):
    # an iterator was read twice (guard, then the rule) in both mirrors;
    # NumPy's rules called .numpy() on bfloat16 and requires-grad tensors
    q_pos, k_pos = np.array([7, 2, 2, 0]), np.array([3, 0, 7, 1, 2, 9])
    want = as_numpy(ALL_RULES[rule](numpy_ref, q_pos, k_pos))
    q, k = FORMS[form](q_pos), FORMS[form](k_pos)
    got = as_numpy(ALL_RULES[rule](ref, q, k))
    np.testing.assert_array_equal(got, want)
    if rule in ("sliding_window",):  # and the definition, pair by pair
        definition = DEFINITIONS["sliding_window"](2, 0)
        np.testing.assert_array_equal(got, by_pairs(definition, q_pos, k_pos))
