"""Multi-head attention in PyTorch, mirroring numpy_ref.py.

Device- and dtype-agnostic: everything follows its inputs (CUDA when the
reader has it). Masks are boolean with True = blocked; SDPA's boolean
mask means the opposite and is converted in ``sdpa_forward`` only.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from mha_ref import checks, numpy_ref


def check_finite(tensor, name):
    """checks.finite for a tensor on any device and float dtype."""
    if not torch.isfinite(tensor).all():
        # .double(): NumPy has no bfloat16
        checks.finite(tensor.detach().cpu().double().numpy(), name)


def _check_scores(scores):
    # finite q and k can still overflow q @ k^T: no silent NaN rows
    if (scores.isnan() | scores.isposinf()).any():
        checks.real_logits(scores.detach().cpu().double().numpy())


def _check_mask(mask, scores_shape):
    if not isinstance(mask, torch.Tensor):
        raise TypeError(
            f"mask must be a torch.Tensor of dtype torch.bool, got "
            f"{type(mask).__name__}; convert with torch.as_tensor(mask)"
        )
    if mask.dtype != torch.bool:
        checks.mask_dtype("f")
    checks.mask_shape(mask.shape, scores_shape)
    rows = torch.broadcast_to(mask, scores_shape).all(dim=-1)
    checks.every_row_has_a_key(rows.cpu().numpy())


# --8<-- [start:attention]
def attention(q, k, v, mask=None):
    """q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv); True = blocked.

    Returns the output (..., Tq, dv) and the weights (..., Tq, Tk).
    """
    checks.qkv_shapes(q.shape, k.shape, v.shape)
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        check_finite(tensor, name)
    d = q.shape[-1]  # the head size d_k, not d_model
    # $S = QK^\top / \sqrt{d_k}$
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)  # (..., Tq, Tk)
    if mask is not None:
        _check_mask(mask, scores.shape)
        scores = scores.masked_fill(mask, float("-inf"))  # before softmax
    _check_scores(scores)  # finite or -inf, as numpy_ref.softmax checks
    weights = scores.softmax(dim=-1)  # each row sums to 1 over keys
    return weights @ v, weights  # (..., Tq, dv), (..., Tq, Tk)
# --8<-- [end:attention]


# --8<-- [start:causal-mask]
def causal_mask(t, device=None):
    """(t, t) mask, True strictly above the diagonal: the future."""
    ones = torch.ones(t, t, dtype=torch.bool, device=device)
    return torch.triu(ones, diagonal=1)
# --8<-- [end:causal-mask]


# --8<-- [start:causal-mask-for-positions]
def causal_mask_for_positions(query_positions, key_positions):
    """True where a key's position is later than the query's."""
    q_pos = torch.as_tensor(query_positions)
    k_pos = torch.as_tensor(key_positions, device=q_pos.device)
    checks.positions(q_pos.shape, k_pos.shape)  # one per row: 1-D each
    return k_pos[None, :] > q_pos[:, None]  # (1, Tk) vs (Tq, 1): (Tq, Tk)
# --8<-- [end:causal-mask-for-positions]


class MultiHeadAttention(nn.Module):
    """Self- or cross-attention with ``n_head`` heads, from scratch."""

    # --8<-- [start:mha-init]
    def __init__(self, d_model, n_head, bias=False, device=None, dtype=None):
        super().__init__()
        checks.head_split(d_model, n_head)
        self.d_model, self.n_head = d_model, n_head
        self.d_head = d_model // n_head
        kw = dict(bias=bias, device=device, dtype=dtype)
        # nn.Linear stores its weight as (out, in) and computes x @ W.T
        self.wq = nn.Linear(d_model, d_model, **kw)
        self.wk = nn.Linear(d_model, d_model, **kw)
        self.wv = nn.Linear(d_model, d_model, **kw)
        self.wo = nn.Linear(d_model, d_model, **kw)
    # --8<-- [end:mha-init]

    # --8<-- [start:split-heads]
    def split_heads(self, x):
        b, t, _ = x.shape  # (B, T, d_model)
        x = x.view(b, t, self.n_head, self.d_head)  # (B, T, H, dh)
        return x.transpose(1, 2)  # (B, H, T, dh)
    # --8<-- [end:split-heads]

    # --8<-- [start:merge-heads]
    def merge_heads(self, x):
        b, h, t, dh = x.shape  # (B, H, T, dh)
        x = x.transpose(1, 2).contiguous()  # (B, T, H, dh)
        return x.view(b, t, h * dh)  # (B, T, d_model)
    # --8<-- [end:merge-heads]

    def project(self, x, context=None):
        """Checked inputs -> q (B, H, Tq, dh), k and v (B, H, Tk, dh)."""
        checks.model_input(x.shape, self.d_model)
        if context is None:
            context = x  # self-attention
        else:
            checks.context_input(x.shape, context.shape, self.d_model)
        q = self.split_heads(self.wq(x))
        k = self.split_heads(self.wk(context))
        v = self.split_heads(self.wv(context))
        return q, k, v

    # --8<-- [start:mha-forward]
    def forward(self, x, mask=None, context=None):
        """x (B, Tq, d_model); context (B, Tk, d_model) gives K and V."""
        # $Q = XW_Q$, $K = XW_K$, $V = XW_V$: one GEMM for all heads
        q, k, v = self.project(x, context)  # (B, H, T, dh)
        out, weights = attention(q, k, v, mask)  # (B, H, Tq, dh)
        # $\mathrm{Concat}(\mathrm{head}_1, \ldots, \mathrm{head}_h) W_O$
        y = self.wo(self.merge_heads(out))  # (B, Tq, d_model)
        return y, weights  # weights: (B, H, Tq, Tk)
    # --8<-- [end:mha-forward]


# --8<-- [start:sdpa-forward]
def sdpa_forward(module, x, mask=None, context=None):
    """The module's weights through F.scaled_dot_product_attention."""
    q, k, v = module.project(x, context)  # (B, H, T, dh)
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        check_finite(tensor, name)  # as attention() checks them
    allowed = None
    if mask is not None:
        _check_mask(mask, (*q.shape[:-1], k.shape[-2]))
        allowed = ~mask  # SDPA's boolean mask means True = allowed
    # dropout_p does not follow module.eval(): pass 0.0 explicitly
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=allowed, dropout_p=0.0
    )  # (B, H, Tq, dh)
    # finite q and k can still overflow q @ k^T: no silent NaN rows
    check_finite(out, "SDPA output")
    return module.wo(module.merge_heads(out))  # (B, Tq, d_model)
