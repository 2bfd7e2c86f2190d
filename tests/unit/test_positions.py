"""positions.py and apply_rope's inv_freq / rotary_dim against the code
that defines each rule: transformers 5.24.0 (pinned in pyproject's dev
extras), run here at random configurations, no download.

- sinusoids: DistilBERT's _create_sinusoidal_embeddings, Marian's and
  M2M100's sinusoidal embeddings (models/*/modeling_*.py);
- T5Attention._relative_position_bucket and compute_bias;
- modeling_rope_utils.ROPE_INIT_FUNCTIONS (linear, dynamic, yarn,
  llama3, longrope) and GPT-NeoX's compute_default_rope_parameters;
- GPT-NeoX's rotary application (partial_rotary_factor 0.25 and 0.5);
- Llama 4's query temperature in its layers without RoPE.

transformers computes inv_freq in float32 (ours float64): RTOL32.
"""

import math

import numpy as np
import pytest
import torch

from mha_ref import numpy_ref, torch_ref
from mha_ref.positions import (
    query_temperature,
    rope_frequencies,
    sinusoidal_encoding,
    t5_bias,
    t5_relative_bucket,
)

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()  # its config warnings
from transformers import (  # noqa: E402
    GPTNeoXConfig,
    Llama4TextConfig,
    LlamaConfig,
    T5Config,
)
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.distilbert import (  # noqa: E402
    modeling_distilbert as distilbert,
)
from transformers.models.gpt_neox import modeling_gpt_neox as neox  # noqa: E402
from transformers.models.llama4 import modeling_llama4 as llama4  # noqa: E402
from transformers.models.m2m_100 import modeling_m2m_100 as m2m  # noqa: E402
from transformers.models.marian import modeling_marian as marian  # noqa: E402
from transformers.models.t5.modeling_t5 import T5Attention  # noqa: E402

RTOL32 = {"rtol": 2e-6, "atol": 0}  # float32 inv_freq, a few ulps
SEEDS = range(6)


# -- the three sinusoids --------------------------------------------------


def sizes(seed):
    rng = np.random.default_rng(seed)
    return int(rng.integers(1, 60)), 2 * int(rng.integers(2, 40))


@pytest.mark.parametrize("seed", SEEDS)
def test_sinusoidal_encoding_interleaved_is_distilbert(seed):
    n, d = sizes(seed)
    out = torch.empty(n, d)
    distilbert._create_sinusoidal_embeddings(n_pos=n, dim=d, out=out)
    got = sinusoidal_encoding(n, d)
    np.testing.assert_allclose(got, out.double().numpy(), atol=1e-6, rtol=0)


@pytest.mark.parametrize("seed", SEEDS)
def test_sinusoidal_encoding_halves_is_marian(seed):
    n, d = sizes(seed)
    want = marian.MarianSinusoidalPositionalEmbedding(n, d).create_weight()
    got = sinusoidal_encoding(n, d, layout="halves")
    np.testing.assert_allclose(got, want.double().numpy(), atol=1e-6, rtol=0)


@pytest.mark.parametrize("seed", SEEDS)
def test_sinusoidal_encoding_fairseq_is_m2m100(seed):
    n, d = sizes(seed)
    table = m2m.M2M100SinusoidalPositionalEmbedding.get_embedding(n, d, None)
    got = sinusoidal_encoding(n, d, layout="halves", frequencies="fairseq")
    np.testing.assert_allclose(got, table.double().numpy(), atol=2e-5)


def test_sinusoidal_encoding_m2m100_offsets_positions_by_padding_idx():
    n, d, pad = 7, 16, 1
    module = m2m.M2M100SinusoidalPositionalEmbedding(20, d, padding_idx=pad)
    out = module(inputs_embeds=torch.zeros(1, n, d))[0]  # (n, d)
    table = sinusoidal_encoding(
        n + pad + 1, d, layout="halves", frequencies="fairseq"
    )
    # token t sits at row t + padding_idx + 1 of the table
    np.testing.assert_allclose(
        out.double().numpy(), table[pad + 1 :], atol=2e-5
    )


def test_sinusoidal_encoding_three_forms_differ():
    forms = [
        sinusoidal_encoding(8, 8),
        sinusoidal_encoding(8, 8, layout="halves"),
        sinusoidal_encoding(8, 8, layout="halves", frequencies="fairseq"),
    ]
    for a in range(3):
        for b in range(a):
            assert np.abs(forms[a] - forms[b]).max() > 0.1


