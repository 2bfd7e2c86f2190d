"""Functions to run the checker on: the six pitfalls, two correct
layers written differently from the reference, and an adapter for a
module in Hugging Face's style (q_proj, k_proj, v_proj, o_proj).

Every function here has the checker's layer signature,
``fn(x, w_q, w_k, w_v, w_o, n_head, causal)`` with weights as x @ w.
"""

import functools
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mha_ref import numpy_ref, pitfalls

PITFALLS = ("split", "scale", "mask after", "axis", "merge", "layout")


def _pitfall_layer(x, w_q, w_k, w_v, w_o, n_head, causal, mistake):
    """The layer step by step, with one pitfall of pitfalls.py."""
    b, t, d_model = x.shape
    d_head = d_model // n_head
    if mistake == "layout":  # copied from nn.Linear's (out, in) storage
        w_q, w_k, w_v, w_o = (
            pitfalls.wrong_copy_from_linear(w.T) for w in (w_q, w_k, w_v, w_o)
        )

    def split(a):  # (B, T, d_model) -> (B, H, T, dh)
        if mistake == "split":
            return pitfalls.wrong_split_heads(a, n_head)
        return a.reshape(b, t, n_head, d_head).transpose(0, 2, 1, 3)

    q, k, v = split(x @ w_q), split(x @ w_k), split(x @ w_v)
    if mistake == "scale":
        scores = pitfalls.wrong_scale_scores(q, k, d_model)
    else:
        scores = q @ k.swapaxes(-2, -1) / math.sqrt(d_head)
    mask = np.triu(np.ones((t, t), dtype=bool), 1) if causal else None
    masked = scores if mask is None else np.where(mask, -np.inf, scores)
    if mistake == "mask after" and mask is not None:
        weights = pitfalls.wrong_mask_after_softmax(scores, mask)
    elif mistake == "axis":
        weights = pitfalls.wrong_softmax_axis(masked)
    else:
        weights = numpy_ref.softmax(masked)
    out = weights @ v  # (B, H, T, dh)
    if mistake == "merge":
        merged = pitfalls.wrong_merge_heads(out)
    else:
        merged = out.transpose(0, 2, 1, 3).reshape(b, t, d_model)
    return merged @ w_o  # (B, T, d_model)


def pitfall_layer(mistake):
    """The layer with one of PITFALLS, for diagnose.layer."""
    if mistake not in PITFALLS:
        raise ValueError(f"mistake must be one of {PITFALLS}, got {mistake!r}")
    return functools.partial(_pitfall_layer, mistake=mistake)


# --8<-- [start:einsum-layer]
def einsum_layer(x, w_q, w_k, w_v, w_o, n_head, causal):
    """The layer with einsum: heads as an axis of the weights."""
    b, t, d_model = x.shape
    w_q, w_k, w_v = (w.reshape(d_model, n_head, -1) for w in (w_q, w_k, w_v))
    q = np.einsum("btd,dhe->bhte", x, w_q)  # (B, H, T, dh)
    k = np.einsum("btd,dhe->bhte", x, w_k)
    v = np.einsum("btd,dhe->bhte", x, w_v)
    s = np.einsum("bhqe,bhke->bhqk", q, k) / math.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.triu(np.ones((t, t), dtype=bool), 1), -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    p = p / p.sum(-1, keepdims=True)  # (B, H, T, T)
    o = np.einsum("bhqk,bhke->bqhe", p, v).reshape(b, t, d_model)
    return o @ w_o  # (B, T, d_model)
    # --8<-- [end:einsum-layer]


# --8<-- [start:loop-layer]
def loop_layer(x, w_q, w_k, w_v, w_o, n_head, causal):
    """The layer one head and one query at a time, in plain loops."""
    t, d_model = x.shape[1:]
    d_head = d_model // n_head
    q, k, v = x @ w_q, x @ w_k, x @ w_v  # (B, T, d_model)
    heads = np.zeros_like(q)
    for h in range(n_head):
        cols = slice(h * d_head, (h + 1) * d_head)  # this head's features
        for i in range(t):
            keys = range(i + 1) if causal else range(t)
            s = [(q[:, i, cols] * k[:, j, cols]).sum(-1) for j in keys]
            s = np.stack(s, axis=-1) / math.sqrt(d_head)  # (B, keys)
            p = np.exp(s - s.max(-1, keepdims=True))
            p = p / p.sum(-1, keepdims=True)
            heads[:, i, cols] = np.einsum("bj,bjd->bd", p, v[:, keys, cols])
    return heads @ w_o  # (B, T, d_model)
    # --8<-- [end:loop-layer]


