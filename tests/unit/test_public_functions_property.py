"""Every public function of mha_ref: its float64 oracle, or a clear error.

For random inputs, good and bad (wrong shapes, NaN, int and unsigned
dtypes, float16 and bfloat16, positions as lists, iterators and tensors
of any dtype, with grad too, empty batches), each registered function
either returns finite values equal to a float64 oracle written here
from the equations, or raises ValueError or TypeError. Any other
exception, a NaN or an infinity in the output, or a result for an input
the oracle cannot serve (a row with no key, shapes that do not fit)
fails.

The registry is checked against the package: a public function of any
mha_ref module (a new module too) that has neither a strategy in CASES
nor a line in ELSEWHERE or UNREGISTERED fails the enumeration test, so
a new function must be registered here.
"""

import ast
import copy
import functools
import importlib
import math
import numbers
import pkgutil
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

import mha_ref
from mha_ref import (
    induction,
    kv_cache,
    latent_numpy,
    latent_torch,
    numpy_ref,
    torch_ref,
)

EXAMPLES = settings(
    max_examples=8,
    deadline=None,
    database=None,
    derandomize=True,  # the same examples on every run
    suppress_health_check=[HealthCheck.too_slow],
)
REFUSE = object()  # the oracle's answer for input no function can serve


# -- the float64 oracles, from the equations ------------------------------


