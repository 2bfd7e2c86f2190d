"""The doors of positions.py: one guard per public function, same name
(sinusoids, T5's buckets, RoPE's scaling rules, Llama 4's query
temperature)."""

import numpy as np

from mha_ref.guards.arrays import finite, is_tensor, real_number, rope_base
from mha_ref.guards.values import count, even_size, integers

ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3", "longrope")
ROPE_KEYS = {  # the keys each rope_type reads, besides the shared ones
    "default": (),
    "linear": ("factor",),
    "dynamic": ("factor", "original_max_position_embeddings"),
    "yarn": (
        "factor",
        "original_max_position_embeddings",
        "beta_fast",
        "beta_slow",
        "mscale",
        "mscale_all_dim",
        "truncate",
        "attention_factor",
    ),
    "llama3": (
        "factor",
        "original_max_position_embeddings",
        "low_freq_factor",
        "high_freq_factor",
    ),
    "longrope": (
        "factor",
        "original_max_position_embeddings",
        "attention_factor",
        "short_factor",
        "long_factor",
    ),
}
REQUIRED = {  # the keys without which a rule has no value
    "linear": ("factor",),
    "dynamic": ("factor", "original_max_position_embeddings"),
    "yarn": ("factor", "original_max_position_embeddings"),
    "llama3": (
        "factor",
        "original_max_position_embeddings",
        "low_freq_factor",
        "high_freq_factor",
    ),
    "longrope": (
        "original_max_position_embeddings",
        "short_factor",
        "long_factor",
    ),
}
SHARED_KEYS = ("rope_type", "type", "rope_theta", "partial_rotary_factor")


def sinusoidal_encoding(n_positions, d, base, layout, frequencies):
    """Sizes, base, layout and frequencies of a sinusoid table."""
    count(n_positions, "n_positions")
    even_size(d, "d", 4 if frequencies == "fairseq" else 2)
    rope_base(base, "base")
    if layout not in ("interleaved", "halves"):
        raise ValueError(
            f"layout must be 'interleaved' or 'halves', got {layout!r}"
        )
    if frequencies not in ("paper", "fairseq"):
        raise ValueError(
            f"frequencies must be 'paper' or 'fairseq', got {frequencies!r}"
        )


def _t5_buckets(bidirectional, num_buckets, max_distance):
    """T5's bucket sizes: one exact bucket at least, max_distance past
    the exact ones (else the log buckets divide by zero)."""
    if not isinstance(bidirectional, bool | np.bool_):
        raise TypeError(f"bidirectional must be a bool, got {bidirectional!r}")
    least = 4 if bidirectional else 2
    count(num_buckets, "num_buckets", least)
    exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
    count(max_distance, "max_distance", exact + 1)


def t5_relative_bucket(
    relative_position, bidirectional, num_buckets, max_distance
):
    """Bucket sizes and int positions: returns the int64 positions."""
    _t5_buckets(bidirectional, num_buckets, max_distance)
    return integers(relative_position, "relative_position")


def t5_bias(query_length, key_length, table, bidirectional, *sizes):
    """Lengths, a finite (num_buckets, H) table."""
    count(query_length, "query_length")
    count(key_length, "key_length")
    _t5_buckets(bidirectional, *sizes)
    if is_tensor(table):
        table = table.detach().cpu().numpy()
    table = np.asarray(table)
    if table.dtype.kind not in "iuf":
        raise TypeError(f"table must hold real numbers, got {table.dtype}")
    if table.ndim != 2 or table.shape[0] != sizes[0]:
        raise ValueError(
            f"table must have shape (num_buckets, H) = ({sizes[0]}, H), "
            f"got {table.shape}"
        )
    finite(table, "table")
    return table if table.dtype.kind == "f" else table.astype(np.float64)


def _positive(params, key, least=None):
    value = real_number(params[key], f"scaling[{key!r}]")
    if not np.isfinite(value) or value <= 0 or (least and value < least):
        bound = f">= {least}" if least else "> 0"
        raise ValueError(f"scaling[{key!r}] must be {bound}, got {value}")
    return value


def _factors(params, key, half):
    values = np.asarray(params[key])
    if values.dtype.kind not in "iuf" or values.shape != (half,):
        raise ValueError(
            f"scaling[{key!r}] must be {half} numbers, one per rotated "
            f"pair (r / 2), got shape {values.shape} and dtype "
            f"{values.dtype}"
        )
    if not np.isfinite(values).all() or (values <= 0).any():
        raise ValueError(f"scaling[{key!r}] must be finite and > 0")
    return values.astype(np.float64)


