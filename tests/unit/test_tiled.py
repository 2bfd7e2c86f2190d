"""The tiled (online-softmax) pass equals plain attention, in less memory.

Values: NumPy and PyTorch tiled outputs against numpy_ref.attention and
torch_ref.attention, over block sizes that divide T, leave a ragged last
block, are 1, or exceed T; causal masks from positions when Tq != Tk.
Memory: the peak grows about linearly in T for the tiled pass and
quadratically for the plain one (ratios between T and 2T, never time).
Both passes, forward and backward, also take grouped-query k and v,
align a causal Tq > Tk to the bottom right and give empty_rows="zero"
rows a log-sum-exp of +inf; a row of -inf scores is named an overflow.
"""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_ref import numpy_ref, tiled, torch_ref
from mha_ref.memory import peak_bytes_numpy, peak_bytes_torch_cpu
from mha_ref.tolerances import atol

LEAD = (2, 3)  # (B, H)
D, DV = 4, 5  # head sizes of q/k and of v
BLOCKS = [(1, 1), (3, 4), (4, 4), (5, 7), (16, 16), (64, 64)]


def qkv(tq, tk, dtype=np.float64, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((*LEAD, tq, D)) * scale
    k = rng.standard_normal((*LEAD, tk, D))
    v = rng.standard_normal((*LEAD, tk, DV))
    return q.astype(dtype), k.astype(dtype), v.astype(dtype)


def as_torch(*arrays):
    return [torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]


def aligned_mask(tq, tk):
    """Position-aligned causal mask: the queries are the last Tq keys."""
    return numpy_ref.causal_mask_for_positions(
        np.arange(tk - tq, tk), np.arange(tk)
    )


@pytest.mark.parametrize(("block_q", "block_k"), BLOCKS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("tq", "tk"), [(16, 16), (12, 12), (5, 13), (1, 9)])
def test_tiled_numpy_matches_reference(tq, tk, causal, block_q, block_k):
    q, k, v = qkv(tq, tk)
    mask = aligned_mask(tq, tk) if causal else None
    expected, _ = numpy_ref.attention(q, k, v, mask)
    out = tiled.tiled_attention_numpy(
        q, k, v, causal=causal, block_q=block_q, block_k=block_k
    )
    assert out.shape == expected.shape
    np.testing.assert_allclose(out, expected, rtol=0, atol=atol("float64"))


@pytest.mark.parametrize(("block_q", "block_k"), BLOCKS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("tq", "tk"), [(16, 16), (12, 12), (5, 13)])
def test_tiled_torch_matches_reference(tq, tk, causal, block_q, block_k):
    q, k, v = as_torch(*qkv(tq, tk))
    mask = torch.from_numpy(aligned_mask(tq, tk)) if causal else None
    expected, _ = torch_ref.attention(q, k, v, mask)
    out = tiled.tiled_attention_torch(
        q, k, v, causal=causal, block_q=block_q, block_k=block_k
    )
    assert out.shape == expected.shape
    torch.testing.assert_close(out, expected, rtol=0, atol=atol("float64"))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tiled_float_dtypes_within_tolerance(dtype):
    q, k, v = qkv(20, 20, dtype=dtype, seed=1)
    mask = numpy_ref.causal_mask(20)
    expected, _ = numpy_ref.attention(q, k, v, mask)
    out_np = tiled.tiled_attention_numpy(
        q, k, v, causal=True, block_q=6, block_k=7
    )
    out_torch = tiled.tiled_attention_torch(
        *as_torch(q, k, v), causal=True, block_q=6, block_k=7
    )
    assert out_np.dtype == dtype
    assert out_torch.dtype == as_torch(q)[0].dtype
    tol = atol(dtype)
    np.testing.assert_allclose(out_np, expected, rtol=0, atol=tol)
    np.testing.assert_allclose(out_torch.numpy(), expected, rtol=0, atol=tol)


def test_tiled_rescales_when_a_later_block_raises_the_max():
    # large scores that grow along the keys: every new block has a higher
    # max, so dropping the exp(m_old - m_new) factor would be far off
    q, _, v = qkv(4, 8, seed=2)
    k = np.broadcast_to(np.linspace(0, 40, 8)[:, None], (*LEAD, 8, D))
    q = np.abs(q) + 1.0  # positive queries: scores rise with the key
    expected, _ = numpy_ref.attention(q, k, v)
    out = tiled.tiled_attention_numpy(q, k, v, block_q=4, block_k=1)
    np.testing.assert_allclose(out, expected, rtol=0, atol=atol("float64"))
    state = (np.array([[0.0]]), np.array([[1.0]]), np.array([[2.0]]))
    # one old key (score 0, value 2) then a new one (score 50, value 4)
    m, row_sum, acc = tiled.online_softmax_update_numpy(
        state, np.array([[50.0]]), np.array([[4.0]])
    )
    weight_old = 1 / (1 + np.exp(50.0))
    assert m[0, 0] == 50.0
    np.testing.assert_allclose(
        acc / row_sum, [[2 * weight_old + 4 * (1 - weight_old)]], rtol=1e-15
    )


def test_tiled_with_a_user_mask_and_causal_positions():
    tq, tk = 6, 11
    q, k, v = qkv(tq, tk, seed=3)
    rng = np.random.default_rng(4)
    padding = rng.random((LEAD[0], 1, 1, tk)) < 0.3  # (B, 1, 1, Tk)
    padding[..., -1] = False  # the last key stays visible to every row
    expected, _ = numpy_ref.attention(q, k, v, padding | aligned_mask(tq, tk))
    out_np = tiled.tiled_attention_numpy(
        q, k, v, mask=padding, causal=True, block_q=4, block_k=3
    )
    out_torch = tiled.tiled_attention_torch(
        *as_torch(q, k, v),
        mask=torch.from_numpy(padding),
        causal=True,
        block_q=4,
        block_k=3,
    )
    tol = atol("float64")
    np.testing.assert_allclose(out_np, expected, rtol=0, atol=tol)
    np.testing.assert_allclose(out_torch.numpy(), expected, rtol=0, atol=tol)


def test_tiled_causal_with_unsorted_positions():
    # skipping tiles "in the future" must not assume sorted positions
    tq, tk = 5, 9
    q, k, v = qkv(tq, tk, seed=5)
    q_pos = np.array([8, 3, 6, 4, 7])
    k_pos = np.array([7, 8, 0, 5, 1, 6, 2, 3, 4])  # tile 1: the future
    mask = numpy_ref.causal_mask_for_positions(q_pos, k_pos)
    expected, _ = numpy_ref.attention(q, k, v, mask)
    kw = {"causal": True, "block_q": 2, "block_k": 2}
    out_np = tiled.tiled_attention_numpy(
        q, k, v, query_positions=q_pos, key_positions=k_pos, **kw
    )
    out_torch = tiled.tiled_attention_torch(
        *as_torch(q, k, v),
        query_positions=torch.from_numpy(q_pos),
        key_positions=torch.from_numpy(k_pos),
        **kw,
    )
    tol = atol("float64")
    np.testing.assert_allclose(out_np, expected, rtol=0, atol=tol)
    np.testing.assert_allclose(out_torch.numpy(), expected, rtol=0, atol=tol)


def test_tiled_torch_gradients_match_reference():
    q, k, v = (t.requires_grad_() for t in as_torch(*qkv(7, 7, seed=7)))
    mask = torch_ref.causal_mask(7)
    expected = torch.autograd.grad(
        torch_ref.attention(q, k, v, mask)[0].square().sum(), (q, k, v)
    )
    got = torch.autograd.grad(
        tiled.tiled_attention_torch(q, k, v, causal=True, block_q=3, block_k=2)
        .square()
        .sum(),
        (q, k, v),
    )
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=0, atol=atol("float64"))


