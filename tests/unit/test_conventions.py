"""The conventions page's translation table, one row at a time.

RoPE's two pairings first: Meta's Llama code turns adjacent features
(2i, 2i + 1) as complex numbers; rotate-half (torch_ref.apply_rope)
turns (i, i + d/2). After the rows of W_Q and W_K are reordered within
each head, both give the same scores, weights and outputs; without it,
neither error nor NaN. Then the other rows, each held to the libraries
on either side (torch 2.13, transformers 5.24.0).
"""

import math
import re

import numpy as np
import pytest
import torch

from mha_ref import conventions, torch_ref
from mha_ref.tolerances import atol

TOL64 = {"atol": atol(np.float64), "rtol": 0}


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(7)


def randn(gen, *shape):
    return torch.randn(shape, generator=gen, dtype=torch.float64)


def rope_as_complex(x, positions, base=10000.0):
    """Meta's reference formulation: adjacent pairs as complex numbers,
    multiplied by e^(i m theta_j) (llama/model.py, apply_rotary_emb)."""
    d = x.shape[-1]
    freq = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = torch.as_tensor(positions, dtype=torch.float64)[:, None] * freq
    turn = torch.polar(torch.ones_like(angle), angle)  # (T, d / 2)
    pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(pairs * turn).flatten(-2)


def rotate_adjacent_by_hand(x, positions, base=10000.0):
    """Explicit 2-D rotations of (x_2i, x_2i+1), one row at a time."""
    t, d = x.shape
    out = np.empty_like(x)
    for row, pos in zip(range(t), positions, strict=True):
        for i in range(d // 2):
            angle = pos * base ** (-2 * i / d)
            c, s = math.cos(angle), math.sin(angle)
            a, b = x[row, 2 * i], x[row, 2 * i + 1]
            out[row, 2 * i], out[row, 2 * i + 1] = c * a - s * b, s * a + c * b
    return out


def test_apply_rope_interleaved_matches_adjacent_pair_rotations(gen):
    x = randn(gen, 5, 8)
    positions = [0, 3, 7, 100, 2]
    got = conventions.apply_rope_interleaved(x, positions)
    np.testing.assert_allclose(
        got.numpy(), rotate_adjacent_by_hand(x.numpy(), positions), **TOL64
    )


def test_apply_rope_interleaved_matches_metas_complex_form(gen):
    x = randn(gen, 2, 3, 6, 16)  # (B, H, T, dh)
    positions = torch.arange(40, 46)
    got = conventions.apply_rope_interleaved(x, positions, base=500000.0)
    expected = rope_as_complex(x, positions, base=500000.0)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), **TOL64)


def test_apply_rope_interleaved_keeps_float32(gen):
    x = randn(gen, 4, 8).float()
    got = conventions.apply_rope_interleaved(x, [1, 2, 3, 4])
    assert got.dtype == torch.float32
    expected = conventions.apply_rope_interleaved(x.double(), [1, 2, 3, 4])
    np.testing.assert_allclose(
        got.numpy(), expected.numpy(), atol=atol(np.float32), rtol=0
    )


def test_interleaved_to_rotate_half_orders_evens_then_odds():
    rows = torch.arange(12.0)  # 2 heads of 6: a bias, one value per row
    got = conventions.interleaved_to_rotate_half(rows, n_head=2)
    expected = [0, 2, 4, 1, 3, 5, 6, 8, 10, 7, 9, 11]
    assert got.tolist() == expected


def test_interleaved_to_rotate_half_moves_whole_rows(gen):
    weight = randn(gen, 2 * 4, 5)  # (H * dh, d_model), H = 2, dh = 4
    got = conventions.interleaved_to_rotate_half(weight, n_head=2)
    order = [0, 2, 1, 3, 4, 6, 5, 7]
    np.testing.assert_array_equal(got.numpy(), weight[order].numpy())


def test_rotate_half_of_reordered_features_is_reordered_interleaved(gen):
    x = randn(gen, 3, 7, 8)  # (H, T, dh)
    positions = torch.arange(7)
    order = [0, 2, 4, 6, 1, 3, 5, 7]  # evens, then odds
    got = torch_ref.apply_rope(x[..., order], positions)
    expected = conventions.apply_rope_interleaved(x, positions)[..., order]
    np.testing.assert_allclose(got.numpy(), expected.numpy(), **TOL64)