# -- T5's buckets ---------------------------------------------------------


def t5_sizes(seed, bidirectional):
    rng = np.random.default_rng(seed)
    num_buckets = int(rng.integers(4 if bidirectional else 2, 70))
    exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
    max_distance = int(rng.integers(exact + 1, 600))
    return num_buckets, max_distance


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("seed", [*SEEDS, 32])
def test_t5_relative_bucket_is_t5s(seed, bidirectional):
    nb, md = (32, 128) if seed == 32 else t5_sizes(seed, bidirectional)
    rel = np.arange(-3 * md, 3 * md + 1).reshape(-1, 1)  # any shape
    want = T5Attention._relative_position_bucket(
        torch.from_numpy(rel), bidirectional, nb, md
    )
    got = t5_relative_bucket(
        rel, bidirectional=bidirectional, num_buckets=nb, max_distance=md
    )
    assert got.dtype == np.int64
    assert got.shape == rel.shape
    np.testing.assert_array_equal(got, want.numpy())


@pytest.mark.parametrize("is_decoder", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_t5_bias_is_compute_bias(seed, is_decoder):
    nb, md = t5_sizes(seed, not is_decoder)
    rng = np.random.default_rng(seed)
    tq, tk, h = (int(v) for v in rng.integers(1, 40, 3))
    config = T5Config(
        d_model=8,
        d_kv=4,
        num_heads=h,
        relative_attention_num_buckets=nb,
        relative_attention_max_distance=md,
        is_decoder=is_decoder,
    )
    torch.manual_seed(seed)
    layer = T5Attention(config, has_relative_attention_bias=True, layer_idx=0)
    table = layer.relative_attention_bias.weight.detach()  # (nb, H)
    want = layer.compute_bias(tq, tk)[0].detach()  # (H, Tq, Tk)
    got = t5_bias(
        tq,
        tk,
        table.numpy(),
        bidirectional=not is_decoder,
        num_buckets=nb,
        max_distance=md,
    )
    assert got.shape == (h, tq, tk)
    np.testing.assert_array_equal(got, want.numpy())


def test_t5_bucket_boundaries_need_float32():
    # at num_buckets=9, max_distance=128, one-directional, the distance
    # 8 sits exactly on a log-bucket boundary: T5's float32 gives bucket
    # 5, float64 would round the other way
    got = t5_relative_bucket(
        np.array([-8]), bidirectional=False, num_buckets=9, max_distance=128
    )
    assert got.tolist() == [5]


# -- RoPE's frequencies ---------------------------------------------------


def hf_rope(d, base, scaling, max_position, seq_len=None):
    """ROPE_INIT_FUNCTIONS[rope_type] on a tiny LlamaConfig; default:
    GPT-NeoX's compute_default_rope_parameters."""
    params = {**scaling, "rope_theta": base}
    # GPT-NeoX's config would default it to 0.25 (its rotary_pct)
    params.setdefault("partial_rotary_factor", 1.0)
    if params["rope_type"] == "default":
        config = GPTNeoXConfig(
            hidden_size=2 * d, num_attention_heads=2, rope_parameters=params
        )
        rule = neox.GPTNeoXRotaryEmbedding.compute_default_rope_parameters
    else:
        config = LlamaConfig(
            hidden_size=2 * d,
            num_attention_heads=2,
            head_dim=d,
            max_position_embeddings=max_position,
            rope_parameters=params,
        )
        rule = ROPE_INIT_FUNCTIONS[params["rope_type"]]
    inv_freq, attention = rule(config, "cpu", seq_len=seq_len)
    return inv_freq.double().numpy(), attention


def random_scaling(rope_type, seed):
    """A random rope_parameters dict of the type, with its max length."""
    rng = np.random.default_rng(seed)
    d = 2 * int(rng.integers(4, 65))
    base = float(rng.choice([1e4, 5e5, 1e6, 3000.0]))
    length = int(rng.choice([256, 2048, 4096, 8192]))
    factor = float(rng.choice([1.0, 2.0, 4.0, 8.0, 32.0, 2.5]))
    fraction = float(rng.choice([1.0, 0.5, 0.25]))
    s = {"rope_type": rope_type}
    if int(d * fraction) % 2 == 0 and fraction < 1:
        s["partial_rotary_factor"] = fraction
    r = int(d * s.get("partial_rotary_factor", 1.0))
    if rope_type != "default":
        s["factor"] = factor
    if rope_type in ("dynamic", "yarn", "llama3", "longrope"):
        s["original_max_position_embeddings"] = length
    if rope_type == "yarn":
        for key, values in (
            ("beta_fast", [None, 32, 16, 64]),
            ("beta_slow", [None, 1, 2]),
            ("mscale", [None, 1.0, 0.707, 0.5]),
            ("mscale_all_dim", [None, 1.0, 0.707]),
            ("truncate", [None, True, False]),
            ("attention_factor", [None, None, 1.3]),
        ):
            value = values[int(rng.integers(len(values)))]
            if value is not None:
                s[key] = value
    if rope_type == "llama3":
        low = float(rng.choice([1.0, 0.5, 2.0]))
        s |= {"low_freq_factor": low, "high_freq_factor": low * 4}
    if rope_type == "longrope":
        s["short_factor"] = rng.uniform(1, 2, r // 2).tolist()
        s["long_factor"] = rng.uniform(1, 30, r // 2).tolist()
        if rng.integers(2):
            s["attention_factor"] = float(rng.uniform(1, 1.5))
    return d, base, s, length


@pytest.mark.parametrize(
    "rope_type", ["default", "linear", "dynamic", "yarn", "llama3", "longrope"]
)
@pytest.mark.parametrize("seed", range(8))
def test_rope_frequencies_equal_transformers(rope_type, seed):
    d, base, scaling, length = random_scaling(rope_type, seed)
    max_position = length * 4  # a model's extended length
    seq_lens = [None]
    if rope_type in ("dynamic", "longrope"):
        seq_lens += [length // 2, length, length + 1, 3 * length]
    for seq_len in seq_lens:
        longest = length if rope_type == "dynamic" else max_position
        want, want_attention = hf_rope(d, base, scaling, longest, seq_len)
        got, attention = rope_frequencies(d, base, scaling, seq_len=seq_len)
        r = int(d * scaling.get("partial_rotary_factor", 1.0))
        assert got.shape == (r // 2,)
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want, **RTOL32, err_msg=str(seq_len))
        assert attention == pytest.approx(want_attention, rel=1e-12, abs=0)


def test_rope_frequencies_yarn_mscale_alone_is_not_read():
    s = {"rope_type": "yarn", "factor": 4.0}
    s["original_max_position_embeddings"] = 4096
    _, plain = rope_frequencies(64, 1e4, s)
    _, with_mscale = rope_frequencies(64, 1e4, {**s, "mscale": 0.707})
    assert plain == with_mscale == pytest.approx(0.1 * math.log(4) + 1)
    _, deepseek = rope_frequencies(
        64, 1e4, {**s, "mscale": 0.707, "mscale_all_dim": 0.707}
    )
    assert deepseek == 1.0


def test_rope_frequencies_default_is_the_base():
    got, attention = rope_frequencies(8, 100.0)
    np.testing.assert_allclose(got, 100.0 ** (-np.arange(0, 8, 2) / 8))
    assert attention == 1.0


# -- apply_rope: inv_freq and rotary_dim ----------------------------------


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_apply_rope_defaults_keep_its_behaviour(framework, rng):
    ref = numpy_ref if framework == "numpy" else torch_ref
    x = rng.standard_normal((2, 3, 5, 8))
    x = x if framework == "numpy" else torch.from_numpy(x)
    pos = [0, 4, 1, 9, 30]
    plain = ref.apply_rope(x, pos, 500.0)
    freq, _ = rope_frequencies(8, 500.0)
    for other in (
        ref.apply_rope(x, pos, 500.0, rotary_dim=8),
        ref.apply_rope(x, pos, 500.0, inv_freq=freq),
        ref.apply_rope(x, pos, 500.0, inv_freq=freq, rotary_dim=8),
    ):
        np.testing.assert_allclose(np.asarray(other), np.asarray(plain))


def neox_rotary(q, k, positions, fraction, scaling=None):
    """GPT-NeoX's rotary embedding and apply_rotary_pos_emb on q, k."""
    h, d = q.shape[1], q.shape[3]
    params = {"rope_type": "default", "rope_theta": 1e4}
    params |= {"partial_rotary_factor": fraction, **(scaling or {})}
    config = GPTNeoXConfig(
        hidden_size=h * d,
        num_attention_heads=h,
        rope_parameters=params,
        max_position_embeddings=64,
    )
    rotary = neox.GPTNeoXRotaryEmbedding(config)
    position_ids = torch.as_tensor(positions)[None]  # (1, T)
    cos, sin = rotary(q, position_ids)
    return neox.apply_rotary_pos_emb(q, k, cos, sin)


@pytest.mark.parametrize("fraction", [0.25, 0.5])
@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_apply_rope_rotary_dim_is_gpt_neox_partial_rotary(fraction, framework):
    rng = np.random.default_rng(int(fraction * 8))
    d = 16
    q = torch.from_numpy(rng.standard_normal((2, 3, 6, d)))
    k = torch.from_numpy(rng.standard_normal((2, 3, 6, d)))
    pos = rng.integers(0, 50, 6)
    want_q, want_k = neox_rotary(q, k, pos, fraction)
    ref = numpy_ref if framework == "numpy" else torch_ref
    r = int(d * fraction)
    for x, want in ((q, want_q), (k, want_k)):
        x = x.numpy() if framework == "numpy" else x
        got = np.asarray(ref.apply_rope(x, pos, rotary_dim=r))
        np.testing.assert_allclose(got, want.numpy(), atol=2e-5)
        np.testing.assert_array_equal(got[..., r:], np.asarray(x)[..., r:])


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_apply_rope_inv_freq_is_a_scaled_partial_model(framework):
    # YaRN on half of each head: frequencies from rope_frequencies, and
    # transformers' attention factor multiplies the rotated slice only
    rng = np.random.default_rng(3)
    d, fraction = 16, 0.5
    yarn = {"rope_type": "yarn", "factor": 8.0}
    yarn["original_max_position_embeddings"] = 16
    q = torch.from_numpy(rng.standard_normal((1, 2, 5, d)))
    pos = rng.integers(0, 60, 5)
    want, _ = neox_rotary(q, q, pos, fraction, yarn)
    inv_freq, attention = rope_frequencies(
        d, 1e4, {**yarn, "partial_rotary_factor": fraction}
    )
    ref = numpy_ref if framework == "numpy" else torch_ref
    x = q.numpy() if framework == "numpy" else q
    got = ref.apply_rope(x, pos, inv_freq=inv_freq)
    got = np.array(got) if framework == "numpy" else got.numpy().copy()
    got[..., : d // 2] *= attention
    np.testing.assert_allclose(got, want.numpy(), atol=2e-5)


# -- Llama 4's query temperature ------------------------------------------


def test_query_temperature_is_llama4s_in_a_layer_without_rope(monkeypatch):
    config = Llama4TextConfig(
        hidden_size=16,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=8,
        num_hidden_layers=4,
        floor_scale=3,
        attn_scale=0.25,
        attn_temperature_tuning=True,
    )
    config._attn_implementation = "eager"
    assert config.no_rope_layers == [1, 1, 1, 0]  # layer 3: no RoPE
    torch.manual_seed(0)
    layer = llama4.Llama4TextAttention(config, layer_idx=3)
    seen = {}
    original = llama4.eager_attention_forward

    def spy(module, query, *args, **kwargs):
        seen["query"] = query  # (B, H, T, dh), after the temperature
        return original(module, query, *args, **kwargs)

    monkeypatch.setattr(llama4, "eager_attention_forward", spy)
    x = torch.randn(1, 13, 16)
    with torch.no_grad():
        layer(x, position_embeddings=None, attention_mask=None)
        plain = layer.q_proj(x).view(1, 13, 2, 8).transpose(1, 2)
    scale = query_temperature(np.arange(13), floor_scale=3, attn_scale=0.25)
    assert len(set(scale.tolist())) == 5  # 1 at p < 2, then steps
    np.testing.assert_allclose(
        seen["query"].numpy(),
        plain.numpy() * scale[None, None, :, None],
        rtol=1e-6,
    )


def test_query_temperature_defaults():
    got = query_temperature([0, 8190, 8191, 3 * 8192 - 1])
    np.testing.assert_allclose(
        got, [1.0, 1.0, 1 + 0.1 * math.log(2), 1 + 0.1 * math.log(4)]
    )


# -- refusals -------------------------------------------------------------
