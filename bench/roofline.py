"""This machine's roofline, and where the reference layer falls on it.

The two roofs: the peak rate of a large square float32 matmul (torch.mm
of N x N, 2 N^3 FLOPs as FlopCounterMode counts them), with one thread
and with every available thread, and the memory bandwidth of a large
copy (dst.copy_(src): its bytes read plus written, over the seconds),
one thread and all. Then torch_ref.MultiHeadAttention (d_model 1024,
16 heads, B = 1, float32, --threads threads: one by default, as the
other parts, since on a shared machine OpenMP threads that wait for
busy cores swamp the times) on a causal prefill of T tokens
and on one decoding step against a cache of T positions: the reference
step (kv_cache.cached_step, whose torch.cat copies the cache) and the
same step through SDPA with a cache allocated once (bench.decode). Each
point's FLOPs and bytes come from mha_ref.cost. The rounds interleave
the measurements, so a busy moment slows all of them alike; every
figure is the median of its rounds. Before each layer call the round
reads a buffer of twice the last-level cache (flush_bytes), so every
call starts with its weights and keys in main memory, as the roofs
assume: no call finds what an earlier one left in the caches. A CUDA
device, when torch sees one, is measured the same way in bfloat16.

Its figures go into the report (report["roofline"]), which also writes
them alone to bench/roofline.json, the file the cost page reads
(bench/report.py, PAGE_PARTS).
"""

import os
import statistics
import time
from pathlib import Path

from bench.env import part_environment
from bench.timing import say
from mha_ref import cost

LAYER = {"batch": 1, "d_model": 1024, "n_head": 16}
PREFILL_LENGTHS = (128, 512, 2048)
DECODE_LENGTHS = (1024, 8192, 65536)  # K and V: 8 MiB to 512 MiB
MATMUL_N = {"cpu": 2048, "cuda": 8192}
COPY_BYTES = {"cpu": 2**30, "cuda": 2**31}  # 1 GiB, 2 GiB: past caches
FLUSH_MIN_BYTES = 2**28  # 256 MiB: the flush when the caches say nothing
# The published specifications of one GPU: not measured here, read from
# the one table the pages use (mha_ref.cost.GPU_SPECS).
GPU_SPEC = {
    "name": "NVIDIA H200 SXM",
    **cost.GPU_SPECS["H200 SXM"],
    "bf16_dense_tflops": cost.GPU_SPECS["H200 SXM"]["bf16_sparse_tflops"] / 2,
}


def last_level_cache_bytes():
    """The largest CPU cache, from sysfs (None if it says nothing)."""
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        unit = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        sizes.append(int(text.rstrip("KMG")) * unit)
    return max(sizes, default=None)


def flush_bytes(device):
    """Twice the largest cache of ``device``: reading that many bytes
    leaves nothing of a layer call in it."""
    if device == "cuda":
        import torch

        largest = torch.cuda.get_device_properties(0).L2_cache_size
    else:
        largest = last_level_cache_bytes()
    return max(2 * (largest or 0), FLUSH_MIN_BYTES)


def _seconds(fn, sync):
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def _layer_calls(device, dtype):
    """{(kind, T): call} for a prefill and the two decode steps."""
    import torch

    from bench.decode import _sdpa_step
    from mha_ref import kv_cache, torch_ref

    b, d_model, n_head = (LAYER[k] for k in ("batch", "d_model", "n_head"))
    kw = {"device": device, "dtype": dtype}
    torch.manual_seed(0)
    module = torch_ref.MultiHeadAttention(d_model, n_head, **kw)
    d_head = d_model // n_head
    calls = {}
    for t in PREFILL_LENGTHS:
        x = torch.randn(b, t, d_model, **kw)
        mask = torch_ref.causal_mask(t, device=device)
        calls["prefill", t] = lambda x=x, mask=mask: module(x, mask)
    for t in DECODE_LENGTHS:
        shape = (b, n_head, t - 1, d_head)  # T - 1 cached, 1 new
        keys, values = torch.randn(shape, **kw), torch.randn(shape, **kw)
        x = torch.randn(b, 1, d_model, **kw)

        def reference(keys=keys, values=values, x=x):
            cache = kv_cache.KVCache()
            cache.keys, cache.values = keys, values  # positions 0..T-2
            kv_cache.cached_step(module, cache, x)  # cat: copies them

        free = torch.zeros(b, n_head, 1, d_head, **kw)  # the new slot
        buffers = [torch.cat([c, free], dim=-2) for c in (keys, values)]
        calls["decode", t] = reference
        calls["decode_sdpa", t] = lambda buffers=buffers, x=x: _sdpa_step(
            module, *buffers, x
        )
    return calls