def heads(x, wq, wk, n_head, n_kv_head):
    """q (B, H, T, dh) and k (B, H_kv, T, dh), before RoPE."""
    b, t, _ = x.shape
    q = (x @ wq.T).view(b, t, n_head, -1).transpose(1, 2)
    k = (x @ wk.T).view(b, t, n_kv_head, -1).transpose(1, 2)
    return q, k


@pytest.mark.parametrize(("n_head", "n_kv_head"), [(4, 4), (4, 2)])
def test_reordered_weights_give_the_same_scores(gen, n_head, n_kv_head):
    d_model, t = 32, 9
    d_head = d_model // n_head
    x = randn(gen, 2, t, d_model)
    wq = randn(gen, d_model, d_model)  # a Meta checkpoint: interleaved
    wk = randn(gen, n_kv_head * d_head, d_model)
    positions = torch.arange(t)
    q, k = heads(x, wq, wk, n_head, n_kv_head)
    q = conventions.apply_rope_interleaved(q, positions)
    k = conventions.apply_rope_interleaved(k, positions)
    k = torch_ref.repeat_kv_heads(k, n_head // n_kv_head)
    meta = q @ k.transpose(-2, -1)  # (B, H, T, T)

    wq_hf = conventions.interleaved_to_rotate_half(wq, n_head)
    wk_hf = conventions.interleaved_to_rotate_half(wk, n_kv_head)
    q, k = heads(x, wq_hf, wk_hf, n_head, n_kv_head)
    q, k = (
        torch_ref.apply_rope(q, positions),
        torch_ref.apply_rope(k, positions),
    )
    k = torch_ref.repeat_kv_heads(k, n_head // n_kv_head)
    hf = q @ k.transpose(-2, -1)
    np.testing.assert_allclose(hf.numpy(), meta.numpy(), atol=1e-12, rtol=0)

    q, k = heads(x, wq, wk, n_head, n_kv_head)  # loaded without reorder
    q, k = (
        torch_ref.apply_rope(q, positions),
        torch_ref.apply_rope(k, positions),
    )
    k = torch_ref.repeat_kv_heads(k, n_head // n_kv_head)
    wrong = q @ k.transpose(-2, -1)
    assert (wrong - meta).abs().max() > 1.0  # silently different
    assert torch.isfinite(wrong).all()


def test_reordered_module_matches_interleaved_module_outputs(gen):
    d_model, n_head, t = 16, 2, 6
    torch.manual_seed(3)
    module = torch_ref.MultiHeadAttention(d_model, n_head, rope=True)
    module = module.double()
    x = randn(gen, 1, t, d_model)
    mask = torch_ref.causal_mask(t)
    meta_wq, meta_wk = module.wq.weight.clone(), module.wk.weight.clone()
    q, k = heads(x, meta_wq, meta_wk, n_head, n_head)
    v = module.split_heads(module.wv(x))
    positions = torch.arange(t)
    q = conventions.apply_rope_interleaved(q, positions)
    k = conventions.apply_rope_interleaved(k, positions)
    out, _ = torch_ref.attention(q, k, v, mask)
    expected = module.wo(module.merge_heads(out))
    with torch.no_grad():
        module.wq.weight.copy_(
            conventions.interleaved_to_rotate_half(meta_wq, n_head)
        )
        module.wk.weight.copy_(
            conventions.interleaved_to_rotate_half(meta_wk, n_head)
        )
    got, _ = module(x, mask)
    np.testing.assert_allclose(
        got.detach().numpy(), expected.detach().numpy(), atol=1e-12, rtol=0
    )


def test_transformers_rope_pairs_by_model(gen):
    """Which pairs each transformers 5.24.0 model turns: its own code."""
    from transformers.models.cohere import modeling_cohere
    from transformers.models.deepseek_v3 import modeling_deepseek_v3
    from transformers.models.glm import modeling_glm
    from transformers.models.gptj import modeling_gptj
    from transformers.models.llama import modeling_llama

    q = randn(gen, 1, 2, 5, 8)  # (B, H, T, d)
    positions = torch.arange(5)
    d = q.shape[-1]
    freq = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = positions.double()[:, None] * freq  # (T, d / 2)
    halves = torch.cat([angle, angle], -1)[None]  # (1, T, d): Llama's
    pairs = angle.repeat_interleave(2, -1)[None]  # (1, T, d): Cohere's
    inter = conventions.apply_rope_interleaved(q, positions)
    half = torch_ref.apply_rope(q, positions)
    got = {
        "llama": modeling_llama.apply_rotary_pos_emb(
            q, q, halves.cos(), halves.sin()
        )[0],
        "cohere": modeling_cohere.apply_rotary_pos_emb(
            q, q, pairs.cos(), pairs.sin()
        )[0],
        "glm": modeling_glm.apply_rotary_pos_emb(
            q, q, halves.cos(), halves.sin()
        )[0],
        "gptj": modeling_gptj.apply_rotary_pos_emb(
            q.transpose(1, 2), angle.sin()[None], angle.cos()[None]
        ).transpose(1, 2),  # GPT-J's (B, T, H, d)
        # DeepSeek-V3 turns adjacent pairs and writes them evens first
        "deepseek_v3": modeling_deepseek_v3.apply_rotary_pos_emb_interleave(
            q, q, halves.cos(), halves.sin()
        )[0],
    }
    np.testing.assert_allclose(got["llama"], half, **TOL64)
    for model in ("glm", "gptj"):
        np.testing.assert_allclose(got[model], inter, **TOL64)
    # Cohere rotates in float32 (q.float()), whatever q's dtype
    np.testing.assert_allclose(
        got["cohere"], inter, atol=atol(np.float32), rtol=0
    )
    order = [0, 2, 4, 6, 1, 3, 5, 7]  # interleaved_to_rotate_half's
    np.testing.assert_allclose(got["deepseek_v3"], inter[..., order], **TOL64)
    np.testing.assert_allclose(
        got["deepseek_v3"],
        torch_ref.apply_rope(q[..., order], positions),
        **TOL64,
    )
    # the name does not say it: Cohere's rotate_half pairs neighbours
    x = torch.arange(8.0)
    assert modeling_cohere.rotate_half(x).tolist()[:2] == [-1.0, 0.0]
    assert modeling_llama.rotate_half(x).tolist()[:2] == [-4.0, -5.0]


def interleaved_qwen_layer(state, x, sizes, eps, base):
    """A Qwen-shaped layer as an interleaved-RoPE code would run it:
    biases (Qwen2) and per-head QK-norm (Qwen3) before the rotation."""
    n_head, n_kv_head, d_head = sizes
    b, t, _ = x.shape
    positions = torch.arange(t)

    def heads(part, n):
        y = x @ state[f"{part}_proj.weight"].T
        if f"{part}_proj.bias" in state:
            y = y + state[f"{part}_proj.bias"]
        y = y.view(b, t, n, d_head)  # (B, T, n, d_head)
        if f"{part}_norm.weight" in state:
            rms = y.pow(2).mean(-1, keepdim=True).add(eps).rsqrt()
            y = state[f"{part}_norm.weight"] * (y * rms)
        return y.transpose(1, 2)  # (B, n, T, d_head)

    q = conventions.apply_rope_interleaved(heads("q", n_head), positions, base)
    k = conventions.apply_rope_interleaved(
        heads("k", n_kv_head), positions, base
    )
    v = heads("v", n_kv_head)
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True, enable_gqa=True
    )  # (B, H, T, d_head)
    y = out.transpose(1, 2).reshape(b, t, -1) @ state["o_proj.weight"].T
    return y + state.get("o_proj.bias", 0)  # Qwen3 with attention_bias


@pytest.mark.parametrize("model", ["qwen2", "qwen3"])
def test_checkpoint_to_rotate_half_runs_in_transformers_qwen(gen, model):
    """An interleaved checkpoint, converted, in transformers 5.24.0's own
    Qwen2Attention (q/k biases) and Qwen3Attention (q_norm, k_norm)."""
    import importlib

    module = importlib.import_module(
        f"transformers.models.{model}.modeling_{model}"
    )
    prefix = model.capitalize()
    config = getattr(module, f"{prefix}Config")(
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        attention_bias=True,
        rms_norm_eps=1e-6,
    )
    config._attn_implementation = "eager"
    layer = getattr(module, f"{prefix}Attention")(config, 0).double().eval()
    rotary = getattr(module, f"{prefix}RotaryEmbedding")(config)
    state = {
        name: randn(gen, *tensor.shape)
        for name, tensor in layer.state_dict().items()
    }  # random, norm weights included: an interleaved checkpoint
    x = randn(gen, 2, 6, 32)  # (B, T, d_model)
    base = config.rope_parameters["rope_theta"]
    expected = interleaved_qwen_layer(state, x, (4, 2, 8), 1e-6, base)
    position_embeddings = rotary(x, torch.arange(6)[None])
    mask = torch.full((6, 6), -torch.inf).triu(1)[None, None].double()

    def hf(weights):
        layer.load_state_dict(weights)
        with torch.no_grad():
            return layer(x, position_embeddings, mask)[0]

    converted = conventions.checkpoint_to_rotate_half(state, 8)
    # transformers' angles (inv_freq) and Qwen3's RMSNorm are float32:
    # a float32 tolerance, relative to the outputs' size
    scale = float(expected.abs().max())
    np.testing.assert_allclose(
        hf(converted), expected, atol=atol(np.float32) * scale, rtol=0
    )
    # W_Q and W_K alone reordered: the biases or norm weights left behind
    qk_only = {
        name: converted[name] if name.endswith("proj.weight") else tensor
        for name, tensor in state.items()
    }
    assert (hf(qk_only) - expected).abs().max() > 1e-2
    assert torch.equal(converted["v_proj.weight"], state["v_proj.weight"])


def test_checkpoint_to_rotate_half_refuses_bad_states():
    with pytest.raises(TypeError, match="state must be a dict"):
        conventions.checkpoint_to_rotate_half([torch.zeros(8)], 8)
    with pytest.raises(ValueError, match=r"state\['q_norm.weight'\]"):
        conventions.checkpoint_to_rotate_half(
            {"q_norm.weight": torch.zeros(6)}, 4
        )
    with pytest.raises(ValueError, match=r"'module\.parameter'"):
        conventions.checkpoint_to_rotate_half({"weight": torch.zeros(8)}, 4)


@pytest.mark.parametrize(
    ("shape", "n_head", "words"),
    [
        ((12, 4), 5, "split into n_head heads"),
        ((12, 4), 4, "even head size"),  # d_head = 3
        ((2, 3, 4), 1, "got shape (2, 3, 4)"),
    ],
)
def test_interleaved_to_rotate_half_names_a_bad_shape(shape, n_head, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        conventions.interleaved_to_rotate_half(torch.zeros(shape), n_head)


@pytest.mark.parametrize("dtype", [torch.bool, torch.int8, torch.int64])
def test_apply_rope_interleaved_int_and_bool_inputs_compute_in_float(dtype):
    # as torch_ref.apply_rope: an int rotation cast back to int was 0s
    x = torch.tensor([[1, 0], [1, 1], [0, 1]]).to(dtype)  # (T, d_head)
    got = conventions.apply_rope_interleaved(x, [0, 1, 2])
    expected = rotate_adjacent_by_hand(x.double().numpy(), [0, 1, 2])
    assert got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("kind", ["weight", "bias"])
def test_interleaved_to_rotate_half_takes_a_numpy_weight(gen, kind):
    weight = randn(gen, 2 * 4, 5) if kind == "weight" else randn(gen, 8)
    got = conventions.interleaved_to_rotate_half(weight.numpy(), n_head=2)
    order = [0, 2, 1, 3, 4, 6, 5, 7]  # H = 2 heads of d_head = 4
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, weight[order].numpy())


# The translation table's other rows: one function each, held to the
# libraries on either side (torch 2.13, transformers 5.24.0).


def test_causal_query_positions_give_both_corners():
    for tq, tk in ((3, 5), (2, 5), (5, 2)):
        for align in ("top_left", "bottom_right"):
            q_pos = conventions.causal_query_positions(tq, tk, align)
            got = torch_ref.causal_mask_for_positions(q_pos, torch.arange(tk))
            assert torch.equal(got, torch_ref.causal_mask(tq, tk, align=align))
    positions = conventions.causal_query_positions(3, 5, "bottom_right")
    assert positions.tolist() == [2, 3, 4]
    # flash-attn's README, causal=True (1 = keep): bottom-right
    readme = {(2, 5): [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]}
    readme[(5, 2)] = [[0, 0], [0, 0], [0, 0], [1, 0], [1, 1]]
    for (tq, tk), keep in readme.items():
        q_pos = conventions.causal_query_positions(tq, tk, "bottom_right")
        blocked = torch_ref.causal_mask_for_positions(q_pos, torch.arange(tk))
        assert (~blocked).int().tolist() == keep


def test_rows_without_keys_lists_the_empty_rows():
    mask = torch_ref.causal_mask(4, 2, align="bottom_right")  # rows 0, 1
    mask = mask.expand(2, 4, 2)  # (B, Tq, Tk)
    assert conventions.rows_without_keys(mask) == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
    ]
    with pytest.raises(TypeError, match="mask must be boolean"):
        conventions.rows_without_keys(mask.float())


def test_to_sdpa_mask_gives_sdpa_our_output(gen):
    q, k, v = (randn(gen, 1, 2, 5, 4) for _ in range(3))
    mask = torch_ref.causal_mask(5)
    ours, _ = torch_ref.attention(q, k, v, mask)
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=conventions.to_sdpa_mask(mask)
    )
    np.testing.assert_allclose(sdpa.numpy(), ours.numpy(), **TOL64)
    wrong = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask
    )
    assert (wrong - ours).abs().max() > 0.1  # the unflipped mask runs
    mod = conventions.to_mask_mod(mask)
    qi, kj = torch.arange(5)[:, None], torch.arange(5)[None, :]
    assert torch.equal(mod(0, 0, qi, kj), ~mask)  # True = keep


