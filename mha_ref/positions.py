"""Where positions come from (NumPy): the 2017 sinusoid in its three
forms, T5's relative buckets, RoPE's frequencies under each scaling
rule, and Llama 4's query temperature in its layers without RoPE.

The rotation itself is apply_rope of numpy_ref and torch_ref, which
takes the frequencies made here (``inv_freq``) and a ``rotary_dim``.
"""

import math

import numpy as np

from mha_ref.guards import positions as check


# --8<-- [start:sinusoidal-encoding]
def sinusoidal_encoding(
    n_positions, d, *, base=10000.0, layout="interleaved", frequencies="paper"
):
    """(n_positions, d) float64: sin and cos of p * omega_i, d / 2 pairs.

    layout "interleaved": PE[p, 2i] = sin, PE[p, 2i + 1] = cos (the
    paper); "halves": the d / 2 sines, then the d / 2 cosines.
    frequencies "paper": omega_i = base^(-2i / d); "fairseq" (the
    fairseq library's, Where positions come from):
    omega_i = base^(-i / (d / 2 - 1)).
    """
    check.sinusoidal_encoding(n_positions, d, base, layout, frequencies)
    i = np.arange(d // 2)  # one frequency per sin/cos pair
    if frequencies == "paper":
        omega = float(base) ** (-2.0 * i / d)  # (d / 2,)
    else:
        omega = float(base) ** (-i / (d // 2 - 1))  # (d / 2,)
    angle = np.arange(n_positions)[:, None] * omega  # (n_positions, d / 2)
    if layout == "halves":
        return np.concatenate([np.sin(angle), np.cos(angle)], axis=-1)
    pe = np.empty((n_positions, d))  # (n_positions, d)
    pe[:, 0::2], pe[:, 1::2] = np.sin(angle), np.cos(angle)
    return pe
    # --8<-- [end:sinusoidal-encoding]


# --8<-- [start:t5-bucket]
def t5_relative_bucket(
    relative_position, *, bidirectional=True, num_buckets=32, max_distance=128
):
    """T5's bucket of each relative position (key - query), int64.

    Bidirectional: half the buckets for keys after the query. Of the
    rest, the first half are exact distances 0, 1, ...; then buckets
    grow logarithmically up to max_distance, and every longer distance
    shares the last bucket. Computed in float32, as T5 does.
    """
    rel = check.t5_relative_bucket(
        relative_position, bidirectional, num_buckets, max_distance
    )
    return _bucket(rel, bidirectional, num_buckets, max_distance)
    # --8<-- [end:t5-bucket]


# --8<-- [start:t5-bucket-core]
def _bucket(rel, bidirectional, num_buckets, max_distance):
    bucket = np.zeros_like(rel)  # same shape as relative_position
    if bidirectional:  # a key after the query: the upper half
        num_buckets //= 2
        bucket += (rel > 0) * num_buckets
        distance = np.abs(rel)
    else:  # only earlier keys count; a later key is distance 0
        distance = np.maximum(-rel, 0)
    exact = num_buckets // 2
    # log(distance / exact) / log(max_distance / exact), in float32
    ratio = np.maximum(distance, 1).astype(np.float32) / np.float32(exact)
    scale = np.float32(math.log(max_distance / exact))
    log_part = np.log(ratio) / scale * np.float32(num_buckets - exact)
    large = np.minimum(exact + log_part.astype(np.int64), num_buckets - 1)
    return bucket + np.where(distance < exact, distance, large)
    # --8<-- [end:t5-bucket-core]


# --8<-- [start:t5-bias]
def t5_bias(
    query_length,
    key_length,
    table,
    *,
    bidirectional=True,
    num_buckets=32,
    max_distance=128,
):
    """(H, query_length, key_length): table[bucket(key - query)].

    table (num_buckets, H), one learned scalar per bucket and head.
    """
    table = check.t5_bias(
        query_length,
        key_length,
        table,
        bidirectional,
        num_buckets,
        max_distance,
    )
    # --8<-- [start:t5-bias-core]
    query = np.arange(query_length)[:, None]  # (Tq, 1)
    key = np.arange(key_length)[None, :]  # (1, Tk)
    bucket = _bucket(key - query, bidirectional, num_buckets, max_distance)
    return table[bucket].transpose(2, 0, 1)  # (Tq, Tk, H) -> (H, Tq, Tk)
    # --8<-- [end:t5-bias-core]
    # --8<-- [end:t5-bias]


# --8<-- [start:rope-frequencies]
def rope_frequencies(d, base, scaling=None, *, seq_len=None):
    """(inv_freq (r / 2,), attention_factor) of a rope_parameters dict.

    r = int(d * partial_rotary_factor), else d. theta_i = base^(-2i / r)
    then the rule of scaling["rope_type"]; seq_len, the current length,
    matters to "dynamic" and "longrope" only.
    """
    rope_type, r, p = check.rope_frequencies(d, base, scaling, seq_len)
    # theta_i = base^(-2i / r), i = 0 .. r / 2 - 1
    inv_freq = float(base) ** (-np.arange(0, r, 2) / r)  # (r / 2,)
    if rope_type == "default":
        return inv_freq, 1.0
    if rope_type == "linear":  # every position divided by factor
        return inv_freq / p["factor"], 1.0
    if rope_type == "dynamic":
        return _dynamic(float(base), r, p, seq_len), 1.0
    rule = {"yarn": _yarn, "llama3": _llama3, "longrope": _longrope}
    return rule[rope_type](inv_freq, float(base), r, p, seq_len)
    # --8<-- [end:rope-frequencies]


# --8<-- [start:rope-dynamic]
def _dynamic(base, r, p, seq_len):
    factor, length = p["factor"], p["original_max_position_embeddings"]
    s = max(seq_len or length, length)  # no change up to the trained one
    # a larger base, base * (factor s / L - (factor - 1))^(r / (r - 2))
    base = base * (factor * s / length - (factor - 1)) ** (r / (r - 2))
    return base ** (-np.arange(0, r, 2) / r)  # (r / 2,)
    # --8<-- [end:rope-dynamic]


# --8<-- [start:rope-yarn]
def _yarn(inv_freq, base, r, p, seq_len):
    factor, length = p["factor"], p["original_max_position_embeddings"]

    def mscale(scale, m=1.0):  # 0.1 m ln(scale) + 1, 1 up to scale 1
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention = p["attention_factor"]
    if attention is None and p["mscale"] and p["mscale_all_dim"]:
        attention = mscale(factor, p["mscale"]) / mscale(
            factor, p["mscale_all_dim"]
        )
    elif attention is None:  # mscale alone is not read
        attention = mscale(factor)

    def pair_of(turns):  # the pair i that turns `turns` times in L
        return (
            r * math.log(length / (turns * 2 * math.pi)) / (2 * math.log(base))
        )

    low, high = pair_of(p["beta_fast"] or 32), pair_of(p["beta_slow"] or 1)
    if p["truncate"]:  # whole pairs only
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, r - 1)
    high = high + 0.001 if low == high else high
    # ramp 0 below pair `low` (kept), 1 above pair `high` (divided)
    ramp = np.clip((np.arange(r // 2) - low) / (high - low), 0, 1)
    return inv_freq / factor * ramp + inv_freq * (1 - ramp), attention
    # --8<-- [end:rope-yarn]


# --8<-- [start:rope-llama3]
def _llama3(inv_freq, base, r, p, seq_len):
    factor, length = p["factor"], p["original_max_position_embeddings"]
    low, high = p["low_freq_factor"], p["high_freq_factor"]
    wavelength = 2 * math.pi / inv_freq  # (r / 2,) positions per turn
    # 0 at wavelength L / low, 1 at L / high: the blend in between
    smooth = (length / wavelength - low) / (high - low)
    blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    out = np.where(wavelength > length / low, inv_freq / factor, blended)
    return np.where(wavelength < length / high, inv_freq, out), 1.0
    # --8<-- [end:rope-llama3]


# --8<-- [start:rope-longrope]
def _longrope(inv_freq, base, r, p, seq_len):
    length, factor = p["original_max_position_embeddings"], p["factor"]
    attention = p["attention_factor"]
    if attention is None:  # sqrt(1 + ln(factor) / ln(L)), 1 up to 1
        attention = 1.0
        if factor > 1:
            attention = math.sqrt(1 + math.log(factor) / math.log(length))
    long = seq_len is not None and seq_len > length
    divide = p["long_factor"] if long else p["short_factor"]  # (r / 2,)
    return inv_freq / divide, attention
    # --8<-- [end:rope-longrope]


# --8<-- [start:query-temperature]
def query_temperature(positions, *, floor_scale=8192, attn_scale=0.1):
    """Llama 4's factor on the queries of its layers without RoPE:
    1 + attn_scale * ln(1 + floor((p + 1) / floor_scale)), float64.
    """
    p = check.query_temperature(positions, floor_scale, attn_scale)
    steps = np.floor((p + 1.0) / floor_scale)  # 0 for p < floor_scale - 1
    return 1.0 + attn_scale * np.log1p(steps)  # same shape as positions
    # --8<-- [end:query-temperature]
