"""Peak memory of one call: NumPy through tracemalloc, torch (CPU)
through the profiler. The tiled and layer-backward pages measure with
it (their notebooks carry this file), and so do the unit tests and the
benchmark.
"""

import gc
import tracemalloc

CALLS = 5  # two were not enough beside a loaded machine's other work


def peak_bytes_numpy(fn, *args, **kwargs):
    """Peak bytes allocated while fn runs (tracemalloc sees NumPy).

    The smallest of CALLS traced calls, each after a collection and with
    the collector off during the call: first-call caches, garbage and a
    Jupyter kernel's own threads (its messages, traced too, on a loaded
    machine) do not move the peak unless they land in every call.
    ``gc.freeze()`` keeps everything alive before the call out of those
    collections (milliseconds, not a third of a second, once torch is
    loaded). A few bytes of Python objects still vary from run to run.

    The caller's state is left as found: a tracemalloc session of its
    own keeps tracing (its traces stay; only its peak restarts, as
    tracemalloc.reset_peak() does, and the peak here is counted above
    the bytes it held already), the collector stays off if it was off,
    and objects it had frozen stay frozen (then nothing more is frozen
    here: gc.unfreeze() cannot tell its objects from ours).
    """
    was_enabled, was_tracing = gc.isenabled(), tracemalloc.is_tracing()
    freeze = gc.get_freeze_count() == 0  # else unfreeze() would undo it
    if freeze:
        gc.freeze()  # alive now: not garbage, and not scanned below
    try:
        peaks = []
        for _ in range(CALLS):  # the least: no first-call cache, no thread
            gc.collect()  # the previous call's garbage
            gc.disable()  # a collection mid-call would move the peak
            if was_tracing:  # the caller's session: measure above it
                tracemalloc.reset_peak()
            else:
                tracemalloc.start()
            held = tracemalloc.get_traced_memory()[0]  # 0 unless caller's
            try:
                fn(*args, **kwargs)
                peaks.append(tracemalloc.get_traced_memory()[1] - held)
            finally:
                if not was_tracing:
                    tracemalloc.stop()
                if was_enabled:
                    gc.enable()
        return min(peaks)
    finally:
        if freeze:
            gc.unfreeze()


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