def test_mask_polarity_of_multihead_attention_is_ours(gen):
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True).double()
    x = randn(gen, 1, 5, 8)
    mask = torch_ref.causal_mask(5)
    _, weights = mha(x, x, x, attn_mask=mask)  # True = blocked
    assert (weights[0][mask] == 0).all()


def fused_calls_and_row(mask, **options):
    """nn.MultiheadAttention in eval, query 1 blocked: fused calls, row."""
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, **options).double().eval()
    batch_first = options.get("batch_first", False)
    x = torch.ones(1, 4, 8) if batch_first else torch.ones(4, 1, 8)
    x = x.double()
    calls, fused = [], torch._native_multi_head_attention

    def counted(*args, **kwargs):
        calls.append(1)
        return fused(*args, **kwargs)

    torch._native_multi_head_attention = counted
    try:
        with torch.no_grad():
            y, _ = mha(x, x, x, attn_mask=mask, need_weights=False)
    finally:
        torch._native_multi_head_attention = fused
    row = y[0, 1] if batch_first else y[1, 0]
    return len(calls), row - mha.out_proj.bias  # 0 where attention is 0


def test_multihead_attention_fast_path_needs_a_boolean_mask():
    blocked = torch.zeros(4, 4, dtype=torch.bool)
    blocked[1] = True  # query 1 reads no key
    additive = torch.zeros(4, 4, dtype=torch.float64)
    additive = additive.masked_fill(blocked, -math.inf)
    calls, row = fused_calls_and_row(blocked, batch_first=True)
    assert calls == 1
    assert row.isnan().all()  # the fused kernel: NaN
    for mask, options in (
        (additive, {"batch_first": True}),  # a float mask: no fast path
        (blocked, {}),  # batch_first=False, the default
    ):
        calls, row = fused_calls_and_row(mask, **options)
        assert calls == 0
        assert (row == 0).all()  # through SDPA: zeros


