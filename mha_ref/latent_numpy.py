"""Multi-head latent attention (MLA) in NumPy, mirroring latent_torch.py.

DeepSeek-V2's attention: keys and values come out of one small latent
per token, c_KV (kv_lora_rank numbers), plus one rotated key that every
head shares (qk_rope_head_dim numbers). Weights are stored as x @ W
(in, out) under the names of Hugging Face's DeepseekV3Attention;
``state_dict`` and ``load_state_dict`` use its (out, in) layout, so the
torch module's weights move over as they are. The guards of both
mirrors live here (no torch needed), so they refuse the same inputs.
"""

import numpy as np

from mha_ref import numpy_ref
from mha_ref.guards import latent_numpy as check
from mha_ref.guards.arrays import scores_finite


# --8<-- [start:rms-norm]
def rms_norm(x, weight, eps=1e-6):
    """x / sqrt(mean(x^2) + eps) * weight, over the last axis.

    As Hugging Face's DeepseekV3RMSNorm (eps 1e-6): a learned gain per
    feature, no bias, no mean subtracted.
    """
    x, weight = check.rms_norm(x, weight, eps)  # finite floats
    return _rms_norm(x, weight, eps)


def _rms_norm(x, weight, eps):
    # unchecked: the layer normalises its own latents with it
    # rms = sqrt(mean(x^2) + eps), one per row
    rms = np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + eps)
    return x / rms * weight  # (..., d)
    # --8<-- [end:rms-norm]


