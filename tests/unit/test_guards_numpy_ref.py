"""Refusals of the doors of numpy_ref.py (mha_ref/guards/numpy_ref.py);
most run the torch_ref mirror beside it: one case per door, plus one
per bad value."""

import math
import re

import numpy as np
import pytest
import torch
from test_alibi import MIRRORS as MIRRORS_A
from test_backward import (
    DV,
    H,
    backward_functions,
    qkv,
)
from test_backward import draw as draw_b
from test_checks import MIRRORS as MIRRORS_C
from test_checks import as_framework
from test_core import RNG, K, Q, V
from test_grouped_heads import randn as randn_gh
from test_masks import (
    RULES,
)
from test_numpy_ref_attention import TOL, TQ, D
from test_numpy_ref_mha import D_MODEL, N_HEAD, TK, B
from test_rope import draw as draw_r
from test_rope import (
    in_framework,
    random_rope_module,
)
from test_score_modifiers import MIRRORS as MIRRORS_SM
from test_score_modifiers import (
    case,
    run,
)
from test_score_modifiers import randn as randn_sm

from mha_ref import numpy_ref, tiled, torch_ref


@pytest.fixture(params=list(backward_functions()))
def backward(request):
    return backward_functions()[request.param]


@pytest.fixture(params=["numpy", "torch"])
def ref(request):
    """numpy_ref or torch_ref: both mirrors share every behaviour."""
    return numpy_ref if request.param == "numpy" else torch_ref


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(31)


@pytest.mark.parametrize(
    "module", [numpy_ref, torch_ref], ids=["numpy", "torch"]
)
def test_causal_mask_for_positions_rejects_2d_positions(module):
    with pytest.raises(
        ValueError,
        match=r"query_positions must be 1-D.*"
        r"\(1, 2\)",
    ):
        module.causal_mask_for_positions([[3, 4]], range(5))
    with pytest.raises(
        ValueError,
        match=r"key_positions must be 1-D.*"
        r"\(5, 1\)",
    ):
        module.causal_mask_for_positions([3, 4], [[j] for j in range(5)])


@MIRRORS_C
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("which", ["query_positions", "key_positions"])
def test_causal_mask_for_positions_rejects_non_finite_positions(
    module, bad, which
):
    # a NaN query position compared False with every key: it saw them all
    positions = {"query_positions": [3.0, 4.0], "key_positions": [0.0] * 5}
    positions[which] = [*positions[which][:-1], bad]
    with pytest.raises(
        ValueError, match=rf"{which} of shape .* holds {bad} at index"
    ):
        module.causal_mask_for_positions(
            *(
                as_framework(module, positions[n], np.float64)
                for n in ("query_positions", "key_positions")
            )
        )


@MIRRORS_C
@pytest.mark.parametrize(
    ("positions", "message"),
    [
        (
            [True, False],
            r"query_positions must hold integers.*dtype (torch\.)?bool",
        ),
        ([1 + 2j, 0j], r"query_positions must hold integers.*complex"),
    ],
)
def test_causal_mask_for_positions_rejects_non_real_positions(
    module, positions, message
):
    with pytest.raises(TypeError, match=message):
        module.causal_mask_for_positions(positions, range(2))


