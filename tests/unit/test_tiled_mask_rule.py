"""tiled.py's mask_rule: values, gradients and the tiles it skips.

The oracle is numpy_ref.attention (and attention_backward) with the
rule's dense mask, in float64; the skipped tiles are counted on the
loop itself and against the tiles of the dense mask that hold at least
one allowed pair.
"""

import functools

import numpy as np
import pytest
import torch

from mha_ref import numpy_ref, tiled, torch_ref

TOL = {"rtol": 0, "atol": 1e-12}
T = 29  # ragged against every block below
IDS = numpy_ref.document_ids([5, 11, 1, 12])  # four packed documents


def rules(ref):
    """Rules of positions, NumPy or PyTorch: the builders, bound."""
    ids = np.asarray(IDS) if ref is numpy_ref else torch.from_numpy(IDS)

    def packed(q_pos, k_pos):  # causal within each document
        other = ref.document_mask(ids[q_pos], ids[k_pos])
        return other | ref.causal_mask_for_positions(q_pos, k_pos)

    return {
        "sliding_window": functools.partial(ref.sliding_window_mask, window=5),
        "sinks": functools.partial(
            ref.sliding_window_mask, window=3, sink_tokens=2
        ),
        "chunked": functools.partial(ref.chunked_mask, chunk=6),
        "prefix_lm": functools.partial(ref.prefix_lm_mask, prefix=7),
        "packed": packed,
    }


NAMES = list(rules(numpy_ref))


def inputs(tq=T, tk=T, seed=0, lead=(2, 3)):
    gen = np.random.default_rng(seed)
    q = gen.standard_normal((*lead, tq, 8))
    k, v = (gen.standard_normal((*lead, tk, 8)) for _ in "kv")
    dout = gen.standard_normal((*lead, tq, 8))
    return q, k, v, dout


def run(ref, *arrays, **kw):
    """The tiled forward of this mirror, on NumPy arrays."""
    if ref is numpy_ref:
        return tiled.tiled_attention_numpy(*arrays, **kw)
    tensors = [torch.from_numpy(a) for a in arrays]
    return tiled.tiled_attention_torch(*tensors, **kw).numpy()


def run_backward(ref, *arrays, **kw):
    if ref is numpy_ref:
        return tiled.tiled_attention_backward_numpy(*arrays, **kw)
    tensors = [torch.from_numpy(a) for a in arrays]
    grads = tiled.tiled_attention_backward_torch(*tensors, **kw)
    return [g.numpy() for g in grads]


@pytest.fixture(params=["numpy", "torch"])
def ref(request):
    return numpy_ref if request.param == "numpy" else torch_ref


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("block_q", "block_k"), [(4, 4), (8, 3), (64, 64)])
def test_tiled_mask_rule_equals_dense_mask(ref, name, block_q, block_k):
    q, k, v, _ = inputs()
    pos = np.arange(T)
    dense = rules(numpy_ref)[name](pos, pos)
    want, _ = numpy_ref.attention(q, k, v, dense)
    got = run(
        ref,
        q,
        k,
        v,
        mask_rule=rules(ref)[name],
        block_q=block_q,
        block_k=block_k,
    )
    np.testing.assert_allclose(got, want, **TOL)


@pytest.mark.parametrize("name", NAMES)
def test_tiled_backward_mask_rule_equals_dense_gradients(ref, name):
    q, k, v, dout = inputs(seed=1)
    pos = np.arange(T)
    dense = rules(numpy_ref)[name](pos, pos)
    want = numpy_ref.attention_backward(q, k, v, dout, dense)
    got = run_backward(
        ref, q, k, v, dout, mask_rule=rules(ref)[name], block_q=5, block_k=4
    )
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, **TOL)


def test_tiled_mask_rule_gradients_match_autograd_on_the_reference():
    # torch.autograd through torch_ref.attention, the dense mask
    q, k, v, dout = (torch.from_numpy(a) for a in inputs(seed=2))
    pos = torch.arange(T)
    rule = functools.partial(torch_ref.sliding_window_mask, window=4)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    out, _ = torch_ref.attention(*leaves, rule(pos, pos))
    out.backward(dout)
    got = tiled.tiled_attention_backward_torch(
        q, k, v, dout, mask_rule=rule, block_q=6, block_k=6
    )
    for g, leaf in zip(got, leaves, strict=True):
        torch.testing.assert_close(g, leaf.grad, **TOL)


def test_tiled_mask_rule_with_cached_positions_and_grouped_heads(ref):
    # queries at the end of the keys; 4 query heads share 2 key heads
    tq, tk = 9, T
    gen = np.random.default_rng(3)
    q = gen.standard_normal((2, 4, tq, 8))
    k, v = (gen.standard_normal((2, 2, tk, 8)) for _ in "kv")
    q_pos, k_pos = np.arange(tk - tq, tk), np.arange(tk)
    rule = rules(ref)["sinks"]
    dense = rules(numpy_ref)["sinks"](q_pos, k_pos)
    want, _ = numpy_ref.attention(q, k, v, dense)
    got = run(ref, q, k, v, mask_rule=rule, block_q=4, block_k=5)
    np.testing.assert_allclose(got, want, **TOL)
    # explicit positions give the same as the default bottom-right ones
    got = run(
        ref,
        q,
        k,
        v,
        mask_rule=rule,
        query_positions=q_pos,
        key_positions=k_pos,
        block_q=4,
        block_k=5,
    )
    np.testing.assert_allclose(got, want, **TOL)


