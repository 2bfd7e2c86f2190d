"""Properties over random shapes, head counts and masks (hypothesis).

Every drawn mask leaves each query row at least one allowed key; shapes
cover self- and cross-attention and shared, per-batch, per-head and
key-padding mask layouts.
"""

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mha_ref import numpy_ref, torch_ref
from mha_ref.tolerances import atol

pytestmark = pytest.mark.slow  # make fast skips it; make test runs it

TOL = atol(np.float64)
# the factory fixtures are stateless, so sharing them across examples
# is safe: hypothesis' warning about function-scoped fixtures is moot
PROPERTY = settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
LAYOUTS = ["none", "shared", "per-batch", "per-head", "key-padding"]


@st.composite
def masks(draw, b, n_head, tq, tk, masked=False):
    """A bool mask (True = blocked) with no empty row, or None."""
    layout = draw(st.sampled_from(LAYOUTS[masked:]))  # [1:] skips none
    shape = {
        "none": None,
        "shared": (tq, tk),
        "per-batch": (b, 1, tq, tk),
        "per-head": (b, n_head, tq, tk),
        "key-padding": (b, 1, 1, tk),
    }[layout]
    if shape is None:
        return None
    size = int(np.prod(shape))
    bits = draw(st.lists(st.booleans(), min_size=size, max_size=size))
    mask = np.array(bits, dtype=bool).reshape(shape)
    full = np.broadcast_to(mask, (b, n_head, tq, tk))
    if full.all(axis=-1).any():  # free one key per row, keep the layout
        free = draw(st.integers(0, tk - 1))
        mask[..., free] = False
    return mask


@st.composite
def problems(draw, masked=False):
    """Module sizes, inputs and a mask for one multi-head call."""
    b, n_head = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    d_head = draw(st.integers(1, 4))
    tq = draw(st.integers(1, 5))
    cross = draw(st.booleans())
    tk = draw(st.integers(1, 5)) if cross else tq
    return {
        "b": b,
        "n_head": n_head,
        "d_model": n_head * d_head,
        "tq": tq,
        "tk": tk,
        "cross": cross,
        "bias": draw(st.booleans()),
        "mask": draw(masks(b, n_head, tq, tk, masked)),
        "seed": draw(st.integers(0, 2**16)),
    }


def run_both(p, random_module, random_tensor):
    """(y, weights) from torch_ref and from its NumPy twin, as arrays."""
    module = random_module(
        p["d_model"], p["n_head"], bias=p["bias"], seed=p["seed"]
    )
    x = random_tensor((p["b"], p["tq"], p["d_model"]), seed=p["seed"])
    context = None
    if p["cross"]:
        context = random_tensor(
            (p["b"], p["tk"], p["d_model"]), seed=p["seed"] + 1
        )
    mask = None if p["mask"] is None else torch.from_numpy(p["mask"])
    y, weights = module(x, mask, context)
    twin = numpy_ref.MultiHeadAttention.from_torch(module)
    y_np, weights_np = twin(
        x.numpy(), p["mask"], None if context is None else context.numpy()
    )
    return (y.detach().numpy(), weights.detach().numpy()), (y_np, weights_np)


@PROPERTY
@given(p=problems())
def test_properties_numpy_and_torch_modules_agree(p, make_module, make_tensor):
    (y, weights), (y_np, weights_np) = run_both(p, make_module, make_tensor)
    np.testing.assert_allclose(y_np, y, atol=TOL, rtol=0)
    np.testing.assert_allclose(weights_np, weights, atol=TOL, rtol=0)


@PROPERTY
@given(p=problems())
def test_properties_weight_rows_sum_to_one(p, make_module, make_tensor):
    for _, weights in run_both(p, make_module, make_tensor):
        np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=TOL, rtol=0)
        assert (weights >= 0).all()


@PROPERTY
@given(p=problems(masked=True))
def test_properties_masked_weights_are_exactly_zero(
    p, make_module, make_tensor
):
    for _, weights in run_both(p, make_module, make_tensor):
        blocked = np.broadcast_to(p["mask"], weights.shape)
        assert (weights[blocked] == 0).all()


@st.composite
def heads(draw):
    """q, k, v of one attention call, with dv independent of d."""
    b, n_head = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    tq, tk = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    d, dv = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    gen = np.random.default_rng(draw(st.integers(0, 2**16)))
    q = gen.standard_normal((b, n_head, tq, d))
    k = gen.standard_normal((b, n_head, tk, d))
    v = 10 * gen.standard_normal((b, n_head, tk, dv))
    return q, k, v, draw(masks(b, n_head, tq, tk))


@PROPERTY
@given(qkvm=heads())
def test_properties_head_output_lies_between_allowed_values(qkvm):
    q, k, v, mask = qkvm
    blocked = np.zeros(q.shape[:-1] + k.shape[-2:-1], dtype=bool)
    if mask is not None:
        blocked = np.broadcast_to(mask, blocked.shape)
    # per coordinate: min and max of v over each row's allowed keys
    spread = np.broadcast_to(v[..., None, :, :], blocked.shape + v.shape[-1:])
    low = np.where(blocked[..., None], np.inf, spread).min(axis=-2)
    high = np.where(blocked[..., None], -np.inf, spread).max(axis=-2)
    out_np, _ = numpy_ref.attention(q, k, v, mask)
    as_torch = None if mask is None else torch.from_numpy(mask)
    out_torch, _ = torch_ref.attention(
        torch.from_numpy(q),
        torch.from_numpy(k),
        torch.from_numpy(v),
        as_torch,
    )
    for out in (out_np, out_torch.numpy()):
        assert (out >= low - 10 * TOL).all()
        assert (out <= high + 10 * TOL).all()