def _measure(device, dtype, runs, threads, layer_threads):
    """Medians of the roofs (on each count of ``threads``) and of every
    layer call (on ``layer_threads``), in rounds."""
    import torch

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    n, n_bytes = MATMUL_N[device], COPY_BYTES[device]
    kw = {"device": device, "dtype": dtype}
    a, b = torch.randn(n, n, **kw), torch.randn(n, n, **kw)
    src = torch.randn(n_bytes // a.element_size(), **kw)
    dst = torch.empty_like(src)
    flush = torch.ones(flush_bytes(device) // a.element_size(), **kw)
    calls = _layer_calls(device, dtype)
    seconds = {}
    with torch.no_grad():
        for round_ in range(runs + 1):  # round 0 warms up, not kept
            for thread_count in threads:
                torch.set_num_threads(thread_count)
                for name, fn in (
                    ("matmul", lambda: torch.mm(a, b)),
                    ("copy", lambda: dst.copy_(src)),
                ):
                    took = _seconds(fn, sync)
                    if round_:
                        seconds.setdefault((name, thread_count), [])
                        seconds[name, thread_count].append(took)
            torch.set_num_threads(layer_threads)
            for key, fn in calls.items():
                flush.sum()  # untimed: evicts the previous call's data
                took = _seconds(fn, sync)
                if round_:
                    seconds.setdefault(key, []).append(took)
    return {key: statistics.median(s) for key, s in seconds.items()}, n


def _points(medians, bytes_per_value):
    """Each layer call's seconds, FLOPs, bytes and rate (from cost)."""
    from mha_ref import cost

    shape = {k: LAYER[k] for k in ("d_model", "n_head")}
    points = []
    for kind, t in (k for k in medians if k[0] not in ("matmul", "copy")):
        tq, cached = (t, False) if kind == "prefill" else (1, True)
        args = (LAYER["batch"], tq, t)
        flops = cost.attention_flops(*args, **shape, cached=cached)["total"]
        moved = cost.bytes_moved(
            *args, **shape, bytes_per_value=bytes_per_value, cached=cached
        )
        seconds = medians[kind, t]
        points.append(
            {
                "kind": kind,
                "t": t,
                "seconds": seconds,
                "flops": flops,
                "bytes": moved,
                "intensity": flops / moved,
                "gflops_per_s": flops / seconds / 1e9,
            }
        )
    return points


def bench_roofline(runs, threads=1):
    """The roofs and the layer's points (the layer on ``threads``
    threads)."""
    import torch

    env = part_environment()  # before the runs: the load they met
    available = len(os.sched_getaffinity(0))
    counts = sorted({1, available})
    medians, n = _measure("cpu", torch.float32, runs, counts, threads)
    flops = 2 * n**3
    result = {
        "layer": {**LAYER, "d_head": LAYER["d_model"] // LAYER["n_head"]},
        "cpu": {
            "dtype": "float32",
            "matmul_n": n,
            "copy_bytes": COPY_BYTES["cpu"],
            "last_level_cache_bytes": last_level_cache_bytes(),
            "flush_bytes": flush_bytes("cpu"),  # read before each call
            "threads": counts,
            "layer_threads": threads,
            # 1 thread and all: peak FLOP/s and copy bandwidth
            "peak_gflops": {
                str(c): flops / medians["matmul", c] / 1e9 for c in counts
            },
            "bandwidth_gbs": {
                str(c): 2 * COPY_BYTES["cpu"] / medians["copy", c] / 1e9
                for c in counts
            },
            "points": _points(medians, 4),
        },
        "gpu_spec": GPU_SPEC,
        "runs": runs,
        "environment": env,
    }
    if torch.cuda.is_available():  # a lent GPU: measured, not specified
        medians, n = _measure(
            "cuda", torch.bfloat16, runs, [available], available
        )
        result["cuda"] = {
            "device": torch.cuda.get_device_name(),
            "dtype": "bfloat16",
            "matmul_n": n,
            "flush_bytes": flush_bytes("cuda"),
            "peak_gflops": 2 * n**3 / medians["matmul", available] / 1e9,
            "bandwidth_gbs": 2
            * COPY_BYTES["cuda"]
            / medians["copy", available]
            / 1e9,
            "points": _points(medians, 2),
        }
    cpu = result["cpu"]
    say(
        "roofline: peak "
        + ", ".join(
            f"{v:.0f} GFLOP/s ({c} thread(s))"
            for c, v in cpu["peak_gflops"].items()
        )
        + "; copy "
        + ", ".join(
            f"{v:.1f} GB/s ({c})" for c, v in cpu["bandwidth_gbs"].items()
        )
    )
    for p in cpu["points"]:
        say(
            f"roofline {p['kind']} T={p['t']}: {p['seconds'] * 1e3:.2f} ms,"
            f" {p['gflops_per_s']:.1f} GFLOP/s at {p['intensity']:.2f} "
            "FLOP/byte"
        )
    return result


def markdown(r):
    """The report's roofline section."""
    cpu, env = r["cpu"], r["environment"]
    lines = [
        "",
        f"## Roofline (float32 matmul N = {cpu['matmul_n']}, copy of "
        f"{cpu['copy_bytes'] / 2**20:.0f} MiB; layer d_model="
        f"{r['layer']['d_model']}, H={r['layer']['n_head']}, "
        f"B={r['layer']['batch']}, {cpu['layer_threads']} thread(s))",
        "",
        "| threads | peak matmul (GFLOP/s) | copy bandwidth (GB/s) |",
        "|--:|--:|--:|",
    ]
    for c in cpu["peak_gflops"]:
        lines.append(
            f"| {c} | {cpu['peak_gflops'][c]:.1f} | "
            f"{cpu['bandwidth_gbs'][c]:.1f} |"
        )
    lines += [
        "",
        "| call | T | time (ms) | FLOP/byte | GFLOP/s |",
        "|:--|--:|--:|--:|--:|",
    ]
    for p in cpu["points"]:
        lines.append(
            f"| {p['kind']} | {p['t']} | {p['seconds'] * 1e3:.2f} | "
            f"{p['intensity']:.2f} | {p['gflops_per_s']:.1f} |"
        )
    lines += [
        "",
        f"Medians of {r['runs']} rounds, each layer call after a read of "
        f"{cpu.get('flush_bytes', 0) / 2**20:.0f} MiB that empties the "
        f"caches; measured at commit "
        f"{env['commit']} with torch {env['torch']} on {env['cpu']} "
        f"({env['cores_available']} cores available). Also in "
        "bench/roofline.json, which the cost page reads.",
    ]
    return lines
