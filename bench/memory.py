"""Peak memory of one call: NumPy through tracemalloc, torch (CPU)
through the profiler. Used by implementations.py and the unit tests.

The page scripts (notebooks/tiled.py, notebooks/layer-backward.py)
carry their own peak_bytes_numpy, since a notebook cannot import the
repository: the same measure, taken as the smaller of two traced calls,
because a Jupyter kernel's threads allocate beside the call.
"""

import gc
import tracemalloc


def peak_bytes_numpy(fn, *args, **kwargs):
    """Peak bytes allocated while fn runs (tracemalloc sees NumPy).

    After one untraced warm-up call and a garbage collection, and with
    the collector off during the call, so that first-call caches and
    garbage do not move the peak. A few bytes of Python objects still
    vary from run to run.
    """
    fn(*args, **kwargs)
    gc.collect()
    gc.disable()  # a collection mid-call would move the peak
    tracemalloc.start()
    try:
        fn(*args, **kwargs)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        gc.enable()


def peak_bytes_torch_cpu(fn, *args, **kwargs):
    """Peak of torch's CPU allocations while fn runs, from the profiler.

    The profiler charges each op its net bytes (frees outside ops come
    as "[memory]" events); summed in start order they trace the live
    total. An op's transient peak inside itself is not seen.
    """
    from torch.profiler import ProfilerActivity, profile

    with profile(
        activities=[ProfilerActivity.CPU], profile_memory=True
    ) as prof:
        fn(*args, **kwargs)
    live = peak = 0
    for event in sorted(prof.events(), key=lambda e: e.time_range.start):
        live += event.self_cpu_memory_usage
        peak = max(peak, live)
    return peak
