"""MultiHeadLatentAttention against Hugging Face's DeepseekV3Attention.

The oracle is transformers 5.24.0 (pinned in pyproject's dev extras),
models/deepseek_v3/modeling_deepseek_v3.py, at tiny random
configurations (no download) with num_key_value_heads equal to the
head count. Its state_dict loads into ours as is.

HF computes three steps in float32 whatever the module's dtype: its RMS
norms (hidden_states.to(torch.float32)), its rotary angles (inv_freq
and position_ids.float()) and its softmax (dtype=torch.float32). For
the float64 comparison those steps run in float64 with HF's own code:
the modeling file's name ``torch`` is swapped, for the test only, for
one whose float32 is float64. As shipped (float32, unpatched), the two
agree within HF_FLOAT32_ATOL.
"""

import pytest
import torch

from mha_ref import latent_torch, torch_ref
from mha_ref.tolerances import atol

hf = pytest.importorskip(
    "transformers.models.deepseek_v3.modeling_deepseek_v3"
)
DeepseekV3Config = hf.DeepseekV3Config

TOL = {"atol": atol(torch.float64), "rtol": 0}
# float32 as shipped: HF's angles are float32 (ours float64, cast once),
# position * 2^-24 of rounding at positions up to 30 moves q_rope and
# k_rope by ~2e-6, and every stored value rounds at eps32 = 1.2e-7; the
# outputs here, up to 3.3, differ by at most 7.2e-7 (measured, both
# forms): 1e-5 (tolerances.atol("float32"), ~84 eps32) holds with room
HF_FLOAT32_ATOL = atol(torch.float32)
D_MODEL, N_HEAD = 24, 3
SHAPES = {"kv_lora_rank": 10, "qk_nope_head_dim": 6, "qk_rope_head_dim": 4}
SHAPES["v_head_dim"] = 5


class _Float64Torch:
    """torch, but its float32 (and float) is float64: HF's float32 steps
    then run in float64, with HF's own code."""

    def __getattr__(self, name):
        if name in ("float32", "float"):
            return torch.float64
        return getattr(torch, name)


def hf_pair(q_lora_rank, rope_interleave, dtype, monkeypatch=None, seed=0):
    """HF's attention, its rotary embedding, and ours with its weights."""
    config = DeepseekV3Config(
        hidden_size=D_MODEL,
        num_attention_heads=N_HEAD,
        num_key_value_heads=N_HEAD,
        q_lora_rank=q_lora_rank,
        rope_interleave=rope_interleave,
        **SHAPES,
    )
    config._attn_implementation = "eager"  # returns the weights
    if monkeypatch is not None:  # float64 inv_freq, computed by HF
        monkeypatch.setattr(hf, "torch", _Float64Torch())
    theirs = hf.DeepseekV3Attention(config, layer_idx=0).to(dtype)
    rotary = hf.DeepseekV3RotaryEmbedding(config)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # every weight random, the norms' gains too
        for param in theirs.parameters():
            draw = torch.randn(param.shape, generator=gen).to(dtype)
            if param.dim() == 1:
                param.copy_(1.0 + 0.3 * draw)
            else:
                param.copy_(draw * param.shape[-1] ** -0.5)
    ours = latent_torch.MultiHeadLatentAttention(
        D_MODEL,
        N_HEAD,
        **SHAPES,
        q_lora_rank=q_lora_rank,
        rope_interleave=rope_interleave,
        dtype=dtype,
    )
    ours.load_state_dict(theirs.state_dict())  # as is: same names
    return theirs, rotary, ours


def hf_forward(theirs, rotary, x, positions, blocked):
    """HF's forward with its rotary embedding and an additive mask."""
    cos_sin = rotary(x, positions[None])  # (1, T, d_rope) each
    additive = torch.zeros(blocked.shape, dtype=x.dtype)
    additive = additive.masked_fill(blocked, float("-inf"))[None, None]
    return theirs(x, cos_sin, additive)


