"""Conventions that differ between libraries, and the code that bridges
them (the conventions page).

RoPE's pairs: torch_ref.apply_rope turns features (i, i + d_head / 2)
together (rotate-half: GPT-NeoX, transformers' Llama and most of its
models); Meta's Llama code, RoFormer, GPT-J, Cohere, GLM and DeepSeek-V3
turn adjacent features (2i, 2i + 1). The two give the same scores once
the rows of W_Q and W_K are reordered within each head, as the Llama
conversion script of transformers' repository does.

The causal corner (causal_mask's ``align``) and rows with no allowed
key (``empty_rows``) are arguments of the references; the two helpers
here name the query positions of a corner and the rows left empty.

Then one function per convention of the translation table: mask
polarity, the sliding window's counts, ALiBi's slope rules and signs,
the two meanings of "sink", soft-cap before the mask, tensor layouts,
the grouped-query head map, scale defaults and fill values.
"""

import numpy as np
import torch

from mha_ref import numpy_ref
from mha_ref.guards import conventions as check


# --8<-- [start:rope-interleaved]
def apply_rope_interleaved(x, positions, base=10000.0, rotary_dim=None):
    """RoPE on adjacent pairs (2i, 2i + 1): Meta's Llama code, RoFormer.

    x (..., T, d_head) at ``positions`` (T,), apply_rope's angles. With
    rotary_dim r only the first r features turn, the rest pass through.
    """
    x, positions, r = check.apply_rope_interleaved(
        x, positions, base, rotary_dim
    )
    if not x.is_floating_point():  # int or bool x: rotate in float32
        x = x.to(torch.promote_types(x.dtype, torch.float32))
    dtype = x.dtype
    # theta_i = base^(-2i / r), in float64, cast once
    i = torch.arange(r // 2, device=x.device, dtype=torch.float64)
    freq = float(base) ** (-2.0 * i / r)  # (r / 2,)
    angle = positions.double()[:, None] * freq  # (T, r / 2)
    cos, sin = angle.cos().to(dtype), angle.sin().to(dtype)
    x, passed = x[..., :r], x[..., r:]  # (..., T, r), (..., T, d_head - r)
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., T, r / 2) each
    # each pair (x_2i, x_2i+1) turned by its angle, as R(m theta_i)
    turned = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)
    return torch.cat([turned.flatten(-2), passed], -1)  # (..., T, d_head)
    # --8<-- [end:rope-interleaved]