@pytest.mark.parametrize("name", ["q", "k", "v"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_attention_rejects_non_finite_inputs_naming_them(name, bad, rng):
    arrays = {n: rng.standard_normal((TQ, D)) for n in "qkv"}
    arrays[name][1, 3] = bad
    with pytest.raises(
        ValueError,
        match=rf"{name} of shape \(4, 6\) "
        rf"holds {bad} at index \(1, 3\)",
    ):
        numpy_ref.attention(arrays["q"], arrays["k"], arrays["v"])


def test_attention_rejects_overflowing_scores():
    q = k = np.array([[1e200, 0.0]])
    with (
        np.errstate(over="ignore"),
        pytest.raises(ValueError, match=r"hold inf at index \(0, 0\)"),
    ):
        numpy_ref.attention(q, k, np.ones((1, 2)))


def test_numpy_attention_takes_lists_and_refuses_torch_tensors(rng):
    q, k, v = (rng.standard_normal((3, 4)) for _ in range(3))
    expected, _ = numpy_ref.attention(q, k, v)
    out, _ = numpy_ref.attention(q.tolist(), k.tolist(), v.tolist())
    np.testing.assert_allclose(out, expected, **TOL)
    tensor = torch.from_numpy(k)
    pattern = (
        r"k is a torch.Tensor of dtype torch.float64, but this NumPy "
        r"function expects a NumPy array"
    )
    with pytest.raises(TypeError, match=pattern):
        numpy_ref.attention(q, tensor, v)
    with pytest.raises(TypeError, match=pattern):
        tiled.tiled_attention_numpy(q, tensor, v)
    with pytest.raises(TypeError, match=r"logits is a torch.Tensor"):
        numpy_ref.softmax(tensor)
    with pytest.raises(
        TypeError,
        match=r"q must hold real numbers .* got "
        r"dtype complex128",
    ):
        numpy_ref.attention(q + 1j, k, v)


@pytest.mark.parametrize(
    "shape", [(TQ, D_MODEL), (B, TQ, D_MODEL + 1), (1, B, TQ, D_MODEL)]
)
def test_mha_rejects_wrong_input_shape_naming_it(shape, rng):
    module = numpy_ref.MultiHeadAttention(D_MODEL, N_HEAD)
    with pytest.raises(
        ValueError,
        match=r"x must have shape \(B, T, "
        rf"d_model=12\), got \({shape[0]}, ",
    ):
        module(rng.standard_normal(shape))


def test_mha_rejects_bad_context_naming_shapes(rng):
    module = numpy_ref.MultiHeadAttention(D_MODEL, N_HEAD)
    x = rng.standard_normal((B, TQ, D_MODEL))
    with pytest.raises(
        ValueError,
        match=r"context batch \(3, 6, 12\) does "
        r"not match x batch \(2, 4, 12\)",
    ):
        module(x, context=rng.standard_normal((3, TK, D_MODEL)))
    with pytest.raises(
        ValueError,
        match=r"context must have shape .* got "
        r"\(2, 6, 8\)",
    ):
        module(x, context=rng.standard_normal((B, TK, 8)))


def test_mha_rejects_fully_masked_row_naming_it(rng):
    module = numpy_ref.MultiHeadAttention(D_MODEL, N_HEAD)
    x = rng.standard_normal((B, TQ, D_MODEL))
    mask = np.zeros((B, N_HEAD, TQ, TQ), dtype=bool)
    mask[1, 2, 3] = True  # batch 1, head 2, query 3 sees nothing
    with pytest.raises(ValueError, match=r"query row at index \(1, 2, 3\)"):
        module(x, mask)


def test_mha_rejects_non_bool_and_non_broadcasting_masks(rng):
    module = numpy_ref.MultiHeadAttention(D_MODEL, N_HEAD)
    x = rng.standard_normal((B, TQ, D_MODEL))
    with pytest.raises(TypeError, match="boolean"):
        module(x, np.zeros((TQ, TQ)))
    with pytest.raises(ValueError, match=r"mask of shape \(5, 4, 4\)"):
        module(x, np.zeros((5, TQ, TQ), dtype=bool))


def test_numpy_mha_takes_a_list_and_names_nan_in_x(rng):
    module = numpy_ref.MultiHeadAttention(D_MODEL, N_HEAD)
    x = rng.standard_normal((B, TQ, D_MODEL))
    np.testing.assert_allclose(module(x.tolist())[0], module(x)[0], **TOL)
    x[1, 2, 3] = np.nan
    with pytest.raises(
        ValueError,
        match=rf"x of shape \({B}, {TQ}, {D_MODEL}\) holds "
        r"nan at index \(1, 2, 3\)",
    ):
        module(x)


@pytest.mark.parametrize(("axis", "row"), [(-1, r"\(1,\)"), (0, r"\(0,\)")])
def test_softmax_rejects_all_minus_inf_row_naming_it(axis, row):
    logits = np.array([[-np.inf, 0.0], [-np.inf, -np.inf]])
    with pytest.raises(
        ValueError,
        match=rf"logits row at index {row}.* "
        r"every key masked",
    ):
        numpy_ref.softmax(logits, axis=axis)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_softmax_rejects_nan_and_plus_inf_naming_index(bad):
    with pytest.raises(ValueError, match=rf"hold {bad} at index \(0, 2\)"):
        numpy_ref.softmax(np.array([[0.0, 1.0, bad]]))


@pytest.mark.parametrize(
    "logits",
    [
        np.array([0, 2**53 + 1], dtype=np.int64),
        np.array([2**63 - 1, 0], dtype=np.int64),
    ],
)
def test_softmax_rejects_int64_not_exact_in_float64(logits):
    with pytest.raises(ValueError, match="not exactly representable"):
        numpy_ref.softmax(logits)


@pytest.mark.parametrize(
    ("logits", "kind"),
    [
        ([1 + 2j, 0j], "complex"),
        (np.array([1.0], dtype=object), "object"),
        (["a", "b"], "<U1"),
    ],
)
def test_softmax_rejects_complex_object_and_str(logits, kind):
    with pytest.raises(TypeError, match=f"got dtype {kind}"):
        numpy_ref.softmax(logits)


def test_softmax_backward_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match=r"\(2,\) and upstream \(3,\)"):
        numpy_ref.softmax_backward(np.ones(2) / 2, np.ones(3))


def test_softmax_empty_rows_zero_on_any_axis():
    logits = np.array([[0.0, -np.inf], [1.0, -np.inf], [-np.inf, -np.inf]])
    got = numpy_ref.softmax(logits.T, axis=0, empty_rows="zero").T
    np.testing.assert_array_equal(got, [[1.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    with pytest.raises(ValueError, match=r"logits row at index \(2,\)"):
        numpy_ref.softmax(logits)


def test_softmax_rejects_empty_and_scalar_logits():
    with pytest.raises(
        ValueError,
        match=r"logits of shape \(0,\) hold no "
        r"value along axis -1",
    ):
        numpy_ref.softmax([])
    with pytest.raises(ValueError, match=r"shape \(2, 0\) hold no value"):
        numpy_ref.softmax(np.zeros((2, 0)))
    with pytest.raises(
        ValueError,
        match=r"axis -1 does not exist for "
        r"logits of shape \(\)",
    ):
        numpy_ref.softmax(np.float64(1.0))


@pytest.mark.parametrize("ref", [numpy_ref, torch_ref], ids=["np", "torch"])
def test_dot_product_attention_refuses_by_name(ref):
    as_in = torch.from_numpy if ref is torch_ref else np.asarray
    q, k, v = as_in(Q), as_in(K), as_in(V)
    with pytest.raises(ValueError, match="fewer heads"):
        ref.dot_product_attention(
            as_in(RNG.normal(size=(1, 4, 5, 4))),
            *(as_in(RNG.normal(size=(1, 2, 5, 4))) for _ in range(2)),
        )
    with pytest.raises(ValueError, match="every key masked"):
        ref.dot_product_attention(q, k, v, as_in(np.ones((5, 5), bool)))
    with pytest.raises(ValueError, match="does not broadcast"):
        ref.dot_product_attention(q, k, v, as_in(np.zeros((4, 5), bool)))
    with pytest.raises(ValueError, match="overflowed"):
        ref.dot_product_attention(q * 1e160, k * 1e160, v)
    bad = as_in(Q.copy())
    bad[0, 0, 0, 0] = math.nan
    with pytest.raises(ValueError, match="finite"):
        ref.dot_product_attention(bad, k, v)


@MIRRORS_A
@pytest.mark.parametrize(
    ("n_head", "error", "words"),
    [
        (0, ValueError, "n_head must be positive, got 0"),
        (-2, ValueError, "n_head must be positive, got -2"),
        (2.0, TypeError, "n_head must be an int"),
        (True, TypeError, "n_head must be an int"),
    ],
)
def test_alibi_slopes_names_a_bad_head_count(ref, n_head, error, words):
    with pytest.raises(error, match=re.escape(words)):
        ref.alibi_slopes(n_head)


@MIRRORS_A
@pytest.mark.parametrize(
    ("slopes", "q_pos", "error", "words"),
    [
        ([[0.5]], [0], ValueError, "slopes must be 1-D"),
        ([], [0], ValueError, "slopes must be 1-D and not empty"),
        ([math.nan], [0], ValueError, "slopes of shape (1,) holds nan"),
        ([0.5], [[0]], ValueError, "query_positions must be 1-D"),
        ([0.5], [True], TypeError, "query_positions must hold real numbers"),
    ],
)
def test_alibi_bias_names_a_bad_input(ref, slopes, q_pos, error, words):
    if ref is torch_ref:
        slopes = torch.tensor(slopes, dtype=torch.float64)
    with pytest.raises(error, match=re.escape(words)):
        ref.alibi_bias(slopes, q_pos, [0, 1])


@pytest.mark.parametrize("ref", [numpy_ref, torch_ref])
def test_apply_rope_odd_head_size_raises(ref):
    x = np.zeros((3, 5)) if ref is numpy_ref else torch.zeros(3, 5)
    with pytest.raises(ValueError, match="even head size, got d_head=5"):
        ref.apply_rope(x, [0, 1, 2])


@pytest.mark.parametrize("ref", [numpy_ref, torch_ref])
@pytest.mark.parametrize("positions", [[0, 1], [[0, 1, 2]]])
def test_apply_rope_positions_must_be_one_per_row(ref, positions):
    x = np.zeros((3, 4)) if ref is numpy_ref else torch.zeros(3, 4)
    with pytest.raises(ValueError, match=r"shape \(T,\) = \(3,\)"):
        ref.apply_rope(x, positions)


@pytest.mark.parametrize("ref", [numpy_ref, torch_ref])
def test_mha_rope_odd_head_size_raises_at_init(ref):
    with pytest.raises(ValueError, match="d_head=3"):
        ref.MultiHeadAttention(6, 2, rope=True)


def test_mha_rope_refuses_cross_attention():
    module = random_rope_module(n_kv_head=2)
    twin = numpy_ref.MultiHeadAttention.from_torch(module)
    x = torch.zeros(1, 3, 16, dtype=torch.float64)
    context = torch.zeros(1, 4, 16, dtype=torch.float64)
    with pytest.raises(ValueError, match="self-attention only"):
        module(x, context=context)
    with pytest.raises(ValueError, match="self-attention only"):
        twin(x.numpy(), context=context.numpy())


@pytest.mark.parametrize("ref", [numpy_ref, torch_ref])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_apply_rope_rejects_non_finite_positions(ref, bad):
    x = in_framework(ref, np.zeros((2, 4)))
    with pytest.raises(ValueError, match=rf"positions .* holds {bad} at"):
        ref.apply_rope(x, in_framework(ref, np.array([0.0, bad])))


def test_apply_rope_refuses_the_other_frameworks_array():
    with pytest.raises(TypeError, match=r"x must be a torch\.Tensor, got nd"):
        torch_ref.apply_rope(np.zeros((2, 4)), [0, 1])
    with pytest.raises(TypeError, match=r"x is a torch\.Tensor .* NumPy"):
        numpy_ref.apply_rope(torch.zeros(2, 4), [0, 1])


@pytest.mark.parametrize(
    "entry",
    [
        "numpy.apply_rope",
        "torch.apply_rope",
        "numpy.forward",
        "numpy.backward",
        "torch.forward",
    ],
)
def test_rope_bool_positions_are_refused_by_every_entry_point(entry):
    module = random_rope_module(n_kv_head=2)
    twin = numpy_ref.MultiHeadAttention.from_torch(module)
    x = draw_r((1, 3, 16), 0)
    positions = np.array([True, False, True])
    run = {
        "numpy.apply_rope": lambda: numpy_ref.apply_rope(x[0], positions),
        "torch.apply_rope": lambda: torch_ref.apply_rope(
            torch.from_numpy(x[0]), torch.from_numpy(positions)
        ),
        "numpy.forward": lambda: twin(x, positions=positions),
        "numpy.backward": lambda: twin.backward(x, x, positions=positions),
        "torch.forward": lambda: module(
            torch.from_numpy(x), positions=torch.from_numpy(positions)
        ),
    }[entry]
    with pytest.raises(
        TypeError,
        match=r"positions must hold integers \(or real numbers\), one "
        r"position per row, got dtype (torch\.)?bool",
    ):
        run()


@pytest.mark.parametrize("ref", [numpy_ref, torch_ref], ids=["numpy", "torch"])
def test_apply_rope_refuses_nan_positions_naming_them(ref):
    x = np.ones((3, 4)) if ref is numpy_ref else torch.ones(3, 4)
    positions = in_framework(ref, np.array([0.0, np.nan, 2.0]))
    with pytest.raises(
        ValueError,
        match=r"positions of shape \(3,\) holds nan at index \(1,\)",
    ):
        ref.apply_rope(x, positions)


@pytest.mark.parametrize("bad", [0, -10000.0, float("nan"), float("inf")])
@pytest.mark.parametrize(
    "make",
    [
        lambda base: numpy_ref.MultiHeadAttention(
            8, 2, rope=True, rope_base=base
        ),
        lambda base: torch_ref.MultiHeadAttention(
            8, 2, rope=True, rope_base=base
        ),
    ],
    ids=["numpy", "torch"],
)
def test_mha_rope_base_must_be_positive_naming_it(make, bad):
    with pytest.raises(ValueError, match=r"rope_base must be positive"):
        make(bad)
    with pytest.raises(TypeError, match=r"rope_base must be a real number"):
        make("10000")


@pytest.mark.parametrize("ref", [numpy_ref, torch_ref], ids=["numpy", "torch"])
def test_apply_rope_base_must_be_positive_naming_it(ref):
    x = np.ones((2, 4)) if ref is numpy_ref else torch.ones(2, 4)
    with pytest.raises(ValueError, match=r"base must be positive.* got -1"):
        ref.apply_rope(x, [0, 1], base=-1)


def test_backward_rejects_mismatched_dout(backward):
    q, k, v = qkv(4, 6)
    dout = draw_b((B, H, 4, DV + 1), 1)
    with pytest.raises(
        ValueError,
        match=r"dout of shape \(2, 3, 4, 6\) "
        r"must match .* \(2, 3, 4, 5\)",
    ):
        backward(q, k, v, dout)


def test_backward_rejects_a_fully_masked_row(backward):
    q, k, v = qkv(5, 6)
    mask = np.zeros((5, 6), dtype=bool)
    mask[3] = True  # query row 3 may see no key
    with pytest.raises(ValueError, match=r"index \(0, 0, 3\).*every key"):
        backward(q, k, v, draw_b((B, H, 5, DV), 1), mask)


def test_backward_rejects_nan(backward):
    q, k, v = qkv(4, 6)
    dout = draw_b((B, H, 4, DV), 1)
    dout[1, 2, 3, 0] = np.nan
    with pytest.raises(
        ValueError,
        match=r"dout of shape \(2, 3, 4, 5\) "
        r"holds nan at index \(1, 2, 3, 0\)",
    ):
        backward(q, k, v, dout)
    q[0, 1, 2, 3] = np.nan
    with pytest.raises(
        ValueError,
        match=r"q of shape .* index "
        r"\(0, 1, 2, 3\)",
    ):
        backward(q, k, v, dout)


def test_mha_backward_rejects_bad_input():
    layer = numpy_ref.MultiHeadAttention(8, 2)
    x = draw_b((1, 4, 8), 0)
    with pytest.raises(
        ValueError,
        match=r"dy of shape \(1, 3, 8\) must "
        r"match .* \(1, 4, 8\)",
    ):
        layer.backward(x, draw_b((1, 3, 8), 1))
    dy = draw_b((1, 4, 8), 1)
    dy[0, 2, 5] = np.nan
    with pytest.raises(ValueError, match=r"dy .* index \(0, 2, 5\)"):
        layer.backward(x, dy)
    rope = numpy_ref.MultiHeadAttention(8, 2, rope=True)
    with pytest.raises(ValueError, match="self-attention only"):
        rope.backward(x, draw_b((1, 4, 8), 1), context=x)


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "dy_shape", "message"),
    [
        # the same number of rows, another leading shape: a wrong dW
        ((2, 3, 4), (4, 5), (3, 2, 5), r"dy of shape \(3, 2, 5\) must "),
        ((2, 3, 4), (4, 5), (2, 3, 6), r"\(2, 3, 6\) must match .*5\)"),
        ((2, 3, 4), (3, 5), (2, 3, 5), r"x \(2, 3, 4\) and weight \(3, 5\)"),
        ((2, 3, 4), (4,), (2, 3), r"weight \(4,\) do not fit y = x W"),
    ],
)
def test_linear_backward_rejects_a_mismatched_upstream(
    x_shape, w_shape, dy_shape, message
):
    with pytest.raises(ValueError, match=message):
        numpy_ref.linear_backward(
            draw_b(x_shape, 0), draw_b(w_shape, 1), draw_b(dy_shape, 2)
        )


def test_mha_backward_takes_lists_and_names_nan_in_x():
    layer = numpy_ref.MultiHeadAttention(8, 2, bias=True, seed=1)
    x, dy = draw_b((2, 4, 8), 0), draw_b((2, 4, 8), 1)
    expected = layer.backward(x, dy)
    got = layer.backward(x.tolist(), dy.tolist())
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name])
    x[1, 2, 3] = np.nan
    with pytest.raises(
        ValueError,
        match=r"x of shape \(2, 4, 8\) holds nan at index \(1, 2, 3\)",
    ):
        layer.backward(x, dy)