def test_window_conversions_follow_each_librarys_rule():
    from transformers.masking_utils import sliding_window_overlay

    pos = torch.arange(9)
    qi, kj = pos[:, None], pos[None, :]
    for window in (1, 2, 4):
        ours = torch_ref.sliding_window_mask(pos, pos, window)
        hf = sliding_window_overlay(window)(0, 0, qi, kj) & (kj <= qi)
        assert torch.equal(~hf, ours)  # transformers' own overlay
        left, right = conventions.window_from_hugging_face(
            window, "flash_attn"
        )
        flash = (kj >= qi - left) & (kj <= qi + right)  # its README
        assert torch.equal(~flash, ours)
        assert conventions.window_from_hugging_face(window, "jax") == (
            left,
            right,
        )
        gym = conventions.window_from_hugging_face(window, "attention_gym")
        assert torch.equal(~((qi - kj <= gym) & (qi >= kj)), ours)
        # jax.nn.dot_product_attention(implementation="cudnn") passes
        # sliding_window_length = local_window_size[0] + 1 to cuDNN
        # (jax/_src/nn/functions.py)
        cudnn = conventions.window_from_hugging_face(window, "jax_cudnn")
        assert cudnn == left + 1
        for library in conventions.WINDOWS:
            value = conventions.window_from_hugging_face(window, library)
            back = conventions.window_to_hugging_face(value, library)
            assert back == window
        # Mistral's reference prefill, triu(tril(ones), -sliding_window),
        # counts like attention-gym
        mistral = torch.ones(9, 9).tril().triu(-gym).bool()
        assert torch.equal(~mistral, ours)