def test_tiled_mask_rule_combines_with_causal_and_a_dense_mask(ref):
    # causal=True and a key-padding mask add to the rule with |
    q, k, v, _ = inputs(seed=4)
    pos = np.arange(T)
    padding = numpy_ref.key_padding_mask([T, 20])  # (2, 1, 1, T)
    prefix = rules(numpy_ref)["prefix_lm"](pos, pos)
    dense = prefix | numpy_ref.causal_mask(T) | padding
    want, _ = numpy_ref.attention(q, k, v, dense)
    mask = padding if ref is numpy_ref else torch.from_numpy(padding)
    if ref is numpy_ref:
        got = tiled.tiled_attention_numpy(
            q,
            k,
            v,
            mask,
            causal=True,
            mask_rule=rules(ref)["prefix_lm"],
            block_q=4,
            block_k=4,
        )
    else:
        tensors = (torch.from_numpy(a) for a in (q, k, v))
        got = tiled.tiled_attention_torch(
            *tensors,
            mask,
            causal=True,
            mask_rule=rules(ref)["prefix_lm"],
            block_q=4,
            block_k=4,
        ).numpy()
    np.testing.assert_allclose(got, want, **TOL)


def test_tiled_mask_rule_of_batched_ids_masks_each_sequence(ref):
    # a rule may answer (B, 1, bq, bk): one packing per sequence
    ids = np.stack([IDS, numpy_ref.document_ids([20, 9])])  # (B, T)
    ids_ref = ids if ref is numpy_ref else torch.from_numpy(ids)

    def packed(q_pos, k_pos):
        return ref.document_mask(ids_ref[:, q_pos], ids_ref[:, k_pos])

    q, k, v, _ = inputs(seed=5)
    want, _ = numpy_ref.attention(q, k, v, numpy_ref.document_mask(ids, ids))
    got = run(ref, q, k, v, mask_rule=packed, block_q=8, block_k=8)
    np.testing.assert_allclose(got, want, **TOL)


def count_updates(monkeypatch, ref):
    """Count the tiles the loop folds in (calls of the online update)."""
    calls = []
    name = f"online_softmax_update_{'numpy' if ref is numpy_ref else 'torch'}"
    update = getattr(tiled, name)

    def counted(state, s, v_block):
        calls.append(s.shape[-2:])
        return update(state, s, v_block)

    monkeypatch.setattr(tiled, name, counted)
    return calls


def tiles_with_an_allowed_pair(dense, block_q, block_k):
    """The oracle: tiles of the dense mask not blocked everywhere."""
    tq, tk = dense.shape
    return sum(
        not dense[i : i + block_q, j : j + block_k].all()
        for i in range(0, tq, block_q)
        for j in range(0, tk, block_k)
    )


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("block_q", "block_k"), [(4, 4), (5, 3)])
def test_tiled_mask_rule_computes_only_tiles_with_an_allowed_pair(
    ref, monkeypatch, name, block_q, block_k
):
    q, k, v, _ = inputs(lead=(1,))
    pos = np.arange(T)
    dense = rules(numpy_ref)[name](pos, pos)
    want = tiles_with_an_allowed_pair(dense, block_q, block_k)
    calls = count_updates(monkeypatch, ref)
    run(
        ref,
        q,
        k,
        v,
        mask_rule=rules(ref)[name],
        block_q=block_q,
        block_k=block_k,
    )
    assert len(calls) == want
    computed, total = tiled.tiles_computed(
        rules(numpy_ref)[name], pos, pos, block_q, block_k
    )
    assert computed == want
    assert total == -(-T // block_q) * -(-T // block_k)
    assert computed < total  # every rule here skips something


def test_tiles_computed_of_a_window_grows_linearly_with_length():
    # a window of 64 keys: about 2 tiles of 64 per query block, not T / 64
    rule = functools.partial(numpy_ref.sliding_window_mask, window=64)
    counts = [
        tiled.tiles_computed(rule, np.arange(t), np.arange(t), 64, 64)
        for t in (512, 1024, 2048)
    ]
    assert [c for c, _ in counts] == [15, 31, 63]  # 2 * T / 64 - 1
    assert [n for _, n in counts] == [64, 256, 1024]


def test_tiled_mask_rule_of_the_other_mirror_gives_the_same(ref):
    # a NumPy rule in the torch pass and a torch rule in the NumPy pass
    other = torch_ref if ref is numpy_ref else numpy_ref
    q, k, v, _ = inputs(seed=7)
    pos = np.arange(T)
    want, _ = numpy_ref.attention(
        q, k, v, rules(numpy_ref)["chunked"](pos, pos)
    )
    got = run(ref, q, k, v, mask_rule=rules(other)["chunked"], block_q=7)
    np.testing.assert_allclose(got, want, **TOL)


def test_tiled_backward_reads_iterator_positions_once(ref):
    # the forward read the iterators, the backward's loop found them
    # empty: "query_positions must have shape (5,), got (0,)"
    q, k, v, dout = inputs(tq=5, tk=7)
    q_pos, k_pos = [2, 3, 4, 5, 6], [0, 1, 2, 3, 4, 5, 6]
    rule = rules(ref)["chunked"]
    got = run_backward(
        ref,
        q,
        k,
        v,
        dout,
        mask_rule=rule,
        causal=True,
        query_positions=iter(q_pos),
        key_positions=iter(k_pos),
        block_q=2,
        block_k=3,
    )
    blocked = numpy_ref.chunked_mask(q_pos, k_pos, chunk=6)
    want = numpy_ref.attention_backward(q, k, v, dout, blocked)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, **TOL)