class MultiHeadLatentAttention:
    """Causal self-attention whose keys and values come from a latent.

    Same arguments as latent_torch.MultiHeadLatentAttention; ``seed``
    draws the weights (the torch module's come from nn.Linear).
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
        seed=0,
    ):
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
        )
        self.d_model, self.n_head = d_model, n_head
        self.kv_lora_rank, self.q_lora_rank = kv_lora_rank, q_lora_rank
        self.qk_nope_head_dim = qk_nope_head_dim
        self.qk_rope_head_dim = qk_rope_head_dim
        self.v_head_dim = v_head_dim
        self.rope_base, self.rope_interleave = rope_base, rope_interleave
        d_qk = qk_nope_head_dim + qk_rope_head_dim  # content + position
        self.scale = d_qk**-0.5  # q . k sums d_qk products, whatever d_v
        rng = np.random.default_rng(seed)
        for name, shape in self.weight_shapes().items():
            bound = 1 / np.sqrt(shape[-1])  # nn.Linear's init range
            weight = rng.uniform(-bound, bound, shape)  # (out, in)
            if name.endswith("layernorm.weight"):
                weight = np.ones(shape)  # RMSNorm gains start at 1
            self._set(name, weight)
        # --8<-- [end:mla-init]

    def weight_shapes(self):
        """{state_dict name: (out, in) shape}, as DeepseekV3Attention's."""
        h, d_c = self.n_head, self.kv_lora_rank
        d_qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        shapes = {}
        if self.q_lora_rank is None:
            shapes["q_proj.weight"] = (h * d_qk, self.d_model)
        else:
            shapes["q_a_proj.weight"] = (self.q_lora_rank, self.d_model)
            shapes["q_a_layernorm.weight"] = (self.q_lora_rank,)
            shapes["q_b_proj.weight"] = (h * d_qk, self.q_lora_rank)
        shapes["kv_a_proj_with_mqa.weight"] = (
            d_c + self.qk_rope_head_dim,
            self.d_model,
        )
        shapes["kv_a_layernorm.weight"] = (d_c,)
        shapes["kv_b_proj.weight"] = (
            h * (self.qk_nope_head_dim + self.v_head_dim),
            d_c,
        )
        shapes["o_proj.weight"] = (self.d_model, h * self.v_head_dim)
        return shapes

    def _set(self, name, weight):
        # "q_proj.weight" (out, in) -> self.q_proj (in, out): x @ W
        setattr(self, name.removesuffix(".weight"), np.asarray(weight).T)

    def state_dict(self):
        """The weights in DeepseekV3Attention's names and (out, in) layout."""
        return {
            name: getattr(self, name.removesuffix(".weight")).T
            for name in self.weight_shapes()
        }

    def load_state_dict(self, state_dict):
        """Take the weights of a DeepseekV3Attention-shaped state_dict.

        Values are arrays (a torch state_dict: convert with .numpy());
        a wrong name or shape is refused, naming the parameter.
        """
        weights = check.load_state_dict(
            self.weight_shapes(), state_dict, type(self)
        )  # every name and shape, as float arrays
        for name, weight in weights.items():
            self._set(name, weight)

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
            x = np.concatenate([x[..., 0::2], x[..., 1::2]], axis=-1)
        return numpy_ref.apply_rope(x, positions, self.rope_base)
        # --8<-- [end:mla-rotate]

    # --8<-- [start:mla-queries]
    def queries(self, x, positions):
        """x (B, T, d_model) -> q_nope (B, H, T, d_nope), q_rope rotated."""
        b, t, _ = x.shape
        if self.q_lora_rank is None:
            q = x @ self.q_proj  # (B, T, H * d_qk)
        else:  # q = RMSNorm(x W_DQ) W_UQ: a bottleneck for the queries
            c_q = _rms_norm(x @ self.q_a_proj, self.q_a_layernorm, 1e-6)
            q = c_q @ self.q_b_proj  # (B, T, q_lora_rank) -> (.., H * d_qk)
        d_qk = q.shape[-1] // self.n_head  # not -1: B may be 0
        q = q.reshape(b, t, self.n_head, d_qk).transpose(0, 2, 1, 3)
        # (B, H, T, d_qk): the content part, then the position part
        q_nope, q_rope = np.split(q, [self.qk_nope_head_dim], axis=-1)
        return q_nope, self.rotate(q_rope, positions)
        # --8<-- [end:mla-queries]

    # --8<-- [start:mla-latents]
    def latents(self, x, positions):
        """x (B, T, d_model) -> c_KV (B, T, d_c) and k_rope (B, T, d_rope).

        The two things a cache keeps per token: the normalised latent
        and the rotated key that every head shares.
        """
        # NumPy keeps W transposed, (in, out): x @ W, not W x
        # [c_KV, k_R] = x [W_DKV, W_KR]: one matrix, d_c + d_rope outputs
        both = x @ self.kv_a_proj_with_mqa  # (B, T, d_c + d_rope)
        c_kv, k_rope = np.split(both, [self.kv_lora_rank], axis=-1)
        c_kv = _rms_norm(c_kv, self.kv_a_layernorm, 1e-6)  # (B, T, d_c)
        return c_kv, self.rotate(k_rope, positions)  # (B, T, d_rope)
        # --8<-- [end:mla-latents]

    # --8<-- [start:mla-up-projections]
    def up_projections(self):
        """W_UK (H, d_nope, d_c) and W_UV (H, d_v, d_c), from kv_b_proj."""
        w = self.kv_b_proj.T  # (H * (d_nope + d_v), d_c), as nn.Linear's
        w = w.reshape(self.n_head, -1, self.kv_lora_rank)  # (H, .., d_c)
        return np.split(w, [self.qk_nope_head_dim], axis=1)
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
        k_nope = c @ np.swapaxes(w_uk, -2, -1)  # (B, H, T, d_nope)
        v = c @ np.swapaxes(w_uv, -2, -1)  # (B, H, T, d_v)
        shape = (*k_nope.shape[:-1], self.qk_rope_head_dim)
        k_rope = np.broadcast_to(k_rope[:, None], shape)  # (B, H, T, ..)
        return np.concatenate([k_nope, k_rope], axis=-1), v
        # --8<-- [end:mla-expand]

    # --8<-- [start:mla-naive]
    def naive_attention(self, q_nope, q_rope, c_kv, k_rope, mask=None):
        """Expand keys and values for every head, then attention.

        Returns out (B, H, Tq, d_v) and the weights (B, H, Tq, Tk).
        """
        k, v = self.expand_kv(c_kv, k_rope)  # (B, H, Tk, d_qk | d_v)
        q = np.concatenate([q_nope, q_rope], axis=-1)  # (B, H, Tq, d_qk)
        # softmax(q k^T / sqrt(d_nope + d_rope)) v: attention's own scale
        return numpy_ref.attention(q, k, v, mask)
        # --8<-- [end:mla-naive]

    # --8<-- [start:mla-absorbed]
    def absorbed_attention(self, q_nope, q_rope, c_kv, k_rope, mask=None):
        """Score against the latent itself; no per-head key or value.

        Returns out (B, H, Tq, d_v) and the weights (B, H, Tq, Tk).
        """
        w_uk, w_uv = self.up_projections()  # (H, d_nope | d_v, d_c)
        # q_nope . (W_UK c) = (W_UK^T q_nope) . c: W_UK joins the query
        q_latent = q_nope @ w_uk  # (B, H, Tq, d_nope) -> (B, H, Tq, d_c)
        c, k_r = c_kv[:, None], k_rope[:, None]  # (B, 1, Tk, .): shared
        content = q_latent @ np.swapaxes(c, -2, -1)  # (B, H, Tq, Tk)
        position = q_rope @ np.swapaxes(k_r, -2, -1)  # (B, H, Tq, Tk)
        scores = (content + position) * self.scale  # 1 / sqrt(d_qk)
        if mask is not None:
            scores = np.where(mask, -np.inf, scores)  # True = blocked
        scores_finite(scores, mask)  # overflow: name the row
        weights = numpy_ref.softmax(scores, axis=-1)  # (B, H, Tq, Tk)
        # sum_s a_s (W_UV c_s) = W_UV (sum_s a_s c_s): W_UV comes last
        mixed = weights @ c  # (B, H, Tq, d_c): a mean of latents
        return mixed @ np.swapaxes(w_uv, -2, -1), weights  # d_c -> d_v
        # --8<-- [end:mla-absorbed]

    # --8<-- [start:mla-forward]
    def __call__(self, x, mask=None, positions=None, absorbed=False):
        """x (B, T, d_model) -> y (B, T, d_model), weights (B, H, T, T).

        mask: True = blocked, broadcast to (B, H, T, T); positions (T,)
        for RoPE (default 0 .. T - 1); absorbed picks the form.
        """
        x, mask, positions = check.forward(
            self, x, mask, positions, absorbed
        )  # the guards
        q_nope, q_rope = self.queries(x, positions)  # (B, H, T, .)
        c_kv, k_rope = self.latents(x, positions)  # (B, T, .)
        attend = self.absorbed_attention if absorbed else self.naive_attention
        out, weights = attend(q_nope, q_rope, c_kv, k_rope, mask)
        b, h, t, d_v = out.shape  # (B, H, T, d_v)
        merged = out.transpose(0, 2, 1, 3).reshape(b, t, h * d_v)
        return merged @ self.o_proj, weights  # (B, T, d_model)
        # --8<-- [end:mla-forward]