@settings(max_examples=40, deadline=None)
@given(
    tq=st.integers(1, 12),
    extra=st.integers(0, 6),
    block_q=st.integers(1, 14),
    block_k=st.integers(1, 14),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_tiled_numpy_matches_reference_for_any_blocks(
    tq, extra, block_q, block_k, causal, seed
):
    tk = tq + extra  # queries at the end of the keys: no empty row
    q, k, v = qkv(tq, tk, seed=seed)
    mask = aligned_mask(tq, tk) if causal else None
    expected, _ = numpy_ref.attention(q, k, v, mask)
    out = tiled.tiled_attention_numpy(
        q, k, v, causal=causal, block_q=block_q, block_k=block_k
    )
    np.testing.assert_allclose(out, expected, rtol=0, atol=atol("float64"))


# Input errors: each check fails on a bad case, with a clear message.


@pytest.fixture(params=["numpy", "torch"])
def attend(request):
    """The tiled function of one framework, taking NumPy inputs."""
    if request.param == "numpy":
        return tiled.tiled_attention_numpy

    def torch_version(q, k, v, mask=None, **kw):
        mask = None if mask is None else torch.from_numpy(np.asarray(mask))
        return tiled.tiled_attention_torch(*as_torch(q, k, v), mask, **kw)

    return torch_version


def position_oracle(tq, tk, q_pos, k_pos):
    """float64 numpy_ref.attention under the mask from these positions."""
    q, k, v = qkv(tq, tk)
    mask = numpy_ref.causal_mask_for_positions(
        np.asarray(q_pos, np.float64), np.asarray(k_pos, np.float64)
    )
    return numpy_ref.attention(q, k, v, mask)[0]


def test_tiled_default_query_positions_are_the_last_of_key_positions(
    attend,
):
    # the docstring's promise: the queries are the last Tq of the Tk
    # key positions, also when those do not start at 0
    key_positions = np.arange(10, 16)  # Tk = 6
    got = attend(*qkv(4, 6), causal=True, key_positions=key_positions)
    oracle = position_oracle(4, 6, key_positions[2:], key_positions)
    np.testing.assert_allclose(np.asarray(got), oracle, atol=atol("float64"))


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32, np.uint64])
def test_tiled_accepts_unsigned_positions(attend, dtype):
    got = attend(
        *qkv(4, 6),
        causal=True,
        query_positions=np.arange(2, 6, dtype=dtype),
        key_positions=np.arange(6, dtype=dtype),
        block_q=3,
        block_k=2,
    )
    oracle = position_oracle(4, 6, np.arange(2, 6), np.arange(6))
    np.testing.assert_allclose(np.asarray(got), oracle, atol=atol("float64"))


