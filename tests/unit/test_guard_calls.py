"""Each check runs once per public call: the guard calls of a dense and
a tiled attention, counted (issue 44's targets).

Counted with sys.setprofile: Python function calls whose code lives in
mha_ref (comprehension frames not counted, a generator once); a guard
call is one of a function of mha_ref/guards/ or mha_ref/checks*.py.
Counts are deterministic, so the targets are held exactly.
"""

import sys
from collections import Counter
from functools import partial
from pathlib import Path

import numpy as np

import mha_ref
from mha_ref import numpy_ref, tiled
from mha_ref.guards import arrays

PACKAGE = Path(mha_ref.__file__).parent
GENERATOR = 0x20  # inspect.CO_GENERATOR


def is_guard(filename):
    """True for a file of mha_ref/guards/ or mha_ref/checks*.py."""
    path = Path(filename)
    return path.parent.name == "guards" or path.name.startswith("checks")


def count_calls(fn, *args, **kwargs):
    """(calls, guard calls, {(file, function): count} of the guards) of
    mha_ref's Python functions during fn(*args, **kwargs)."""
    calls, seen = Counter(), set()

    def profile(frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        if code.co_name.startswith("<"):
            return  # a comprehension's frame is not a call
        if code.co_flags & GENERATOR:  # a generator: once, not per resume
            if id(frame) in seen:
                return
            seen.add(id(frame))
        if code.co_filename.startswith(str(PACKAGE)):
            where = Path(code.co_filename).relative_to(PACKAGE).as_posix()
            calls[(where, code.co_name)] += 1

    sys.setprofile(profile)
    try:
        fn(*args, **kwargs)
    finally:
        sys.setprofile(None)
    guards = {key: n for key, n in calls.items() if is_guard(PACKAGE / key[0])}
    return sum(calls.values()), sum(guards.values()), guards


def repeated(guards):
    """The guard functions called more than once."""
    return {key: n for key, n in guards.items() if n > 1}


def test_dense_attention_with_sinks_and_softcap_makes_few_guard_calls():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 2, 8, 4)) for _ in range(3))
    causal = numpy_ref.causal_mask(8)
    _, n_guards, guards = count_calls(
        numpy_ref.attention,
        q,
        k,
        v,
        mask=causal,
        sinks=np.zeros(2),
        softcap=30.0,
    )
    assert n_guards <= 12, guards  # 36 before issue 44
    assert not repeated(guards), repeated(guards)


def test_tiled_attention_with_a_mask_rule_is_mostly_attention():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 2, 256, 16)) for _ in range(3))
    rule = partial(numpy_ref.sliding_window_mask, window=64)
    total, n_guards, guards = count_calls(
        tiled.tiled_attention_numpy,
        q,
        k,
        v,
        block_q=64,
        block_k=64,
        mask_rule=rule,
    )
    # 16 tiles: 440 guard calls of 560 before issue 44
    assert 3 * n_guards <= total, (n_guards, total, guards)


def test_the_counter_catches_a_guard_called_twice():
    def drifted(x):  # a function that checks its input twice
        arrays.finite(x, "x")
        arrays.finite(x, "x")

    _, n_guards, guards = count_calls(drifted, np.zeros(3))
    assert n_guards == 2
    assert repeated(guards) == {("guards/arrays.py", "finite"): 2}


def test_the_counter_counts_a_generator_once_and_no_comprehension():
    def walk(values):  # a generator, resumed once per value
        yield from (arrays.is_tensor(v) for v in values)

    _, n_guards, guards = count_calls(lambda: list(walk(range(3))))
    assert guards == {("guards/arrays.py", "is_tensor"): 3}
    assert n_guards == 3