# --8<-- [end:sdpa-forward]


# --8<-- [start:library-version]
def library_version(module):
    """An nn.MultiheadAttention (batch_first) with the same weights."""
    has_bias = module.wq.bias is not None
    weight = module.wq.weight
    library = nn.MultiheadAttention(
        module.d_model, module.n_head, bias=has_bias, batch_first=True,
        device=weight.device, dtype=weight.dtype,
    )
    with torch.no_grad():
        # Q, K, V stacked row-wise into one (3 d_model, d_model) matrix
        library.in_proj_weight.copy_(torch.cat(
            [module.wq.weight, module.wk.weight, module.wv.weight]))
        library.out_proj.weight.copy_(module.wo.weight)
        if has_bias:
            library.in_proj_bias.copy_(torch.cat(
                [module.wq.bias, module.wk.bias, module.wv.bias]))
            library.out_proj.bias.copy_(module.wo.bias)
    return library
# --8<-- [end:library-version]


# --8<-- [start:library-forward]
def library_forward(library, x, mask=None, context=None):
    """Call nn.MultiheadAttention with our mask convention (True = blocked).

    A per-head or per-batch mask becomes the (B * H, Tq, Tk) it expects.
    """
    context = x if context is None else context
    b, tq, tk = x.shape[0], x.shape[1], context.shape[1]
    h = library.num_heads
    if mask is not None:
        _check_mask(mask, (b, h, tq, tk))
        mask = mask.expand(b, h, tq, tk).reshape(b * h, tq, tk)
    y, _ = library(x, context, context, attn_mask=mask, need_weights=False)
    return y  # (B, Tq, d_model)
# --8<-- [end:library-forward]


# --8<-- [start:to-numpy]
def to_numpy(module):
    """A numpy_ref.MultiHeadAttention holding the same weights."""
    has_bias = module.wq.bias is not None
    twin = numpy_ref.MultiHeadAttention(
        module.d_model, module.n_head, bias=has_bias
    )

    def as_array(p):
        return p.detach().cpu().numpy().copy()

    # nn.Linear is (out, in) for x @ W.T; numpy_ref uses x @ W: transpose
    twin.Wq, twin.Wk, twin.Wv, twin.Wo = (
        as_array(lin.weight).T
        for lin in (module.wq, module.wk, module.wv, module.wo)
    )
    if has_bias:
        twin.bq, twin.bk, twin.bv, twin.bo = (
            as_array(lin.bias)
            for lin in (module.wq, module.wk, module.wv, module.wo)
        )
    return twin
# --8<-- [end:to-numpy]