def test_window_conversion_is_transformers_own_for_flash_attn():
    import collections

    from transformers.modeling_flash_attention_utils import (
        _process_flash_attention_kwargs,
    )

    supports = collections.defaultdict(bool, window_size=True)
    for window in (2, 3, 5):
        kwargs = _process_flash_attention_kwargs(
            9, 9, True, sliding_window=window, supports_mapping=supports
        )
        left, _ = kwargs["window_size"]  # causal=True drops the right
        assert kwargs["causal"] is True
        ours = conventions.window_from_hugging_face(window, "flash_attn")
        assert (left, 0) == ours


def test_learned_sink_as_key_equals_sinks(gen):
    q, k, v = (randn(gen, 2, 3, 4, 5) for _ in range(3))
    sinks = torch.tensor([0.5, -2.0, -math.inf], dtype=torch.float64)
    mask = torch_ref.causal_mask(4)
    want, _ = torch_ref.attention(q, k, v, mask, sinks=sinks, softcap=3.0)
    k2, v2, bias = conventions.learned_sink_as_key(k, v, sinks)
    seen = torch.cat([mask, torch.zeros(4, 1, dtype=torch.bool)], dim=-1)
    got, _ = torch_ref.attention(q, k2, v2, seen, bias=bias, softcap=3.0)
    np.testing.assert_allclose(got.numpy(), want.numpy(), **TOL64)