def rope_frequencies(d, base, scaling, seq_len):
    """Size, base and scaling dict: returns (rope_type, r, params),
    params holding each key of the type, None where absent."""
    even_size(d, "d")
    rope_base(base, "base")
    scaling = {} if scaling is None else scaling
    if not isinstance(scaling, dict):
        raise TypeError(
            f"scaling must be a dict in rope_parameters form or None, got "
            f"{type(scaling).__name__}"
        )
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type not in ROPE_TYPES:
        raise ValueError(
            f"scaling['rope_type'] must be one of {', '.join(ROPE_TYPES)}; "
            f"got {rope_type!r}"
        )
    known = set(SHARED_KEYS).union(*ROPE_KEYS.values())
    unknown = sorted(set(scaling) - known)
    if unknown:
        raise ValueError(
            f"scaling has keys no rope_type reads: {unknown} (a typo?); "
            f"{rope_type!r} reads {', '.join(ROPE_KEYS[rope_type])}"
        )
    theta = scaling.get("rope_theta")
    if theta is not None and theta != base:
        raise ValueError(
            f"scaling['rope_theta']={theta} disagrees with base={base}"
        )
    given = {k for k, v in scaling.items() if v is not None}
    missing = [k for k in REQUIRED.get(rope_type, ()) if k not in given]
    if rope_type == "longrope" and not {"factor", "attention_factor"} & given:
        missing.append("factor or attention_factor")
    if missing:
        raise ValueError(
            f"rope_type {rope_type!r} needs scaling keys {missing}"
        )
    params = {k: scaling.get(k) for k in ROPE_KEYS[rope_type]}
    if rope_type == "yarn":  # absent: True, as transformers reads it
        params["truncate"] = scaling.get("truncate", True)
    r = d
    if scaling.get("partial_rotary_factor") is not None:
        fraction = _positive(scaling, "partial_rotary_factor")
        if fraction > 1:
            raise ValueError(
                f"scaling['partial_rotary_factor'] must be in (0, 1], got "
                f"{fraction}"
            )
        r = int(d * fraction)
        even_size(r, f"the rotary dimension int(d * {fraction})")
    _type_values(rope_type, params, r)
    if seq_len is not None:
        count(seq_len, "seq_len", 1)
    return rope_type, r, params


def _type_values(rope_type, params, r):
    """Each present key of the type: a number of the right range."""
    least = 1 if rope_type in ("linear", "dynamic", "yarn", "llama3") else 0
    if params.get("factor") is not None:
        params["factor"] = _positive(params, "factor", least)
    if "original_max_position_embeddings" in params:
        params["original_max_position_embeddings"] = count(
            params["original_max_position_embeddings"],
            "scaling['original_max_position_embeddings']",
            1,
        )
    for key in ("low_freq_factor", "high_freq_factor", "attention_factor"):
        if params.get(key) is not None:
            params[key] = _positive(params, key)
    for key in ("beta_fast", "beta_slow", "mscale", "mscale_all_dim"):
        if params.get(key) is not None:
            params[key] = real_number(params[key], f"scaling[{key!r}]")
    high, low = params.get("high_freq_factor"), params.get("low_freq_factor")
    if rope_type == "llama3" and high <= low:
        raise ValueError(
            f"scaling['high_freq_factor'] must exceed "
            f"scaling['low_freq_factor'], got {high} <= {low}"
        )
    if rope_type == "dynamic" and r < 4:
        raise ValueError(
            f"rope_type 'dynamic' raises the base to r / (r - 2): it "
            f"needs a rotary dimension r >= 4, got r={r}"
        )
    if rope_type == "yarn":
        truncate = params["truncate"]
        if not isinstance(truncate, bool | np.bool_):
            raise TypeError(
                f"scaling['truncate'] must be a bool, got {truncate!r}"
            )
    if rope_type == "longrope":
        for key in ("short_factor", "long_factor"):
            params[key] = _factors(params, key, r // 2)


def query_temperature(positions, floor_scale, attn_scale):
    """Positions (ints >= 0) and scales: returns the int64 positions."""
    positions = integers(positions, "positions", least=0)
    floor = real_number(floor_scale, "floor_scale")
    if not np.isfinite(floor) or floor <= 0:
        raise ValueError(f"floor_scale must be > 0, got {floor_scale}")
    if not np.isfinite(real_number(attn_scale, "attn_scale")):
        raise ValueError(f"attn_scale must be finite, got {attn_scale}")
    return positions