@pytest.mark.parametrize("ref", [numpy_ref, torch_ref])
@pytest.mark.parametrize(
    ("h_k", "h_v", "words"),
    [
        (4, 4, "H=6 heads and k, v have H_kv=4"),
        (2, 3, "same number of heads"),
        (4, 2, "same number of heads"),
        (12, 12, "batch dims .* do not broadcast"),  # more heads than q
    ],
)
def test_attention_bad_kv_heads_raise_naming_both(ref, h_k, h_v, words):
    q = randn_gh(1, 6, 3, 4, seed=1)
    k, v = randn_gh(1, h_k, 3, 4, seed=2), randn_gh(1, h_v, 3, 4, seed=3)
    if ref is numpy_ref:
        q, k, v = q.numpy(), k.numpy(), v.numpy()
    with pytest.raises(ValueError, match=words):
        ref.attention(q, k, v)


@pytest.mark.parametrize("ref", [numpy_ref, torch_ref])
@pytest.mark.parametrize(
    ("n_kv_head", "error", "words"),
    [
        (4, ValueError, "n_head=6 is not a multiple of n_kv_head=4"),
        (0, ValueError, "n_kv_head must be positive"),
        (2.0, TypeError, "n_kv_head must be an int"),
    ],
)
def test_mha_bad_n_kv_head_raises(ref, n_kv_head, error, words):
    with pytest.raises(error, match=words):
        ref.MultiHeadAttention(12, 6, n_kv_head=n_kv_head)