def f64(value):
    """A tensor, array or list as a float64 NumPy array."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().double().numpy()
    return np.asarray(value, dtype=np.float64)


def attention64(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d) masked) v, grouped heads repeated."""
    q, k, v = f64(q), f64(k), f64(v)
    grouped = q.ndim >= 3 and q.shape[-3] > 1  # one query head broadcasts
    if grouped and k.shape[-3] not in (1, q.shape[-3]):
        group = q.shape[-3] // k.shape[-3]
        if group * k.shape[-3] != q.shape[-3] or k.shape[-3] != v.shape[-3]:
            return REFUSE
        k, v = np.repeat(k, group, -3), np.repeat(v, group, -3)
    if k.shape[-2] != v.shape[-2] or q.shape[-1] != k.shape[-1]:
        return REFUSE
    if min(q.shape[-2], k.shape[-2], q.shape[-1]) < 1:
        return REFUSE
    scores = q @ np.swapaxes(k, -2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        mask = np.asarray(mask.numpy() if torch.is_tensor(mask) else mask)
        if mask.dtype != bool:
            return REFUSE
        if np.broadcast_shapes(mask.shape, scores.shape) != scores.shape:
            return REFUSE
        scores = np.where(mask, -np.inf, scores)
    if np.isneginf(scores).all(axis=-1).any():
        return REFUSE  # a query row with no allowed key
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    return weights @ v, weights


def attention_grads64(q, k, v, dout, mask=None):
    """dq, dk, dv of attention64 by torch autograd, in float64."""
    if attention64(q, k, v, mask) is REFUSE:
        return REFUSE
    q, k, v = (torch.tensor(f64(a), requires_grad=True) for a in (q, k, v))
    group = max(q.shape[-3] // k.shape[-3], 1) if q.dim() >= 3 else 1
    kk, vv = (a.repeat_interleave(group, -3) for a in (k, v))
    scores = q @ kk.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(torch.as_tensor(mask), -math.inf)
    out = scores.softmax(-1) @ vv
    dout = torch.tensor(f64(dout))
    if dout.shape != out.shape:
        return REFUSE
    out.backward(dout)
    return q.grad.sum_to_size(q.shape), k.grad, v.grad


def values_of(positions):
    """Positions in any form as a NumPy array: an iterator read, a tensor
    as float64 (a bool one as bool), a list or an array as NumPy reads it."""
    if torch.is_tensor(positions):
        if positions.dtype == torch.bool:
            return positions.numpy()
        return f64(positions)
    if isinstance(positions, Iterator):
        positions = list(positions)
    return np.asarray(positions)


def rope64(x, positions, base=10000.0, interleaved=False):
    """Each pair of features turned by position * base ** (-2 i / d)."""
    x, positions = f64(x), f64(values_of(positions))
    d = x.shape[-1]
    if d % 2 or positions.shape != (x.shape[-2],) or base <= 0:
        return REFUSE
    angle = positions[:, None] * base ** (-2.0 * np.arange(d // 2) / d)
    cos, sin = np.cos(angle), np.sin(angle)
    if interleaved:  # pairs (2i, 2i + 1)
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
        return out
    a, b = x[..., : d // 2], x[..., d // 2 :]  # pairs (i, i + d / 2)
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)


def weights_of(module):
    """(W, b) per projection as x @ W + b, from either module."""
    if isinstance(module, numpy_ref.MultiHeadAttention):
        names = (("Wq", "bq"), ("Wk", "bk"), ("Wv", "bv"), ("Wo", "bo"))
        return [
            (f64(getattr(module, w)), getattr(module, b)) for w, b in names
        ]
    return [
        (f64(lin.weight).T, None if lin.bias is None else f64(lin.bias))
        for lin in (module.wq, module.wk, module.wv, module.wo)
    ]


def mha64(module, x, mask=None, context=None, positions=None):
    """The module's output (B, Tq, d_model), from its weights."""
    x = f64(x)
    context = x if context is None else f64(context)
    (wq, bq), (wk, bk), (wv, bv), (wo, bo) = weights_of(module)
    dh = module.d_model // module.n_head

    def project(inp, w, b):
        y = inp @ w + (0.0 if b is None else f64(b))
        b_, t, width = y.shape  # B may be 0: no -1 in the reshape
        return y.reshape(b_, t, width // dh, dh).transpose(0, 2, 1, 3)

    q, k = project(x, wq, bq), project(context, wk, bk)
    v = project(context, wv, bv)
    if module.rope:
        pos = range(x.shape[1]) if positions is None else positions
        q = rope64(q, pos, module.rope_base)
        k = rope64(k, pos, module.rope_base)
    result = attention64(q, k, v, mask)
    if result is REFUSE or q is REFUSE:
        return REFUSE
    out = result[0].transpose(0, 2, 1, 3).reshape(*x.shape[:2], module.d_model)
    return out @ wo + (0.0 if bo is None else f64(bo))


# -- strategies: random inputs, good and bad ------------------------------


def faulty(data):
    """Whether this example may hold bad input: one in three do."""
    if not hasattr(data, "faulty"):
        data.faulty = data.draw(st.integers(0, 2), label="faulty") == 0
    return data.faulty


def pick(data, good, *bad):
    """good; in a faulty example, one of bad half of the time."""
    if not bad or not faulty(data):
        return good
    return data.draw(st.sampled_from([good] * len(bad) + list(bad)))


def normal(data, shape, nan=True):
    """Standard normal float64 values; a NaN in some faulty examples."""
    seed = data.draw(st.integers(0, 2**16), label="seed")
    values = np.random.default_rng(seed).standard_normal(shape)
    if nan and values.size and pick(data, False, True):
        values.flat[0] = np.nan
    return values


def frame(framework, value):
    """A NumPy value as the framework takes it (a torch tensor)."""
    if framework == "numpy" or value is None:
        return value
    return torch.from_numpy(np.ascontiguousarray(value))


def qkv_shapes(data):
    """(B, H, Tq, d), (B, H_kv, Tk, d), (B, H_kv, Tk, dv): sometimes
    grouped, sometimes empty or misfit."""
    b = data.draw(st.integers(1, 2))
    h = data.draw(st.sampled_from([1, 2, 4]))
    h_kv = pick(data, data.draw(st.sampled_from([h, 1, max(h // 2, 1)])), 3)
    tq = pick(data, data.draw(st.integers(1, 4)), 0)
    tk = data.draw(st.integers(1, 5))
    d, dv = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 3))
    dk = pick(data, d, d + 1)  # a misfit now and then
    return (b, h, tq, d), (b, h_kv, tk, dk), (b, h_kv, tk, dv)


def random_mask(data, shape):
    if data.draw(st.booleans()):
        return None
    seed = data.draw(st.integers(0, 2**16))
    mask_shape = data.draw(st.sampled_from([shape[-2:], shape, shape[-1:]]))
    mask = np.random.default_rng(seed).random(mask_shape) < 0.3
    if not faulty(data):  # one allowed key a row at least
        mask[..., 0] = False
    return mask


FORMS = ("array", "list", "iter", "tensor", "bfloat16", "grad")


def in_form(values, form):
    """A maker of fresh ``values`` (a NumPy array) in one of the forms
    positions come in: the array, a list, an iterator, an int64 tensor,
    a bfloat16 tensor, a float tensor that requires grad."""
    if form == "list":
        return values.tolist
    if form == "iter":
        return lambda: iter(values.tolist())
    if form == "tensor":
        return lambda: torch.from_numpy(np.array(values))
    if form in ("bfloat16", "grad"):
        dtype = torch.bfloat16 if form == "bfloat16" else torch.float32
        grad = form == "grad"
        return lambda: torch.tensor(
            values.astype(np.float64), dtype=dtype, requires_grad=grad
        )
    return lambda: values


def positions_of(data, n):
    """n positions: ints, unsigned, floats, in any form (FORMS); a NaN or
    bools in faulty examples."""
    kind = pick(
        data,
        data.draw(st.sampled_from(["int", "uint32", "float", *FORMS[1:]])),
        "nan",
        "bool",
    )
    seed = data.draw(st.integers(0, 2**16))
    values = np.random.default_rng(seed).integers(0, 8, n)
    if kind == "uint32":
        return values.astype(np.uint32)
    if kind == "float":
        return values + 0.5
    if kind == "nan":
        return np.where(np.arange(n) == 0, np.nan, values)
    if kind in FORMS:
        return in_form(values, kind)()
    if kind == "bool":
        return values > 3
    return values


# -- the registry: a strategy and an oracle for each function -------------


@dataclass
class Case:
    """make(data) -> inputs: a function giving fresh (args, kwargs), so
    that the oracle and the function each read their own iterators.
    oracle(*args, **kwargs) -> the expected values, or REFUSE.

    inputs may carry: expected(), the oracle when it needs more than
    the arguments (then oracle is None); result(got), what to compare
    of the function's result (a mask_mod applied, a module run); and
    forward = True, when args[0] is a module to call on args[1:]."""

    make: Callable
    oracle: Callable | None


LOW_PRECISION = ("float64", "float32", "float16", "bfloat16")


def in_dtype(values, dtype, framework):
    """A float64 NumPy array in ``dtype`` (LOW_PRECISION), as the
    framework takes it; NumPy has no bfloat16: float32 there."""
    if framework == "torch":
        return torch.from_numpy(values).to(getattr(torch, dtype))
    return values.astype(np.float32 if dtype == "bfloat16" else dtype)


def mirrored(framework):
    return numpy_ref if framework == "numpy" else torch_ref


def attention_case(framework, backward=False, tiled_pass=False):
    def make(data):
        qs, ks, vs = qkv_shapes(data)
        dtype = data.draw(st.sampled_from(LOW_PRECISION), label="dtype")
        q, k, v = (
            in_dtype(normal(data, s), dtype, "numpy") for s in (qs, ks, vs)
        )
        dout = in_dtype(normal(data, (*qs[:-1], vs[-1])), dtype, "numpy")
        mask = random_mask(data, (*qs[:-1], ks[-2]))
        blocks = {}
        if tiled_pass:
            blocks = {
                "block_q": data.draw(st.integers(1, 3)),
                "block_k": data.draw(st.integers(1, 3)),
            }

        def inputs():
            tensors = [frame(framework, a) for a in (q, k, v)]
            if backward:
                tensors.append(frame(framework, dout))
            if framework == "torch" and dtype == "bfloat16":  # NumPy's
                tensors = [t.bfloat16() for t in tensors]  # float32: exact
            return (*tensors, frame(framework, mask)), blocks

        return inputs

    def oracle(*args, **_):
        if backward:
            return attention_grads64(*args)
        result = attention64(*args)
        return result if result is REFUSE or not tiled_pass else result[0]

    return Case(make, oracle)


def core_attention_case(framework):
    """dot_product_attention: attention_case's inputs; grouped key/value
    heads (fewer than q's, more than one) are refused by the core."""
    inputs = attention_case(framework)

    def oracle(q, k, v, mask=None):
        if q.shape[-3] > 1 and k.shape[-3] not in (1, q.shape[-3]):
            return REFUSE  # attention repeats them; the core does not
        return attention64(q, k, v, mask)

    return Case(inputs.make, oracle)


def modifiers64(q, k, v, mask, wide, scale, softcap, bias, sinks):
    """attention with its score modifiers in float64, Gemma 2's order;
    REFUSE for what the guards refuse. ``wide``: the compute dtype,
    where a bias or sink beyond its range is refused."""
    q, k, v = f64(q), f64(k), f64(v)
    if not all(np.isfinite(a).all() for a in (q, k, v)):
        return REFUSE
    if min(q.ndim, k.ndim, v.ndim) < 3 or k.shape[-3] != v.shape[-3]:
        return REFUSE
    if q.shape[-3] % k.shape[-3]:
        return REFUSE
    group = q.shape[-3] // k.shape[-3]
    k, v = np.repeat(k, group, -3), np.repeat(v, group, -3)
    if k.shape[-2] != v.shape[-2] or q.shape[-1] != k.shape[-1]:
        return REFUSE
    if min(q.shape[-2], k.shape[-2]) < 1:
        return REFUSE
    for value in (scale, softcap):
        if value is not None and (
            isinstance(value, bool) or not np.isfinite(value)
        ):
            return REFUSE
    if softcap is not None and softcap <= 0:
        return REFUSE
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ np.swapaxes(k, -2, -1) * scale
    if softcap is not None:
        s = softcap * np.tanh(s / softcap)
    for value in (bias, sinks):
        if value is None:
            continue
        if str(value.dtype).endswith("bool"):
            return REFUSE
        value = f64(value)
        with np.errstate(over="ignore"):
            lost = np.isfinite(value) & ~np.isfinite(value.astype(wide))
        if np.isnan(value).any() or np.isposinf(value).any() or lost.any():
            return REFUSE
    if bias is not None:
        bias = f64(bias)
        if np.broadcast_shapes(bias.shape, s.shape) != s.shape:
            return REFUSE
        s = s + bias
    if mask is not None:
        mask = f64(mask) > 0 if mask.dtype in (bool, torch.bool) else None
        if mask is None:
            return REFUSE
        if np.broadcast_shapes(mask.shape, s.shape) != s.shape:
            return REFUSE
        s = np.where(mask, -np.inf, s)
    if sinks is not None:
        sinks = f64(sinks)
        if sinks.shape != (s.shape[-3],):
            return REFUSE
        s = np.concatenate(
            [s, np.broadcast_to(sinks[:, None, None], (*s.shape[:-1], 1))], -1
        )
    if np.isneginf(s).all(axis=-1).any():
        return REFUSE  # a row with no key and no sink
    weights = np.exp(s - s.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    if sinks is not None:
        weights = weights[..., :-1]
    return weights @ v, weights


def modifiers_case(framework, tiled_pass=False):
    """attention (or a tiled pass) with scale, softcap, bias and sinks,
    in every dtype; bad values of each in faulty examples."""

    def make(data):
        qs, ks, vs = qkv_shapes(data)
        dtype = data.draw(st.sampled_from(LOW_PRECISION), label="dtype")
        q, k, v = (normal(data, s) for s in (qs, ks, vs))
        mask = random_mask(data, (*qs[:-1], ks[-2]))
        h, tq, tk = qs[-3], qs[-2], ks[-2]
        modifiers = {}
        if data.draw(st.booleans()):
            good = data.draw(st.floats(0.05, 2.0))
            modifiers["scale"] = pick(data, good, math.inf, True)
        if data.draw(st.booleans()):
            good = data.draw(st.floats(0.5, 5.0))
            modifiers["softcap"] = pick(data, good, 0.0, -1.0)
        if data.draw(st.booleans()):
            bias = normal(data, pick(data, (h, tq, tk), (h + 1, tq, tk)))
            if bias.size and data.draw(st.booleans()):
                bias.flat[-1] = pick(data, -np.inf, np.inf, 1e300, -1e300)
            modifiers["bias"] = bias
        if data.draw(st.booleans()):
            sinks = normal(data, (pick(data, h, h + 1),), nan=False)
            if data.draw(st.booleans()):
                sinks[0] = pick(data, -np.inf, np.inf, 1e300)
            modifiers["sinks"] = pick(data, sinks, sinks > 0)
        side = data.draw(st.sampled_from(["float64", dtype]), label="side")
        blocks = {"block_q": 2, "block_k": 2} if tiled_pass else {}

        def inputs():
            tensors = [in_dtype(a, dtype, framework) for a in (q, k, v)]
            kw = {
                name: value
                if not isinstance(value, np.ndarray) or value.dtype == bool
                else in_dtype(value, side, framework)
                for name, value in modifiers.items()
            }
            if framework == "torch":
                kw = {
                    n: torch.from_numpy(a) if isinstance(a, np.ndarray) else a
                    for n, a in kw.items()
                }
            return (*tensors, frame(framework, mask)), {**kw, **blocks}

        def expected():
            args, kw = inputs()
            wide = np.float64 if dtype == "float64" else np.float32
            got = modifiers64(
                *args[:3],
                args[3],
                wide,
                kw.get("scale"),
                kw.get("softcap"),
                kw.get("bias"),
                kw.get("sinks"),
            )
            return got if got is REFUSE or not tiled_pass else got[0]

        inputs.expected = expected
        return inputs

    return Case(make, None)


def causal_positions_case(framework, backward=False):
    """The tiled passes with causal=True at random positions."""

    def make(data):
        tq, tk = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 5))
        q, k, v = (normal(data, (1, 2, t, 3), nan=False) for t in (tq, tk, tk))
        dout = normal(data, (1, 2, tq, 3), nan=False)
        q_pos = positions_of(data, tq) if data.draw(st.booleans()) else None
        k_pos = positions_of(data, tk) if data.draw(st.booleans()) else None
        seen = [  # an iterator read once, here: each call gets a new one
            list(p) if isinstance(p, type(iter([]))) else p
            for p in (q_pos, k_pos)
        ]

        def inputs():
            fresh = seen
            tensors = [frame(framework, a) for a in (q, k, v)]
            if backward:
                tensors.append(frame(framework, dout))
            return tensors, {
                "causal": True,
                "query_positions": iter(fresh[0])
                if isinstance(q_pos, type(iter([])))
                else fresh[0],
                "key_positions": iter(fresh[1])
                if isinstance(k_pos, type(iter([])))
                else fresh[1],
                "block_q": 2,
                "block_k": 2,
            }

        return inputs

    def oracle(*tensors, query_positions, key_positions, **_):
        tq, tk = tensors[0].shape[-2], tensors[1].shape[-2]
        k_pos = np.arange(tk) if key_positions is None else key_positions
        k_pos = values_of(k_pos)
        if query_positions is None:
            if tq > tk:
                return REFUSE
            q_pos = k_pos[tk - tq :]
        else:
            q_pos = values_of(query_positions)
        if q_pos.dtype == bool or k_pos.dtype == bool:
            return REFUSE
        if not (
            np.isfinite(f64(q_pos)).all() and np.isfinite(f64(k_pos)).all()
        ):
            return REFUSE
        mask = k_pos[None, :] > q_pos[:, None]
        if backward:
            return attention_grads64(*tensors[:3], tensors[3], mask)
        result = attention64(*tensors[:3], mask)
        return result if result is REFUSE else result[0]

    return Case(make, oracle)


def softmax_case():
    def make(data):
        shape = data.draw(st.sampled_from([(3,), (2, 4), (2, 1, 3), (0,)]))
        logits = normal(data, shape)
        if logits.size and data.draw(st.booleans()):
            logits.flat[-1] = -np.inf  # masked
        dtype = data.draw(st.sampled_from([np.float64, np.int64, np.bool_]))
        logits = (
            np.nan_to_num(logits, nan=np.nan)
            if dtype == np.float64
            else (np.nan_to_num(logits, nan=0.0, neginf=0.0).astype(dtype))
        )
        return lambda: ((logits,), {})

    def oracle(logits):
        x = f64(logits)
        if x.size == 0 or np.isnan(x).any() or np.isneginf(x).all(-1).any():
            return REFUSE
        w = np.exp(x - x.max(-1, keepdims=True))
        return w / w.sum(-1, keepdims=True)

    return Case(make, oracle)


def softmax_backward_case(framework):
    def make(data):
        shape = data.draw(st.sampled_from([(3,), (2, 4)]))
        g_shape = data.draw(st.sampled_from([shape, shape, (5,)]))
        p = np.abs(normal(data, shape, nan=False))
        p /= p.sum(-1, keepdims=True)
        g = normal(data, g_shape, nan=False)
        return lambda: ((frame(framework, p), frame(framework, g)), {})

    def oracle(p, g):
        p, g = f64(p), f64(g)
        if p.shape != g.shape:
            return REFUSE
        return p * (g - (p * g).sum(-1, keepdims=True))

    return Case(make, oracle)


def kv_heads_case(framework, function):
    def make(data):
        group = data.draw(st.integers(1, 3))
        h = data.draw(st.integers(1, 2)) * (group if function == "sum" else 1)
        x = normal(data, (h, 2, 3), nan=False)
        return lambda: ((frame(framework, x), group), {})

    def oracle(x, group):
        x = f64(x)
        if function == "repeat":
            return np.repeat(x, group, axis=-3)
        return x.reshape(-1, group, *x.shape[-2:]).sum(axis=-3)

    return Case(make, oracle)


def sum_to_shape_case():
    def make(data):
        shape = data.draw(st.sampled_from([(1, 4), (3, 4), (4,), (2, 1, 4)]))
        grad = normal(data, (2, 3, 4), nan=False)
        return lambda: ((grad, shape), {})

    def oracle(grad, shape):
        return torch.tensor(grad).sum_to_size(shape).numpy()

    return Case(make, oracle)


def causal_mask_case():
    def make(data):
        t = data.draw(st.integers(-1, 4))
        tk = data.draw(st.sampled_from([None, 1, 3, 5]))
        align = data.draw(st.sampled_from([None, "top_left", "bottom_right"]))
        return lambda: ((t, tk, align), {})

    def oracle(t, tk, align):
        tk = t if tk is None else tk
        if t < 1 or tk < 1 or (tk != t and align is None):
            return REFUSE
        offset = tk - t if align == "bottom_right" else 0
        return np.arange(tk)[None, :] > np.arange(t)[:, None] + offset

    return Case(make, oracle)


def positions_mask_case(framework):
    def make(data):
        tq, tk = data.draw(st.integers(0, 3)), data.draw(st.integers(0, 4))
        q_pos, k_pos = positions_of(data, tq), positions_of(data, tk)
        seen = [
            list(p) if not hasattr(p, "shape") else p for p in (q_pos, k_pos)
        ]
        as_torch = framework == "torch" and data.draw(st.booleans())

        def inputs():
            fresh = [
                iter(s) if not hasattr(p, "shape") else p
                for p, s in zip((q_pos, k_pos), seen, strict=True)
            ]
            if as_torch:
                fresh = [
                    torch.from_numpy(p) if isinstance(p, np.ndarray) else p
                    for p in fresh
                ]
            return tuple(fresh), {}

        return inputs

    def oracle(q_pos, k_pos):
        q_pos, k_pos = (values_of(p) for p in (q_pos, k_pos))
        if q_pos.dtype == bool or k_pos.dtype == bool:
            return REFUSE
        if not (
            np.isfinite(f64(q_pos)).all() and np.isfinite(f64(k_pos)).all()
        ):
            return REFUSE
        return f64(k_pos)[None, :] > f64(q_pos)[:, None]

    return Case(make, oracle)


def key_padding_case(framework):
    def make(data):
        b = pick(data, data.draw(st.integers(1, 3)), 0)
        seed = data.draw(st.integers(0, 2**16))
        low = pick(data, 1, 0)  # a length 0 leaves a row with no key
        lengths = np.random.default_rng(seed).integers(low, 5, b)
        dtype = pick(
            data, data.draw(st.sampled_from([np.int64, np.uint16])), float
        )
        tk = pick(data, data.draw(st.sampled_from([None, 4])), 2)
        lengths = lengths.astype(dtype)
        return lambda: ((frame(framework, lengths), tk), {})

    def oracle(lengths, tk):
        lengths = np.asarray(lengths)
        if lengths.dtype.kind not in "iu" or len(lengths) == 0:
            return REFUSE
        if lengths.min() < 1 or (tk is not None and lengths.max() > tk):
            return REFUSE
        tk = int(lengths.max()) if tk is None else tk
        padded = np.arange(tk)[None, :] >= lengths[:, None]
        return padded[:, None, None, :]

    return Case(make, oracle)


def rope_case(function, framework, interleaved=False):
    def make(data):
        t, d = data.draw(st.integers(1, 3)), pick(data, 4, 2, 3)
        x = normal(data, (2, t, d))
        dtype = data.draw(st.sampled_from([np.float64, np.float64, np.int64]))
        if dtype == np.int64:
            x = np.nan_to_num(x, nan=0.0).round().astype(np.int64)
        pos = positions_of(data, pick(data, t, t + 1))
        pos = pos if hasattr(pos, "shape") else np.asarray(list(pos))
        base = pick(data, data.draw(st.sampled_from([1e4, 500.0])), -1.0, 0)
        return lambda: ((frame(framework, x), pos, base), {})

    def oracle(x, positions, base):
        x = f64(x)
        if np.isnan(x).any() or positions.dtype == bool:
            return REFUSE
        if not np.isfinite(f64(positions)).all() or not base:
            return REFUSE
        return rope64(x, positions, base, interleaved)

    return Case(make, oracle)


def rope_permutation_case():
    def make(data):
        n_head = data.draw(st.integers(1, 3))
        d_head = data.draw(st.sampled_from([2, 4, 3]))
        shape = data.draw(
            st.sampled_from([(n_head * d_head, 5), (n_head * d_head,)])
        )
        weight = normal(data, shape, nan=False)
        as_torch = data.draw(st.booleans())
        return lambda: (
            (torch.from_numpy(weight) if as_torch else weight, n_head),
            {},
        )

    def oracle(weight, n_head):
        weight = f64(weight)
        d_head = weight.shape[0] // n_head
        if d_head % 2 or weight.shape[0] % n_head:
            return REFUSE
        order = [
            h * d_head + 2 * i + half
            for h in range(n_head)
            for half in (0, 1)
            for i in range(d_head // 2)
        ]
        return weight[order]

    return Case(make, oracle)


def linear_backward_case():
    def make(data):
        x = normal(data, (2, 3, 4), nan=False)
        w_shape = pick(data, (4, 5), (3, 5))
        dy_shape = pick(data, (2, 3, 5), (3, 2, 5))
        weight, dy = normal(data, w_shape), normal(data, dy_shape)
        return lambda: ((x, weight, dy), {})

    def oracle(x, weight, dy):
        if np.isnan(weight).any() or np.isnan(dy).any():
            return REFUSE
        if weight.shape[0] != 4 or dy.shape != (2, 3, weight.shape[1]):
            return REFUSE
        tx = torch.tensor(x, requires_grad=True)
        tw = torch.tensor(weight, requires_grad=True)
        tb = torch.zeros(weight.shape[1], dtype=torch.float64).requires_grad_()
        (tx @ tw + tb).backward(torch.tensor(dy))
        return tw.grad, tb.grad, tx.grad

    return Case(make, oracle)


def module_of(framework, data):
    """A module with random sizes, heads, RoPE and bias (float64)."""
    n_head = data.draw(st.sampled_from([1, 2]))
    d_model = n_head * data.draw(st.sampled_from([2, 4]))
    n_kv = data.draw(st.sampled_from([None, 1]))
    rope, bias = data.draw(st.booleans()), data.draw(st.booleans())
    if framework == "numpy":
        seed = data.draw(st.integers(0, 100))
        return numpy_ref.MultiHeadAttention(
            d_model, n_head, n_kv, bias=bias, rope=rope, seed=seed
        )
    torch.manual_seed(data.draw(st.integers(0, 100)))
    return torch_ref.MultiHeadAttention(
        d_model, n_head, n_kv, bias=bias, rope=rope, dtype=torch.float64
    )


def module_case(framework, path):
    """A module's forward (path "call"), or a function of it."""

    def make(data):
        module = module_of(framework, data)
        b, t = data.draw(st.integers(0, 2)), data.draw(st.integers(1, 3))
        x = normal(data, (b, t, module.d_model))
        causal = data.draw(st.booleans())
        mask = numpy_ref.causal_mask(t) if causal else None
        positions = lambda: None  # noqa: E731
        if path in ("call", "sdpa") and data.draw(st.booleans()):
            seed = data.draw(st.integers(0, 2**16), label="seed")
            at = np.random.default_rng(seed).integers(0, 9, t)
            form = data.draw(st.sampled_from(FORMS), label="form")
            positions = in_form(at, form)  # RoPE's: read by q and by k
        if path in ("library", "library_version") and (
            module.rope or module.n_kv_head != module.n_head
        ):
            module = torch_ref.MultiHeadAttention(
                module.d_model, module.n_head, dtype=torch.float64
            )

        def inputs():
            xs, m = frame(framework, x), frame(framework, mask)
            if path == "call":
                return (module, xs, m), {"positions": positions()}
            if path == "library":
                return (torch_ref.library_version(module), xs, m), {}
            if path == "library_version":
                return (module,), {}
            if path == "cached":
                return (module, xs, [t]), {}
            if path == "to_numpy":
                return (module,), {}
            return (module, xs, m), {"positions": positions()}  # sdpa

        inputs.module, inputs.x, inputs.mask = module, x, mask
        inputs.positions = positions
        return inputs

    def oracle(first, *args):
        return None  # replaced below: the module's own oracle needs make

    return Case(make, oracle)


def module_oracle(inputs_fn, path):
    module, x, mask = inputs_fn.module, inputs_fn.x, inputs_fn.mask
    positions = getattr(inputs_fn, "positions", lambda: None)()
    if positions is not None:
        positions = values_of(positions)
    if path in ("to_numpy", "library_version"):
        return None  # a module: its outputs are compared in check_result
    if np.isnan(x).any():
        return REFUSE
    if path == "cached":
        mask = numpy_ref.causal_mask(x.shape[1])
    expected = mha64(module, x, mask, positions=positions)
    if path == "call" and expected is not REFUSE:
        b, t = x.shape[:2]
        weights = attention64(*mha_heads(module, x, positions), mask)[1]
        return expected, weights.reshape(b, module.n_head, t, t)
    return expected


def mha_heads(module, x, positions=None):
    """q, k, v (B, H, T, dh) of the module at x, RoPE applied."""
    x = f64(x)
    (wq, bq), (wk, bk), (wv, bv), _ = weights_of(module)
    dh = module.d_model // module.n_head

    def project(w, b):
        y = x @ w + (0.0 if b is None else f64(b))
        heads = y.shape[-1] // dh
        return y.reshape(*x.shape[:2], heads, dh).transpose(0, 2, 1, 3)

    q, k, v = project(wq, bq), project(wk, bk), project(wv, bv)
    if module.rope:
        at = range(x.shape[1]) if positions is None else positions
        q = rope64(q, at, module.rope_base)
        k = rope64(k, at, module.rope_base)
    return q, k, v


def examples_case(function, n_new):
    def make(data):
        n = data.draw(st.integers(0, 5))
        values = tuple(normal(data, (n,)).tolist())
        return lambda: ((values,), {})

    def oracle(values):
        v = f64(values)
        if len(v) < n_new or np.isnan(v).any():
            return REFUSE
        if function == "example":  # queries at the last two positions
            cum = np.cumsum(v) / np.arange(1, len(v) + 1)
            return cum[-2:], np.array([v[0], v[:2].mean()])
        if function == "single":
            return np.array([v.mean()]), np.array([v.mean()]), None
        return np.array([v.mean()]), np.array([v[0]])

    return Case(make, oracle)


def corrupt_case():
    def make(data):
        n, t = data.draw(st.integers(1, 3)), data.draw(st.integers(4, 10))
        vocab = data.draw(st.sampled_from([1, 2, 5]))
        seed = data.draw(st.integers(0, 100))
        batch = induction.repeated_segments(
            n, t, max(vocab, 2), torch.Generator().manual_seed(seed), 2
        )
        return lambda: ((batch, vocab, torch.Generator().manual_seed(1)), {})

    def oracle(batch, vocab, _):
        if vocab < 2:
            return REFUSE
        return None  # no values to compare: checked by corrupted_ok

    return Case(make, oracle)


def head_scores_case():
    def make(data):
        n, t = 2, data.draw(st.integers(6, 10))
        batch = induction.repeated_segments(
            n,
            t,
            5,
            torch.Generator().manual_seed(data.draw(st.integers(0, 9))),
        )
        w = np.abs(normal(data, (1, n, 2, t, t), nan=False))
        w = np.where(np.arange(t)[None, :] > np.arange(t)[:, None], 0.0, w)
        w /= w.sum(-1, keepdims=True)
        offset = data.draw(st.integers(-1, t))
        return lambda: ((torch.from_numpy(w), batch, offset), {})

    def oracle(w, batch, offset):
        w = f64(w)
        t = w.shape[-1]
        if not 0 <= offset < t:
            return REFUSE
        i = np.arange(offset, t)
        back = w[..., i, i - offset].mean(axis=(1, 3))
        rows, q = np.nonzero(batch.copy_from.numpy() >= 0)
        k = batch.copy_from.numpy()[rows, q]
        copy = np.stack(
            [w[:, r, :, a, c] for r, a, c in zip(rows, q, k, strict=True)]
        )
        return back, copy.mean(axis=0)

    return Case(make, oracle)


# -- mask rules, sinks and ALiBi (numpy_ref and torch_ref) ----------------


def rule_positions(data, n, framework):
    """n positions for a mask rule: ints, uint16, whole floats, (B, T),
    in any form (FORMS: a list, an iterator, tensors of int64, bfloat16
    or with grad, for either mirror); in faulty examples halves,
    negatives, NaN, bools or 3-D."""
    kind = pick(
        data,
        data.draw(st.sampled_from(["int", "uint16", "whole", "batch"])),
        *("half", "negative", "nan", "bool", "3-D"),
    )
    seed = data.draw(st.integers(0, 2**16), label="seed")
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 9, n)
    if kind == "batch":
        values = rng.integers(0, 9, (data.draw(st.integers(1, 3)), n))
    elif kind in ("uint16", "bool"):
        values = values.astype(np.uint16) if kind == "uint16" else values > 4
    elif kind in ("whole", "half"):
        values = values + (0.5 if kind == "half" else 0.0)
    elif kind in ("negative", "nan") and n:
        values = values.astype(float)
        values[0] = -1.0 if kind == "negative" else np.nan
    elif kind == "3-D":
        values = values.reshape(1, 1, n)
    form = data.draw(st.sampled_from(FORMS), label="form")
    if values.dtype == bool and form in ("bfloat16", "grad"):
        form = "tensor"  # a bool tensor: refused as bools
    return in_form(values, form)


def rule_values64(values, ids=False):
    """Positions (or document ids) as float64, or REFUSE."""
    array = values_of(values)
    if array.dtype.kind not in "iuf" or array.ndim not in (1, 2):
        return REFUSE
    array = array.astype(np.float64)
    if not np.isfinite(array).all() or (array != np.round(array)).any():
        return REFUSE
    if not ids and (array < 0).any():
        return REFUSE
    return array


def rule_pairs64(query_values, key_values, ids=False):
    """(q, k) float64, broadcasting to (Tq, Tk) or (B, 1, Tq, Tk)."""
    q, k = rule_values64(query_values, ids), rule_values64(key_values, ids)
    if q is REFUSE or k is REFUSE:
        return REFUSE
    if q.ndim == k.ndim == 2 and len({q.shape[0], k.shape[0]} - {1}) > 1:
        return REFUSE  # two batches of different sizes
    if q.ndim == k.ndim == 1:
        return q[:, None], k[None, :]
    b_q, b_k = (len(a) if a.ndim == 2 else 1 for a in (q, k))  # 1: shared
    return q.reshape(b_q, 1, -1, 1), k.reshape(b_k, 1, 1, -1)


def is_int(value, least):
    """An int (NumPy's too, never bool) of at least ``least``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        return False
    return value >= least


def rule_blocked64(rule, q, k, **sizes):
    """The rules' definitions on float64 positions: True = blocked."""
    if rule == "sliding_window_mask":
        allowed = (q - k >= 0) & (q - k < sizes["window"])
        return ~(allowed | ((k < sizes["sink_tokens"]) & (k <= q)))
    if rule == "chunked_mask":
        chunk = sizes["chunk"]
        return ~((np.floor(q / chunk) == np.floor(k / chunk)) & (k <= q))
    if rule == "prefix_lm_mask":
        return ~((k < sizes["prefix"]) | (k <= q))
    return k > q  # causal


RULE_SIZES = {
    "sliding_window_mask": {"window": 1, "sink_tokens": 0},
    "chunked_mask": {"chunk": 1},
    "prefix_lm_mask": {"prefix": 0},
}


def mask_rule_case(framework, rule):
    """A mask rule of positions; its sizes drawn, some of them bad."""

    def make(data):
        tq, tk = data.draw(st.integers(0, 4)), data.draw(st.integers(1, 5))
        q_pos = rule_positions(data, tq, framework)
        k_pos = rule_positions(data, tk, framework)
        sizes = {}
        for name, least in RULE_SIZES.get(rule, {}).items():
            good = data.draw(st.integers(least, 4))
            sizes[name] = pick(data, good, least - 1, 2.0, True, np.int64(2))
        return lambda: ((q_pos(), k_pos()), sizes)

    def oracle(query_positions, key_positions, **sizes):
        if not all(
            is_int(sizes[name], least)
            for name, least in RULE_SIZES.get(rule, {}).items()
        ):
            return REFUSE
        ids = rule in ("document_mask", "position_pairs")  # any integers
        pairs = rule_pairs64(query_positions, key_positions, ids)
        if pairs is REFUSE:
            return REFUSE
        q, k = pairs
        if rule == "position_pairs":
            return q, k
        if rule == "document_mask":
            return q != k
        return rule_blocked64(rule, q, k, **sizes)

    return Case(make, oracle)


def document_lengths(data, framework):
    """1 to 3 document lengths; zeros, floats, bools, 2-D in faulty ones."""
    n = pick(data, data.draw(st.integers(1, 3)), 0)
    seed = data.draw(st.integers(0, 2**16), label="seed")
    lengths = np.random.default_rng(seed).integers(1, 4, n)
    kind = pick(
        data,
        data.draw(st.sampled_from(["int", "uint16", "list"])),
        *("zero", "float", "bool", "2-D", "iter"),
    )
    if kind == "zero" and n:
        lengths[-1] = 0
    lengths = {
        "uint16": lengths.astype(np.uint16),
        "float": lengths.astype(float),
        "bool": lengths > 1,
        "2-D": lengths[None],
    }.get(kind, lengths)
    if kind in ("list", "iter"):
        lengths = lengths.tolist()
    as_tensor = framework == "torch" and kind != "list"
    if as_tensor and data.draw(st.booleans()):
        lengths = torch.from_numpy(np.asarray(lengths))
    if kind == "iter":
        return lambda: iter(lengths)
    return lambda: lengths


def document_ids64(lengths):
    """Each token's document: lengths[i] times i, or REFUSE."""
    if torch.is_tensor(lengths):
        lengths = lengths.numpy()
    lengths = np.asarray(lengths)
    if lengths.dtype.kind not in "iu" or lengths.ndim != 1 or not len(lengths):
        return REFUSE
    if (lengths < 1).any():
        return REFUSE
    ids = [i for i, n in enumerate(lengths.tolist()) for _ in range(n)]
    return np.array(ids, dtype=np.float64)


def document_case(framework, function):
    def make(data):
        lengths = document_lengths(data, framework)
        return lambda: ((lengths(),), {})

    def oracle(lengths):
        ids = document_ids64(lengths)
        if ids is REFUSE or function == "document_ids":
            return ids
        t = np.arange(len(ids))
        return (ids[:, None] != ids[None, :]) | (t[None, :] > t[:, None])

    return Case(make, oracle)


def sinks_case(framework):
    """softmax_with_sinks: scores with masked keys, one sink per head."""

    def make(data):
        h = data.draw(st.integers(1, 3))
        lead = data.draw(st.sampled_from([(), (2,)]))
        shape = pick(data, (*lead, h, 2, 3), (2, 3))
        scores = normal(data, shape)
        if data.draw(st.booleans()):  # masked keys, a whole row sometimes
            scores[..., -1] = -np.inf
            if data.draw(st.booleans()):
                scores[..., 0, :] = -np.inf
        sinks = normal(data, (pick(data, h, h + 1),), nan=False)
        if data.draw(st.booleans()):
            sinks[0] = pick(data, -np.inf, np.inf, np.nan)
        empty_rows = pick(
            data, data.draw(st.sampled_from(["raise", "zero"])), "drop"
        )
        dtype = data.draw(st.sampled_from(LOW_PRECISION), label="dtype")
        scores, sinks = (
            in_dtype(a, dtype, framework) for a in (scores, sinks)
        )
        sinks = pick(data, sinks, sinks > 0)  # bool sinks: refused
        return lambda: ((scores, sinks, empty_rows), {})

    def oracle(scores, sinks, empty_rows):
        scores, sinks = f64(scores), f64(sinks)
        if scores.ndim < 3 or sinks.shape != (scores.shape[-3],):
            return REFUSE
        if empty_rows not in ("raise", "zero"):
            return REFUSE
        sink = np.broadcast_to(sinks[:, None, None], (*scores.shape[:-1], 1))
        both = np.concatenate([scores, sink], axis=-1)
        if np.isnan(both).any() or np.isposinf(both).any():
            return REFUSE
        empty = np.isneginf(both).all(axis=-1, keepdims=True)
        if empty.any() and empty_rows == "raise":
            return REFUSE
        top = np.where(empty, 0.0, both.max(axis=-1, keepdims=True))
        weights = np.exp(both - top)
        total = weights.sum(axis=-1, keepdims=True)
        return (weights / np.where(empty, 1.0, total))[..., :-1]

    return Case(make, oracle)


def alibi_slopes64(n_head):
    """Press et al.'s slopes: start^1 .. start^n, start = 2^(-8 / n), for
    the largest power of two n <= n_head; then the odd powers of the
    rule for 2n, until n_head are filled."""
    if not is_int(n_head, 1):
        return REFUSE
    n = 2 ** math.floor(math.log2(n_head))
    slopes = [(2 ** (-8 / n)) ** h for h in range(1, n + 1)]
    extra = [(2 ** (-8 / (2 * n))) ** h for h in range(1, 2 * n, 2)]
    return np.array(slopes + extra[: n_head - n])


def alibi_slopes_case(gym=False):
    def make(data):
        n_head = pick(
            data,
            data.draw(st.sampled_from([1, 2, 3, 5, 6, 8, 12, np.int64(6)])),
            *(0, -1, 2.0, True),
        )
        return lambda: ((n_head,), {})

    def oracle(n_head):
        if gym:  # 2^(-8 (h + 1) / H), h = 0 .. H - 1, for every H
            if not is_int(n_head, 1):
                return REFUSE
            return np.array(
                [2 ** (-8 * h / n_head) for h in range(1, n_head + 1)]
            )
        return alibi_slopes64(n_head)

    return Case(make, oracle)


def real_positions(data, n, framework, start=0):
    """n real positions (fractional allowed) from ``start``: ints,
    uint32, floats, in any form (FORMS); NaN, bool, 2-D or none in
    faulty examples."""
    kind = pick(
        data,
        data.draw(st.sampled_from(["int", "uint32", "float", "iter"])),
        *("nan", "bool", "2-D", "empty"),
    )
    seed = data.draw(st.integers(0, 2**16), label="seed")
    values = start + np.random.default_rng(seed).integers(0, 9, n)
    values = {
        "uint32": values.astype(np.uint32),
        "float": values * 0.75,
        "nan": np.where(np.arange(n) == 0, np.nan, values),
        "bool": values > 4,
        "2-D": values[None],
        "empty": values[:0],
    }.get(kind, values)
    form = data.draw(st.sampled_from(FORMS), label="form")
    if kind == "iter" or (values.dtype == bool and form != "array"):
        form = "iter" if kind == "iter" else "tensor"
    return in_form(values, form)


def real_values64(values):
    """1-D, not empty, real and finite as float64; else REFUSE. An
    iterator is read (as a list)."""
    if isinstance(values, Iterator):
        values = list(values)
    array = np.asarray(f64(values) if torch.is_tensor(values) else values)
    if array.dtype.kind not in "iuf" or array.ndim != 1 or not len(array):
        return REFUSE
    array = array.astype(np.float64)
    return array if np.isfinite(array).all() else REFUSE


def slopes_of(data, framework):
    """(H,) positive slopes: float64, float32, float16, bfloat16, int
    or a list; bad ones too."""
    h = data.draw(st.integers(1, 3))
    seed = data.draw(st.integers(0, 2**16), label="seed")
    slopes = np.random.default_rng(seed).uniform(0.05, 1.0, h)
    kinds = ["float64", "float32", "float16", "bfloat16", "int", "list"]
    kind = pick(
        data,
        data.draw(st.sampled_from(kinds)),
        *("nan", "inf", "bool", "2-D", "empty"),
    )
    if kind == "bfloat16":  # torch only; NumPy's mirror reads it too
        return torch.tensor(slopes, dtype=torch.bfloat16)
    slopes = {
        "float32": slopes.astype(np.float32),
        "float16": slopes.astype(np.float16),
        "int": np.arange(1, h + 1),
        "nan": np.where(np.arange(h) == 0, np.nan, slopes),
        "inf": np.where(np.arange(h) == 0, np.inf, slopes),
        "bool": slopes > 0.5,
        "2-D": slopes[None],
        "empty": slopes[:0],
    }.get(kind, slopes)
    if kind == "list":
        return slopes.tolist()
    if framework == "torch" and data.draw(st.booleans()):
        return torch.from_numpy(np.array(slopes))
    return slopes


def alibi_bias_case(framework, symmetric=False):
    def make(data):
        slopes = slopes_of(data, framework)
        tq, tk = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 4))
        # long positions: float16 slopes once cast 2049 and 2048 alike
        start = data.draw(st.sampled_from([0, 257, 2049]), label="start")
        q_pos = real_positions(data, tq, framework, start)
        k_pos = real_positions(data, tk, framework, start)
        return lambda: ((slopes, q_pos(), k_pos()), {})

    def oracle(slopes, query_positions, key_positions):
        m, q = real_values64(slopes), real_values64(query_positions)
        k = real_values64(key_positions)
        if any(a is REFUSE for a in (m, q, k)):
            return REFUSE
        distance = q[:, None] - k[None, :]  # (Tq, Tk): q - k
        if symmetric:
            distance = np.abs(distance)
        return -m[:, None, None] * distance  # (H, Tq, Tk)

    return Case(make, oracle)


# -- the conventions page's converters -----------------------------------


def without_neginf(values):
    """-inf is a value here (a fill, no sink): where it is, and the rest."""
    values = f64(values)
    return np.isneginf(values), np.where(np.isneginf(values), 0.0, values)


def bool_mask(data, shape, framework="torch"):
    """A random boolean mask, True = blocked; int or 1-D if faulty."""
    seed = data.draw(st.integers(0, 2**16), label="seed")
    mask = np.random.default_rng(seed).random(shape) < 0.4
    mask = pick(data, mask, mask.astype(np.int64), mask[0])
    return frame(framework, mask)


def causal_query_positions_case():
    def make(data):
        tq = pick(data, data.draw(st.integers(1, 4)), 0, 2.0)
        tk = data.draw(st.sampled_from([None, 1, 3, 5]))
        align = pick(
            data,
            data.draw(st.sampled_from([None, "top_left", "bottom_right"])),
            "lower_right",
        )
        return lambda: ((tq, tk, align), {})

    def oracle(tq, tk, align):
        tk = tq if tk is None else tk
        if not (is_int(tq, 1) and is_int(tk, 1)):
            return REFUSE
        if align not in (None, "top_left", "bottom_right"):
            return REFUSE
        if align is None and tk != tq:
            return REFUSE  # as causal_mask: say which corner
        offset = tk - tq if align == "bottom_right" else 0
        return np.arange(tq) + offset

    return Case(make, oracle)


def mask_conversion_case(function):
    """rows_without_keys, to_sdpa_mask, to_mask_mod: mask (.., Tq, Tk)."""

    def make(data):
        shape = data.draw(st.sampled_from([(2, 3), (2, 2, 3), (3, 1)]))
        if function == "to_mask_mod":
            shape = pick(data, shape[-2:], (1, *shape[-2:]))
        numpy = function == "rows_without_keys" and data.draw(st.booleans())
        mask = bool_mask(data, shape, "numpy" if numpy else "torch")
        if data.draw(st.booleans()) and mask.ndim >= 2:
            mask[..., 0, :] = True  # a row with no key
        inputs = lambda: ((mask,), {})  # noqa: E731
        if function == "rows_without_keys":  # [(i, ...)] as (n, ndim - 1)
            inputs.result = lambda rows: np.array(
                rows, dtype=np.int64
            ).reshape(len(rows), mask.ndim - 1)
        if function == "to_mask_mod":  # the mask_mod on every pair
            tq, tk = (1, *mask.shape) if mask.dim() == 1 else mask.shape[-2:]
            inputs.result = lambda mask_mod: mask_mod(
                0, 0, torch.arange(tq)[:, None], torch.arange(tk)[None, :]
            )
        return inputs

    def oracle(mask):
        mask = mask.numpy() if torch.is_tensor(mask) else mask
        if mask.dtype != bool:
            return REFUSE
        if function == "rows_without_keys":
            return np.argwhere(mask.all(axis=-1))
        if function == "to_mask_mod" and mask.ndim != 2:
            return REFUSE  # a (Tq, Tk) mask
        return ~mask  # SDPA's and FlexAttention's True = keep

    return Case(make, oracle)


WINDOW_LIBRARIES = ("hugging_face", "flash_attn", "attention_gym", "jax")


def window_case(direction):
    def make(data):
        library = pick(
            data, data.draw(st.sampled_from(WINDOW_LIBRARIES)), "mistral"
        )
        w = data.draw(st.integers(1, 5))
        if direction == "from":
            window = pick(data, w, 0, 2.0, True)
            return lambda: ((window, library), {})
        pair = library in ("flash_attn", "jax")
        value = (w - 1, 0) if pair else w - (library == "attention_gym")
        value = pick(data, value, (w, 1), (-1, 0), [w, 0], w, (1.0, 0), 0, -1)
        return lambda: ((value, library), {})

    def oracle(value, library):
        if library not in WINDOW_LIBRARIES:
            return REFUSE
        if direction == "from":  # Hugging Face's W: itself and W - 1 keys
            if not is_int(value, 1):
                return REFUSE
            if library in ("flash_attn", "jax"):
                return value - 1, 0  # (left, right)
            return np.array(value - (library == "attention_gym"))
        if library in ("flash_attn", "jax"):
            if not isinstance(value, tuple | list) or len(value) != 2:
                return REFUSE
            if not (is_int(value[0], 0) and is_int(value[1], 0)):
                return REFUSE
            return REFUSE if value[1] else np.array(value[0] + 1)
        least = 0 if library == "attention_gym" else 1
        if not is_int(value, least):
            return REFUSE
        return np.array(value + (library == "attention_gym"))

    return Case(make, oracle)


def alibi_row_bias_case(form):
    """BLOOM's slope * k and MPT's slope * (k - (T - 1)): (H, 1, T)."""

    def make(data):
        slopes = slopes_of(data, "numpy")
        t = pick(data, data.draw(st.integers(1, 4)), 0, -1, 2.5, True)
        return lambda: ((slopes, t), {})

    def oracle(slopes, t):
        m = real_values64(slopes)
        if m is REFUSE or not is_int(t, 1):
            return REFUSE
        k = np.arange(t, dtype=np.float64)  # key positions 0 .. T - 1
        k = k if form == "key_only" else k - (t - 1)
        return m[:, None, None] * k[None, None, :]

    return Case(make, oracle)


def sink_key_case():
    def make(data):
        h, tk, d = (data.draw(st.integers(1, 3)) for _ in range(3))
        k = normal(data, (1, h, tk, d))
        v = normal(data, (1, h, pick(data, tk, tk + 1), 2), nan=False)
        sinks = normal(data, (pick(data, h, h + 1),), nan=False)
        if data.draw(st.booleans()):
            sinks[0] = pick(data, -np.inf, np.inf)
        as_dtype = pick(data, torch.float64, torch.float32)
        inputs = lambda: (  # noqa: E731
            (
                torch.from_numpy(k),
                torch.from_numpy(v),
                torch.from_numpy(sinks).to(as_dtype),
            ),
            {},
        )
        inputs.result = lambda got: (*got[:2], *without_neginf(got[2]))
        return inputs

    def oracle(k, v, sinks):
        k, v, sinks = f64(k), f64(v), f64(sinks)
        if np.isnan(k).any() or np.isnan(sinks).any():
            return REFUSE
        if np.isposinf(sinks).any() or sinks.shape != (k.shape[-3],):
            return REFUSE
        if k.shape[:-1] != v.shape[:-1]:
            return REFUSE
        zero_k = np.zeros((*k.shape[:-2], 1, k.shape[-1]))
        zero_v = np.zeros((*v.shape[:-2], 1, v.shape[-1]))
        bias = np.zeros((len(sinks), 1, k.shape[-2] + 1))
        bias[:, 0, -1] = sinks  # the appended key scores eta_h
        return (
            np.concatenate([k, zero_k], -2),
            np.concatenate([v, zero_v], -2),
            *without_neginf(bias),
        )

    return Case(make, oracle)


def mask_then_softcap_case():
    def make(data):
        shape = data.draw(st.sampled_from([(4,), (2, 3), (2, 2, 3)]))
        scores = normal(data, shape) * 3
        mask = bool_mask(data, pick(data, shape, (5,)))
        cap = pick(
            data, data.draw(st.sampled_from([1.0, 2.5, 30])), 0.0, np.inf
        )
        return lambda: ((torch.from_numpy(scores), mask, cap), {})

    def oracle(scores, mask, softcap):
        scores, mask = f64(scores), mask.numpy()
        if np.isnan(scores).any() or mask.dtype != bool:
            return REFUSE
        if not (np.isfinite(softcap) and softcap > 0):
            return REFUSE
        if np.broadcast_shapes(mask.shape, scores.shape) != scores.shape:
            return REFUSE
        capped = softcap * np.tanh(np.where(mask, -np.inf, scores) / softcap)
        weights = np.exp(capped - capped.max(-1, keepdims=True))
        return weights / weights.sum(-1, keepdims=True)

    return Case(make, oracle)


def layout_case(ndim, axes):
    def make(data):
        shape = (2, 3, 1, 2)[: pick(data, ndim, ndim - 1, ndim + 1)]
        x = normal(data, shape, nan=False)
        as_numpy = pick(data, False, True)
        return lambda: ((x if as_numpy else torch.from_numpy(x),), {})

    def oracle(x):
        x = f64(x)
        return REFUSE if x.ndim != ndim else np.swapaxes(x, *axes)

    return Case(make, oracle)


def kv_head_of_case():
    def make(data):
        n_head = pick(data, data.draw(st.sampled_from([1, 2, 4, 6])), 0, -2)
        n_kv = pick(data, data.draw(st.sampled_from([1, 2, 3])), 0, 2.0)
        layout = pick(
            data,
            data.draw(st.sampled_from(["consecutive", "strided"])),
            "interleaved",
        )
        return lambda: ((n_head, n_kv, layout), {})

    def oracle(n_head, n_kv_head, layout):
        if not (is_int(n_head, 1) and is_int(n_kv_head, 1)):
            return REFUSE
        if n_head % n_kv_head or layout not in ("consecutive", "strided"):
            return REFUSE
        group = n_head // n_kv_head  # query heads per key/value head
        if layout == "consecutive":  # 0, 0, 1, 1: repeat_interleave
            return np.array([h // group for h in range(n_head)])
        return np.array([h % n_kv_head for h in range(n_head)])  # tile

    return Case(make, oracle)


def default_scale_case():
    def make(data):
        d = pick(data, data.draw(st.integers(1, 8)), 0, 2.0, np.int64(4))
        convention = pick(
            data, data.draw(st.sampled_from(["sqrt", "gemma", "t5"])), "x"
        )
        scalar = pick(
            data,
            data.draw(st.sampled_from([256, 144.0, None])),
            *(0, np.nan, True),
        )
        return lambda: ((d, convention, scalar), {})

    def oracle(d_head, convention, query_pre_attn_scalar):
        if not is_int(d_head, 1) or convention not in ("sqrt", "gemma", "t5"):
            return REFUSE
        if convention == "t5":
            return np.array(1.0)
        if convention == "sqrt":
            return np.array(1 / math.sqrt(d_head))
        s = query_pre_attn_scalar
        if isinstance(s, bool) or not isinstance(s, int | float):
            return REFUSE
        return np.array(1 / math.sqrt(s)) if s > 0 else REFUSE

    return Case(make, oracle)


def additive_mask_case():
    def make(data):
        mask = bool_mask(data, (2, 3))
        dtype = pick(
            data,
            data.draw(
                st.sampled_from([torch.float32, torch.float64, torch.float16])
            ),
            torch.int64,
            np.float32,
        )
        fill = pick(
            data,
            data.draw(st.sampled_from(["-inf", "min", -1e9, -1e4])),
            *("max", np.nan, True),
        )
        inputs = lambda: ((mask, dtype, fill), {})  # noqa: E731
        inputs.result = without_neginf
        return inputs

    def oracle(mask, dtype, fill):
        if mask.dtype != torch.bool:
            return REFUSE
        if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
            return REFUSE
        info = torch.finfo(dtype)
        if isinstance(fill, str):
            if fill not in ("-inf", "min"):
                return REFUSE
            value = -np.inf if fill == "-inf" else info.min
        elif isinstance(fill, bool) or not info.min <= fill <= info.max:
            return REFUSE  # NaN too: no comparison holds
        else:
            value = float(torch.tensor(fill, dtype=dtype))  # rounded
        return without_neginf(np.where(mask.numpy(), value, 0.0))

    return Case(make, oracle)


# -- the cost model: FLOPs and bytes from the matmul shapes ---------------


def matmul_flops(*shapes):
    """2 m k n for each (count, m, k, n): count matmuls (m, k) @ (k, n)."""
    return sum(2 * count * m * k * n for count, m, k, n in shapes)


def layer_shapes(batch, tq, tk, d_model, n_head, n_kv_head, d_head, rows):
    """{part: the matmuls of one attention layer}, rows the K, V rows."""
    return {
        "q": [(1, batch * tq, d_model, n_head * d_head)],  # X Wq
        "k": [(1, batch * rows, d_model, n_kv_head * d_head)],  # X Wk
        "v": [(1, batch * rows, d_model, n_kv_head * d_head)],  # X Wv
        "scores": [(batch * n_head, tq, d_head, tk)],  # Q K^T per head
        "weighted_sum": [(batch * n_head, tq, tk, d_head)],  # A V
        "out": [(1, batch * tq, n_head * d_head, d_model)],  # heads Wo
    }


def cost_size(data, good):
    """A size: an int; 0, -1, 2.0 or True if faulty."""
    return pick(data, good, 0, -1, float(good), True)


def is_size(value):
    """An int >= 1, Python's or NumPy's (not bool): what the cost model
    takes, counting in Python ints so that its counts stay exact."""
    integral = isinstance(value, int | np.integer)
    return integral and not isinstance(value, bool) and value >= 1


def cost_heads(data):
    """(d_model, n_head, n_kv_head, d_head), sometimes not dividing."""
    n_head = cost_size(data, data.draw(st.sampled_from([1, 2, 4])))
    d_head = data.draw(st.sampled_from([None, None, 3]))
    good = n_head * data.draw(st.integers(1, 3)) if is_size(n_head) else 4
    d_model = cost_size(data, pick(data, good, good + 1))
    n_kv = data.draw(st.sampled_from([None, 1, 2]))
    return d_model, n_head, pick(data, n_kv, 3, 0), d_head


def heads64(d_model, n_head, n_kv_head, d_head):
    """(n_kv_head, d_head) as the layer has them, or REFUSE."""
    if not (is_size(d_model) and is_size(n_head)):
        return REFUSE
    if d_head is None:
        if d_model % n_head:
            return REFUSE
        d_head = d_model // n_head
    n_kv_head = n_head if n_kv_head is None else n_kv_head
    if not (is_size(n_kv_head) and is_size(d_head)):
        return REFUSE
    return REFUSE if n_head % n_kv_head else (int(n_kv_head), int(d_head))


def bytes_per_value_of(data):
    return pick(
        data,
        data.draw(st.sampled_from([2, 4, 0.5, np.float32(2)])),
        *(0, np.nan, True, "2"),
    )


def good_bytes(value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    return bool(np.isfinite(value) and value > 0)


def flops_case(function):
    """attention_flops, useful_flops, tiled_flops, bytes_moved and
    arithmetic_intensity, on small sizes or huge ints (NumPy's too)."""

    def make(data):
        # counts beyond 2**63 (the tiled count walks its tiles: not there)
        huge = data.draw(st.integers(0, 5)) == 0 and function != "tiled_flops"
        scale = 1  # huge: exact, NumPy's ints counted as Python's
        if huge:
            scale = data.draw(st.sampled_from([2**20, np.int64(2**20)]))
        batch = cost_size(data, data.draw(st.integers(1, 3)) * scale)
        tq = cost_size(data, data.draw(st.integers(1, 4)) * scale)
        tk = cost_size(data, data.draw(st.integers(1, 6)) * scale)
        d_model, n_head, n_kv, d_head = cost_heads(data)
        kwargs = {"n_kv_head": n_kv}
        if function in ("attention_flops", "useful_flops", "tiled_flops"):
            kwargs["d_head"] = d_head
        if function in ("attention_flops", "tiled_flops"):
            kwargs["backward"] = pick(data, data.draw(st.booleans()), 1)
        if function in ("attention_flops", "bytes_moved", "intensity"):
            kwargs["cached"] = pick(data, data.draw(st.booleans()), "yes")
        if function in ("bytes_moved", "intensity"):
            kwargs["bytes_per_value"] = bytes_per_value_of(data)
        if function == "tiled_flops":
            for name in ("block_q", "block_k"):
                kwargs[name] = cost_size(data, data.draw(st.integers(1, 3)))
        args = (batch, tq, tk, d_model, n_head)
        return lambda: (args, kwargs)

    def oracle(batch, tq, tk, d_model, n_head, **kwargs):
        sizes = (batch, tq, tk, d_model, n_head)
        heads = heads64(
            d_model, n_head, kwargs["n_kv_head"], kwargs.get("d_head")
        )
        if heads is REFUSE or not all(is_size(s) for s in sizes):
            return REFUSE
        batch, tq, tk, d_model, n_head = (int(s) for s in sizes)
        n_kv, d_head = heads
        flags = {
            k: v for k, v in kwargs.items() if k in ("backward", "cached")
        }
        if not all(isinstance(v, bool) for v in flags.values()):
            return REFUSE
        cached = flags.get("cached", False) or function in (
            "useful_flops",
            "tiled_flops",
        )
        if cached and tq > tk:
            return REFUSE  # the tq queries are the last of the tk keys
        rows = tq if cached else tk
        shapes = layer_shapes(
            batch, tq, tk, d_model, n_head, n_kv, d_head, rows
        )
        parts = {name: matmul_flops(*mm) for name, mm in shapes.items()}
        if function in ("useful_flops", "tiled_flops"):
            pairs = sum(range(tk - tq + 1, tk + 1))  # keys up to each query
            if function == "tiled_flops":
                bq, bk = kwargs["block_q"], kwargs["block_k"]
                if not (is_size(bq) and is_size(bk)):
                    return REFUSE
                pairs = causal_tiles64(tq, tk, bq, bk)[2]
            pair_flops = 2 * batch * n_head * pairs * d_head
            parts["scores"] = parts["weighted_sum"] = pair_flops
        if flags.get("backward"):  # each matmul's backward: two of its size
            if function == "tiled_flops":  # S again, dQ, dK; dP, dV
                parts = {
                    name: flops * {"scores": 4, "weighted_sum": 3}.get(name, 3)
                    for name, flops in parts.items()
                }
            else:
                parts = {name: 3 * flops for name, flops in parts.items()}
        if function in ("bytes_moved", "intensity"):
            value = kwargs["bytes_per_value"]
            if not good_bytes(value):
                return REFUSE
            weights = (
                2 * d_model * n_head * d_head + 2 * d_model * n_kv * d_head
            )
            context = 0 if cached or tq == tk else batch * tk * d_model
            moved = (
                weights
                + context
                + 2 * batch * tq * d_model  # x read, y written
                + 2 * batch * tk * n_kv * d_head  # K and V read
            ) * value
            if function == "bytes_moved":
                return np.array(moved, dtype=np.float64)
            return np.array(sum(parts.values()) / moved)
        return {**parts, "total": sum(parts.values())}

    return Case(make, oracle)


def causal_tiles64(tq, tk, block_q, block_k):
    """(tiles, skipped, pairs) from the tiles themselves: query row i at
    position tk - tq + i; a tile is skipped when every key in it lies
    after every query in it."""
    tiles = skipped = pairs = 0
    for i in range(0, tq, block_q):
        rows = range(i, min(i + block_q, tq))
        for j in range(0, tk, block_k):
            keys = range(j, min(j + block_k, tk))
            tiles += 1
            if keys[0] > tk - tq + rows[-1]:
                skipped += 1
            else:
                pairs += len(rows) * len(keys)
    return tiles, skipped, pairs


def causal_tiles_case():
    def make(data):
        tq = cost_size(data, data.draw(st.integers(1, 6)))
        tk = cost_size(data, data.draw(st.integers(1, 8)))
        bq = cost_size(data, data.draw(st.integers(1, 4)))
        bk = cost_size(data, data.draw(st.integers(1, 4)))
        return lambda: ((tq, tk, bq, bk), {})

    def oracle(tq, tk, block_q, block_k):
        if not all(is_size(s) for s in (tq, tk, block_q, block_k)):
            return REFUSE
        return REFUSE if tq > tk else causal_tiles64(tq, tk, block_q, block_k)

    return Case(make, oracle)


def kv_cache_bytes_case():
    def make(data):
        sizes = [cost_size(data, data.draw(st.integers(1, 4))) for _ in "lhdt"]
        window = pick(data, data.draw(st.sampled_from([None, 1, 2, 5])), 0)
        value = bytes_per_value_of(data)
        return lambda: ((*sizes, value), {"window": window})

    def oracle(n_layer, n_kv_head, d_head, tokens, bytes_per_value, window):
        sizes = (n_layer, n_kv_head, d_head, tokens)
        if not all(is_size(s) for s in sizes) or not good_bytes(
            bytes_per_value
        ):
            return REFUSE
        if window is not None and not is_size(window):
            return REFUSE
        held = tokens if window is None else min(tokens, window - 1)
        # K and V, each (n_layer, n_kv_head, held, d_head)
        values = 2 * n_layer * n_kv_head * held * d_head
        return np.array(values * bytes_per_value, dtype=np.float64)

    return Case(make, oracle)


def saved_activation_case():
    def make(data):
        batch = cost_size(data, data.draw(st.integers(1, 2)))
        t = cost_size(data, data.draw(st.integers(1, 5)))
        d_model, n_head, _, _ = cost_heads(data)
        value = bytes_per_value_of(data)
        weights = pick(data, data.draw(st.booleans()), 0)
        args = (batch, t, d_model, n_head, value)
        return lambda: (args, {"weights": weights})

    def oracle(batch, t, d_model, n_head, bytes_per_value, weights):
        if not (is_size(batch) and is_size(t)):
            return REFUSE
        if heads64(d_model, n_head, None, None) is REFUSE:
            return REFUSE
        if not good_bytes(bytes_per_value) or not isinstance(weights, bool):
            return REFUSE
        # X, Q, K, V and the merged heads: B T d_model values each
        kept = 5 * batch * t * d_model * bytes_per_value
        if weights:  # A: (B, H, T, T)
            return np.array(kept + batch * n_head * t * t * bytes_per_value)
        row_bytes = max(bytes_per_value, 4)  # a float32 log-sum-exp per row
        return np.array(kept + batch * n_head * t * row_bytes)

    return Case(make, oracle)


def rate_of(data):
    """A bandwidth or ridge point: positive and finite, or faulty."""
    good = data.draw(st.sampled_from([1.0, 206.0, 3.35e12, np.float32(2)]))
    return pick(data, good, 0, -1.0, np.nan, np.inf, True, "fast")


def good_rate(value):
    return good_bytes(value) and bool(np.isfinite(value))


def roofline_case(function):
    """decode_floor and memory_bound_batch, from the layer's sizes."""

    def make(data):
        batch = cost_size(data, data.draw(st.integers(1, 300)))
        tk = cost_size(data, data.draw(st.integers(1, 40)))
        d_model, n_head, n_kv, _ = cost_heads(data)
        value = bytes_per_value_of(data)
        rate = rate_of(data)
        if function == "decode_floor":
            args = (batch, tk, d_model, n_head, n_kv, value)
            return lambda: (args, {"bandwidth": rate})
        args = (tk, d_model, n_head, n_kv, value)
        return lambda: (args, {"ridge": rate})

    def oracle(*args, bandwidth=None, ridge=None):
        if function == "decode_floor":
            batch, tk, d_model, n_head, n_kv, value = args
        else:
            (tk, d_model, n_head, n_kv, value), batch = args, 1
        heads = heads64(d_model, n_head, n_kv, None)
        sizes = (batch, tk, d_model, n_head)
        if heads is REFUSE or not all(is_size(s) for s in sizes):
            return REFUSE
        rate = bandwidth if function == "decode_floor" else ridge
        if not (good_bytes(value) and good_rate(rate)):
            return REFUSE
        tk, d_model, n_head = int(tk), int(d_model), int(n_head)
        n_kv, d_head = heads
        weights = 2 * d_model * d_head * (n_head + n_kv) * value
        if function == "decode_floor":
            cache = 2 * batch * tk * n_kv * d_head * value
            return {
                "weights": np.array(weights, dtype=np.float64),
                "cache": np.array(cache, dtype=np.float64),
                "seconds": np.array((weights + cache) / rate),
            }
        # per sequence: its K, V read, x read and y written; FLOPs of
        # the new row's projections and its scores and weighted sum
        flops = 2 * d_model * d_head * (2 * n_head + 2 * n_kv)
        flops += 4 * n_head * tk * d_head
        per_seq = (2 * tk * n_kv * d_head + 2 * d_model) * value
        if flops <= rate * per_seq:  # no batch reaches the ridge
            return None
        near = rate * weights / (flops - rate * per_seq)  # about there
        for b in range(max(1, math.floor(near) - 2), math.ceil(near) + 3):
            if b * flops >= rate * (weights + b * per_seq) * (1 - 1e-12):
                return np.array(b)  # the first batch at the ridge
        return REFUSE

    return Case(make, oracle)


def onset_case():
    """memory_bound_from: the first cache length no batch gets past."""

    def make(data):
        d_model, n_head, n_kv, _ = cost_heads(data)
        value, rate = bytes_per_value_of(data), rate_of(data)
        return lambda: ((d_model, n_head, n_kv, value), {"ridge": rate})

    def oracle(d_model, n_head, n_kv, value, ridge=None):
        heads = heads64(d_model, n_head, n_kv, None)
        if heads is REFUSE or not (good_bytes(value) and good_rate(ridge)):
            return REFUSE
        d_model, n_head = int(d_model), int(n_head)
        n_kv, d_head = heads
        r, v = Fraction(float(ridge)), Fraction(float(value))
        # per sequence, f - r m = a + c tk: its FLOPs less the ridge
        # times its bytes, for a cache of tk; no batch once it is <= 0
        a = 2 * d_model * d_head * (2 * n_head + 2 * n_kv)
        a -= r * 2 * d_model * v
        c = 4 * n_head * d_head - r * 2 * n_kv * d_head * v
        if a + c <= 0:
            return np.array(1)
        if c >= 0:
            return None
        return np.array(max(1, math.ceil(-a / c)))

    return Case(make, oracle)


# -- multi-head latent attention (latent_numpy, latent_torch) ------------


def latent_config(data, even=False):
    """Small MLA sizes: 1 or 2 heads, with or without q_lora_rank."""
    return {
        "d_model": 4,
        "n_head": data.draw(st.integers(1, 2)),
        "kv_lora_rank": 2 if even else data.draw(st.integers(2, 3)),
        "qk_nope_head_dim": 2 if even else data.draw(st.integers(1, 2)),
        "qk_rope_head_dim": 2,
        "v_head_dim": data.draw(st.integers(1, 2)),
        "q_lora_rank": data.draw(st.sampled_from([None, 2])),
        "rope_base": data.draw(st.sampled_from([10000.0, 50.0])),
        "rope_interleave": data.draw(st.booleans()),
    }


def latent_module(framework, data, config):
    if framework == "numpy":
        seed = data.draw(st.integers(0, 100))
        return latent_numpy.MultiHeadLatentAttention(**config, seed=seed)
    torch.manual_seed(data.draw(st.integers(0, 100)))
    return latent_torch.MultiHeadLatentAttention(**config, dtype=torch.float64)


def rms64(x, weight, eps=1e-6):
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * weight


def latent_parts64(module, x, positions=None):
    """q_nope, q_rope (B, H, T, .), c_KV (B, T, d_c), k_rope (B, T, d_r),
    W_UK (H, d_nope, d_c) and W_UV (H, d_v, d_c), in float64 from the
    module's state_dict, RoPE by rope64 (interleaved: the turned evens,
    then the turned odds, as Hugging Face writes them)."""
    sd = {n: f64(w) for n, w in module.state_dict().items()}
    x = f64(x)
    b, t, _ = x.shape
    h, d_c = module.n_head, module.kv_lora_rank
    d_nope, d_v = module.qk_nope_head_dim, module.v_head_dim
    if "q_proj.weight" in sd:
        q = x @ sd["q_proj.weight"].T
    else:  # RMSNorm(x W_DQ) W_UQ
        c_q = rms64(x @ sd["q_a_proj.weight"].T, sd["q_a_layernorm.weight"])
        q = c_q @ sd["q_b_proj.weight"].T
    d_qk = d_nope + module.qk_rope_head_dim
    q = q.reshape(b, t, h, d_qk).transpose(0, 2, 1, 3)  # (B, H, T, d_qk)
    both = x @ sd["kv_a_proj_with_mqa.weight"].T  # (B, T, d_c + d_r)
    c_kv = rms64(both[..., :d_c], sd["kv_a_layernorm.weight"])
    positions = np.arange(t) if positions is None else f64(positions)

    def turn(a):
        if not module.rope_interleave:
            return rope64(a, positions, module.rope_base)
        out = rope64(a, positions, module.rope_base, interleaved=True)
        return np.concatenate([out[..., 0::2], out[..., 1::2]], axis=-1)

    w = sd["kv_b_proj.weight"].reshape(h, d_nope + d_v, d_c)
    q_rope, k_rope = turn(q[..., d_nope:]), turn(both[..., d_c:])
    return q[..., :d_nope], q_rope, c_kv, k_rope, w[:, :d_nope], w[:, d_nope:]


def mla64(module, x, mask=None, positions=None):
    """y (B, T, d_model) and weights (B, H, T, T) of MLA, naive form."""
    q_nope, q_rope, c_kv, k_rope, w_uk, w_uv = latent_parts64(
        module, x, positions
    )
    k_nope = np.einsum("btc,hdc->bhtd", c_kv, w_uk)  # W_UK c, per head
    v = np.einsum("btc,hdc->bhtd", c_kv, w_uv)  # W_UV c
    scores = q_nope @ np.swapaxes(k_nope, -2, -1)
    scores = scores + np.einsum("bhqd,bkd->bhqk", q_rope, k_rope)
    scores = scores / math.sqrt(module.qk_nope_head_dim + 2)
    if mask is not None:
        scores = np.where(f64(mask) > 0, -np.inf, scores)
    if np.isneginf(scores).all(axis=-1).any():
        return REFUSE
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    b, h, t, d_v = v.shape[0], v.shape[1], x.shape[1], v.shape[-1]
    merged = (weights @ v).transpose(0, 2, 1, 3).reshape(b, t, h * d_v)
    return merged @ f64(module.state_dict()["o_proj.weight"]).T, weights


def mla_positions(data, t, framework):
    """A maker of fresh positions (T,) in any form (FORMS), or of None."""
    kind = pick(
        data, data.draw(st.sampled_from([None, "int", "float"])), "nan", "t+1"
    )
    if kind is None:
        return lambda: None
    seed = data.draw(st.integers(0, 2**16), label="seed")
    values = np.random.default_rng(seed).integers(0, 9, t + (kind == "t+1"))
    values = values * 0.5 if kind == "float" else values
    if kind == "nan":
        values = np.where(np.arange(t) == 0, np.nan, values)
    return in_form(values, data.draw(st.sampled_from(FORMS), label="form"))


def latent_forward_case(framework):
    """The module's forward, naive and absorbed, against mla64."""

    def make(data):
        module = latent_module(framework, data, latent_config(data))
        b, t = (
            pick(data, data.draw(st.integers(1, 2)), 0),
            data.draw(st.integers(1, 3)),
        )
        x = normal(data, (b, t, 4))
        mask = random_mask(data, (b, module.n_head, t, t))
        positions = mla_positions(data, t, framework)
        absorbed = pick(data, data.draw(st.booleans()), 1)

        def inputs():
            return (
                module,
                frame(framework, x),
                frame(framework, mask),
                positions(),
                absorbed,
            ), {}

        inputs.forward = True

        def expected():
            if np.isnan(x).any() or not isinstance(absorbed, bool):
                return REFUSE
            p = positions()
            if p is not None:
                p = f64(values_of(p))
                if p.shape != (t,) or not np.isfinite(p).all():
                    return REFUSE
            if mask is not None and (
                np.broadcast_shapes(mask.shape, (b, module.n_head, t, t))
                != (b, module.n_head, t, t)
            ):
                return REFUSE
            return mla64(module, x, mask, p)

        inputs.expected = expected
        return inputs

    return Case(make, None)


def latent_shapes_case():
    names = ("d_model", "n_head", "kv_lora_rank", "qk_nope_head_dim")

    def make(data):
        sizes = [cost_size(data, data.draw(st.integers(1, 3))) for _ in names]
        rope_dim = pick(data, 2, 3, 0)
        v_dim = cost_size(data, 2)
        q_rank = pick(data, data.draw(st.sampled_from([None, 2])), 0)
        base = pick(data, 10000.0, 0.0, np.nan, "1e4")
        interleave = pick(data, data.draw(st.booleans()), 1)
        args = (*sizes, rope_dim, v_dim, q_rank, base, interleave)
        return lambda: (args, {})

    def oracle(*args):
        *sizes, q_rank, base, interleave = args
        if not all(is_int(s, 1) for s in sizes):
            return REFUSE
        if sizes[4] % 2 or (q_rank is not None and not is_int(q_rank, 1)):
            return REFUSE  # qk_rope_head_dim: RoPE turns pairs
        if isinstance(base, str) or not (np.isfinite(base) and base > 0):
            return REFUSE
        return None if isinstance(interleave, bool) else REFUSE

    return Case(make, oracle)


def state_dict_shapes_case():
    def make(data):
        expected = {"a.weight": (2, 3), "b.weight": (3,)}
        given = dict(expected)
        change = pick(data, None, "shape", "missing", "extra")
        if change == "shape":
            given["a.weight"] = (3, 2)
        elif change == "missing":
            del given["b.weight"]
        elif change == "extra":
            given["c.weight"] = (1,)
        strict = data.draw(st.booleans())
        return lambda: ((expected, given, strict), {})

    def oracle(expected, given, strict):
        for name, shape in given.items():
            if name in expected and tuple(shape) != tuple(expected[name]):
                return REFUSE
        return REFUSE if strict and set(given) != set(expected) else None

    return Case(make, oracle)


def rms_norm_case(framework):
    """latent_numpy.rms_norm, or latent_torch.RMSNorm(d, eps)(x)."""

    def make(data):
        d = data.draw(st.integers(1, 3))
        x = normal(data, (2, pick(data, d, d + 1)))
        weight = normal(data, (d,), nan=False)
        eps = pick(data, data.draw(st.sampled_from([1e-6, 0.1])), -1.0, np.nan)
        if framework == "numpy":
            inputs = lambda: ((x, weight, eps), {})  # noqa: E731
        else:
            size = pick(data, d, 0, -1, 2.0)
            inputs = lambda: ((size,), {"eps": eps, "dtype": torch.float64})  # noqa: E731

            def result(module):
                with torch.no_grad():
                    module.weight.copy_(torch.from_numpy(weight))
                return module(torch.from_numpy(x))

            inputs.result = result

        def expected():
            if np.isnan(x).any() or x.shape[-1] != d:
                return REFUSE
            if not (np.isfinite(eps) and eps > 0):
                return REFUSE
            return rms64(x, weight, eps)

        inputs.expected = expected
        return inputs

    return Case(make, None)


def content_keys_case():
    """rope_on_the_content_keys: exact, as cached and turned scores."""

    def make(data):
        module = latent_module("torch", data, latent_config(data, even=True))
        t = data.draw(st.integers(1, 3))
        x = normal(data, (1, t, 4))
        positions = pick(data, torch.arange(t), torch.tensor([np.nan] * t))

        def expected():
            if np.isnan(x).any() or np.isnan(f64(positions)).any():
                return REFUSE
            q_nope, _, c_kv, _, w_uk, _ = latent_parts64(module, x, positions)
            base, c = module.rope_base, c_kv[:, None]  # (B, 1, T, d_c)
            q_t = rope64(q_nope, f64(positions), base)  # R_t q
            k_c = c @ np.swapaxes(w_uk, -2, -1)  # W_UK c_s, per head
            k_s = rope64(k_c, f64(positions), base)  # R_s W_UK c_s
            q_latent = q_t @ w_uk  # W_UK^T R_t q
            c_s = rope64(c, f64(positions), base)  # R_s c_s
            return (
                q_t @ np.swapaxes(k_s, -2, -1),
                q_latent @ np.swapaxes(c, -2, -1),
                q_latent @ np.swapaxes(c_s, -2, -1),
            )

        inputs = lambda: ((module, torch.from_numpy(x), positions), {})  # noqa: E731
        inputs.expected = expected
        return inputs

    return Case(make, None)


def random_chunks(data, t):
    """Positive chunk lengths summing to t; a zero or a short sum if
    faulty."""
    chunks, left = [], t
    while left:
        chunks.append(data.draw(st.integers(1, left)))
        left -= chunks[-1]
    return pick(data, chunks, [*chunks, 0], chunks[:-1] or [0])


def cached_latent_case():
    def make(data):
        module = latent_module("torch", data, latent_config(data))
        t = data.draw(st.integers(1, 4))
        x = normal(data, (data.draw(st.integers(1, 2)), t, 4))
        chunks = random_chunks(data, t)
        absorbed = data.draw(st.booleans())

        def expected():
            if np.isnan(x).any() or sum(chunks) != t or 0 in chunks:
                return REFUSE
            causal = np.triu(np.ones((t, t), bool), 1)
            return mla64(module, x, causal)[0]

        inputs = lambda: (  # noqa: E731
            (module, torch.from_numpy(x), chunks),
            {"absorbed": absorbed},
        )
        inputs.expected = expected
        return inputs

    return Case(make, None)


def cache_bytes_case():
    def make(data):
        dtype = data.draw(
            st.sampled_from([torch.float32, torch.float64, torch.bfloat16])
        )
        b, t = data.draw(st.integers(0, 2)), pick(data, 2, 0)  # B = 0 too
        kind = data.draw(st.sampled_from(["latent", "kv"]))
        if kind == "latent":
            cache = latent_torch.LatentCache()
            if t:
                cache.latent = torch.zeros(b, t, 3, dtype=dtype)
                cache.rope_key = torch.zeros(b, t, 2, dtype=dtype)
            per_token = 3 + 2  # c_KV and k_rope
        else:
            cache = kv_cache.KVCache()
            if t:
                cache.append(*(torch.zeros(b, 2, t, 3, dtype=dtype),) * 2)
            per_token = 2 * 2 * 3  # K and V, 2 heads of 3
        size = torch.finfo(dtype).bits // 8
        inputs = lambda: ((cache,), {})  # noqa: E731
        inputs.expected = lambda: (
            REFUSE if not t else np.array(per_token * size)
        )
        return inputs

    return Case(make, None)


def latent_bytes_case(function):
    """Bytes per token: the latent cache, or the expanded K and V."""

    def make(data):
        config = latent_config(data)
        config["qk_rope_head_dim"] = pick(data, 2, 3)
        shapes = {k: v for k, v in config.items() if not k.startswith("rope")}
        as_module = config["qk_rope_head_dim"] == 2 and data.draw(
            st.booleans()
        )
        source = latent_module("torch", data, config) if as_module else shapes
        source = pick(data, source, [4, 1])
        dtype = data.draw(
            st.sampled_from([None, torch.float32, torch.bfloat16])
        )

        def expected():
            if not isinstance(source, dict | nn.Module):
                return REFUSE
            if config["qk_rope_head_dim"] % 2:
                return REFUSE
            default = torch.float64 if as_module else torch.bfloat16
            size = torch.finfo(dtype or default).bits // 8
            if function == "latent":  # c_KV and the shared k_rope
                width = config["kv_lora_rank"] + config["qk_rope_head_dim"]
            else:  # per head: k (d_nope + d_rope) and v (d_v)
                width = config["n_head"] * (
                    config["qk_nope_head_dim"]
                    + config["qk_rope_head_dim"]
                    + config["v_head_dim"]
                )
            return np.array(width * size)

        inputs = lambda: ((source,), {"dtype": dtype})  # noqa: E731
        inputs.expected = expected
        return inputs

    return Case(make, None)


def decode_flops_case():
    def make(data):
        config = latent_config(data)
        shapes = {k: v for k, v in config.items() if not k.startswith("rope")}
        as_module = data.draw(st.booleans())
        source = latent_module("torch", data, config) if as_module else shapes
        n_key = cost_size(data, data.draw(st.integers(1, 5)))
        absorbed = pick(data, data.draw(st.booleans()), "no")
        return lambda: ((source, n_key), {"absorbed": absorbed})

    def oracle(source, n_key, absorbed):
        if not is_int(n_key, 1) or not isinstance(absorbed, bool):
            return REFUSE
        s = source if isinstance(source, dict) else vars(source)
        h, d, d_c = s["n_head"], s["d_model"], s["kv_lora_rank"]
        d_nope, d_rope = s["qk_nope_head_dim"], s["qk_rope_head_dim"]
        d_v, q_rank = s["v_head_dim"], s["q_lora_rank"]
        d_qk = d_nope + d_rope
        if q_rank is None:  # one token: (1, d) @ (d, H d_qk)
            queries = matmul_flops((1, 1, d, h * d_qk))
        else:  # (1, d) @ (d, q_rank), then (1, q_rank) @ (q_rank, H d_qk)
            queries = matmul_flops((1, 1, d, q_rank), (1, 1, q_rank, h * d_qk))
        if absorbed:  # q_nope W_UK per head; the mixed latent W_UV^T
            up = matmul_flops((h, 1, d_nope, d_c), (h, 1, d_c, d_v))
            scores = matmul_flops((h, 1, d_c + d_rope, n_key))
            mix = matmul_flops((h, 1, n_key, d_c))
        else:  # every cached latent expanded: (n_key, d_c) @ (d_c, ...)
            up = matmul_flops((1, n_key, d_c, h * (d_nope + d_v)))
            scores = matmul_flops((h, 1, d_qk, n_key))
            mix = matmul_flops((h, 1, n_key, d_v))
        return {
            "queries": queries,
            "latents": matmul_flops((1, 1, d, d_c + d_rope)),
            "up_projections": up,
            "scores": scores,
            "weighted_sum": mix,
            "output": matmul_flops((1, 1, h * d_v, d)),
        }

    return Case(make, oracle)


def yarn_case():
    def make(data):
        factor = pick(
            data,
            data.draw(st.sampled_from([1, 4, 40.0, 0.5, np.float64(8)])),
            *(np.nan, np.inf, "4", True),
        )
        mscale = pick(
            data, data.draw(st.sampled_from([1.0, 0.707])), np.nan, None
        )
        return lambda: ((factor, mscale), {})

    def oracle(factor, mscale):
        for value in (factor, mscale):
            if isinstance(value, bool) or not isinstance(value, int | float):
                return REFUSE
            if not np.isfinite(value):
                return REFUSE
        if factor <= 1:
            return np.array(1.0)
        return np.array(0.1 * mscale * math.log(factor) + 1.0)

    return Case(make, oracle)


# -- the rolling and the cross-attention caches (kv_cache) ---------------


def sliding64(q, k, window, sink_tokens):
    return rule_blocked64(
        "sliding_window_mask", q, k, window=window, sink_tokens=sink_tokens
    )


def rolling_forward_case():
    """cached_forward with a window: a RollingKVCache, rolling_step."""

    def make(data):
        module = module_of("torch", data)
        t = data.draw(st.integers(1, 5))
        x = normal(data, (data.draw(st.integers(1, 2)), t, module.d_model))
        chunks = random_chunks(data, t)
        window = pick(data, data.draw(st.integers(1, 3)), 0, None)
        sinks = pick(data, data.draw(st.integers(0, 2)), -1)

        def expected():
            if np.isnan(x).any() or sum(chunks) != t or 0 in chunks:
                return REFUSE
            if not (is_int(window, 1) and is_int(sinks, 0)):
                return REFUSE
            p = np.arange(t, dtype=np.float64)
            mask = sliding64(p[:, None], p[None, :], window, sinks)
            return mha64(module, x, mask)

        inputs = lambda: (  # noqa: E731
            (module, torch.from_numpy(x), chunks),
            {"window": window, "sink_tokens": sinks},
        )
        inputs.expected = expected
        return inputs

    return Case(make, None)


def cross_module(data):
    """A float64 torch module without RoPE (RoPE refused if faulty)."""
    module = module_of("torch", data)
    if module.rope and not faulty(data):
        module.rope = False
    return module


def cross_case(function):
    def make(data):
        module = cross_module(data)
        b, s = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 4))
        d = module.d_model
        if function == "cross_keys_values":
            d = pick(data, d, d + 1)
        context = normal(data, (b, s, d))
        x = normal(data, (b, data.draw(st.integers(1, 2)), module.d_model))
        lengths = np.random.default_rng(s).integers(1, s + 1, b)
        padding = (
            np.arange(s)[None, None, None, :] >= lengths[:, None, None, None]
        )
        padding = data.draw(st.sampled_from([None, padding]))
        (wq, bq), (wk, bk), (wv, bv), (wo, bo) = weights_of(module)
        dh = module.d_head

        def heads(y, w, bias):
            y = y @ w + (0.0 if bias is None else bias)
            return y.reshape(*y.shape[:2], -1, dh).transpose(0, 2, 1, 3)

        def expected():
            if d != module.d_model or np.isnan(context).any():
                return REFUSE
            k, v = heads(context, wk, bk), heads(context, wv, bv)
            if function == "cross_keys_values":  # no RoPE across
                return REFUSE if module.rope else (k, v)
            if np.isnan(x).any():
                return REFUSE
            out = attention64(heads(x, wq, bq), k, v, padding)
            if out is REFUSE:
                return REFUSE
            merged = out[0].transpose(0, 2, 1, 3).reshape(*x.shape)
            return merged @ wo + (0.0 if bo is None else bo)

        def inputs():
            ctx = torch.from_numpy(context)
            if function == "cross_keys_values":
                return (module, ctx), {}
            keys_values = [  # as cross_keys_values gives them
                torch.from_numpy(heads(context, w, bias))
                for w, bias in ((wk, bk), (wv, bv))
            ]
            pad = None if padding is None else torch.from_numpy(padding)
            return (module, torch.from_numpy(x), keys_values, pad), {}

        inputs.expected = expected
        return inputs

    return Case(make, None)


# -- the tiled pass's rules (tiled) and the trained heads (induction) ----


def bound_rule(data, ref):
    """A mask rule with its sizes bound; a broken one if faulty."""
    name = data.draw(st.sampled_from(sorted(RULE_SIZES)))
    sizes = {
        n: data.draw(st.integers(max(least, 1), 3))
        for n, least in RULE_SIZES[name].items()
    }
    rule = functools.partial(getattr(ref, name), **sizes)
    rule.oracle = lambda q, k: rule_blocked64(name, q, k, **sizes)
    broken = {
        "ints": lambda q, k: np.zeros((len(q), len(k)), dtype=np.int64),
        "shape": lambda q, k: np.zeros((len(q) + 1, len(k)), dtype=bool),
        "scalar": lambda q, k: 0,
    }
    choice = pick(data, "rule", *broken)
    return rule if choice == "rule" else broken[choice]


def position_rule_case():
    def make(data):
        ref = data.draw(st.sampled_from([numpy_ref, torch_ref]))
        rule = pick(data, bound_rule(data, ref), None, 3)
        causal = data.draw(st.booleans())
        tq, tk = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 4))
        seed = data.draw(st.integers(0, 2**16), label="seed")
        q_pos, k_pos = (
            np.random.default_rng(seed + n).integers(0, 6, t)
            for n, t in enumerate((tq, tk))
        )
        as_ref = torch.from_numpy if ref is torch_ref else np.asarray
        inputs = lambda: ((rule, causal, (), ref), {})  # noqa: E731
        inputs.result = lambda tile_rule: (
            None
            if tile_rule is None
            else tile_rule(as_ref(q_pos), as_ref(k_pos))
        )

        def expected():
            if rule is None:
                return None
            if not hasattr(rule, "oracle"):
                return REFUSE
            q, k = f64(q_pos)[:, None], f64(k_pos)[None, :]
            return rule.oracle(q, k) | (causal & (k > q))

        inputs.expected = expected
        return inputs

    return Case(make, None)


def tiles_computed_case():
    def make(data):
        ref = data.draw(st.sampled_from([numpy_ref, torch_ref]))
        rule = pick(data, bound_rule(data, ref), None)
        tq, tk = data.draw(st.integers(0, 5)), data.draw(st.integers(1, 6))
        seed = data.draw(st.integers(0, 2**16), label="seed")
        q_pos = np.sort(np.random.default_rng(seed).integers(0, 8, tq))
        k_pos = np.arange(tk)
        q_pos = pick(data, q_pos, q_pos[None], q_pos + 0.5)
        blocks = [cost_size(data, data.draw(st.integers(1, 3))) for _ in "qk"]
        inputs = lambda: ((rule, q_pos, k_pos, *blocks), {})  # noqa: E731

        def expected():
            if not hasattr(rule, "oracle") or q_pos.ndim != 1:
                return REFUSE
            if not all(is_int(b, 1) for b in blocks) or (q_pos % 1).any():
                return REFUSE
            blocked = rule.oracle(f64(q_pos)[:, None], f64(k_pos)[None, :])
            (bq, bk), computed, total = blocks, 0, 0
            for i in range(0, tq, bq):
                for j in range(0, tk, bk):
                    total += 1
                    computed += not blocked[i : i + bq, j : j + bk].all()
            return computed, total

        inputs.expected = expected
        return inputs

    return Case(make, None)


def copying_case():
    """induction.copying on an untrained two-layer model, in float32."""

    def make(data):
        vocab, t = 5, data.draw(st.integers(6, 8))
        torch.manual_seed(data.draw(st.integers(0, 100)))
        model = induction.AttentionOnly(vocab, 8, 4, 2)
        generator = torch.Generator().manual_seed(data.draw(st.integers(0, 9)))
        batch = induction.repeated_segments(2, t, vocab, generator)
        kind = pick(data, "ok", "no copy", "vocab")
        if kind == "no copy":
            batch = batch._replace(
                copy_from=torch.full_like(batch.copy_from, -1)
            )
        elif kind == "vocab":
            batch = batch._replace(tokens=batch.tokens + vocab)

        def expected():
            if kind != "ok":
                return REFUSE
            model64 = copy.deepcopy(model).double()
            with torch.no_grad():
                heads = f64(model64(batch.tokens)[2])  # (L, B, H, T, dh)
            unembed = f64(model64.unembed.weight)  # (vocab, d_model)
            scores = np.zeros((len(model64.layers), model64.n_head))
            rows, queries = np.nonzero(batch.copy_from.numpy() >= 0)
            for n, mha in enumerate(model64.layers):
                wo = f64(mha.wo.weight)  # (d_model, H dh), nn.Linear's
                dh = mha.d_head
                for h in range(model64.n_head):
                    cols = wo[:, h * dh : (h + 1) * dh]  # head h's share
                    picked = []
                    for r, q in zip(rows, queries, strict=True):
                        logits = unembed @ (cols @ heads[n, r, h, q])
                        letter = batch.tokens[r, batch.copy_from[r, q]]
                        picked.append(logits[letter] - logits.mean())
                    scores[n, h] = np.mean(picked)
            return scores

        inputs = lambda: ((model, batch), {})  # noqa: E731
        inputs.expected = expected
        return inputs

    return Case(make, None)


def sinusoid_case():
    def make(data):
        n = pick(data, data.draw(st.integers(0, 5)), -1, 2.0)
        d = pick(data, data.draw(st.sampled_from([4, 6, 8])), 3, 0)
        layout = pick(
            data, data.draw(st.sampled_from(["interleaved", "halves"])), "x"
        )
        freqs = pick(data, data.draw(st.sampled_from(["paper", "fairseq"])), 1)
        kwargs = {"layout": layout, "frequencies": freqs}
        return lambda: ((n, d), kwargs)

    def oracle(n, d, layout, frequencies):
        if not is_int(n, 0) or not is_int(d, 2) or d % 2:
            return REFUSE
        if layout not in ("interleaved", "halves"):
            return REFUSE
        if frequencies not in ("paper", "fairseq"):
            return REFUSE
        pe = np.zeros((n, d))
        for p in range(n):
            for i in range(d // 2):
                if frequencies == "paper":
                    w = 10000.0 ** (-2 * i / d)
                else:
                    w = 10000.0 ** (-i / (d / 2 - 1))
                s_at, c_at = (2 * i, 2 * i + 1)
                if layout == "halves":
                    s_at, c_at = i, i + d // 2
                pe[p, s_at], pe[p, c_at] = math.sin(p * w), math.cos(p * w)
        return pe

    return Case(make, oracle)


def t5_bucket64(rel, bidirectional, num_buckets, max_distance):
    """T5's bucket of one relative position, from the definition."""
    n, offset = num_buckets, 0
    if bidirectional:
        n //= 2
        offset = n if rel > 0 else 0
        distance = abs(rel)
    else:
        distance = max(-rel, 0)
    exact = n // 2
    if distance < exact:
        return offset + distance
    log_part = math.log(distance / exact) / math.log(max_distance / exact)
    return offset + min(exact + int(log_part * (n - exact)), n - 1)


def t5_sizes(data):
    bidirectional = pick(data, data.draw(st.booleans()), 1)
    buckets = pick(data, data.draw(st.sampled_from([32, 8])), 1, 2.0)
    distance = pick(data, data.draw(st.sampled_from([128, 20])), 1, True)
    return {
        "bidirectional": bidirectional,
        "num_buckets": buckets,
        "max_distance": distance,
    }


def t5_sizes_ok(bidirectional, num_buckets, max_distance):
    if not isinstance(bidirectional, bool) or not is_int(num_buckets, 4):
        return False
    exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
    return is_int(max_distance, exact + 1)


def t5_bucket_case():
    def make(data):
        seed = data.draw(st.integers(0, 2**16), label="seed")
        rel = np.random.default_rng(seed).integers(-300, 300, (2, 3))
        rel = pick(data, rel, rel + 0.5, rel > 0)
        sizes = t5_sizes(data)
        return lambda: ((rel,), dict(sizes))

    def oracle(rel, **sizes):
        if rel.dtype.kind not in "iu" or not t5_sizes_ok(**sizes):
            return REFUSE
        flat_rel = [t5_bucket64(int(r), **sizes) for r in rel.flat]
        return np.array(flat_rel).reshape(rel.shape)

    return Case(make, oracle)


def t5_bias_case():
    def make(data):
        tq = pick(data, data.draw(st.integers(1, 4)), -1, 1.5)
        tk = data.draw(st.integers(1, 40))
        sizes = t5_sizes(data)
        rows = sizes["num_buckets"] if is_int(sizes["num_buckets"], 1) else 3
        table = normal(data, (pick(data, rows, rows + 1), 2))
        return lambda: ((tq, tk, table), dict(sizes))

    def oracle(tq, tk, table, **sizes):
        if not is_int(tq, 0) or not t5_sizes_ok(**sizes):
            return REFUSE
        if table.shape != (sizes["num_buckets"], 2):
            return REFUSE
        if not np.isfinite(table).all():
            return REFUSE
        out = np.empty((2, tq, tk))
        for i in range(tq):
            for j in range(tk):
                out[:, i, j] = table[t5_bucket64(j - i, **sizes)]
        return out

    return Case(make, oracle)


def rope_frequencies64(d, base, scaling, seq_len):
    """inv_freq and attention factor from each rule's equations."""
    rope_type = scaling.get("rope_type", "default")
    r = int(d * scaling.get("partial_rotary_factor", 1.0))
    theta = np.array([base ** (-2 * i / r) for i in range(r // 2)])
    factor = scaling.get("factor")
    length = scaling.get("original_max_position_embeddings")
    if rope_type == "default":
        return theta, 1.0
    if rope_type == "linear":
        return theta / factor, 1.0
    if rope_type == "dynamic":
        s = max(seq_len or length, length)
        new = base * (factor * s / length - factor + 1) ** (r / (r - 2))
        return np.array([new ** (-2 * i / r) for i in range(r // 2)]), 1.0
    if rope_type == "llama3":
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        out = []
        for f in theta:
            wavelength = 2 * math.pi / f
            if wavelength < length / high:
                out.append(f)
            elif wavelength > length / low:
                out.append(f / factor)
            else:
                t = (length / wavelength - low) / (high - low)
                out.append((1 - t) * f / factor + t * f)
        return np.array(out), 1.0
    if rope_type == "longrope":
        key = "long_factor" if seq_len and seq_len > length else "short_factor"
        scale = scaling.get("attention_factor")
        if scale is None:
            scale = 1.0
            if factor > 1:
                scale = math.sqrt(1 + math.log(factor) / math.log(length))
        return theta / np.array(scaling[key]), scale
    return REFUSE


def rope_frequencies_case():
    def make(data):
        rope_type = data.draw(
            st.sampled_from(["default", "linear", "dynamic", "llama3"])
        )
        d = pick(data, data.draw(st.sampled_from([8, 16, 64])), 7, 2.0)
        base = pick(data, data.draw(st.sampled_from([1e4, 5e5])), -1.0)
        scaling = {"rope_type": pick(data, rope_type, "ntk")}
        if rope_type != "default":
            scaling["factor"] = pick(data, 4.0, 0.5)
        if rope_type in ("dynamic", "llama3"):
            scaling["original_max_position_embeddings"] = 64
        if rope_type == "llama3":
            scaling |= {"low_freq_factor": 1.0, "high_freq_factor": 4.0}
        if data.draw(st.booleans()):
            scaling["partial_rotary_factor"] = pick(data, 0.5, 1.5)
        if pick(data, False, True):
            scaling.pop("factor", None)
        seq_len = pick(data, data.draw(st.sampled_from([None, 30, 200])), -1)
        return lambda: ((d, base, dict(scaling)), {"seq_len": seq_len})

    def oracle(d, base, scaling, seq_len):
        if not is_int(d, 2) or d % 2 or base <= 0:
            return REFUSE
        if seq_len is not None and not is_int(seq_len, 1):
            return REFUSE
        rope_type = scaling["rope_type"]
        if rope_type not in ("default", "linear", "dynamic", "llama3"):
            return REFUSE
        if rope_type != "default" and scaling.get("factor", 0) < 1:
            return REFUSE
        fraction = scaling.get("partial_rotary_factor", 1.0)
        if fraction > 1 or int(d * fraction) % 2:
            return REFUSE
        if rope_type == "dynamic" and int(d * fraction) < 4:
            return REFUSE
        return rope_frequencies64(d, base, scaling, seq_len)

    return Case(make, oracle)


def partial_rope_case(framework):
    def make(data):
        t, d = data.draw(st.integers(1, 3)), 8
        x = normal(data, (2, t, d))
        pos = np.random.default_rng(t).integers(0, 9, t)
        rotary_dim = pick(data, data.draw(st.sampled_from([2, 4, 8])), 3, 10)
        kwargs = {"rotary_dim": rotary_dim}
        if data.draw(st.booleans()):
            n_freq = rotary_dim // 2 if is_int(rotary_dim, 0) else 1
            freq = np.linspace(1.0, 0.01, n_freq)
            kwargs["inv_freq"] = pick(data, freq, freq[:-1], freq * np.nan)
        return lambda: ((frame(framework, x), pos), dict(kwargs))

    def oracle(x, positions, rotary_dim, inv_freq=None):
        x = f64(x)
        if np.isnan(x).any() or rotary_dim % 2 or rotary_dim > x.shape[-1]:
            return REFUSE
        r = rotary_dim
        if inv_freq is None:
            inv_freq = 1e4 ** (-2.0 * np.arange(r // 2) / r)
        if len(inv_freq) != r // 2 or not np.isfinite(inv_freq).all():
            return REFUSE
        angle = f64(positions)[:, None] * inv_freq  # (T, r / 2)
        cos, sin = np.cos(angle), np.sin(angle)
        a, b = x[..., : r // 2], x[..., r // 2 : r]
        turned = [a * cos - b * sin, a * sin + b * cos, x[..., r:]]
        return np.concatenate(turned, axis=-1)

    return Case(make, oracle)


def query_temperature_case():
    def make(data):
        seed = data.draw(st.integers(0, 2**16), label="seed")
        pos = np.random.default_rng(seed).integers(0, 40, 5)
        pos = pick(data, pos, pos - 50, pos + 0.5)
        floor = pick(data, data.draw(st.sampled_from([8192, 4, 7])), 0, -2)
        return lambda: ((pos,), {"floor_scale": floor, "attn_scale": 0.1})

    def oracle(positions, floor_scale, attn_scale):
        if positions.dtype.kind not in "iu" or (positions < 0).any():
            return REFUSE
        if floor_scale <= 0:
            return REFUSE
        steps = [math.floor((p + 1) / floor_scale) for p in positions]
        return np.array([1 + attn_scale * math.log(1 + s) for s in steps])

    return Case(make, oracle)


# -- attention in a server (serving) --------------------------------------


def merge_partials_case():
    """P partials of one attention, some empty (LSE +inf or -inf)."""

    def make(data):
        p, rows = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 3))
        outputs = normal(data, (p, rows, data.draw(st.integers(1, 3))))
        lses = normal(data, (p, rows), nan=False) * 3
        marks = [data.draw(st.sampled_from([0, 1, -1])) for _ in range(p)]
        for i, mark in enumerate(marks[1:], 1):  # partial 0 is never empty
            if mark:
                lses[i] = mark * np.inf
        lses = pick(data, lses, lses[:-1], lses.astype(bool), np.nan * lses)
        fw = data.draw(st.sampled_from(["numpy", "torch"]))
        return lambda: ((frame(fw, outputs), frame(fw, lses)), {})

    def oracle(outputs, lses):
        o, lse = f64(outputs), np.asarray(lses)
        if lse.dtype == bool or lse.shape != o.shape[:-1]:
            return REFUSE
        lse = lse.astype(np.float64)
        empty = np.isinf(lse)
        if np.isnan(lse).any() or np.isnan(o[~empty]).any():
            return REFUSE
        # L = log sum_p e^(L_p); o = sum_p e^(L_p - L) o_p
        total = np.log(np.where(empty, 0.0, np.exp(lse)).sum(axis=0))
        weights = np.where(empty, 0.0, np.exp(lse - total))
        merged = (weights[..., None] * np.nan_to_num(o)).sum(axis=0)
        return merged, total

    return Case(make, oracle)


def split_kv_decode_case():
    def make(data):
        q_shape, k_shape, v_shape = qkv_shapes(data)
        q, k, v = (normal(data, s) for s in (q_shape, k_shape, v_shape))
        splits = pick(data, data.draw(st.integers(1, 7)), 0, 1.5)
        return lambda: ((*(frame("torch", x) for x in (q, k, v)), splits), {})

    def oracle(q, k, v, num_splits):
        if not is_int(num_splits, 1) or np.isnan(f64(q)).any():
            return REFUSE
        if any(np.isnan(f64(x)).any() for x in (k, v)):
            return REFUSE
        result = attention64(q, k, v)
        if result is REFUSE:
            return REFUSE
        qq, kk = f64(q), f64(k)
        if qq.shape[-3] > kk.shape[-3] > 1:  # grouped, as attention64
            kk = np.repeat(kk, qq.shape[-3] // kk.shape[-3], -3)
        s = qq @ np.swapaxes(kk, -2, -1) / math.sqrt(qq.shape[-1])
        top = s.max(axis=-1)
        return result[0], top + np.log(np.exp(s - top[..., None]).sum(-1))

    return Case(make, oracle)


def varlen_attention_case():
    """Packed sequences of random lengths (some empty), causal or not."""

    def make(data):
        b = data.draw(st.integers(1, 3))
        lk = [data.draw(st.integers(0, 4)) for _ in range(b)]
        lq = [data.draw(st.integers(0, n)) for n in lk]
        lq[0] = pick(data, lq[0], lk[0] + 1)  # more queries than keys
        cu_q, cu_k = (np.concatenate([[0], np.cumsum(x)]) for x in (lq, lk))
        cu_k = pick(data, cu_k, cu_k[::-1], cu_k + 1, cu_k.astype(float))
        h, h_kv = data.draw(st.sampled_from([(1, 1), (2, 1), (4, 2), (2, 2)]))
        q = normal(data, (sum(lq), h, 3))
        k, v = (
            normal(data, (sum(lk), h_kv, 3)),
            normal(data, (sum(lk), h_kv, 2)),
        )
        causal = data.draw(st.booleans())
        args = (*(frame("torch", x) for x in (q, k, v)), cu_q, cu_k)
        return lambda: (args, {"causal": causal})

    def oracle(q, k, v, cu_q, cu_k, causal=True):
        cu_q, cu_k = np.asarray(cu_q), np.asarray(cu_k)
        if cu_k.dtype.kind != "i" or (np.diff(cu_k) < 0).any():
            return REFUSE
        if cu_k[0] != 0 or cu_k[-1] != k.shape[0]:
            return REFUSE
        out = np.zeros((q.shape[0], q.shape[1], v.shape[-1]))
        for i in range(len(cu_q) - 1):
            rows, keys = slice(*cu_q[i : i + 2]), slice(*cu_k[i : i + 2])
            lq, lk = rows.stop - rows.start, keys.stop - keys.start
            if lq == 0:
                continue
            if (causal and lq > lk) or lk == 0:
                return REFUSE
            mask = None
            if causal:  # bottom right: query j sees keys up to j + Lk - Lq
                mask = np.triu(np.ones((lq, lk), bool), k=1 + lk - lq)
            result = attention64(
                *(
                    np.swapaxes(f64(x)[s], 0, 1)
                    for x, s in ((q, rows), (k, keys), (v, keys))
                ),
                mask,
            )
            if result is REFUSE or np.isnan(result[0]).any():
                return REFUSE
            out[rows] = np.swapaxes(result[0], 0, 1)
        return out

    return Case(make, oracle)


def tree_mask_case():
    def make(data):
        n = data.draw(st.integers(0, 6))
        parents = [data.draw(st.integers(-1, i - 1)) for i in range(n)]
        if n:
            parents[-1] = pick(data, parents[-1], n - 1, -2)
        prefix = pick(data, data.draw(st.integers(0, 3)), -1, 1.5)
        kind = data.draw(st.sampled_from([list, np.asarray, torch.tensor]))
        return lambda: ((kind(parents), prefix), {})

    def oracle(parents, prefix_length):
        parents = [int(p) for p in parents]
        if not is_int(prefix_length, 0):
            return REFUSE
        if any(not -1 <= p < i for i, p in enumerate(parents)):
            return REFUSE
        n = len(parents)
        blocked = np.ones((n, prefix_length + n), bool)
        blocked[:, :prefix_length] = False
        for i in range(n):
            node = i
            while node >= 0:  # node i, then each ancestor in turn
                blocked[i, prefix_length + node] = False
                node = parents[node]
        return blocked

    return Case(make, oracle)


def verify_greedy_case():
    def make(data):
        n, vocab = data.draw(st.integers(0, 4)), data.draw(st.integers(1, 5))
        logits = normal(data, (n + 1, vocab))
        target = logits.argmax(axis=-1)
        draft = [
            int(t)
            if data.draw(st.booleans())
            else data.draw(st.integers(0, vocab - 1))
            for t in target[:n]
        ]
        draft = pick(data, draft, [*draft, 0], [vocab] * n)
        return lambda: ((list(draft), frame("torch", logits)), {})

    def oracle(draft_tokens, target_logits):
        logits = f64(target_logits)
        n = len(draft_tokens)
        if logits.shape[0] != n + 1 or np.isnan(logits).any():
            return REFUSE
        if any(t >= logits.shape[1] for t in draft_tokens):
            return REFUSE
        target = logits.argmax(axis=-1)
        accepted = 0
        while accepted < n and draft_tokens[accepted] == target[accepted]:
            accepted += 1
        return np.float64(accepted), np.float64(target[accepted])

    return Case(make, oracle)


def public(name):
    module, function = name.rsplit(".", 1)
    return getattr(importlib.import_module(f"mha_ref.{module}"), function)


def embed_case():
    """embedding.embed: torch's embedding lookup, in float64."""

    def make(data):
        vocab, d = data.draw(st.integers(1, 5)), data.draw(st.integers(1, 3))
        table = normal(data, pick(data, (vocab, d), (vocab,), (1, vocab, d)))
        shape = data.draw(st.sampled_from([(3,), (2, 3), (0,)]))
        seed = data.draw(st.integers(0, 2**16), label="ids")
        ids = np.random.default_rng(seed).integers(0, vocab, shape)
        ids = pick(data, ids, ids + vocab, ids - vocab, ids + 0.5, ids > 0)
        return lambda: ((ids, table), {})

    def oracle(ids, table):
        ids = np.asarray(ids)
        if ids.size == 0 and ids.dtype.kind == "f":  # [] reads as float
            ids = ids.astype(np.int64)
        if ids.dtype.kind not in "iu" or table.ndim != 2:
            return REFUSE
        if np.isnan(table).any():
            return REFUSE
        lookup = nn.functional.embedding  # IndexError out of range
        return lookup(torch.from_numpy(ids), torch.tensor(table)).numpy()

    return Case(make, oracle)


CASES = {
    "numpy_ref.softmax": softmax_case(),
    "numpy_ref.linear_backward": linear_backward_case(),
    "numpy_ref.sum_to_shape": sum_to_shape_case(),
    "numpy_ref.causal_mask": causal_mask_case(),
    "torch_ref.causal_mask": causal_mask_case(),
    "conventions.apply_rope_interleaved": rope_case(
        "apply_rope_interleaved", "torch", interleaved=True
    ),
    "conventions.interleaved_to_rotate_half": rope_permutation_case(),
    "kv_cache.cached_attention_example": examples_case("example", 2),
    "kv_cache.single_new_query": examples_case("single", 1),
    "kv_cache.single_query_is_causal": examples_case("is_causal", 1),
    "induction.corrupt": corrupt_case(),
    "induction.head_scores": head_scores_case(),
}
for fw in ("numpy", "torch"):
    CASES |= {
        f"{fw}_ref.attention": attention_case(fw),
        f"{fw}_ref.dot_product_attention": core_attention_case(fw),
        f"{fw}_ref.attention_backward": attention_case(fw, backward=True),
        f"{fw}_ref.softmax_backward": softmax_backward_case(fw),
        f"{fw}_ref.repeat_kv_heads": kv_heads_case(fw, "repeat"),
        f"{fw}_ref.sum_kv_heads": kv_heads_case(fw, "sum"),
        f"{fw}_ref.causal_mask_for_positions": positions_mask_case(fw),
        f"{fw}_ref.key_padding_mask": key_padding_case(fw),
        f"{fw}_ref.apply_rope": rope_case("apply_rope", fw),
        f"{fw}_ref.MultiHeadAttention": module_case(fw, "call"),
        f"tiled.tiled_attention_{fw}": attention_case(fw, tiled_pass=True),
        f"tiled.tiled_attention_backward_{fw}": attention_case(
            fw, backward=True, tiled_pass=True
        ),
    }
    CASES[f"tiled.tiled_attention_{fw}#causal"] = causal_positions_case(fw)
    CASES[f"{fw}_ref.attention#modifiers"] = modifiers_case(fw)
    CASES[f"tiled.tiled_attention_{fw}#modifiers"] = modifiers_case(
        fw, tiled_pass=True
    )
    CASES[f"tiled.tiled_attention_backward_{fw}#causal"] = (
        causal_positions_case(fw, backward=True)
    )
    CASES |= {
        f"{fw}_ref.{rule}": mask_rule_case(fw, rule)
        for rule in (
            "position_pairs",
            "sliding_window_mask",
            "chunked_mask",
            "document_mask",
            "prefix_lm_mask",
        )
    }
    CASES |= {
        f"{fw}_ref.document_ids": document_case(fw, "document_ids"),
        f"{fw}_ref.packed_causal_mask": document_case(fw, "packed"),
        f"{fw}_ref.softmax_with_sinks": sinks_case(fw),
        f"{fw}_ref.alibi_slopes": alibi_slopes_case(),
        f"{fw}_ref.alibi_bias": alibi_bias_case(fw),
        f"latent_{fw}.MultiHeadLatentAttention": latent_forward_case(fw),
    }
CASES |= {
    "conventions.causal_query_positions": causal_query_positions_case(),
    "conventions.rows_without_keys": mask_conversion_case("rows_without_keys"),
    "conventions.to_sdpa_mask": mask_conversion_case("to_sdpa_mask"),
    "conventions.to_mask_mod": mask_conversion_case("to_mask_mod"),
    "conventions.window_from_hugging_face": window_case("from"),
    "conventions.window_to_hugging_face": window_case("to"),
    "conventions.alibi_slopes_attention_gym": alibi_slopes_case(gym=True),
    "conventions.alibi_bias_key_only": alibi_row_bias_case("key_only"),
    "conventions.alibi_bias_last_key": alibi_row_bias_case("last_key"),
    "conventions.alibi_bias_symmetric": alibi_bias_case(
        "numpy", symmetric=True
    ),
    "conventions.learned_sink_as_key": sink_key_case(),
    "conventions.mask_then_softcap": mask_then_softcap_case(),
    "conventions.from_bthd": layout_case(4, (1, 2)),
    "conventions.from_sequence_first": layout_case(3, (0, 1)),
    "conventions.kv_head_of": kv_head_of_case(),
    "conventions.default_scale": default_scale_case(),
    "conventions.additive_mask": additive_mask_case(),
    "cost.attention_flops": flops_case("attention_flops"),
    "cost.useful_flops": flops_case("useful_flops"),
    "cost.tiled_flops": flops_case("tiled_flops"),
    "cost.bytes_moved": flops_case("bytes_moved"),
    "cost.arithmetic_intensity": flops_case("intensity"),
    "cost.causal_tiles": causal_tiles_case(),
    "cost.kv_cache_bytes": kv_cache_bytes_case(),
    "cost.saved_activation_bytes": saved_activation_case(),
    "cost.decode_floor": roofline_case("decode_floor"),
    "cost.memory_bound_batch": roofline_case("memory_bound_batch"),
    "cost.memory_bound_from": onset_case(),
    "guards.shapes.latent_shapes": latent_shapes_case(),
    "guards.shapes.state_dict_shapes": state_dict_shapes_case(),
    "latent_numpy.rms_norm": rms_norm_case("numpy"),
    "latent_torch.RMSNorm": rms_norm_case("torch"),
    "latent_torch.rope_on_the_content_keys": content_keys_case(),
    "latent_torch.cached_latent_forward": cached_latent_case(),
    "latent_torch.cache_bytes_per_token": cache_bytes_case(),
    "latent_torch.latent_cache_bytes_per_token": latent_bytes_case("latent"),
    "latent_torch.expanded_kv_bytes_per_token": latent_bytes_case("kv"),
    "latent_torch.decode_step_flops": decode_flops_case(),
    "latent_torch.yarn_mscale": yarn_case(),
    "kv_cache.cached_forward#window": rolling_forward_case(),
    "kv_cache.cross_keys_values": cross_case("cross_keys_values"),
    "kv_cache.cross_step": cross_case("cross_step"),
    "tiled.position_rule": position_rule_case(),
    "tiled.tiles_computed": tiles_computed_case(),
    "induction.copying": copying_case(),
    "positions.sinusoidal_encoding": sinusoid_case(),
    "positions.t5_relative_bucket": t5_bucket_case(),
    "positions.t5_bias": t5_bias_case(),
    "positions.rope_frequencies": rope_frequencies_case(),
    "positions.query_temperature": query_temperature_case(),
    "numpy_ref.apply_rope#partial": partial_rope_case("numpy"),
    "torch_ref.apply_rope#partial": partial_rope_case("torch"),
}
CASES |= {
    "serving.merge_partials": merge_partials_case(),
    "serving.split_kv_decode": split_kv_decode_case(),
    "serving.varlen_attention": varlen_attention_case(),
    "serving.tree_mask": tree_mask_case(),
    "serving.verify_greedy": verify_greedy_case(),
    "embedding.embed": embed_case(),
}
MODULE_PATHS = {
    "torch_ref.sdpa_forward": "sdpa",
    "torch_ref.library_forward": "library",
    "torch_ref.library_version": "library_version",
    "kv_cache.cached_forward": "cached",
    "torch_ref.to_numpy": "to_numpy",
}
CASES |= {
    name: module_case("torch", path) for name, path in MODULE_PATHS.items()
}

# public functions fed through another entry, or tested elsewhere because
# they have no float64 value to compare (a guard, a training loop, a
# memory measurement, a deliberately wrong pitfall)
ELSEWHERE = {
    "numpy_ref.kv_group": "shapes only: test_grouped_heads.py",
    "conventions.sliding_window_mod": "FlexAttention: test_masks_flex.py",
    "conventions.chunked_mod": "FlexAttention: test_masks_flex.py",
    "conventions.prefix_lm_mod": "FlexAttention: test_masks_flex.py",
    "conventions.document_mod": "FlexAttention: test_masks_flex.py",
    "conventions.softcap_mod": "FlexAttention: test_scores_flex.py",
    "conventions.alibi_mod": "FlexAttention: test_scores_flex.py",
    "conventions.relative_bias_mod": "FlexAttention: test_scores_flex.py",
    "conventions.capped_then": "FlexAttention: test_scores_flex.py",
    "conventions.with_sinks": "FlexAttention's lse: test_scores_flex.py",
    "conventions.checkpoint_to_rotate_half": "transformers' Qwen2/Qwen3: "
    "test_conventions.py",
    "kv_cache.KVCache": "kv_cache.cached_forward",
    "kv_cache.cached_step": "kv_cache.cached_forward",
    "kv_cache.RollingKVCache": "kv_cache.cached_forward#window",
    "kv_cache.rolling_step": "kv_cache.cached_forward#window",
    "latent_torch.LatentCache": "latent_torch.cached_latent_forward",
    "latent_torch.cached_latent_step": "latent_torch.cached_latent_forward",
    "guards.shapes.rms_norm_inputs": "the guard of rms_norm and RMSNorm",
    "guards.cost.NotAnIntegerError": "an exception class, raised by checked",
    "induction.AttentionOnly": "trains or runs a model: test_induction.py",
    "induction.Segments": "a NamedTuple of induction.repeated_segments",
    "induction.repeated_segments": "induction.corrupt, head_scores",
    "induction.rule_accuracy": "a vote with no float oracle: test_induction",
    "induction.train": "trains a model: test_induction.py",
    "induction.accuracy": "runs a model: test_induction.py",
    "induction.patching": "runs a model: test_induction.py",
    "induction.to_arrays": "a weight copy: test_induction.py",
    "induction.from_arrays": "a weight copy: test_induction.py",
    "induction.composition_scores": "weights vs forms: test_induction.py",
    "memory.peak_bytes_numpy": "measures bytes: test_tiled.py",
    "memory.peak_bytes_torch_cpu": "measures bytes: test_tiled.py",
    "tolerances.atol": "a table of tolerances: test_checks.py",
    "serving.PagedKVCache": "a cache with state: test_serving.py",
    "serving.paged_attention": "reads a PagedKVCache: test_serving.py",
    **{
        f"diagnose.{name}": "the checker: test_diagnose.py"
        for name in (
            "Case",
            "Finding",
            "Report",
            "Mistakes",
            "attend",
            "layer_forward",
            "explain",
            "attention_cases",
            "layer_cases",
            "attention",
            "layer",
            "main",
        )
    },
    **{
        f"solutions.{name}": "a reader's solution, unguarded on purpose: "
        "tests/docs/test_write_the_layer.py"
        for name in (
            "softmax",
            "attention",
            "split_heads",
            "merge_heads",
            "layer",
        )
    },
    **{
        f"diagnose_examples.{name}": "run by the checker: test_diagnose.py"
        for name in (
            "pitfall_layer",
            "einsum_layer",
            "loop_layer",
            "HFStyleAttention",
            "module_layer",
            "sdpa_mask_as_is",
            "llama_attention",
        )
    },
    **{
        f"{fw}_ref.{step}": "an unguarded step of dot_product_attention "
        "and attention, through them: test_core.py"
        for fw in ("numpy", "torch")
        for step in (
            "attention_scores",
            "apply_mask",
            "softmax_rows",
            "weighted_sum",
            "linear",
            "ScoreMod",
        )
    },
    **{
        f"tiled.{step}": "a step of the tiled passes, through them"
        for step in (
            "positions",
            "check_row_max",
            "online_softmax_update_numpy",
            "online_softmax_update_torch",
            "tile_mask_numpy",
            "tile_mask_torch",
            "backward_tile_numpy",
            "backward_tile_torch",
        )
    },
    **{
        f"pitfalls.{name}": "deliberately wrong: test_pitfalls.py"
        for name in (
            "wrong_split_heads",
            "wrong_scale_scores",
            "wrong_mask_after_softmax",
            "wrong_softmax_axis",
            "wrong_merge_heads",
            "wrong_copy_from_linear",
            "wrong_tiled_statistics_dtype",
            "wrong_cached_step",
            "wrong_tile_kv_heads",
        )
    },
}

# public functions added by other issues that still need a strategy and
# an oracle in CASES (none now)
UNREGISTERED = set()


def public_functions():
    """module.name of every public function and class of mha_ref, and
    guards.module.name of those of mha_ref/guards/."""
    found = set()
    for info in pkgutil.walk_packages(mha_ref.__path__, "mha_ref."):
        module = importlib.import_module(info.name)
        short = info.name.removeprefix("mha_ref.")
        for name, obj in vars(module).items():
            defined_here = getattr(obj, "__module__", None) == module.__name__
            if not name.startswith("_") and callable(obj) and defined_here:
                found.add(f"{short}.{name}")
    return found


MHA_REF = Path(mha_ref.__file__).parent
GUARD_MODULES = {  # each guard module: the one name code calls it by
    path.stem for path in MHA_REF.glob("checks*.py")
}


def _guard_home(module):
    # "mha_ref.guards.kv_cache" -> "guards.kv_cache"; "mha_ref.checks_x"
    # -> "checks_x"; None for a module that holds no guards
    parts = module.split(".")
    if parts[:2] == ["mha_ref", "guards"] and len(parts) == 3:
        return f"guards.{parts[2]}"
    return parts[-1] if parts[-1] in GUARD_MODULES else None


def guards_called_elsewhere():
    """module.<name> for each guard a mha_ref module calls: checks.name,
    or check.name after ``from mha_ref.guards import kv_cache as check``
    (guards.kv_cache.name), in any module; name() of a function imported
    from a guard module; and, in a guard module (checks*.py,
    guards/*.py), name() of its own."""
    called = set()
    for path in (*MHA_REF.glob("*.py"), *MHA_REF.glob("guards/*.py")):
        tree = ast.parse(path.read_text("utf-8"))
        in_guards = path.parent.name == "guards"
        here = f"guards.{path.stem}" if in_guards else path.stem
        modules = {name: name for name in GUARD_MODULES}  # local -> home
        homes = {}  # a local name -> (guard module, its name there)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.ImportFrom) and node.module):
                continue
            for alias in node.names:
                local = alias.asname or alias.name
                if node.module == "mha_ref.guards":
                    modules[local] = f"guards.{alias.name}"
                elif home := _guard_home(node.module):
                    homes[local] = (home, alias.name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                name = node.func.id
                if name in homes:
                    called.add("{}.{}".format(*homes[name]))
                elif in_guards or path.stem in GUARD_MODULES:
                    called.add(f"{here}.{name}")
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in modules
            ):
                called.add(f"{modules[node.value.id]}.{node.attr}")
    return called


UNIT_TESTS = Path(__file__).parent


def snake(name):
    """A class's name as a test names it: MultiHeadAttention ->
    multi_head_attention; a function's name is left as it is."""
    words = r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])"
    return re.sub(words, "_", name).lower()  # RMSNorm -> rms_norm


def found_by_test_name(folder=UNIT_TESTS):
    """module.name of each public function or class that a unit test
    module imports from its mha_ref module (``from mha_ref.rms import
    rms_norm``) and tests by name: a test function named
    ``test_<name>...`` (a class: its name in snake case). Such a
    function's tests are found by its name, so it needs no entry here."""
    found = set()
    for path in sorted(folder.rglob("test_*.py")):
        tree = ast.parse(path.read_text("utf-8"))
        imported = {  # name -> module, for from mha_ref.<module> import
            alias.name: node.module.removeprefix("mha_ref.")
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            and (node.module or "").startswith("mha_ref.")
            for alias in node.names
        }
        tests = [
            node.name
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.name.startswith("test_")
        ]
        for name, module in imported.items():
            prefix = f"test_{snake(name)}"
            if any(t == prefix or t.startswith(prefix + "_") for t in tests):
                found.add(f"{module}.{name}")
    return found


def test_every_public_function_has_an_entry():
    """A new public function must be registered above, or tested by
    name in a unit test that imports it (see found_by_test_name): this fails
    with the names that are neither."""
    registered = {name.split("#")[0] for name in CASES}
    registered |= set(ELSEWHERE) | UNREGISTERED | found_by_test_name()
    # the guards (mha_ref/checks*.py) are fed through the functions that
    # call them; one that no module calls needs an entry of its own
    registered |= guards_called_elsewhere()
    missing = sorted(public_functions() - registered)
    assert not missing, (
        f"public functions of mha_ref with no entry in "
        f"{Path(__file__).name} (CASES, ELSEWHERE or UNREGISTERED) and "
        f"no unit test named after them (test_<name>_...): {missing}"
    )
    gone = sorted(
        ({n.split("#")[0] for n in CASES} | set(ELSEWHERE))
        - public_functions()
    )
    assert not gone, f"entries for functions that no longer exist: {gone}"


def test_found_by_test_name_needs_the_import_and_a_test_named_after_it(
    tmp_path,
):
    (tmp_path / "test_rms.py").write_text(
        "from mha_ref.rms import rms_norm, RMSNorm, rms_scale\n"
        "def test_rms_norm_gives_unit_rms(): pass\n"
        "def test_rms_norm_module_matches(): pass\n"
        "def test_the_scale(): pass\n"  # names no function
    )
    (tmp_path / "test_layer.py").write_text(
        "from mha_ref.layer import MultiHeadAttention\n"
        "def test_multi_head_attention(): pass\n"
    )
    assert found_by_test_name(tmp_path) == {
        "rms.rms_norm",
        "rms.RMSNorm",  # snake case rms_norm: the same tests name it
        "layer.MultiHeadAttention",
    }
    assert "rms.rms_scale" not in found_by_test_name(tmp_path)


def flat(result):
    """Every array in a result (tensors, tuples, dicts) as float64."""
    if result is None:
        return []
    if isinstance(result, tuple | list):
        return [a for item in result for a in flat(item)]
    if isinstance(result, dict):
        return [a for key in sorted(result) for a in flat(result[key])]
    if isinstance(result, torch.Tensor):
        if result.dtype == torch.bool:
            return [result.cpu().numpy()]
        return [result.detach().cpu().double().numpy()]
    return [np.asarray(result)]


def tolerance(result):
    """1e-9 for float64 results, 1e-4 for float32 ones, 1e-2 for float16
    and bfloat16 ones (8 bits of mantissa: 2**-9 relative)."""
    dtypes = {
        str(a.dtype).removeprefix("torch.")
        for a in (result if isinstance(result, tuple) else (result,))
        if hasattr(a, "dtype")
    }
    if dtypes & {"float16", "bfloat16"}:
        return 1e-2
    return 1e-4 if "float32" in dtypes else 1e-9


def check_result(name, got, expected, inputs):
    if name.endswith("to_numpy"):  # the twin's output: the module's
        module = got[0] if isinstance(got, tuple) else got
        x = np.random.default_rng(0).standard_normal((1, 2, got.d_model))
        got, expected = module(x)[0], mha64(inputs.module, x)
    elif name == "torch_ref.library_version":
        x = np.random.default_rng(0).standard_normal((1, 2, got.embed_dim))
        tx = torch.from_numpy(x)
        got = got(tx, tx, tx, need_weights=False)[0]
        expected = mha64(inputs.module, x)
    elif name == "induction.corrupt":
        batch = inputs()[0][0]
        i = torch.arange(batch.tokens.shape[1])[None, :]
        s, n = batch.start[:, None], batch.length[:, None]
        first = (i >= s) & (i < s + n)
        assert torch.all(got.tokens[first] != batch.tokens[first])
        assert torch.equal(got.tokens[~first], batch.tokens[~first])
        return
    values, oracle = flat(got), flat(expected)
    for value in values:
        if value.dtype.kind == "f":
            assert np.isfinite(value).all(), f"{name} returned NaN or inf"
    oracle = [o for o in oracle if o is not None]
    assert len(values) >= len(oracle)
    tol = tolerance(got)
    for value, want in zip(values, oracle, strict=False):
        assert value.shape == want.shape, f"{name}: {value.shape} {want.shape}"
        if want.dtype == bool:  # a mask: True = blocked, and boolean
            assert value.dtype == bool, f"{name} gave dtype {value.dtype}"
        np.testing.assert_allclose(
            f64(value), f64(want), atol=tol, rtol=tol, err_msg=name
        )


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
@EXAMPLES
@given(data=st.data())
def test_public_function_matches_its_oracle_or_refuses(name, data):
    case = CASES[name]
    function = public(name.split("#")[0])
    inputs = case.make(data)
    args, kwargs = inputs()
    path = MODULE_PATHS.get(
        name, "call" if name.endswith("MultiHeadAttention") else None
    )
    try:
        if hasattr(inputs, "expected"):
            expected = inputs.expected()
        elif path is not None:
            expected = module_oracle(inputs, path)
        else:
            expected = case.oracle(*args, **kwargs)
    except (ValueError, IndexError):  # shapes the equations cannot take
        expected = REFUSE
    args, kwargs = inputs()  # fresh iterators for the function itself
    if name.endswith("MultiHeadAttention") or getattr(inputs, "forward", 0):
        module, *args = args
        function = module  # the module's forward
    try:
        got = function(*args, **kwargs)
        if hasattr(inputs, "result"):  # what to compare of the result
            got = inputs.result(got)
    except (ValueError, TypeError) as error:
        if not str(error):
            pytest.fail(f"{name} raised {type(error).__name__} silently")
        return  # a clear refusal
    assert expected is not REFUSE, (
        f"{name} returned a result for input its float64 oracle cannot "
        f"serve (a row with no key, a NaN, misfit shapes)"
    )
    check_result(name, got, expected, inputs)
