"""Shared fixtures: seeded generators, random modules, random masks.

Every random draw comes from a fixed seed so a failure reproduces.
Biases are filled with random values: nn.Linear's small init, or zero
biases, would hide a bias applied in the wrong place. The attention
passes (plain and tiled, forward and backward, both mirrors) come as
fixtures taking NumPy inputs, with SDPA and autograd in float64 as the
reference and inputs whose query rows have no allowed key.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mha_ref import numpy_ref, tiled, torch_ref

SEED = 20240601

# --doctest-modules would import this file as a module named "conftest",
# which clashes with tests/browser/conftest.py; it holds no doctests
collect_ignore = ["conftest.py"]


@pytest.fixture
def rng():
    """A NumPy generator with a fixed seed, fresh for each test."""
    return np.random.default_rng(SEED)


def random_module(
    d_model, n_head, *, bias=True, dtype=torch.float64, device="cpu", seed=0
):
    """torch_ref.MultiHeadAttention with every parameter drawn at random."""
    module = torch_ref.MultiHeadAttention(
        d_model, n_head, bias=bias, device=device, dtype=dtype
    )
    gen = torch.Generator().manual_seed(seed)
    bound = d_model**-0.5  # nn.Linear's init range keeps outputs near 1
    with torch.no_grad():
        for name, param in module.named_parameters():
            if name.endswith("weight"):
                draw = torch.rand(param.shape, generator=gen) * 2 - 1
                param.copy_(draw * bound)
            else:  # biases as large as the activations: easy to see
                param.copy_(torch.randn(param.shape, generator=gen))
    return module


def random_tensor(shape, *, dtype=torch.float64, device="cpu", seed=0):
    """Standard normal values from a fixed seed, on any dtype/device."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen, dtype=torch.float64).to(
        device=device, dtype=dtype
    )


def random_mask(shape, *, p_blocked=0.5, seed=0):
    """A bool mask (True = blocked) leaving every row >= 1 allowed key."""
    gen = np.random.default_rng(seed)
    mask = gen.random(shape) < p_blocked
    keep = gen.integers(0, shape[-1], size=shape[:-1])  # one key per row
    np.put_along_axis(mask, keep[..., None], False, axis=-1)
    return torch.from_numpy(mask)


@pytest.fixture
def make_module():
    """Factory: make_module(d_model, n_head, bias=..., dtype=..., ...)."""
    return random_module


@pytest.fixture
def make_tensor():
    """Factory: make_tensor(shape, dtype=..., device=..., seed=...)."""
    return random_tensor


@pytest.fixture
def make_mask():
    """Factory: make_mask(shape, p_blocked=..., seed=...) -> bool tensor."""
    return random_mask


# Every attention pass, forward and backward, on NumPy inputs

TILES = {"block_q": 2, "block_k": 3}  # ragged last blocks


def as_tensor(array):
    """A NumPy array (or None) as a torch tensor, sharing its memory."""
    if array is None:
        return None
    return torch.from_numpy(np.ascontiguousarray(array))


def forward_numpy_ref(q, k, v, mask=None, **kw):
    return numpy_ref.attention(q, k, v, mask, **kw)[0]


def forward_torch_ref(q, k, v, mask=None, **kw):
    q, k, v, mask = (as_tensor(a) for a in (q, k, v, mask))
    return torch_ref.attention(q, k, v, mask, **kw)[0]


def forward_tiled_numpy(q, k, v, mask=None, **kw):
    return tiled.tiled_attention_numpy(q, k, v, mask, **TILES, **kw)


def forward_tiled_torch(q, k, v, mask=None, **kw):
    q, k, v, mask = (as_tensor(a) for a in (q, k, v, mask))
    return tiled.tiled_attention_torch(q, k, v, mask, **TILES, **kw)


def backward_numpy_ref(q, k, v, dout, mask=None, **kw):
    return numpy_ref.attention_backward(q, k, v, dout, mask, **kw)


def backward_torch_ref(q, k, v, dout, mask=None, **kw):
    arrays = (as_tensor(a) for a in (q, k, v, dout, mask))
    return torch_ref.attention_backward(*arrays, **kw)


def backward_tiled_numpy(q, k, v, dout, mask=None, **kw):
    return tiled.tiled_attention_backward_numpy(
        q, k, v, dout, mask, **TILES, **kw
    )


def backward_tiled_torch(q, k, v, dout, mask=None, **kw):
    arrays = (as_tensor(a) for a in (q, k, v, dout, mask))
    return tiled.tiled_attention_backward_torch(*arrays, **TILES, **kw)