def test_mask_then_softcap_leaks_weight():
    scores = torch.tensor([-45.0, -46.0, 0.0, 0.0], dtype=torch.float64)
    mask = torch.tensor([False, False, True, True])
    wrong = conventions.mask_then_softcap(scores, mask, 50.0)
    leak = float(wrong[mask].sum())
    capped = 50 * torch.tanh(scores[:2] / 50)
    expected = 2 * math.exp(-50) / (2 * math.exp(-50) + capped.exp().sum())
    assert leak == pytest.approx(float(expected), rel=1e-12)
    right, _ = torch_ref.attention(
        torch.eye(4, dtype=torch.float64)[None],
        torch.eye(4, dtype=torch.float64)[None],
        torch.ones(1, 4, 1, dtype=torch.float64),
        mask.expand(1, 4, 4),
        softcap=50.0,
    )
    assert right.isfinite().all()  # the right order: masked weight 0


def test_layout_converters_match_the_libraries(gen):
    x = randn(gen, 2, 5, 3, 4)  # flash-attn's (B, T, H, d)
    assert torch.equal(conventions.from_bthd(x)[:, 1, 2], x[:, 2, 1])
    torch.manual_seed(1)
    mha = torch.nn.MultiheadAttention(8, 2).double()  # (T, B, E)
    seq = randn(gen, 5, 3, 8)
    y_seq, _ = mha(seq, seq, seq)
    torch.manual_seed(1)
    batch_first = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    batch_first = batch_first.double()
    bf = conventions.from_sequence_first(seq)  # (B, T, E)
    y_bf, _ = batch_first(bf, bf, bf)
    np.testing.assert_allclose(
        conventions.from_sequence_first(y_seq).detach().numpy(),
        y_bf.detach().numpy(),
        **TOL64,
    )
    with pytest.raises(ValueError, match=re.escape("4-D tensor (B, T, H, d)")):
        conventions.from_bthd(x[0])


def test_kv_head_of_consecutive_is_sdpas_map(gen):
    q, k, v = (
        randn(gen, 1, 6, 4, 3),
        randn(gen, 1, 2, 4, 3),
        randn(gen, 1, 2, 4, 3),
    )
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, enable_gqa=True
    )
    heads = conventions.kv_head_of(6, 2, "consecutive")
    got, _ = torch_ref.attention(q, k[:, heads], v[:, heads])
    np.testing.assert_allclose(got.numpy(), sdpa.numpy(), **TOL64)
    strided = conventions.kv_head_of(6, 2, "strided")
    assert strided.tolist() == [0, 1, 0, 1, 0, 1]
    assert torch.equal(k.repeat(1, 3, 1, 1), k[:, strided])  # x.repeat
    from transformers.models.llama.modeling_llama import repeat_kv

    assert torch.equal(repeat_kv(k, 3), k[:, heads])  # consecutive
    assert torch.equal(k.repeat_interleave(3, dim=1), k[:, heads])
    with pytest.raises(ValueError, match="layout must be one of"):
        conventions.kv_head_of(6, 2, "interleaved")


