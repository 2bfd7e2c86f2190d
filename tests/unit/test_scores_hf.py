"""Score modifiers against Hugging Face transformers 5.24.0's own code.

Tiny random configurations (no download), eager attention; each
layer's projection weights copied into our computation (torch_ref's
apply_rope, attention, alibi_slopes, alibi_bias, sliding_window_mask):

- Gemma 2 (modeling_gemma2.py): soft-cap, query_pre_attn_scalar, a
  sliding and a full layer. Its softmax runs in float32 whatever the
  input dtype, so float64 inputs agree to float32's tolerance.
- gpt-oss (modeling_gpt_oss.py): learned sinks, alternating sliding
  and full layers; its softmax keeps float64.
- BLOOM (modeling_bloom.py) and MPT (modeling_mpt.py): ALiBi with 6
  heads (not a power of two), softmax in float32.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import BloomConfig, Gemma2Config, GptOssConfig, MptConfig
from transformers.masking_utils import (
    create_causal_mask,
    create_sliding_window_causal_mask,
)
from transformers.models.bloom.modeling_bloom import (
    BloomAttention,
    build_alibi_tensor,
)
from transformers.models.gemma2.modeling_gemma2 import (
    Gemma2Attention,
    Gemma2RotaryEmbedding,
)
from transformers.models.gpt_oss.modeling_gpt_oss import (
    GptOssAttention,
)
from transformers.models.mpt.modeling_mpt import (
    MptAttention,
    build_mpt_alibi_tensor,
)

from mha_ref import torch_ref
from mha_ref.tolerances import atol

T = 7  # positions
F32 = {"atol": atol(np.float32), "rtol": 0}  # a float32 softmax
F64 = {"atol": atol(np.float64), "rtol": 0}


def randomise(module, seed, std=0.4):
    """Every parameter drawn N(0, std^2): scores of a few units, so the
    soft-cap and the sinks matter (the default init is too small)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randn(param.shape, generator=gen) * std)
    return module.double().eval()


def heads(x, weight, bias, d_head):
    """(B, T, d_model) @ W^T + b split into heads: (B, H, T, d_head)."""
    b, t, _ = x.shape
    return F.linear(x, weight, bias).view(b, t, -1, d_head).transpose(1, 2)


def merge(out):
    b, h, t, d = out.shape  # (B, H, T, dh)
    return out.transpose(1, 2).reshape(b, t, h * d)  # (B, T, H * dh)


def blocked(hf_mask):
    """Hugging Face's additive eager mask (0 or finfo.min) as ours."""
    return hf_mask != 0  # True = blocked


def window_mask(window):
    pos = torch.arange(T)
    if window is None:
        return torch_ref.causal_mask(T)
    return torch_ref.sliding_window_mask(pos, pos, window)


def x_input(seed, d_model):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(2, T, d_model, generator=gen, dtype=torch.float64)


def hf_masks(config, x):
    kw = {
        "config": config,
        "inputs_embeds": x,
        "attention_mask": None,
        "cache": None,
        "position_ids": torch.arange(T)[None],
    }
    return {
        "full_attention": create_causal_mask(**kw),
        "sliding_attention": create_sliding_window_causal_mask(**kw),
    }


def gemma2_config():
    return Gemma2Config(
        vocab_size=16,
        hidden_size=32,
        intermediate_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        query_pre_attn_scalar=12,  # not head_dim: scale 12^-1/2
        attn_logit_softcapping=3.0,  # small, so the cap bends the scores
        sliding_window=3,
        attn_implementation="eager",
    )


@pytest.mark.parametrize("layer", [0, 1], ids=["sliding", "full"])
def test_gemma2_attention_matches_ours(layer):
    config = gemma2_config()
    hf = randomise(Gemma2Attention(config, layer), seed=layer)
    x = x_input(10 + layer, config.hidden_size)
    cos, sin = Gemma2RotaryEmbedding(config)(x, torch.arange(T)[None])
    mask = hf_masks(config, x)[config.layer_types[layer]]
    with torch.no_grad():
        want, _ = hf(x, (cos, sin), mask)
    window = config.sliding_window if layer == 0 else None
    ours_mask = window_mask(window)  # (T, T)
    assert torch.equal(blocked(mask)[0, 0], ours_mask)
    with torch.no_grad():
        d = config.head_dim
        theta = config.rope_parameters["rope_theta"]
        q = torch_ref.apply_rope(
            heads(x, hf.q_proj.weight, None, d), range(T), theta
        )
        k = torch_ref.apply_rope(
            heads(x, hf.k_proj.weight, None, d), range(T), theta
        )
        v = heads(x, hf.v_proj.weight, None, d)  # (B, H_kv, T, d)
        out, _ = torch_ref.attention(
            q,
            k,
            v,
            ours_mask,
            scale=config.query_pre_attn_scalar**-0.5,
            softcap=config.attn_logit_softcapping,
        )
        got = F.linear(merge(out), hf.o_proj.weight)
    np.testing.assert_allclose(got.numpy(), want.numpy(), **F32)
    with torch.no_grad():
        capped = torch_ref.attention(q, k, v, ours_mask, scale=12**-0.5)[0]
    assert (capped - out).abs().max() > 100 * F32["atol"]  # the cap matters


