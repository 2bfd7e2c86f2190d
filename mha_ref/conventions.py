"""Conventions that differ between libraries, and the code that bridges
them (the conventions page).

RoPE's pairs: torch_ref.apply_rope turns features (i, i + d_head / 2)
together (rotate-half: GPT-NeoX, Hugging Face transformers); Meta's
Llama code and RoFormer turn adjacent features (2i, 2i + 1). The two
give the same scores once the rows of W_Q and W_K are reordered within
each head, as Hugging Face's Llama conversion script does.

The other two conventions are arguments of the references: the corner
a causal mask with Tq != Tk starts from (causal_mask's ``align``), and
what a row with no allowed key returns (``empty_rows``).
"""

import torch

from mha_ref import checks


# --8<-- [start:rope-interleaved]
def apply_rope_interleaved(x, positions, base=10000.0):
    """RoPE on adjacent pairs (2i, 2i + 1): Meta's Llama code, RoFormer.

    x (..., T, d_head) at ``positions`` (T,). Pair i turns by the same
    angle as in torch_ref.apply_rope, position * base ** (-2 i / d_head),
    but pair i is features 2i and 2i + 1, not i and i + d_head / 2.
    """
    positions = torch.as_tensor(positions, device=x.device)
    checks.rope_inputs(x.shape, positions, base)  # even d, T positions
    d_head, dtype = x.shape[-1], x.dtype
    # theta_i = base^(-2i / d_head), in float64, cast once
    i = torch.arange(d_head // 2, device=x.device, dtype=torch.float64)
    freq = float(base) ** (-2.0 * i / d_head)  # (d_head / 2,)
    angle = positions.double()[:, None] * freq  # (T, d_head / 2)
    cos, sin = angle.cos().to(dtype), angle.sin().to(dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., T, d_head / 2) each
    # each pair (x_2i, x_2i+1) turned by its angle, as R(m theta_i)
    turned = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)
    return turned.flatten(-2)  # (..., T, d_head / 2, 2) -> (..., T, d)
    # --8<-- [end:rope-interleaved]


# --8<-- [start:rope-permutation]
def interleaved_to_rotate_half(weight, n_head):
    """W_Q or W_K of an interleaved-RoPE checkpoint, for rotate-half RoPE.

    weight (n_head * d_head, d_model), nn.Linear's (out, in), or its
    bias (n_head * d_head,); for W_K, n_head is the number of key/value
    heads. Within each head, row 2i moves to slot i and row 2i + 1 to
    slot i + d_head / 2: the pair rotate-half turns together. This is
    the permute() of Hugging Face's convert_llama_weights_to_hf.py.
    """
    checks.rope_weight(weight.shape, n_head)  # whole heads, even d_head
    rest = weight.shape[1:]  # (d_model,) for a weight, () for a bias
    d_head = weight.shape[0] // n_head
    pairs = weight.reshape(n_head, d_head // 2, 2, *rest)  # (H, d/2, 2, ..)
    halves = pairs.transpose(1, 2)  # (H, 2, d/2, ...): evens, then odds
    return halves.reshape(weight.shape)  # (H * d_head, ...)
    # --8<-- [end:rope-permutation]
