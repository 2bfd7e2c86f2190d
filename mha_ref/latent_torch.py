"""Multi-head latent attention (MLA, DeepSeek-V2 and V3) in PyTorch.

Keys and values come out of one small latent per token, c_KV
(kv_lora_rank numbers), plus one rotated key that every head shares
(qk_rope_head_dim numbers): that is all a decoder caches. Submodules
are named and shaped as Hugging Face transformers' DeepseekV3Attention
(5.24.0, models/deepseek_v3/modeling_deepseek_v3.py), so its state_dict
loads as is. Two forms of the same attention: the naive one expands
per-head keys and values, the absorbed one folds W_UK into the query
and W_UV after the weighted sum, and never forms them. latent_numpy.py
mirrors the module and holds the guards both mirrors share.
"""

import math

import torch
from torch import nn

from mha_ref import kv_cache, torch_ref
from mha_ref.guards import latent_torch as check
from mha_ref.guards.shapes import SHAPE_NAMES, state_dict_shapes
from mha_ref.guards.tensors import scores_no_overflow

# DeepSeek-V3's published attention shapes (its config.json on the
# Hugging Face Hub, deepseek-ai/DeepSeek-V3, and the defaults of
# transformers' DeepseekV3Config, which a test holds this to)
DEEPSEEK_V3 = {
    "d_model": 7168,  # hidden_size
    "n_head": 128,  # num_attention_heads (= num_key_value_heads)
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "q_lora_rank": 1536,
}
DEEPSEEK_V3_LAYERS = 61  # num_hidden_layers