def test_default_scale_matches_the_libraries():
    from transformers import Gemma2Config, T5Config
    from transformers.models.gemma2.modeling_gemma2 import Gemma2Attention
    from transformers.models.t5.modeling_t5 import T5Attention

    config = Gemma2Config(
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        query_pre_attn_scalar=12,
        num_hidden_layers=1,
    )
    gemma = Gemma2Attention(config, 0).scaling
    assert conventions.default_scale(8, "gemma", 12) == pytest.approx(gemma)
    t5 = T5Attention(T5Config(d_model=8, d_kv=4, num_heads=2)).scaling
    assert conventions.default_scale(4, "t5") == t5 == 1.0
    assert conventions.default_scale(64, "sqrt") == 0.125
    with pytest.raises(ValueError, match="query_pre_attn_scalar must be"):
        conventions.default_scale(8, "gemma", -1.0)


def test_additive_mask_finite_fill_keeps_the_rows_softmax():
    mask = torch.tensor([[False, True], [True, True]])
    scores = torch.tensor([[0.3, 2.0], [0.3, 2.0]])
    for fill, empty_row in (("-inf", "nan"), ("min", "uniform")):
        added = scores + conventions.additive_mask(mask, torch.float32, fill)
        weights = added.softmax(dim=-1)
        assert weights[0].tolist() == [1.0, 0.0]  # a key left: weight 0
        if empty_row == "nan":
            assert weights[1].isnan().all()
        else:
            assert weights[1].tolist() == [0.5, 0.5]
    # -1e9 drowns small float32 scores (spacing 64 at 1e9) but not
    # float64 ones: there the emptied row is the softmax of its scores
    blocked = torch.ones(1, 3, dtype=torch.bool)
    row = torch.tensor([[0.5, 1.0, -0.3]], dtype=torch.float64)
    for dtype, uniform in ((torch.float32, True), (torch.float64, False)):
        added = row.to(dtype) + conventions.additive_mask(blocked, dtype, -1e9)
        weights = added.softmax(dim=-1)
        if uniform:
            assert (weights == weights[0, 0]).all()
        else:
            np.testing.assert_allclose(
                weights, row.softmax(dim=-1), rtol=1e-7, atol=0
            )
    with pytest.raises(ValueError, match=r"does not fit torch\.float16"):
        conventions.additive_mask(mask, torch.float16, -1e9)


@pytest.mark.parametrize(
    ("convert", "shape", "axes"),
    [
        (conventions.from_bthd, (2, 3, 4, 5), (1, 2)),
        (conventions.from_sequence_first, (3, 2, 5), (0, 1)),
    ],
)
def test_layout_converters_give_the_numpy_answer_for_an_array(
    convert, shape, axes
):
    # x.transpose(1, 2) is a permutation of every axis in NumPy: "axes
    # don't match array"
    x = np.arange(math.prod(shape), dtype=np.float64).reshape(shape)
    got = convert(x)
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, np.swapaxes(x, *axes))
    with pytest.raises(TypeError, match=r"x must be a torch\.Tensor or a Num"):
        convert(x.tolist())


def test_rows_without_keys_takes_a_numpy_mask():
    mask = np.array([[[True, True], [False, True]], [[True, False]] * 2])
    want = [tuple(i) for i in np.argwhere(mask.all(axis=-1)).tolist()]
    assert conventions.rows_without_keys(mask) == want == [(0, 0)]
    assert conventions.rows_without_keys(torch.from_numpy(mask)) == want
    with pytest.raises(TypeError, match="mask must be a boolean torch"):
        conventions.rows_without_keys(mask.tolist())


def glm_rotary(q, positions, fraction):
    """transformers 5.24.0 GLM's rotary embedding and its interleaved
    partial apply_rotary_pos_emb on q (B, H, T, d)."""
    from transformers import GlmConfig
    from transformers.models.glm import modeling_glm

    h, d = q.shape[1], q.shape[3]
    config = GlmConfig(
        hidden_size=h * d,
        num_attention_heads=h,
        num_key_value_heads=h,
        head_dim=d,
        partial_rotary_factor=fraction,
    )
    rotary = modeling_glm.GlmRotaryEmbedding(config)
    cos, sin = rotary(q, torch.as_tensor(positions)[None])
    return modeling_glm.apply_rotary_pos_emb(q, q, cos, sin)[0]


