"""Each attention implementation against SDPA: time and peak memory.

Causal attention, B=1, H=8, d_head=64, float32, on this CPU: the median
time and peak memory of each implementation, as ratios to PyTorch's
scaled_dot_product_attention. One thread per library by default
(--threads): on a shared machine, BLAS and OpenMP threads that wait for
busy cores swamp the comparison.
"""

import statistics
import time
from functools import partial

from bench.env import part_environment
from bench.timing import say
from mha_ref.memory import peak_bytes_numpy, peak_bytes_torch_cpu

IMPL_SHAPE = {"batch": 1, "n_head": 8, "d_head": 64}
IMPL_LENGTHS = {256: 7, 512: 5, 1024: 5, 2048: 3, 4096: 2}  # T: runs
QUICK_LENGTHS = {256: 3, 512: 3, 1024: 2}
# read by BLAS when numpy is first imported: main() sets them first
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def bench_impl(lengths, threads):
    """Time and peak memory per implementation, as ratios to SDPA."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    from mha_ref import numpy_ref, tiled, torch_ref

    torch.set_num_threads(threads)
    env = part_environment("numpy")  # before the runs: the load they met
    b, h, d = (IMPL_SHAPE[k] for k in ("batch", "n_head", "d_head"))
    rows = []
    for t, runs in lengths.items():
        rng = np.random.default_rng(0)
        q, k, v = (
            rng.standard_normal((b, h, t, d)).astype(np.float32)
            for _ in range(3)
        )
        tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
        mask, mask_t = numpy_ref.causal_mask(t), torch_ref.causal_mask(t)
        sdpa = partial(F.scaled_dot_product_attention, is_causal=True)
        impls = {  # name: (call, memory tool)
            "numpy_ref": (
                partial(numpy_ref.attention, q, k, v, mask),
                peak_bytes_numpy,
            ),
            "torch_ref": (
                partial(torch_ref.attention, tq, tk, tv, mask_t),
                peak_bytes_torch_cpu,
            ),
            "sdpa": (partial(sdpa, tq, tk, tv), peak_bytes_torch_cpu),
            "tiled_numpy": (
                partial(tiled.tiled_attention_numpy, q, k, v, causal=True),
                peak_bytes_numpy,
            ),
            "tiled_torch": (
                partial(tiled.tiled_attention_torch, tq, tk, tv, causal=True),
                peak_bytes_torch_cpu,
            ),
        }
        measured = {}
        with torch.no_grad():
            for name, (call, peak_of) in impls.items():
                peak = peak_of(call)  # also the warm-up call
                seconds = []
                for _ in range(runs):
                    start = time.perf_counter()
                    call()
                    seconds.append(time.perf_counter() - start)
                measured[name] = (statistics.median(seconds), peak)
        sdpa_s, sdpa_peak = measured["sdpa"]
        for name, (seconds, peak) in measured.items():
            rows.append(
                {
                    "t": t,
                    "impl": name,
                    "runs": runs,
                    "seconds": seconds,
                    "peak_bytes": peak,
                    "time_vs_sdpa": seconds / sdpa_s,
                    "memory_vs_sdpa": peak / sdpa_peak if sdpa_peak else None,
                }
            )
        say(
            f"impl T={t}: "
            + ", ".join(
                f"{n} {s * 1e3:.1f} ms" for n, (s, _) in measured.items()
            )
        )
    return {
        **IMPL_SHAPE,
        "dtype": "float32",
        "causal": True,
        "threads": threads,
        "block": tiled.BLOCK,
        "rows": rows,
        "memory_tools": {
            "numpy": "tracemalloc peak during the call",
            "torch": "sum of the profiler's per-op CPU bytes in "
            "start order (an op's transient peak unseen)",
        },
        "environment": env,
    }