# --8<-- [start:rms-norm]
class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight, over the last axis.

    As Hugging Face's DeepseekV3RMSNorm (eps 1e-6): the statistics in
    at least float32, cast back to x's dtype before the gain.
    """

    def __init__(self, d, eps=1e-6, device=None, dtype=None):
        super().__init__()
        cuda = torch.cuda.is_available()  # a CUDA device needs one
        check.rms_norm(d, eps, device, cuda)  # d >= 1, eps > 0
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d, device=device, dtype=dtype))

    def forward(self, x):
        check.rms_norm_forward(x, self.weight, self.eps)  # floats
        wide = x.to(torch.promote_types(x.dtype, torch.float32))
        # rms = sqrt(mean(x^2) + eps), one per row
        rms = (wide.pow(2).mean(dim=-1, keepdim=True) + self.eps).sqrt()
        return self.weight * (wide / rms).to(x.dtype)  # (..., d)
        # --8<-- [end:rms-norm]


class MultiHeadLatentAttention(nn.Module):
    """Causal self-attention whose keys and values come from a latent.

    DeepSeek-V2's MLA with Hugging Face's DeepseekV3Attention names:
    forward(x, mask, positions, absorbed) -> (y, weights). No YaRN: the
    scale is (qk_nope_head_dim + qk_rope_head_dim) ** -0.5 and the
    rotary frequencies are plain RoPE's, so the module computes what
    DeepSeek-V3 computes with rope_scaling off. YaRN changes both: it
    multiplies the scale by yarn_mscale(...) ** 2, and it divides the
    rotary frequencies of the slowest pairs by its factor and blends
    the middle ones (transformers' _compute_yarn_parameters).
    """

    # --8<-- [start:mla-init]
    def __init__(
        self,
        d_model,
        n_head,
        kv_lora_rank,
        qk_nope_head_dim,
        qk_rope_head_dim,
        v_head_dim,
        q_lora_rank=None,
        rope_base=10000.0,
        rope_interleave=True,
        device=None,
        dtype=None,
    ):
        super().__init__()
        check.multi_head_latent_attention(
            d_model,
            n_head,
            kv_lora_rank,
            qk_nope_head_dim,
            qk_rope_head_dim,
            v_head_dim,
            q_lora_rank,
            rope_base,
            rope_interleave,
            device=device,
            cuda=torch.cuda.is_available(),  # a CUDA device needs one
        )
        self.d_model, self.n_head = d_model, n_head
        self.kv_lora_rank, self.q_lora_rank = kv_lora_rank, q_lora_rank
        self.qk_nope_head_dim = qk_nope_head_dim
        self.qk_rope_head_dim = qk_rope_head_dim
        self.v_head_dim = v_head_dim
        self.rope_base, self.rope_interleave = rope_base, rope_interleave
        d_qk = qk_nope_head_dim + qk_rope_head_dim  # content + position
        self.scale = d_qk**-0.5  # q . k sums d_qk products, whatever d_v
        kw = {"bias": False, "device": device, "dtype": dtype}
        norm = {"device": device, "dtype": dtype}
        self.q_proj = self.q_a_proj = self.q_a_layernorm = None
        self.q_b_proj = None
        if q_lora_rank is None:  # W_Q: (H * d_qk, d_model)
            self.q_proj = nn.Linear(d_model, n_head * d_qk, **kw)
        else:  # W_DQ, then W_UQ: a bottleneck for the queries too
            self.q_a_proj = nn.Linear(d_model, q_lora_rank, **kw)
            self.q_a_layernorm = RMSNorm(q_lora_rank, **norm)
            self.q_b_proj = nn.Linear(q_lora_rank, n_head * d_qk, **kw)
        # W_DKV and W_KR in one matrix: the latent and the shared key
        d_kv_a = kv_lora_rank + qk_rope_head_dim
        self.kv_a_proj_with_mqa = nn.Linear(d_model, d_kv_a, **kw)
        self.kv_a_layernorm = RMSNorm(kv_lora_rank, **norm)
        # W_UK and W_UV of every head, stacked: (H * (d_nope + d_v), d_c)
        d_kv_b = n_head * (qk_nope_head_dim + v_head_dim)
        self.kv_b_proj = nn.Linear(kv_lora_rank, d_kv_b, **kw)
        self.o_proj = nn.Linear(n_head * v_head_dim, d_model, **kw)  # W_O
        # --8<-- [end:mla-init]

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """nn.Module's, with the names and shapes checked first.

        A wrong shape names the parameter and both shapes; with
        ``strict``, a missing or unexpected name is a ValueError too.
        """
        given = {n: tuple(t.shape) for n, t in state_dict.items()}
        check.load_state_dict(self._shapes(), given, strict, self._config())
        return super().load_state_dict(state_dict, strict, assign)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # also inside a parent's load_state_dict, before torch's own
        # size-mismatch error: name the parameter and both shapes
        given = {
            n.removeprefix(prefix): tuple(t.shape)
            for n, t in state_dict.items()
            if n.startswith(prefix)
        }
        state_dict_shapes(self._shapes(), given, False, self._config())
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _shapes(self):
        # {state_dict name: shape}: the parameters (no buffers here)
        return {n: tuple(p.shape) for n, p in self.named_parameters()}

    def _config(self):
        names = ("d_model", "n_head", *SHAPE_NAMES)
        shown = ", ".join(f"{n}={getattr(self, n)}" for n in names)
        return f"module ({shown}, q_lora_rank={self.q_lora_rank})"

    # --8<-- [start:mla-rotate]
    def rotate(self, x, positions):
        """RoPE on the last axis of x (..., T, d_rope) at ``positions``.

        rope_interleave: the checkpoint pairs features (2i, 2i + 1);
        gathering evens then odds makes them the halves apply_rope
        turns. Hugging Face's apply_rotary_pos_emb_interleave turns each
        pair directly and writes turned evens, then turned odds: the
        same numbers in the same order (its docstring: bit-identical).
        """
        if self.rope_interleave:  # (x0, x1, x2, x3) -> (x0, x2, x1, x3)
            x = torch.cat([x[..., 0::2], x[..., 1::2]], dim=-1)
        return torch_ref.apply_rope(x, positions, self.rope_base)
        # --8<-- [end:mla-rotate]

    # --8<-- [start:mla-queries]
    def queries(self, x, positions):
        """x (B, T, d_model) -> q_nope (B, H, T, d_nope), q_rope rotated."""
        b, t, _ = x.shape
        if self.q_lora_rank is None:
            q = self.q_proj(x)  # (B, T, H * d_qk)
        else:  # q = RMSNorm(x W_DQ) W_UQ: a bottleneck for the queries
            c_q = self.q_a_layernorm(self.q_a_proj(x))
            q = self.q_b_proj(c_q)  # (B, T, q_lora_rank) -> (.., H * d_qk)
        d_qk = q.shape[-1] // self.n_head  # not -1: B may be 0
        q = q.view(b, t, self.n_head, d_qk).transpose(1, 2)
        # (B, H, T, d_qk): the content part, then the position part
        q_nope, q_rope = q.split(
            [self.qk_nope_head_dim, self.qk_rope_head_dim], dim=-1
        )
        return q_nope, self.rotate(q_rope, positions)
        # --8<-- [end:mla-queries]

    # --8<-- [start:mla-latents]
    def latents(self, x, positions):
        """x (B, T, d_model) -> c_KV (B, T, d_c) and k_rope (B, T, d_rope).

        The two things a cache keeps per token: the normalised latent
        and the rotated key that every head shares.
        """
        # [c_KV, k_R] = x [W_DKV, W_KR]: one matrix, d_c + d_rope outputs
        both = self.kv_a_proj_with_mqa(x)  # (B, T, d_c + d_rope)
        c_kv, k_rope = both.split(
            [self.kv_lora_rank, self.qk_rope_head_dim], dim=-1
        )
        c_kv = self.kv_a_layernorm(c_kv)  # (B, T, d_c)
        return c_kv, self.rotate(k_rope, positions)  # (B, T, d_rope)
        # --8<-- [end:mla-latents]

    # --8<-- [start:mla-up-projections]
    def up_projections(self):
        """W_UK (H, d_nope, d_c) and W_UV (H, d_v, d_c), from kv_b_proj."""
        w = self.kv_b_proj.weight  # (H * (d_nope + d_v), d_c)
        w = w.view(self.n_head, -1, self.kv_lora_rank)  # (H, .., d_c)
        return w.split([self.qk_nope_head_dim, self.v_head_dim], dim=1)
        # --8<-- [end:mla-up-projections]

    # --8<-- [start:mla-expand]
    def expand_kv(self, c_kv, k_rope):
        """Per-head keys and values from the latent: the naive form.

        c_KV (B, T, d_c), k_rope (B, T, d_rope) -> k (B, H, T, d_nope +
        d_rope) and v (B, H, T, d_v).
        """
        w_uk, w_uv = self.up_projections()  # (H, d_nope | d_v, d_c)
        c = c_kv[:, None]  # (B, 1, T, d_c): one latent for every head
        # k_C = c W_UK^T and v = c W_UV^T, head by head
        k_nope = c @ w_uk.transpose(-2, -1)  # (B, H, T, d_nope)
        v = c @ w_uv.transpose(-2, -1)  # (B, H, T, d_v)
        shape = (*k_nope.shape[:-1], self.qk_rope_head_dim)
        k_rope = k_rope[:, None].expand(shape)  # (B, H, T, d_rope)
        return torch.cat([k_nope, k_rope], dim=-1), v
        # --8<-- [end:mla-expand]

    # --8<-- [start:mla-naive]
    def naive_attention(self, q_nope, q_rope, c_kv, k_rope, mask=None):
        """Expand keys and values for every head, then attention.

        Returns out (B, H, Tq, d_v) and the weights (B, H, Tq, Tk).
        """
        k, v = self.expand_kv(c_kv, k_rope)  # (B, H, Tk, d_qk | d_v)
        q = torch.cat([q_nope, q_rope], dim=-1)  # (B, H, Tq, d_qk)
        # softmax(q k^T / sqrt(d_nope + d_rope)) v: attention's own scale
        return torch_ref.attention(q, k, v, mask)
        # --8<-- [end:mla-naive]

    # --8<-- [start:mla-absorbed]
    def absorbed_attention(self, q_nope, q_rope, c_kv, k_rope, mask=None):
        """Score against the latent itself; no per-head key or value.

        Returns out (B, H, Tq, d_v) and the weights (B, H, Tq, Tk).
        """
        dtype = q_nope.dtype  # fp16 and bf16 compute in float32
        wide = torch.promote_types(dtype, torch.float32)
        w_uk, w_uv = (w.to(wide) for w in self.up_projections())
        q_nope, q_rope = q_nope.to(wide), q_rope.to(wide)
        c, k_r = c_kv[:, None].to(wide), k_rope[:, None].to(wide)
        # q_nope . (W_UK c) = (W_UK^T q_nope) . c: W_UK joins the query
        q_latent = q_nope @ w_uk  # (B, H, Tq, d_nope) -> (B, H, Tq, d_c)
        content = q_latent @ c.transpose(-2, -1)  # (B, H, Tq, Tk)
        position = q_rope @ k_r.transpose(-2, -1)  # (B, H, Tq, Tk)
        scores = (content + position) * self.scale  # 1 / sqrt(d_qk)
        if mask is not None:
            scores = scores.masked_fill(mask, float("-inf"))  # blocked
        scores_no_overflow(scores, mask)  # overflow
        weights = scores.softmax(dim=-1)  # (B, H, Tq, Tk)
        # sum_s a_s (W_UV c_s) = W_UV (sum_s a_s c_s): W_UV comes last
        mixed = weights @ c  # (B, H, Tq, d_c): a mean of latents
        out = mixed @ w_uv.transpose(-2, -1)  # (B, H, Tq, d_v)
        return out.to(dtype), weights.to(dtype)
        # --8<-- [end:mla-absorbed]

    def output(self, out):
        """out (B, H, T, d_v) -> y (B, T, d_model): heads merged, W_O."""
        b, h, t, d_v = out.shape
        merged = out.transpose(1, 2).reshape(b, t, h * d_v)  # (B, T, ..)
        return self.o_proj(merged)  # (B, T, d_model)

    # --8<-- [start:mla-forward]
    def forward(self, x, mask=None, positions=None, absorbed=False):
        """x (B, T, d_model) -> y (B, T, d_model), weights (B, H, T, T).

        mask: True = blocked, broadcast to (B, H, T, T); positions (T,)
        for RoPE (default 0 .. T - 1); absorbed picks the form.
        """
        mask, positions = check.forward(
            self, x, mask, positions, absorbed
        )  # the guards
        q_nope, q_rope = self.queries(x, positions)  # (B, H, T, .)
        c_kv, k_rope = self.latents(x, positions)  # (B, T, .)
        attend = self.absorbed_attention if absorbed else self.naive_attention
        out, weights = attend(q_nope, q_rope, c_kv, k_rope, mask)
        return self.output(out), weights  # (B, T, d_model)
        # --8<-- [end:mla-forward]

    def cached_forward(self, x, chunks, absorbed=False):
        """Decoding with the latent cache: cached_latent_forward, which
        kv_cache.cached_forward hands this module to."""
        return cached_latent_forward(self, x, chunks, absorbed)


# --8<-- [start:rope-blocks-absorption]
def rope_on_the_content_keys(module, x, positions):
    """If RoPE turned the per-head keys k_C = W_UK c, could W_UK fold?

    Scores q_nope . k_C (B, H, T, T) of that variant, three ways: exact
    (every key turned at its own position s, every query at its t), and
    two tries at folding W_UK into the query: the cached latent as it
    is, or the latent turned instead of the key. d_nope, d_c even.
    """
    positions = check.rope_on_the_content_keys(
        module, x, positions
    )  # positions (T,), a tensor on x's device: read once, used five times
    q_nope, _ = module.queries(x, positions)  # (B, H, T, d_nope)
    c_kv, _ = module.latents(x, positions)  # (B, T, d_c)
    w_uk, _ = module.up_projections()  # (H, d_nope, d_c)
    c, base = c_kv[:, None], module.rope_base  # c: (B, 1, T, d_c)
    q_t = torch_ref.apply_rope(q_nope, positions, base)  # R_t q
    k_c = c @ w_uk.transpose(-2, -1)  # (B, H, T, d_nope): W_UK c_s
    k_s = torch_ref.apply_rope(k_c, positions, base)  # R_s W_UK c_s
    exact = q_t @ k_s.transpose(-2, -1)  # (R_t q)^T R_s W_UK c_s
    q_latent = q_t @ w_uk  # W_UK^T R_t q: folded once per query
    as_cached = q_latent @ c.transpose(-2, -1)  # R_s is missing
    c_s = torch_ref.apply_rope(c, positions, base)  # R_s c_s: latent space
    turned = q_latent @ c_s.transpose(-2, -1)  # R_s W_UK != W_UK R_s
    return exact, as_cached, turned
    # --8<-- [end:rope-blocks-absorption]


def _weight(module):
    # the module's dtype and device, from a weight every module has
    return module.kv_a_proj_with_mqa.weight


# --8<-- [start:latent-cache-class]
class LatentCache:
    """What MLA keeps of every position seen so far, in order.

    The normalised latent c_KV (B, T, d_c) and the shared rotated key
    k_rope (B, T, d_rope), rotated at their absolute positions: no
    head axis, so the cache does not grow with the number of heads.
    """

    def __init__(self):
        self.reset()

    def reset(self):
        """Forget every position: the next chunk starts at position 0."""
        self.latent = None  # (B, T, d_c)
        self.rope_key = None  # (B, T, d_rope)

    @property
    def length(self):
        """Positions held, which is also the next row's position."""
        return 0 if self.latent is None else self.latent.shape[1]

    def extended(self, c_kv, k_rope):
        """The cached latents and keys with a chunk's after them.

        c_kv (B, Tc, d_c), k_rope (B, Tc, d_rope) -> (B, T + Tc, .) each;
        the cache itself is unchanged until the caller stores them.
        """
        check.latent_cache_extended(self, c_kv, k_rope)  # B, sizes agree
        return self._extended(c_kv, k_rope)

    def _extended(self, c_kv, k_rope):
        # unchecked: the step extends the cache with its own latents
        if self.latent is None:
            return c_kv, k_rope  # the first chunk
        latent = torch.cat([self.latent, c_kv], dim=1)  # (B, T + Tc, d_c)
        rope_key = torch.cat([self.rope_key, k_rope], dim=1)  # (B, ., ..)
        return latent, rope_key

    # --8<-- [end:latent-cache-class]


# --8<-- [start:latent-cache-step]
def cached_latent_step(module, cache, x, absorbed=False):
    """One chunk x (B, Tc, d_model) at the positions after the cache.

    Stores only the chunk's latents and shared keys; the cache takes
    them once the step has succeeded, so a step that raises leaves it
    exactly as it was.
    """
    start = cache.length  # absolute position of the chunk's first row
    positions = torch.arange(start, start + x.shape[1], device=x.device)
    check.cached_latent_step(module, x, positions, absorbed)
    extend = cache.extended  # checks the chunk's latents fit the cache
    return _cached_latent_step(module, cache, x, positions, absorbed, extend)


def _cached_latent_step(module, cache, x, positions, absorbed, extend):
    # the step itself; extend: cache.extended, or, in the loop of
    # cached_latent_forward, the unchecked cache._extended
    q_nope, q_rope = module.queries(x, positions)  # (B, H, Tc, .)
    c_kv, k_rope = module.latents(x, positions)  # (B, Tc, .): to keep
    latent, rope_key = extend(c_kv, k_rope)  # (B, T, .)
    key_positions = torch.arange(latent.shape[1], device=x.device)
    blocked = torch_ref.causal_mask_for_positions(
        positions, key_positions
    )  # (Tc, T): True where a key comes after the query
    attend = module.absorbed_attention if absorbed else module.naive_attention
    out, _ = attend(q_nope, q_rope, latent, rope_key, blocked)
    y = module.output(out)  # (B, Tc, d_model)
    cache.latent, cache.rope_key = latent, rope_key  # succeeded: keep
    return y
    # --8<-- [end:latent-cache-step]


# --8<-- [start:latent-cache-loop]
def cached_latent_forward(module, x, chunks, absorbed=False):
    """x (B, T, d_model) through ``module`` in chunks of these lengths.

    A prefill then single steps is chunks = [T0, 1, 1, ...]. Equals
    module(x, mask=torch_ref.causal_mask(T), absorbed=absorbed)[0].
    """
    chunks = check.cached_latent_forward(module, x, chunks, absorbed)
    cache = LatentCache()
    outputs = []
    for n in chunks:
        start = cache.length  # the chunk's first position
        chunk = x[:, start : start + n]  # (B, n, d_model)
        positions = torch.arange(start, start + n, device=x.device)
        outputs.append(
            _cached_latent_step(
                module, cache, chunk, positions, absorbed, cache._extended
            )
        )
    return torch.cat(outputs, dim=1)  # (B, T, d_model)
    # --8<-- [end:latent-cache-loop]


# --8<-- [start:cache-bytes]
def cache_bytes_per_token(cache):
    """Bytes a cache holds per token of one sequence, in one layer.

    Measured, not computed: the bytes of the tensors it stores for one
    sequence (every axis but the batch's), over the length; a batch of
    no sequence has the same answer. A LatentCache, or a KVCache.
    """
    stored = [t for t in vars(cache).values() if torch.is_tensor(t)]
    check.cache_bytes_per_token(cache, stored)  # a position at least
    # (B, ...) in every cache: one sequence's share is the rest
    total = sum(math.prod(t.shape[1:]) * t.element_size() for t in stored)
    return total // cache.length
    # --8<-- [end:cache-bytes]


def _shapes(module_or_shapes):
    # a module's constructor shapes, or a dict of them (DEEPSEEK_V3),
    # checked by the caller's guard
    names = ("d_model", "n_head", *SHAPE_NAMES)
    if isinstance(module_or_shapes, MultiHeadLatentAttention):
        m = module_or_shapes
        return {n: getattr(m, n) for n in (*names, "q_lora_rank")}
    return {"q_lora_rank": None, **module_or_shapes}


def _dtype(module_or_shapes, dtype):
    # the dtype to measure in: given, the module's, or bfloat16
    if dtype is not None:
        return dtype
    if isinstance(module_or_shapes, nn.Module):
        return _weight(module_or_shapes).dtype
    return torch.bfloat16  # DeepSeek-V3's and Llama 3's 16-bit values


# --8<-- [start:latent-cache-bytes]
def latent_cache_bytes_per_token(module_or_shapes, dtype=None):
    """Bytes one token adds to one layer's LatentCache, measured.

    A two-token decode through a module with the given kv_lora_rank and
    qk_rope_head_dim, in ``dtype`` (default: the module's, bfloat16 for
    a dict of shapes such as DEEPSEEK_V3). The cache has no head axis
    and nothing of d_model, so a one-head module of width 8 caches
    what the full model caches, without its 187M-parameter layer.
    """
    check.latent_cache_bytes_per_token(module_or_shapes)
    s, dtype = _shapes(module_or_shapes), _dtype(module_or_shapes, dtype)
    probe = MultiHeadLatentAttention(
        8, 1, s["kv_lora_rank"], 2, s["qk_rope_head_dim"], 2, dtype=dtype
    )
    cache = LatentCache()
    x = torch.ones(1, 2, 8, dtype=dtype)  # (B, T, d_model): two tokens
    for t in range(2):  # prefill one token, then decode one
        at = torch.arange(t, t + 1)  # the token's position
        step = x[:, t : t + 1]  # (1, 1, 8)
        _cached_latent_step(probe, cache, step, at, False, cache._extended)
    return cache_bytes_per_token(cache)
    # --8<-- [end:latent-cache-bytes]


# --8<-- [start:expanded-kv-bytes]
def expanded_kv_bytes_per_token(module_or_shapes, dtype=None):
    """Bytes per token per layer if the naive form's K and V were cached.

    Measured: expand_kv's k (B, H, T, d_nope + d_rope) and v (B, H, T,
    d_v) in a kv_cache.KVCache, as multi-head attention with these
    heads caches them; the module has the given heads and head sizes
    (kv_lora_rank and d_model shape neither k nor v).
    """
    check.expanded_kv_bytes_per_token(module_or_shapes)
    s, dtype = _shapes(module_or_shapes), _dtype(module_or_shapes, dtype)
    probe = MultiHeadLatentAttention(
        8,
        s["n_head"],
        2,
        s["qk_nope_head_dim"],
        s["qk_rope_head_dim"],
        s["v_head_dim"],
        dtype=dtype,
    )
    x = torch.ones(1, 2, 8, dtype=dtype)  # (B, T, d_model): two tokens
    c_kv, k_rope = probe.latents(x, torch.arange(2))  # (B, T, .)
    cache = kv_cache.KVCache()
    cache.append(*probe.expand_kv(c_kv, k_rope))  # (B, H, T, .) each
    return cache_bytes_per_token(cache)
    # --8<-- [end:expanded-kv-bytes]


# --8<-- [start:decode-flops]
def decode_step_flops(module_or_shapes, n_key, absorbed=False):
    """FLOPs of one decoding step, one token, one layer, by part.

    The new token attends ``n_key`` positions (itself included); a
    multiply-add counts 2, as FlopCounterMode does. The naive form
    expands keys and values from every cached latent again; the
    absorbed one multiplies W_UK into the query and W_UV after the sum.
    """
    check.decode_step_flops(module_or_shapes, n_key, absorbed)
    s = _shapes(module_or_shapes)  # a module or a dict of shapes
    h, d, d_c = s["n_head"], s["d_model"], s["kv_lora_rank"]
    d_nope, d_rope, d_v = (
        s["qk_nope_head_dim"],
        s["qk_rope_head_dim"],
        s["v_head_dim"],
    )
    d_qk, q_rank = d_nope + d_rope, s["q_lora_rank"]
    queries = (
        2 * d * h * d_qk
        if q_rank is None
        else (2 * d * q_rank + 2 * q_rank * h * d_qk)
    )
    if absorbed:  # W_UK into the query, W_UV after the sum: per step
        up = 2 * h * d_nope * d_c + 2 * h * d_c * d_v
        scores, mix = 2 * h * n_key * (d_c + d_rope), 2 * h * n_key * d_c
    else:  # k_C and v for every head and every cached position
        up = 2 * n_key * d_c * h * (d_nope + d_v)
        scores, mix = 2 * h * n_key * d_qk, 2 * h * n_key * d_v
    return {
        "queries": queries,
        "latents": 2 * d * (d_c + d_rope),  # the new token's c_KV, k_R
        "up_projections": up,
        "scores": scores,
        "weighted_sum": mix,
        "output": 2 * h * d_v * d,  # W_O
    }
    # --8<-- [end:decode-flops]


# --8<-- [start:yarn-mscale]
def yarn_mscale(factor, mscale=1.0):
    """YaRN's attention temperature for a context stretched ``factor``x.

    0.1 * mscale * ln(factor) + 1 (1 when factor <= 1), as Hugging
    Face's yarn_get_mscale. DeepSeek-V3 multiplies its softmax scale by
    its square, with mscale = rope_scaling's mscale_all_dim.

    >>> round(yarn_mscale(40, 1.0) ** 2, 4)
    1.8739
    """
    check.yarn_mscale(factor, mscale)  # finite numbers
    if factor <= 1:
        return 1.0
    return 0.1 * mscale * math.log(factor) + 1.0
    # --8<-- [end:yarn-mscale]