def rope_angles(d_head, base):
    """cos and sin (1, T, d_head / 2) of position * base^(-2i / d_head)."""
    i = torch.arange(d_head // 2, dtype=torch.float64)
    angle = torch.arange(T, dtype=torch.float64)[:, None] * base ** (
        -2 * i / d_head
    )
    return angle.cos()[None], angle.sin()[None]


def gpt_oss_config():
    return GptOssConfig(
        vocab_size=16,
        hidden_size=32,
        intermediate_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        sliding_window=3,
        num_local_experts=2,
        num_experts_per_tok=1,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        attn_implementation="eager",
    )


@pytest.mark.parametrize("layer", [0, 1], ids=["sliding", "full"])
def test_gpt_oss_attention_with_sinks_matches_ours(layer):
    config = gpt_oss_config()
    assert config.layer_types == ["sliding_attention", "full_attention"]
    hf = randomise(GptOssAttention(config, layer), seed=20 + layer, std=0.6)
    x = x_input(30 + layer, config.hidden_size)
    # its rotary module computes cos and sin in float32; these are the
    # same angles in float64, as torch_ref.apply_rope computes them
    cos, sin = rope_angles(config.head_dim, 10000.0)
    mask = hf_masks(config, x)[config.layer_types[layer]]
    with torch.no_grad():
        want, _ = hf(x, (cos, sin), mask)
    window = config.sliding_window if layer == 0 else None
    ours_mask = window_mask(window)
    assert torch.equal(blocked(mask)[0, 0], ours_mask)
    d = config.head_dim
    q = torch_ref.apply_rope(
        heads(x, hf.q_proj.weight, hf.q_proj.bias, d), range(T)
    )
    k = torch_ref.apply_rope(
        heads(x, hf.k_proj.weight, hf.k_proj.bias, d), range(T)
    )
    v = heads(x, hf.v_proj.weight, hf.v_proj.bias, d)
    with torch.no_grad():
        out, weights = torch_ref.attention(q, k, v, ours_mask, sinks=hf.sinks)
        got = F.linear(merge(out), hf.o_proj.weight, hf.o_proj.bias)
    np.testing.assert_allclose(got.numpy(), want.numpy(), **F64)
    share = 1 - weights.sum(dim=-1)  # what the sinks took, per row
    assert share.max() > 0.5  # the sinks carry real weight here


def alibi_input(seed, d_model):
    return x_input(seed, d_model)


def test_bloom_attention_matches_ours_with_alibi():
    config = BloomConfig(vocab_size=16, hidden_size=24, n_head=6, n_layer=1)
    hf = randomise(BloomAttention(config, 0), seed=40)
    x = alibi_input(41, config.hidden_size)
    n_head, d = config.n_head, config.hidden_size // config.n_head
    alibi = build_alibi_tensor(torch.ones(2, T), n_head, torch.float64)
    causal = torch_ref.causal_mask(T)
    additive = torch.zeros(T, T, dtype=torch.float64).masked_fill(
        causal, torch.finfo(torch.float64).min
    )[None, None]  # (1, 1, T, T), as BLOOM's model builds it
    with torch.no_grad():
        want = hf(x, torch.zeros_like(x), alibi, additive)[0]
    # BLOOM fuses Q, K, V per head: rows (H, 3, dh) of query_key_value
    w = hf.query_key_value.weight.view(n_head, 3, d, -1)
    b = hf.query_key_value.bias.view(n_head, 3, d)
    q, k, v = (
        heads(x, w[:, i].reshape(-1, w.shape[-1]), b[:, i].reshape(-1), d)
        for i in range(3)
    )
    slopes = torch_ref.alibi_slopes(n_head)
    bias = torch_ref.alibi_bias(slopes, range(T), range(T))  # -m (i - j)
    with torch.no_grad():
        out, _ = torch_ref.attention(q, k, v, causal, bias=bias)
        got = F.linear(merge(out), hf.dense.weight, hf.dense.bias)
    np.testing.assert_allclose(got.numpy(), want.numpy(), **F32)


def test_mpt_attention_matches_ours_with_alibi():
    config = MptConfig(
        vocab_size=16, d_model=24, n_heads=6, n_layers=1, max_seq_len=16
    )
    hf = randomise(MptAttention(config, 0), seed=50)
    x = alibi_input(51, config.d_model)
    n_head, d = config.n_heads, config.d_model // config.n_heads
    position_bias = build_mpt_alibi_tensor(n_head, T).double()  # (H, 1, T)
    causal = torch_ref.causal_mask(T)
    with torch.no_grad():
        want, _ = hf(x, position_bias, attention_mask=causal[None, None])
    wq, wk, wv = hf.Wqkv.weight.chunk(3, dim=0)  # Q, K, V one after another
    q, k, v = (heads(x, w, None, d) for w in (wq, wk, wv))
    slopes = torch_ref.alibi_slopes(n_head)
    bias = torch_ref.alibi_bias(slopes, range(T), range(T))
    with torch.no_grad():
        out, _ = torch_ref.attention(q, k, v, causal, bias=bias)
        got = F.linear(merge(out), hf.out_proj.weight)
    np.testing.assert_allclose(got.numpy(), want.numpy(), **F32)