def inputs(t, dtype, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(2, t, D_MODEL, generator=gen).to(dtype)


VARIANTS = [
    pytest.param(None, True, id="no-q-lora-interleaved"),
    pytest.param(None, False, id="no-q-lora-halves"),
    pytest.param(8, True, id="q-lora-interleaved"),
    pytest.param(8, False, id="q-lora-halves"),
]
POSITIONS = [
    pytest.param(torch.arange(6), id="from-0"),
    pytest.param(torch.arange(25, 31), id="from-25"),
    pytest.param(torch.tensor([0, 2, 3, 7, 8, 12]), id="gaps"),
]


@pytest.mark.parametrize(("q_lora_rank", "interleave"), VARIANTS)
@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.parametrize("absorbed", [False, True])
def test_mla_matches_hf_float64(
    monkeypatch, q_lora_rank, interleave, positions, absorbed
):
    theirs, rotary, ours = hf_pair(
        q_lora_rank, interleave, torch.float64, monkeypatch
    )
    x, blocked = inputs(6, torch.float64), torch_ref.causal_mask(6)
    y_hf, w_hf = hf_forward(theirs, rotary, x, positions, blocked)
    y, w = ours(x, blocked, positions, absorbed=absorbed)
    torch.testing.assert_close(y, y_hf, **TOL)
    torch.testing.assert_close(w, w_hf, **TOL)


@pytest.mark.parametrize(("q_lora_rank", "interleave"), VARIANTS)
def test_mla_gradients_match_hf_float64(monkeypatch, q_lora_rank, interleave):
    theirs, rotary, ours = hf_pair(
        q_lora_rank, interleave, torch.float64, monkeypatch
    )
    x, blocked = inputs(6, torch.float64), torch_ref.causal_mask(6)
    positions = torch.arange(3, 9)
    dy = inputs(6, torch.float64, seed=7)
    x_hf, x_ours = x.clone().requires_grad_(), x.clone().requires_grad_()
    y_hf, _ = hf_forward(theirs, rotary, x_hf, positions, blocked)
    y, _ = ours(x_ours, blocked, positions)
    grads_hf = torch.autograd.grad(
        (y_hf * dy).sum(), [x_hf, *theirs.parameters()]
    )
    grads = torch.autograd.grad((y * dy).sum(), [x_ours, *ours.parameters()])
    names = ["x", *(n for n, _ in ours.named_parameters())]
    assert names[1:] == [n for n, _ in theirs.named_parameters()]
    for name, got, want in zip(names, grads, grads_hf, strict=True):
        torch.testing.assert_close(got, want, **TOL, msg=name)


@pytest.mark.parametrize(("q_lora_rank", "interleave"), VARIANTS)
@pytest.mark.parametrize("absorbed", [False, True])
def test_mla_matches_hf_float32_as_shipped(q_lora_rank, interleave, absorbed):
    theirs, rotary, ours = hf_pair(q_lora_rank, interleave, torch.float32)
    x, blocked = inputs(6, torch.float32), torch_ref.causal_mask(6)
    positions = torch.arange(25, 31)
    y_hf, w_hf = hf_forward(theirs, rotary, x, positions, blocked)
    y, w = ours(x, blocked, positions, absorbed=absorbed)
    torch.testing.assert_close(y, y_hf, atol=HF_FLOAT32_ATOL, rtol=0)
    torch.testing.assert_close(w, w_hf, atol=HF_FLOAT32_ATOL, rtol=0)


def test_mla_float64_without_the_patch_shows_hf_float32_steps():
    # the drifted case: HF unpatched in float64 rounds three steps to
    # float32, far outside the float64 tolerance
    theirs, rotary, ours = hf_pair(8, True, torch.float64)
    x, blocked = inputs(6, torch.float64), torch_ref.causal_mask(6)
    positions = torch.arange(25, 31)
    y_hf, _ = hf_forward(theirs, rotary, x, positions, blocked)
    y, _ = ours(x, blocked, positions)
    assert 1e-10 < (y - y_hf).abs().max() < HF_FLOAT32_ATOL


@pytest.mark.parametrize("interleave", [True, False])
def test_mla_rope_interleave_flag_must_match_hf(monkeypatch, interleave):
    # the same weights read with the other convention give other outputs
    theirs, rotary, _ = hf_pair(None, interleave, torch.float64, monkeypatch)
    other = latent_torch.MultiHeadLatentAttention(
        D_MODEL, N_HEAD, **SHAPES, rope_interleave=not interleave
    ).double()
    other.load_state_dict(theirs.state_dict())
    x, blocked = inputs(6, torch.float64), torch_ref.causal_mask(6)
    positions = torch.arange(25, 31)
    y_hf, _ = hf_forward(theirs, rotary, x, positions, blocked)
    assert (other(x, blocked, positions)[0] - y_hf).abs().max() > 1e-3


@pytest.mark.parametrize("interleave", [True, False])
def test_latent_cache_holds_what_hf_cache_holds(monkeypatch, interleave):
    # HF caches the normalised latent and the rotated shared key, as we do
    from transformers import DynamicCache

    theirs, rotary, ours = hf_pair(8, interleave, torch.float64, monkeypatch)
    x, blocked = inputs(6, torch.float64), torch_ref.causal_mask(6)
    hf_cache = DynamicCache(config=theirs.config)
    cos_sin = rotary(x, torch.arange(6)[None])
    additive = torch.zeros(6, 6, dtype=x.dtype).masked_fill(
        blocked, float("-inf")
    )
    theirs(x, cos_sin, additive[None, None], cache=hf_cache)
    cache = latent_torch.LatentCache()
    latent_torch.cached_latent_step(ours, cache, x[:, :4])
    latent_torch.cached_latent_step(ours, cache, x[:, 4:], absorbed=True)
    layer = hf_cache.layers[0]  # keys: the latent, values: the rope key
    torch.testing.assert_close(cache.latent, layer.keys[:, 0], **TOL)
    torch.testing.assert_close(cache.rope_key, layer.values[:, 0], **TOL)


def test_deepseek_v3_shapes_are_hf_config_defaults():
    # DeepseekV3Config's defaults are the published DeepSeek-V3 shapes
    config = DeepseekV3Config()
    same_name = set(latent_torch.DEEPSEEK_V3) - {"d_model", "n_head"}
    got = {
        "d_model": config.hidden_size,
        "n_head": config.num_attention_heads,
        **{name: getattr(config, name) for name in same_name},
    }
    assert got == latent_torch.DEEPSEEK_V3
    assert config.num_key_value_heads == config.num_attention_heads
    assert config.num_hidden_layers == latent_torch.DEEPSEEK_V3_LAYERS
    assert config.rms_norm_eps == 1e-6  # our RMSNorm's eps


def test_mla_scale_and_yarn_mscale_match_hf():
    d_qk = SHAPES["qk_nope_head_dim"] + SHAPES["qk_rope_head_dim"]
    ours = latent_torch.MultiHeadLatentAttention(D_MODEL, N_HEAD, **SHAPES)
    assert ours.scale == d_qk**-0.5  # HF: qk_head_dim ** (-0.5)
    # DeepSeek-V3's published rope_scaling (config.json)
    yarn = {
        "rope_type": "yarn",
        "factor": 40.0,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    }
    scaled = hf.yarn_apply_mscale(yarn, 192**-0.5)
    mscale = latent_torch.yarn_mscale(40.0, 1.0)
    assert mscale == hf.yarn_get_mscale(40.0, 1.0)
    assert scaled == pytest.approx(192**-0.5 * mscale**2, rel=1e-15)


def test_hf_yarn_keeps_divides_or_blends_pairs_by_their_turns():
    # the page's count of DeepSeek-V3's YaRN pairs, against HF's own
    # ROPE_INIT_FUNCTIONS["yarn"]: a pair turning more than beta_fast
    # times over the trained context keeps its frequency, one turning
    # fewer than beta_slow times has it divided by the factor
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    v3 = latent_torch.DEEPSEEK_V3
    yarn = {  # DeepSeek-V3's published rope_scaling (config.json)
        "rope_type": "yarn",
        "rope_theta": 10000.0,
        "factor": 40.0,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
        "beta_fast": 32,
        "beta_slow": 1,
    }
    config = DeepseekV3Config(rope_parameters=yarn)
    inv_freq, attention_factor = ROPE_INIT_FUNCTIONS["yarn"](config, None)
    d_rope = v3["qk_rope_head_dim"]
    pair = torch.arange(d_rope // 2, dtype=torch.float64)
    plain = 10000.0 ** (-2 * pair / d_rope)  # RoPE's own frequencies
    ratio = inv_freq.double() / plain  # 1: kept, 1 / 40: divided
    turns = 4096 * plain / (2 * torch.pi)  # over the trained context
    kept, divided = turns > 32, turns < 1
    f32 = {"atol": HF_FLOAT32_ATOL, "rtol": 0}  # HF's inv_freq: float32
    ones = torch.ones(int(kept.sum()), dtype=torch.float64)
    torch.testing.assert_close(ratio[kept], ones, **f32)
    fortieth = torch.full((int(divided.sum()),), 1 / 40, dtype=ones.dtype)
    torch.testing.assert_close(ratio[divided], fortieth, **f32)
    blended = ratio[~kept & ~divided]
    assert ((blended > 1 / 40) & (blended < 1)).all()
    assert [int(kept.sum()), int(divided.sum()), len(blended)] == [11, 9, 12]
    assert attention_factor == 1.0  # mscale == mscale_all_dim
