"""Shared fixtures: seeded generators, random modules, random masks.

Every random draw comes from a fixed seed so a failure reproduces.
Biases are filled with random values: nn.Linear's small init, or zero
biases, would hide a bias applied in the wrong place.
"""

import numpy as np
import pytest
import torch

from mha_ref import torch_ref

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