@pytest.mark.parametrize("rule", list(RULES))
@pytest.mark.parametrize(
    ("q_pos", "error", "match"),
    [
        ([0, -1], ValueError, r"query_positions must be >= 0, got -1"),
        ([0.0, np.nan], ValueError, "query_positions .* nan"),
        ([0.0, np.inf], ValueError, "query_positions .* inf"),
        ([0.5], ValueError, "query_positions must hold whole numbers"),
        ([True, False], TypeError, "query_positions must hold integer"),
        (np.zeros((2, 2, 2), int), ValueError, "query_positions must be"),
        (np.array(3), ValueError, "query_positions must be 1-D"),
    ],
)
def test_rules_refuse_bad_positions_naming_them(
    ref, rule, q_pos, error, match
):
    with pytest.raises(error, match=match):
        RULES[rule](ref, q_pos, [0, 1])
    # and the same positions on the key side
    key_match = match.replace("query_positions", "key_positions")
    with pytest.raises(error, match=key_match):
        RULES[rule](ref, [0, 1], q_pos)


@pytest.mark.parametrize("rule", [*RULES, "document"])
def test_rules_refuse_positions_of_different_batch_sizes(ref, rule):
    make = RULES.get(rule, lambda ref, q, k: ref.document_mask(q, k))
    with pytest.raises(ValueError, match="different batch sizes B = 2 and 3"):
        make(ref, np.zeros((2, 4), int), np.zeros((3, 4), int))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"window": 0}, ValueError, "window must be at least 1, got 0"),
        ({"window": -3}, ValueError, "window must be at least 1"),
        ({"window": 2.0}, TypeError, "window must be an int"),
        ({"window": True}, TypeError, "window must be an int"),
        ({"window": 2, "sink_tokens": -1}, ValueError, "sink_tokens must be"),
        ({"window": 2, "sink_tokens": 1.0}, TypeError, "sink_tokens must be"),
    ],
)
def test_sliding_window_mask_refuses_bad_sizes(ref, kwargs, error, match):
    with pytest.raises(error, match=match):
        ref.sliding_window_mask(range(3), range(3), **kwargs)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda r: r.chunked_mask([0], [0], 0), ValueError, "chunk must be"),
        (lambda r: r.chunked_mask([0], [0], -2), ValueError, "chunk must be"),
        (lambda r: r.chunked_mask([0], [0], 1.5), TypeError, "chunk must be"),
        (lambda r: r.prefix_lm_mask([0], [0], -1), ValueError, "prefix must"),
        (lambda r: r.prefix_lm_mask([0], [0], 2.0), TypeError, "prefix must"),
    ],
)
def test_chunked_and_prefix_refuse_bad_sizes(ref, call, error, match):
    with pytest.raises(error, match=match):
        call(ref)