FORWARDS = {
    "numpy_ref": forward_numpy_ref,
    "torch_ref": forward_torch_ref,
    "tiled_numpy": forward_tiled_numpy,
    "tiled_torch": forward_tiled_torch,
}
BACKWARDS = {
    "numpy_ref": backward_numpy_ref,
    "torch_ref": backward_torch_ref,
    "tiled_numpy": backward_tiled_numpy,
    "tiled_torch": backward_tiled_torch,
}


@pytest.fixture(params=list(FORWARDS))
def forward_pass(request):
    """Each attention forward as (q, k, v, mask=None, **kw) -> out."""
    return FORWARDS[request.param]


@pytest.fixture(params=list(BACKWARDS))
def backward_pass(request):
    """Each backward as (q, k, v, dout, mask=None, **kw) -> (dq, dk, dv)."""
    return BACKWARDS[request.param]


def sdpa_and_autograd(q, k, v, dout, mask=None):
    """Output and dq, dk, dv by SDPA and autograd, in float64.

    mask: NumPy bool, True = blocked (None: no mask). SDPA's boolean
    mask means True = allowed, and a row with none allowed gives 0.
    """
    q, k, v = (
        as_tensor(np.asarray(a, np.float64)).requires_grad_()
        for a in (q, k, v)
    )
    allowed = None if mask is None else ~as_tensor(np.asarray(mask))
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=allowed, enable_gqa=k.shape[-3] != q.shape[-3]
    )
    out.backward(as_tensor(np.asarray(dout, np.float64)))
    grads = [x.grad.numpy() for x in (q, k, v)]
    return out.detach().numpy(), grads


@pytest.fixture
def sdpa_reference():
    """Factory: sdpa_reference(q, k, v, dout, mask=None) -> out, grads."""
    return sdpa_and_autograd


# NumPy inputs (B, H) = (2, 3), d = 4, dv = 5, some with empty rows


def draw(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


def small_inputs(tq=4, tk=5, seed=0):
    q, k = draw((2, 3, tq, 4), seed), draw((2, 3, tk, 4), seed + 1)
    v, dout = draw((2, 3, tk, 5), seed + 2), draw((2, 3, tq, 5), seed + 3)
    return q, k, v, dout


def masked_row_inputs():
    """Query row 2 of 4 has every key blocked; the others keep some."""
    q, k, v, dout = small_inputs(tq=4, tk=5, seed=7)
    mask = np.random.default_rng(8).random((2, 3, 4, 5)) < 0.4
    mask[..., 4] = False  # every row keeps its last key ...
    mask[:, :, 2, :] = True  # ... but row 2, which keeps none
    return q, k, v, dout, mask


def bottom_right_inputs():
    """Tq = 6 > Tk = 4, causal aligned bottom-right: rows 0, 1 see none."""
    q, k, v, dout = small_inputs(tq=6, tk=4, seed=9)
    return q, k, v, dout, numpy_ref.causal_mask(6, 4, align="bottom_right")


def left_padded_inputs():
    """A left-padded batch with a causal mask: padding rows see no key."""
    q, k, v, dout = small_inputs(tq=5, tk=5, seed=11)
    padding = np.array([[False] * 5, [True, True, False, False, False]])
    mask = numpy_ref.key_padding_mask(padding) | numpy_ref.causal_mask(5)
    return q, k, v, dout, mask  # (B, 1, 5, 5)


EMPTY_ROWS_CASES = {
    "masked-row": masked_row_inputs,
    "bottom-right": bottom_right_inputs,
    "left-padded": left_padded_inputs,
}


@pytest.fixture
def qkv_dout():
    """q, k, v, dout of shapes (2, 3, 4, 4), (2, 3, 5, 4), (2, 3, 5, 5)
    and (2, 3, 4, 5), fresh for each test."""
    return small_inputs()


@pytest.fixture
def masked_row_case():
    """q, k, v, dout, mask: query row 2 of 4 has every key blocked."""
    return masked_row_inputs()


@pytest.fixture
def bottom_right_case():
    """q, k, v, dout, mask: Tq = 6 > Tk = 4, causal aligned bottom-right."""
    return bottom_right_inputs()


@pytest.fixture(params=list(EMPTY_ROWS_CASES))
def empty_rows_case(request):
    """q, k, v, dout, mask with some query rows that see no key."""
    return EMPTY_ROWS_CASES[request.param]()