# --8<-- [start:rope-permutation]
def interleaved_to_rotate_half(weight, n_head, rotary_dim=None):
    """W_Q or W_K (or a bias) of an interleaved-RoPE checkpoint, for
    rotate-half RoPE: in each head, row 2i to slot i, row 2i + 1 to
    slot i + r / 2 (r = rotary_dim or d_head; later rows stay).

    weight (n_head * d_head, ...), nn.Linear's (out, in); for W_K,
    n_head counts the key/value heads. Torch or NumPy, kept as given.
    """
    check.interleaved_to_rotate_half(weight.shape, n_head, rotary_dim)
    d_head = weight.shape[0] // n_head
    r = d_head if rotary_dim is None else rotary_dim  # the rotated slice
    rows = np.arange(weight.shape[0]).reshape(n_head, d_head)  # (H, d_head)
    pairs = rows[:, :r].reshape(n_head, r // 2, 2)  # (H, r / 2, 2)
    # in the rotated slice, the evens, then the odds
    rows[:, :r] = pairs.swapaxes(1, 2).reshape(n_head, r)
    return weight[rows.ravel()]  # (H * d_head, ...), rows reordered
    # --8<-- [end:rope-permutation]


# --8<-- [start:rope-checkpoint]
QK_PARTS = ("q_proj", "k_proj", "q_norm", "k_norm")  # transformers' names


def checkpoint_to_rotate_half(state, d_head, rotary_dim=None):
    """An attention layer's weights, from interleaved to rotate-half RoPE.

    state: name -> tensor, by transformers' module names. Each tensor of
    q_proj, k_proj (biases too), q_norm, k_norm is reordered per head.
    """
    check.checkpoint_to_rotate_half(state, d_head)
    out = dict(state)
    for name, tensor in state.items():
        if name.split(".")[-2] in QK_PARTS:
            heads = tensor.shape[0] // d_head  # 1 for a per-head norm
            out[name] = interleaved_to_rotate_half(tensor, heads, rotary_dim)
    return out
    # --8<-- [end:rope-checkpoint]


# --8<-- [start:causal-query-positions]
def causal_query_positions(tq, tk, align):
    """The positions the Tq queries hold among Tk keys at 0 .. Tk - 1.

    "top_left" (SDPA's is_causal): 0 .. Tq - 1, as if the queries came
    first; "bottom_right" (flash-attn >= 2.1, a KV cache): Tk - Tq ..
    Tk - 1. causal_mask_for_positions at these positions is
    causal_mask(tq, tk, align).
    """
    offset = check.causal_query_positions(tq, tk, align)  # None: square
    return torch.arange(offset, offset + tq)  # (Tq,)
    # --8<-- [end:causal-query-positions]


# --8<-- [start:rows-without-keys]
def rows_without_keys(mask):
    """The index of every query row whose keys are all blocked.

    mask (..., Tq, Tk), True = blocked, a tensor or a NumPy array.
    These rows have no softmax: ours refuses them, SDPA and flash-attn
    return 0, a softmax over -inf fills returns NaN.
    """
    check.rows_without_keys(mask)  # a boolean tensor or array
    empty = mask.all(-1)  # (..., Tq): True where every key is blocked
    rows = empty.nonzero() if torch.is_tensor(empty) else np.argwhere(empty)
    return [tuple(row) for row in rows.tolist()]
    # --8<-- [end:rows-without-keys]


# --8<-- [start:mask-polarity]
def to_sdpa_mask(mask):
    """Ours (True = blocked) as SDPA's boolean attn_mask (True = attend)."""
    check.to_sdpa_mask(mask)  # boolean
    return ~mask  # the one place the polarity flips


def to_mask_mod(mask):
    """Ours, a (Tq, Tk) mask, as a FlexAttention mask_mod (True = keep)."""
    check.to_mask_mod(mask)  # bool (Tq, Tk): indexed [q, kv]

    def mask_mod(b, h, q_idx, kv_idx):  # batch, head, query, key index
        return ~mask[q_idx, kv_idx]

    return mask_mod
    # --8<-- [end:mask-polarity]


# --8<-- [start:score-mods]
def softcap_mod(cap):
    """attention(..., softcap=cap) as a FlexAttention score_mod."""
    check.softcap_mod(cap)

    def score_mod(score, b, h, q_idx, kv_idx):  # score: already scaled
        return cap * torch.tanh(score / cap)  # c tanh(s / c)

    return score_mod


def alibi_mod(slopes):
    """attention(..., bias=alibi_bias(slopes, ...)) as a score_mod."""
    check.alibi_mod(slopes)

    def score_mod(score, b, h, q_idx, kv_idx):
        return score - slopes[h] * (q_idx - kv_idx)  # s - m_h (i - j)

    return score_mod


def relative_bias_mod(table, t_k):
    """A learned bias per head and distance i - j, table (H, 2 T_k - 1)
    indexed from distance -(T_k - 1): bias= of that table's matrix."""
    check.relative_bias_mod(table)

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + table[h, q_idx - kv_idx + t_k - 1]  # s + b_h(i - j)

    return score_mod


def capped_then(first, then):
    """Two score_mods in Gemma 2's order: the cap first, then the bias."""

    def score_mod(score, b, h, q_idx, kv_idx):
        score = first(score, b, h, q_idx, kv_idx)
        return then(score, b, h, q_idx, kv_idx)

    return score_mod


def with_sinks(out, lse, sinks):
    """FlexAttention's output and log-sum-exp L (return_aux) as the
    output of attention(..., sinks=): each row times 1 / (1 + e^(eta - L))
    = sigmoid(L - eta), the keys' share once the sink joins the row."""
    check.with_sinks(out, lse, sinks)
    keep = torch.sigmoid(lse - sinks.view(-1, 1))  # (B, H, T)
    return out * keep[..., None]  # (B, H, T, d_head)
    # --8<-- [end:score-mods]


# --8<-- [start:mask-mods]
def sliding_window_mod(window, sink_tokens=0):
    """sliding_window_mask(..., window, sink_tokens) as a mask_mod."""
    check.sliding_window_mod(window, sink_tokens)

    def mask_mod(b, h, q_idx, kv_idx):  # True = keep
        near = (q_idx - kv_idx >= 0) & (q_idx - kv_idx < window)
        return near | ((kv_idx < sink_tokens) & (kv_idx <= q_idx))

    return mask_mod


def chunked_mod(chunk):
    """chunked_mask(..., chunk) as a mask_mod."""
    check.chunked_mod(chunk)

    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx // chunk == kv_idx // chunk) & (kv_idx <= q_idx)

    return mask_mod


def prefix_lm_mod(prefix):
    """prefix_lm_mask(..., prefix) as a mask_mod."""
    check.prefix_lm_mod(prefix)

    def mask_mod(b, h, q_idx, kv_idx):
        return (kv_idx < prefix) | (kv_idx <= q_idx)

    return mask_mod


def document_mod(ids):
    """document_mask(ids[q], ids[k]) as a mask_mod; ids (T,) a tensor."""
    check.document_mod(ids)

    def mask_mod(b, h, q_idx, kv_idx):
        return ids[q_idx] == ids[kv_idx]

    return mask_mod
    # --8<-- [end:mask-mods]


# --8<-- [start:sliding-window-conversions]
WINDOWS = ("hugging_face", "flash_attn", "attention_gym", "jax", "jax_cudnn")


def window_from_hugging_face(window, library):
    """Hugging Face's window W (the query and W - 1 keys before it) in
    another library's terms: (W - 1, 0) for flash-attn and JAX, which
    count the keys before the query; W - 1 for attention-gym; W for
    JAX's cuDNN path, which counts the query too.
    """
    check.window_from_hugging_face(window, library, WINDOWS)
    if library in ("flash_attn", "jax"):
        return (window - 1, 0)
    return window - 1 if library == "attention_gym" else window


def window_to_hugging_face(value, library):
    """The inverse: another library's causal window as Hugging Face's W."""
    check.window_to_hugging_face(value, library, WINDOWS)
    if library in ("flash_attn", "jax"):
        return value[0] + 1  # (left, 0): left keys before, and itself
    return value + 1 if library == "attention_gym" else value
    # --8<-- [end:sliding-window-conversions]


# --8<-- [start:alibi-other-rules]
def alibi_slopes_attention_gym(n_head):
    """attention-gym's ALiBi slopes, 2^(-8 (h + 1) / H) for h = 0 .. H - 1.

    The paper's geometric rule for every H, also when H is not a power
    of two (attn_gym/mods/alibi.py); numpy_ref.alibi_slopes follows the
    paper's code, BLOOM and MPT there instead.
    """
    check.alibi_slopes_attention_gym(n_head)  # an int >= 1
    return 2.0 ** (-8.0 * np.arange(1, n_head + 1) / n_head)  # (H,)


def alibi_bias_key_only(slopes, t):
    """BLOOM's form: slope * k, one row (H, 1, T) for every query.

    It differs from -slope (q - k) by slope * q, a constant per row,
    which the softmax ignores (modeling_bloom.py, build_alibi_tensor).
    """
    slopes = check.alibi_bias_key_only(slopes, t)  # (H,) float64
    return slopes[:, None, None] * np.arange(t)  # (H, 1, T)


def alibi_bias_last_key(slopes, t):
    """MPT's form: slope * (k - (T - 1)), (H, 1, T): 0 at the last key.

    Also a constant per row away from -slope (q - k) (modeling_mpt.py,
    build_mpt_alibi_tensor; flash-attn's causal reference alike).
    """
    slopes = check.alibi_bias_last_key(slopes, t)  # (H,) float64
    return slopes[:, None, None] * np.arange(1 - t, 1)  # (H, 1, T)


def alibi_bias_symmetric(slopes, query_positions, key_positions):
    """-slope |q - k|, (H, Tq, Tk): flash-attn's ALiBi without causal.

    Equal to -slope (q - k) on every key a causal mask allows; without
    the mask it penalises later keys too, where -slope (q - k) rewards
    them: a different model.
    """
    bias = numpy_ref.alibi_bias(slopes, query_positions, key_positions)
    return -np.abs(bias)  # (H, Tq, Tk)
    # --8<-- [end:alibi-other-rules]


# --8<-- [start:sink-as-key]
def learned_sink_as_key(k, v, sinks):
    """A learned sink logit as one more key: score eta_h, value 0.

    k (B, H, Tk, d), v (B, H, Tk, dv), sinks (H,). Returns k, v with a
    zero key and value appended, and the bias (H, 1, Tk + 1) that
    scores that key eta_h. Give a mask one more column of False.
    """
    check.learned_sink_as_key(k, v, sinks)  # one sink per head
    zero_k = k.new_zeros(*k.shape[:-2], 1, k.shape[-1])  # (B, H, 1, d)
    zero_v = v.new_zeros(*v.shape[:-2], 1, v.shape[-1])  # (B, H, 1, dv)
    bias = k.new_zeros(len(sinks), 1, k.shape[-2] + 1)  # (H, 1, Tk + 1)
    bias[..., -1] = sinks[:, None]  # the sink's column
    return torch.cat([k, zero_k], -2), torch.cat([v, zero_v], -2), bias
    # --8<-- [end:sink-as-key]


# --8<-- [start:softcap-after-mask]
def mask_then_softcap(scores, mask, softcap):
    """The weights of the wrong order: the mask's -inf, then the cap,
    so a masked key keeps the score cap * tanh(-inf) = -cap and a
    weight > 0. Gemma 2 caps first (as attention does): weight 0.
    """
    mask = check.mask_then_softcap(scores, mask, softcap)
    filled = scores.masked_fill(mask, float("-inf"))  # mask first
    return (softcap * torch.tanh(filled / softcap)).softmax(dim=-1)
    # --8<-- [end:softcap-after-mask]


# --8<-- [start:layouts]
def from_bthd(x):
    """flash-attn's (B, T, H, d) to ours, (B, H, T, d)."""
    check.from_bthd(x)  # a 4-D tensor or array
    return x.swapaxes(1, 2)  # (B, T, H, d) -> (B, H, T, d)


def from_sequence_first(x):
    """nn.MultiheadAttention's default (T, B, E) to ours, (B, T, E)."""
    check.from_sequence_first(x)  # a 3-D tensor or array
    return x.swapaxes(0, 1)  # (T, B, E) -> (B, T, E)
    # --8<-- [end:layouts]


# --8<-- [start:kv-head-map]
def kv_head_of(n_head, n_kv_head, layout):
    """The key/value head each of n_head query heads reads.

    "consecutive" (SDPA's enable_gqa, Hugging Face's repeat_kv, ours):
    query head h reads h // (H / H_kv), groups of neighbours, what
    repeat_interleave gives. "strided": h % H_kv, the query heads of
    one key/value head H_kv apart, what x.repeat or np.tile give.
    """
    check.kv_head_of(n_head, n_kv_head, layout)
    h = torch.arange(n_head)
    if layout == "consecutive":
        return h // (n_head // n_kv_head)  # (H,)
    return h % n_kv_head  # (H,)
    # --8<-- [end:kv-head-map]


# --8<-- [start:scale-defaults]
def default_scale(d_head, convention, query_pre_attn_scalar=None):
    """The factor of q k^T: 1 / sqrt(d_head), Gemma's, or T5's none.

    "sqrt": 1 / sqrt(d_head) (the paper, SDPA, FlexAttention, most of
    transformers); "gemma": query_pre_attn_scalar^(-1/2) (Gemma 2 and
    3, set per model); "t5": 1 (T5 folds it into its initialisation).
    """
    check.default_scale(d_head, convention, query_pre_attn_scalar)
    if convention == "gemma":
        return query_pre_attn_scalar**-0.5
    return 1.0 if convention == "t5" else d_head**-0.5
    # --8<-- [end:scale-defaults]


# --8<-- [start:additive-mask]
def additive_mask(mask, dtype, fill="-inf"):
    """Ours (bool, True = blocked) as a float mask added to the scores.

    fill: "-inf", "min" (torch.finfo(dtype).min: Hugging Face's eager
    masks, MPT) or a number (-1e9 in many tutorials). Only -inf keeps a
    fully blocked row visible (NaN or, in SDPA, zeros). A finite fill
    shifts the whole row by one constant, so after rounding the row is
    the softmax of its own blocked scores: uniform only where the fill
    drowns them (finfo.min always; -1e9 for small scores in float32).
    """
    value = check.additive_mask(mask, fill, dtype)  # a float
    zeros = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return zeros.masked_fill(mask, value)
    # --8<-- [end:additive-mask]
