"""One decode step with a long KV cache, against the number of KV heads.

torch_ref.MultiHeadAttention (d_model 1024, 16 query heads, RoPE) with
n_kv_head key/value heads, a cache already holding CACHE_LENGTH
positions, and one new token: the median time of
kv_cache.cached_step (the reference: torch.cat appends to the cache,
and its attention copies each key/value head to its query heads with
repeat_interleave) and of the same step through SDPA with
enable_gqa=True and a cache allocated once (the new row written in
place), and that SDPA step again with one cached position (what the
step costs with almost nothing to read: its Python, PyTorch's dispatch
and the projection weights). float32, B = 1, one thread by default.
The rounds interleave the head counts, so a busy moment of the machine
slows all of them alike. The grouped-heads page reads the result from
bench/decode.json (bench/report.py, PAGE_PARTS).
"""

import statistics
import time

from bench.env import part_environment
from bench.timing import say

DECODE_SHAPE = {"batch": 1, "d_model": 1024, "n_head": 16}
KV_HEADS = (1, 2, 4, 8, 16)
CACHE_LENGTH = 4096


def _sdpa_step(module, keys, values, x):
    """One decode step with SDPA's grouped attention and a cache
    allocated once: keys, values (B, H_kv, L + 1, dh) hold L cached
    positions, and the new row is written into the last slot.

    One new query at the last position: every cached key is in its
    past, so no mask is needed (and is_causal=True would be wrong).
    """
    import torch
    import torch.nn.functional as F

    start = keys.shape[-2] - 1  # the new row's absolute position
    positions = torch.arange(start, start + 1)
    q, k, v = module.project(x, positions=positions)  # (B, H, 1, dh)
    keys[:, :, start:] = k  # in place: no copy of the cache
    values[:, :, start:] = v
    grouped = module.n_kv_head != module.n_head
    out = F.scaled_dot_product_attention(
        q, keys, values, dropout_p=0.0, enable_gqa=grouped
    )  # (B, H, 1, dh)
    return module.wo(module.merge_heads(out))  # (B, 1, d_model)


def bench_decode(runs, threads, cache_length=CACHE_LENGTH):
    """Median seconds of one decode step per n_kv_head, both paths."""
    import torch

    from mha_ref import kv_cache, torch_ref

    torch.set_num_threads(threads)
    env = part_environment()  # before the runs: the load they met
    b, d_model, n_head = (
        DECODE_SHAPE[k] for k in ("batch", "d_model", "n_head")
    )
    d_head = d_model // n_head
    gen = torch.Generator().manual_seed(0)
    setups, buffers, short = {}, {}, {}
    for n_kv in KV_HEADS:
        torch.manual_seed(n_kv)  # the module's own initialisation
        module = torch_ref.MultiHeadAttention(
            d_model, n_head, n_kv_head=n_kv, rope=True
        )
        shape = (b, n_kv, cache_length, d_head)  # (B, H_kv, T, dh)
        cached = (
            torch.randn(shape, generator=gen),
            torch.randn(shape, generator=gen),
        )
        x = torch.randn(b, 1, d_model, generator=gen)  # the new token
        setups[n_kv] = (module, cached, x)
        # the same cache allocated once, with one free slot at the end
        buffers[n_kv] = tuple(
            torch.cat([c, torch.zeros(b, n_kv, 1, d_head)], dim=-2)
            for c in cached
        )  # (B, H_kv, L + 1, dh) each
        short[n_kv] = tuple(
            torch.cat([c[:, :, :1], torch.zeros(b, n_kv, 1, d_head)], dim=-2)
            for c in cached
        )  # (B, H_kv, 2, dh): one cached position, one free slot
    paths = ("reference", "sdpa", "sdpa_short")
    seconds = {(n, s): [] for n in KV_HEADS for s in paths}
    with torch.no_grad():
        for round_ in range(runs + 1):  # round 0 warms up, not kept
            for n_kv, (module, (k, v), x) in setups.items():
                cache = kv_cache.KVCache()
                cache.append(k, v)  # holds positions 0 .. L - 1
                start = time.perf_counter()
                kv_cache.cached_step(module, cache, x)  # appends by cat
                reference = time.perf_counter() - start
                start = time.perf_counter()
                _sdpa_step(module, *buffers[n_kv], x)
                sdpa = time.perf_counter() - start
                start = time.perf_counter()
                _sdpa_step(module, *short[n_kv], x)
                sdpa_short = time.perf_counter() - start
                if round_:
                    seconds[n_kv, "reference"].append(reference)
                    seconds[n_kv, "sdpa"].append(sdpa)
                    seconds[n_kv, "sdpa_short"].append(sdpa_short)
    rows = []
    for n_kv, (module, _, _) in setups.items():
        rows.append(
            {
                "n_kv_head": n_kv,
                "reference_s": statistics.median(seconds[n_kv, "reference"]),
                "sdpa_s": statistics.median(seconds[n_kv, "sdpa"]),
                # the SDPA step with one cached position
                "sdpa_short_s": statistics.median(seconds[n_kv, "sdpa_short"]),
                "reference_runs": seconds[n_kv, "reference"],
                "sdpa_runs": seconds[n_kv, "sdpa"],
                # K and V of one layer, float32, for the whole cache
                "cache_bytes": 2 * n_kv * cache_length * d_head * 4,
                "params": sum(p.numel() for p in module.parameters()),
            }
        )
        say(
            f"decode n_kv_head={n_kv}: reference "
            f"{rows[-1]['reference_s'] * 1e3:.2f} ms, sdpa "
            f"{rows[-1]['sdpa_s'] * 1e3:.2f} ms"
        )
    return {
        **DECODE_SHAPE,
        "d_head": d_head,
        "rope": True,
        "cache_length": cache_length,
        "dtype": "float32",
        "threads": threads,
        "runs": runs,
        "rows": rows,
        "environment": env,
    }