def test_tiled_reads_iterator_positions_once(attend):
    got = attend(
        *qkv(4, 6),
        causal=True,
        query_positions=iter([5, 2, 4, 3]),
        key_positions=(j for j in range(6)),
        block_q=3,
        block_k=2,
    )
    oracle = position_oracle(4, 6, [5, 2, 4, 3], np.arange(6))
    np.testing.assert_allclose(np.asarray(got), oracle, atol=atol("float64"))


# Grouped-query heads, Tq > Tk, empty_rows="zero": against SDPA

ATOL64 = 1e-10  # float64 against SDPA and autograd: ~1e-15 in practice


def draw(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


def as_numpy(x):
    return x.detach().double().numpy() if isinstance(x, torch.Tensor) else x


def assert_all_close(got, expected, names=("dq", "dk", "dv")):
    for name, g, e in zip(names, got, expected, strict=True):
        g = as_numpy(g)
        assert g.shape == e.shape, (name, g.shape, e.shape)
        np.testing.assert_allclose(g, e, rtol=0, atol=ATOL64, err_msg=name)


GQA_CASES = {
    "plain": {},
    "mask": {"mask": "random"},
    "causal": {"causal": True},
}


@pytest.mark.parametrize("case", GQA_CASES)
@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_tiled_passes_take_grouped_query_heads(
    framework, case, sdpa_reference
):
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
        tensors = as_torch(q, k, v)
        mask = None if mask is None else torch.from_numpy(mask)
        out = tiled.tiled_attention_torch(*tensors, mask, **kw, **blocks)
        grads = tiled.tiled_attention_backward_torch(
            *tensors, torch.from_numpy(dout), mask, **kw, **blocks
        )
    assert_all_close([out], [out_ref], names=["out"])
    assert_all_close(grads, expected)  # dk, dv: (1, 2, 5, 8), per group
    plain, _ = numpy_ref.attention(q, k, v, full)
    np.testing.assert_allclose(as_numpy(out), plain, rtol=0, atol=ATOL64)


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_tiled_causal_more_queries_than_keys_is_bottom_right(
    framework, bottom_right_case, sdpa_reference
):
    # the tiled default aligns the queries to the last keys: with
    # Tq > Tk the first Tq - Tk rows come before every key, as flash-attn
    q, k, v, dout, mask = bottom_right_case
    out_ref, expected = sdpa_reference(q, k, v, dout, mask)
    kw = {"causal": True, "block_q": 4, "block_k": 3, "empty_rows": "zero"}
    if framework == "numpy":
        out = tiled.tiled_attention_numpy(q, k, v, **kw)
        grads = tiled.tiled_attention_backward_numpy(q, k, v, dout, **kw)
    else:
        out = tiled.tiled_attention_torch(*as_torch(q, k, v), **kw)
        grads = tiled.tiled_attention_backward_torch(
            *as_torch(q, k, v, dout), **kw
        )
    assert_all_close([out], [out_ref], names=["out"])
    assert_all_close(grads, expected)


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_tiled_empty_rows_zero_log_sum_exp_is_inf(framework, masked_row_case):
    # L = +inf for a row with no key makes exp(S - L) = 0 in the backward
    q, k, v, _, mask = masked_row_case
    kw = {"return_lse": True, "empty_rows": "zero", "block_k": 2}
    if framework == "numpy":
        _, lse = tiled.tiled_attention_numpy(q, k, v, mask, **kw)
    else:
        _, lse = tiled.tiled_attention_torch(*as_torch(q, k, v, mask), **kw)
        lse = lse.numpy()
    assert np.isposinf(lse[..., 2]).all()
    assert np.isfinite(lse[..., [0, 1, 3]]).all()


# Memory: ratios of peak bytes between T and 2T.

MEM_LEAD, MEM_D, MEM_BLOCK = (1, 2), 16, 32


def mem_qkv(t, to_torch=False):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((*MEM_LEAD, t, MEM_D)) for _ in range(3)]
    return as_torch(*arrays) if to_torch else arrays