@pytest.mark.parametrize(
    ("lengths", "error", "match"),
    [
        ([3, 0, 2], ValueError, r"lengths\[1\] = 0"),
        ([3, -1], ValueError, r"lengths\[1\] = -1"),
        ([2.0, 1.0], TypeError, "lengths must be positive integers"),
        ([True, True], TypeError, "lengths must be positive integers"),
        ([], ValueError, "at least one document"),
        ([[1, 2]], ValueError, "lengths must be 1-D"),
    ],
)
def test_document_ids_refuse_lengths_that_are_not_positive_ints(
    ref, lengths, error, match
):
    with pytest.raises(error, match=match):
        ref.document_ids(lengths)


def test_document_mask_refuses_ids_that_are_not_integers(ref):
    with pytest.raises(ValueError, match="query_documents must hold whole"):
        ref.document_mask([0.5], [0])
    with pytest.raises(TypeError, match="key_documents must hold integer"):
        ref.document_mask([0], ["a"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bool])
def test_document_ids_refuse_a_float_or_bool_tensor_naming_it(dtype):
    # the guard's message read .dtype of None: AttributeError
    with pytest.raises(TypeError, match="lengths must be positive integers"):
        torch_ref.document_ids(torch.ones(2, dtype=dtype))


@pytest.mark.parametrize(
    ("q_pos", "match"),
    [
        ([np.nan], "holds nan"),  # was cast to -2**63 without a word
        ([0.5], "must hold whole numbers"),  # was cast to 0
        (["a"], "must hold integer"),
    ],
)
def test_position_pairs_refuse_what_is_not_whole(ref, q_pos, match):
    with pytest.raises((ValueError, TypeError), match=match):
        ref.position_pairs(q_pos, [0, 1])