# --8<-- [start:sdpa-mask-as-is]
def sdpa_mask_as_is(q, k, v, mask):
    """SDPA handed this site's mask unchanged (True = blocked): its own
    boolean mask means True = allowed."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    # --8<-- [end:sdpa-mask-as-is]


# --8<-- [start:hf-style-module]
class HFStyleAttention(nn.Module):
    """Laid out like Hugging Face's Llama attention: q_proj, k_proj,
    v_proj, o_proj (nn.Linear, weights (out, in)), an additive mask and
    the rotary cos and sin passed in (rotate-half RoPE: Decoding with a
    KV cache, RoPE section); returns (output, weights)."""

    def __init__(self, d_model, n_head):
        super().__init__()
        self.n_head, self.head_dim = n_head, d_model // n_head
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.o_proj = nn.Linear(d_model, d_model, bias=False)

    def forward(self, hidden_states, position_embeddings, attention_mask):
        b, t, _ = hidden_states.shape
        shape = (b, t, self.n_head, self.head_dim)
        q = self.q_proj(hidden_states).view(shape).transpose(1, 2)
        k = self.k_proj(hidden_states).view(shape).transpose(1, 2)
        v = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        cos, sin = position_embeddings  # (B, T, dh): rotate-half RoPE
        q = q * cos[:, None] + _rotate_half(q) * sin[:, None]
        k = k * cos[:, None] + _rotate_half(k) * sin[:, None]
        s = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        s = s + attention_mask  # (B, 1, T, T): 0, or very negative
        p = torch.softmax(s, dim=-1)  # (B, H, T, T)
        out = (p @ v).transpose(1, 2).reshape(b, t, -1)
        return self.o_proj(out), p
        # --8<-- [end:hf-style-module]


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


# --8<-- [start:llama-attention]
def llama_attention(d_model, n_head):
    """Hugging Face's own LlamaAttention (transformers installed), tiny
    and random, built for one case: make_module for module_layer."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaAttention

    config = LlamaConfig(
        hidden_size=d_model,
        num_attention_heads=n_head,
        num_key_value_heads=n_head,  # no grouped heads: H_kv = H
    )
    config._attn_implementation = "eager"  # its plain PyTorch path
    # layer_idx: this layer's index in the model's stack of layers
    return LlamaAttention(config, layer_idx=0)
    # --8<-- [end:llama-attention]


# --8<-- [start:module-adapter]
def module_layer(make_module):
    """diagnose.layer's fn for attention modules laid out like Hugging
    Face's Llama: make_module(d_model, n_head) builds one per case (its
    head size and scale are fixed when it is built), and the checker's
    weights go in as its parameters, so gradients reach them."""

    def fn(x, w_q, w_k, w_v, w_o, n_head, causal):
        b, t, d_model = x.shape
        module = make_module(d_model, n_head).to(x.dtype)
        params = {  # nn.Linear keeps (out, in): x @ w is weight = w.T
            f"{name}.weight": w.T
            for name, w in zip(
                ("q_proj", "k_proj", "v_proj", "o_proj"),
                (w_q, w_k, w_v, w_o),
                strict=True,
            )
        }
        mask = torch.zeros(b, 1, t, t, dtype=x.dtype)  # additive
        if causal:  # Hugging Face fills with the dtype's minimum
            future = torch.ones(t, t, dtype=torch.bool).triu(1)
            mask = mask.masked_fill(future, torch.finfo(x.dtype).min)
        shape = (b, t, d_model // n_head)  # cos = 1, sin = 0: no rotation
        no_rope = (
            torch.ones(shape, dtype=x.dtype),
            torch.zeros(shape, dtype=x.dtype),
        )
        kwargs = {"position_embeddings": no_rope, "attention_mask": mask}
        out = torch.func.functional_call(module, params, (x,), kwargs)
        return out[0]  # (B, T, d_model)

    return fn
    # --8<-- [end:module-adapter]