def test_apply_rope_interleaved_rotary_dim_is_glms(gen):
    q = randn(gen, 1, 2, 6, 16)
    positions = torch.arange(6) * 7
    want = glm_rotary(q, positions, 0.5)
    got = conventions.apply_rope_interleaved(q, positions, rotary_dim=8)
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-5)


def test_partial_rotary_bridge_reorders_only_the_rotated_slice(gen):
    # GLM: adjacent pairs on half of each head. The reorder of the
    # rotated slice gives rotate-half (apply_rope with rotary_dim) the
    # model's scores; the whole-head reorder, right for a full-rotary
    # model, moves passed features into the rotated slice
    n_head, d_head, d_model, t = 2, 16, 12, 7
    r = d_head // 2
    x = randn(gen, 1, t, d_model)
    wq = randn(gen, n_head * d_head, d_model)
    wk = randn(gen, n_head * d_head, d_model)
    positions = torch.arange(t) * 5
    q, k = heads(x, wq, wk, n_head, n_head)
    glm = glm_rotary(q, positions, 0.5) @ glm_rotary(
        k, positions, 0.5
    ).transpose(-2, -1)

    def scores(reorder):
        q, k = heads(x, reorder(wq), reorder(wk), n_head, n_head)
        q = torch_ref.apply_rope(q, positions, rotary_dim=r)
        k = torch_ref.apply_rope(k, positions, rotary_dim=r)
        return q @ k.transpose(-2, -1)

    sliced = scores(
        lambda w: conventions.interleaved_to_rotate_half(w, n_head, r)
    )
    whole = scores(lambda w: conventions.interleaved_to_rotate_half(w, n_head))
    np.testing.assert_allclose(sliced.numpy(), glm.numpy(), atol=1e-4)
    assert (whole - glm).abs().max() > 1.0  # silently wrong


def test_interleaved_to_rotate_half_rotary_dim_keeps_the_rest():
    rows = torch.arange(16.0)[:, None]  # two heads of 8
    got = conventions.interleaved_to_rotate_half(rows, 2, rotary_dim=4)
    expected = [0, 2, 1, 3, 4, 5, 6, 7, 8, 10, 9, 11, 12, 13, 14, 15]
    assert got[:, 0].tolist() == expected
    with pytest.raises(ValueError, match="rotary_dim"):
        conventions.interleaved_to_rotate_half(rows, 2, rotary_dim=3)


def gptj_rotary(x, positions, rotary_dim):
    """GPT-J's partial rotary (transformers 5.24.0, modeling_gptj.py):
    adjacent pairs on the first rotary_dim features, x (B, T, H, d)."""
    from transformers.models.gptj import modeling_gptj

    table = modeling_gptj.create_sinusoidal_positions(64, rotary_dim)
    sincos = table[positions][None].to(x.dtype)  # (1, T, rotary_dim)
    sin, cos = torch.split(sincos, rotary_dim // 2, dim=-1)
    turned = modeling_gptj.apply_rotary_pos_emb(x[..., :rotary_dim], sin, cos)
    return torch.cat([turned, x[..., rotary_dim:]], dim=-1)


def test_partial_rotary_bridge_gives_gptjs_scores(gen):
    # GPT-J: rotary_dim 64 of a head of 256 by default; here 8 of 32.
    # The slice reorder gives rotate-half on the slice GPT-J's scores
    n_head, d_head, d_model, t, r = 2, 32, 16, 6, 8
    x = randn(gen, 1, t, d_model)
    wq = randn(gen, n_head * d_head, d_model)
    wk = randn(gen, n_head * d_head, d_model)
    positions = torch.arange(t) * 9

    def bthd(w):  # (B, T, H, d_head), GPT-J's layout when it rotates
        return (x @ w.T).view(1, t, n_head, d_head)

    q, k = (
        gptj_rotary(bthd(wq), positions, r),
        gptj_rotary(bthd(wk), positions, r),
    )
    want = q.transpose(1, 2) @ k.transpose(1, 2).transpose(-2, -1)
    q, k = heads(
        x,
        conventions.interleaved_to_rotate_half(wq, n_head, r),
        conventions.interleaved_to_rotate_half(wk, n_head, r),
        n_head,
        n_head,
    )
    q = torch_ref.apply_rope(q, positions, rotary_dim=r)
    k = torch_ref.apply_rope(k, positions, rotary_dim=r)
    got = q @ k.transpose(-2, -1)
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-4)