def test_causal_mask_not_square_needs_an_alignment(ref):
    with pytest.raises(
        ValueError, match=r"\(t, tk\) = \(3, 5\) is not square"
    ):
        ref.causal_mask(3, 5)
    with pytest.raises(ValueError, match=r"align must be 'top_left'"):
        ref.causal_mask(3, 5, align="lower_right")
    with pytest.raises(ValueError, match=r"tk must be positive, got 0"):
        ref.causal_mask(3, 0, align="top_left")
    square = np.asarray(ref.causal_mask(4, 4))
    np.testing.assert_array_equal(square, np.asarray(ref.causal_mask(4)))


def test_key_padding_mask_rejects_bad_lengths(ref):
    with pytest.raises(
        ValueError,
        match=r"lengths\[1\] = 0: a sequence "
        r"needs at least one key",
    ):
        ref.key_padding_mask([3, 0])
    with pytest.raises(ValueError, match=r"lengths\[0\] = 6 exceeds tk = 5"):
        ref.key_padding_mask([6, 2], tk=5)
    with pytest.raises(
        TypeError,
        match=r"lengths must be ints of shape "
        r"\(B,\), or a bool \(B, Tk\) mask",
    ):
        ref.key_padding_mask([2.5, 1.0])
    with pytest.raises(
        ValueError,
        match=r"boolean padding mask must be "
        r"\(B, Tk\)",
    ):
        ref.key_padding_mask([True, False])