@pytest.mark.slow
@pytest.mark.parametrize(
    ("measure", "to_torch"),
    [(peak_bytes_numpy, False), (peak_bytes_torch_cpu, True)],
)
def test_peak_bytes_sees_an_allocation(measure, to_torch):
    # the measuring tool itself: a (512, 512) float64 buffer is 2 MiB
    def allocate():
        return (
            torch.ones(512, 512, dtype=torch.float64)
            if to_torch
            else np.ones((512, 512))
        )

    assert 2**21 <= measure(allocate) < 2**21 + 2**16
    assert measure(lambda: None) < 2**16


def test_peak_bytes_numpy_leaves_the_callers_gc_and_tracemalloc_alone():
    # a caller with its own tracemalloc session, the collector off and
    # objects frozen gets all three back as they were. In a fresh
    # interpreter: in this one, objects earlier tests left behind could
    # be freed meanwhile and move the freeze count.
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import gc, tracemalloc
        import numpy as np
        from mha_ref.memory import peak_bytes_numpy
        tracemalloc.start()
        gc.disable()
        gc.freeze()
        frozen = gc.get_freeze_count()
        try:
            peak = peak_bytes_numpy(np.ones, (256, 256))  # 512 KiB
            assert tracemalloc.is_tracing()
            assert not gc.isenabled()
            assert gc.get_freeze_count() == frozen, gc.get_freeze_count()
        finally:
            gc.unfreeze()
            gc.enable()
            tracemalloc.stop()
        assert 2**19 <= peak < 2**19 + 2**16, peak  # above what it held
        peak_bytes_numpy(np.ones, 8)  # and with no session of the caller's
        assert not tracemalloc.is_tracing()
        assert gc.isenabled()
        assert gc.get_freeze_count() == 0
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("measure", "plain", "tiled_fn", "to_torch"),
    [
        (
            peak_bytes_numpy,
            numpy_ref.attention,
            tiled.tiled_attention_numpy,
            False,
        ),
        (
            peak_bytes_torch_cpu,
            torch_ref.attention,
            tiled.tiled_attention_torch,
            True,
        ),
    ],
)
def test_tiled_peak_memory_grows_linearly(measure, plain, tiled_fn, to_torch):
    kw = {"block_q": MEM_BLOCK, "block_k": MEM_BLOCK}
    peaks = {}
    for t in (256, 512):
        q, k, v = mem_qkv(t, to_torch)
        peaks[t] = (measure(plain, q, k, v), measure(tiled_fn, q, k, v, **kw))
    plain_ratio = peaks[512][0] / peaks[256][0]
    tiled_ratio = peaks[512][1] / peaks[256][1]
    assert plain_ratio > 3.5, peaks  # ~4: the (T, T) scores and weights
    assert tiled_ratio < 2.5, peaks  # ~2: (T, d) outputs, fixed tiles
    assert peaks[512][1] < peaks[512][0] / 10, peaks


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_tiled_peak_cuda_memory_grows_linearly():
    def peak(fn, t, **kw):
        q, k, v = (x.cuda() for x in mem_qkv(t, to_torch=True))
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        fn(q, k, v, **kw)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - start

    kw = {"block_q": MEM_BLOCK, "block_k": MEM_BLOCK}
    plain = {t: peak(torch_ref.attention, t) for t in (1024, 2048)}
    tiles = {
        t: peak(tiled.tiled_attention_torch, t, **kw) for t in (1024, 2048)
    }
    assert plain[2048] / plain[1024] > 3.5, plain
    assert tiles[2048] / tiles[1024] < 2.5, tiles