@pytest.mark.parametrize(
    "lengths",
    [
        lambda: [],
        lambda: np.array([], dtype=np.int64),
        lambda: np.zeros((0, 4), dtype=bool),
    ],
    ids=["list", "int-array", "bool-mask"],
)
def test_key_padding_mask_refuses_no_sequence_naming_lengths(ref, lengths):
    value = lengths()
    if ref is torch_ref and not isinstance(value, list):
        value = torch.from_numpy(value)
    with pytest.raises(ValueError, match=r"lengths must hold one length per"):
        ref.key_padding_mask(value)
    with pytest.raises(ValueError, match=r"lengths must hold one length per"):
        ref.key_padding_mask(value, tk=4)


@pytest.mark.parametrize(
    "call",
    [
        lambda r: r.prefix_lm_mask(np.array([2**63], np.uint64), [0, 1], 0),
        lambda r: r.sliding_window_mask([1e300], [0], 2),
        lambda r: r.chunked_mask([0, 1], [0, 1], 2**70),
        lambda r: r.sliding_window_mask([0], [0], 2**63),
        lambda r: r.sliding_window_mask([0], [0], 2, sink_tokens=2**70),
        lambda r: r.prefix_lm_mask([0], [0], 2**64),
    ],
)
def test_rules_refuse_positions_and_sizes_beyond_int64(ref, call):
    # compared as int64, 2**63 wrapped to -2**63 and 1e300 to a negative
    # number: a wrong mask without a word (numpy), an OverflowError (torch)
    with pytest.raises(ValueError, match="beyond int64"):
        call(ref)


def test_rules_name_a_ragged_list_of_positions(ref):
    with pytest.raises(TypeError, match="query_positions must be numbers"):
        ref.sliding_window_mask([[0, 1], [2]], [0, 1], 2)


@MIRRORS_SM
def test_attention_empty_row_without_sink_is_still_refused(gen, ref):
    q, k, v, mask, _, sinks = case(gen)
    mask[0, 0, 2] = True
    sinks[1] = -math.inf  # head 1 has no sink: its row 2 is empty
    with pytest.raises(ValueError, match=r"index \(0, 1, 2\)"):
        run(ref, q, k, v, mask, sinks=sinks)
    out, _ = run(ref, q, k, v, mask, sinks=sinks, empty_rows="zero")
    assert (out[0, :, 2] == 0).all()


BAD = [
    ({"softcap": 0.0}, ValueError, "softcap must be positive and finite"),
    ({"softcap": -1.0}, ValueError, "softcap must be positive and finite"),
    ({"softcap": math.inf}, ValueError, "got inf"),
    ({"softcap": math.nan}, ValueError, "got nan"),
    ({"softcap": "50"}, TypeError, "softcap must be a real number"),
    ({"scale": math.inf}, ValueError, "scale must be finite"),
    ({"scale": math.nan}, ValueError, "scale must be finite"),
    ({"scale": True}, TypeError, "scale must be a real number"),
    ({"bias": (3, 4)}, ValueError, "bias of shape (3, 4) does not broadcast"),
    ({"bias": "nan"}, ValueError, "holds nan at index (0, 1, 2)"),
    ({"bias": "+inf"}, ValueError, "holds inf at index (0, 1, 2)"),
    ({"bias": "bool"}, TypeError, "a boolean mask goes in mask"),
    ({"sinks": (3,)}, ValueError, "shape (H,) = (4,)"),
    ({"sinks": "nan"}, ValueError, "sinks of shape (4,) holds nan"),
    ({"sinks": "+inf"}, ValueError, "sinks of shape (4,) holds inf"),
]


def bad_value(spec, ref):
    name, value = next(iter(spec.items()))
    if isinstance(value, tuple):  # a shape
        value = torch.zeros(value, dtype=torch.float64)
    elif name in ("bias", "sinks") and isinstance(value, str):
        shape = (4, 5, 7) if name == "bias" else (4,)
        array = torch.zeros(shape, dtype=torch.float64)
        if value == "bool":
            array = array.bool()
        else:
            index = (0, 1, 2) if name == "bias" else (1,)
            array[index] = math.nan if value == "nan" else math.inf
        value = array
    if ref is numpy_ref and torch.is_tensor(value):
        value = value.numpy()
    return {name: value}


@MIRRORS_SM
@pytest.mark.parametrize(("spec", "error", "words"), BAD)
def test_attention_names_a_bad_modifier(gen, ref, spec, error, words):
    q, k, v, mask, _, _ = case(gen)
    with pytest.raises(error, match=re.escape(words)):
        run(ref, q, k, v, mask, **bad_value(spec, ref))


@MIRRORS_SM
def test_attention_sinks_need_a_heads_axis(gen, ref):
    q, k, v = randn_sm(gen, 5, 8), randn_sm(gen, 7, 8), randn_sm(gen, 7, 8)
    with pytest.raises(ValueError, match="sinks need a heads axis"):
        run(ref, q, k, v, sinks=torch.zeros(1, dtype=torch.float64))


@MIRRORS_SM
@pytest.mark.parametrize(
    ("where", "value", "error", "words"),
    [
        ("scores", math.nan, ValueError, r"holds? nan"),  # was NaN
        ("sinks", math.nan, ValueError, r"holds? nan"),
        ("sinks", math.inf, ValueError, r"holds? inf"),
        ("length", None, ValueError, "one logit per query head"),
        ("heads axis", None, ValueError, "sinks need a heads axis"),
    ],
)
def test_softmax_with_sinks_names_a_bad_input(
    gen, ref, where, value, error, words
):
    # torch's mirror returned NaN for NaN or +inf, raised torch's own
    # expand error for a wrong length; one sink broadcast to every head
    scores, sinks = randn_sm(gen, 2, 3, 4), randn_sm(gen, 2)
    if where == "scores":
        scores[0, 0, 0] = value
    elif where == "sinks":
        sinks[1] = value
    elif where == "length":
        sinks = sinks[:1]  # (1,) for 2 heads
    else:
        scores = scores[0]  # (Tq, Tk): no heads axis
    if ref is numpy_ref:
        scores, sinks = scores.numpy(), sinks.numpy()
    with pytest.raises(error, match=words):
        ref.softmax_with_sinks(scores, sinks)


@MIRRORS_SM
@pytest.mark.parametrize("where", ["scores", "sinks"])
@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_softmax_with_sinks_names_the_argument_that_holds_it(
    gen, ref, where, value
):
    # NumPy's mirror named "logits of shape (2, 1, 5)": the scores with
    # the sink's column, an array the caller never passed
    scores, sinks = randn_sm(gen, 2, 1, 4), randn_sm(gen, 2)
    (scores if where == "scores" else sinks).view(-1)[0] = value
    shape = (2, 1, 4) if where == "scores" else (2,)
    if ref is numpy_ref:
        scores, sinks = scores.numpy(), sinks.numpy()
    with pytest.raises(
        ValueError, match=re.escape(f"{where} of shape {shape}")
    ):
        ref.softmax_with_sinks(scores, sinks)


@MIRRORS_SM
def test_softmax_with_sinks_refuses_boolean_sinks(gen, ref):
    scores, sinks = randn_sm(gen, 2, 1, 4), torch.tensor([True, False])
    if ref is numpy_ref:
        scores, sinks = scores.numpy(), sinks.numpy()
    with pytest.raises(TypeError, match="sinks"):
        ref.softmax_with_sinks(scores, sinks)


@MIRRORS_SM
@pytest.mark.parametrize("name", ["bias", "sinks"])
@pytest.mark.parametrize("value", [1e300, -1e300])
def test_a_float64_modifier_beyond_float32_is_refused_alike(
    gen, ref, name, value
):
    # NumPy's mirror read -1e300 as a blocked key (-inf in float32), and
    # torch's blamed +1e300 on an overflow of q @ k^T
    q, k, v, mask, bias, sinks = case(gen)
    q, k, v = q.float(), k.float(), v.float()
    modifier = bias if name == "bias" else sinks
    modifier.view(-1)[1] = value
    with pytest.raises(
        ValueError, match=re.escape(f"{name} of shape {tuple(modifier.shape)}")
    ) as error:
        run(ref, q, k, v, mask, **{name: modifier})
    assert "beyond float32" in str(error.value)
