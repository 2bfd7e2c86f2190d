"""Gradients: the three PyTorch paths agree, and match finite differences.

The from-scratch forward, sdpa_forward and nn.MultiheadAttention get the
same random upstream gradient; the input gradient and every parameter
gradient must agree once the library's packed parameters are mapped back.
"""

import pytest
import torch

from mha_ref import torch_ref
from mha_ref.tolerances import atol

B, N_HEAD, D_MODEL, T, TK = 2, 3, 12, 5, 7
NAMES = ("wq", "wk", "wv", "wo")


def mask_for(case, make_mask, tq, tk):
    if case == "none":
        return None
    if case == "causal":
        return torch_ref.causal_mask(tq)
    return make_mask((B, N_HEAD, tq, tk), seed=5)  # per-head


def grads_of(module, forward, x, context, upstream):
    """Run forward, backprop upstream; return {name: grad} and clear."""
    module.zero_grad(set_to_none=True)
    inputs = [x] if context is None else [x, context]
    for tensor in inputs:
        tensor.grad = None
    y = forward(x, context)
    y.backward(upstream)
    grads = {name: p.grad.clone() for name, p in module.named_parameters()}
    grads["x"] = x.grad.clone()
    if context is not None:
        grads["context"] = context.grad.clone()
    return grads


def library_grads(library, mask, x, context, upstream):
    """The library's gradients, renamed to our module's parameters."""
    grads = grads_of(
        library,
        lambda x, c: torch_ref.library_forward(library, x, mask, c),
        x,
        context,
        upstream,
    )
    # in_proj_weight (and _bias) is [W_q; W_k; W_v] stacked along dim 0
    for kind in ("weight", "bias"):
        if f"in_proj_{kind}" in grads:
            grads.update(
                zip(
                    (f"wq.{kind}", f"wk.{kind}", f"wv.{kind}"),
                    grads.pop(f"in_proj_{kind}").chunk(3),
                    strict=True,
                )
            )
            grads[f"wo.{kind}"] = grads.pop(f"out_proj.{kind}")
    return grads


@pytest.mark.parametrize(
    "case", ["none", "causal", "per-head", "none-cross", "per-head-cross"]
)
@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_gradients_three_paths_agree(
    dtype, bias, case, make_module, make_tensor, make_mask
):
    cross = case.endswith("cross")
    tk = TK if cross else T
    module = make_module(D_MODEL, N_HEAD, bias=bias, dtype=dtype)
    x = make_tensor((B, T, D_MODEL), dtype=dtype, seed=1).requires_grad_()
    context = None
    if cross:
        context = make_tensor((B, tk, D_MODEL), dtype=dtype, seed=2)
        context.requires_grad_()
    mask = mask_for(case.removesuffix("-cross"), make_mask, T, tk)
    upstream = make_tensor((B, T, D_MODEL), dtype=dtype, seed=3)

    ours = grads_of(
        module, lambda x, c: module(x, mask, c)[0], x, context, upstream
    )
    sdpa = grads_of(
        module,
        lambda x, c: torch_ref.sdpa_forward(module, x, mask, c),
        x,
        context,
        upstream,
    )
    library = library_grads(
        torch_ref.library_version(module), mask, x, context, upstream
    )

    expected = {name for name, _ in module.named_parameters()} | {"x"}
    expected |= {"context"} if cross else set()
    assert set(ours) == set(sdpa) == set(library) == expected
    # gradients sum over B * T terms: allow that many roundings more
    tol = {"atol": B * T * atol(dtype), "rtol": 0}
    for name, grad in ours.items():
        if name == "wk.bias":  # q . b_k shifts a whole row: no gradient
            assert grad.abs().max() <= atol(dtype)
        else:  # no gradient is trivially zero
            assert grad.abs().max() > 1e-3, name
        torch.testing.assert_close(sdpa[name], grad, **tol, msg=name)
        torch.testing.assert_close(library[name], grad, **tol, msg=name)


def test_gradients_library_copy_does_not_reach_the_module(
    make_module, make_tensor
):
    # library_version copies: its gradients stay on the copy
    module = make_module(D_MODEL, N_HEAD)
    library = torch_ref.library_version(module)
    x = make_tensor((B, T, D_MODEL), seed=1)
    torch_ref.library_forward(library, x).sum().backward()
    assert all(p.grad is None for p in module.parameters())
    assert library.in_proj_weight.grad.abs().max() > 0


def test_gradients_attention_matches_finite_differences(
    make_tensor, make_mask
):
    q = make_tensor((2, 2, 3, 4), seed=1).requires_grad_()
    k = make_tensor((2, 2, 5, 4), seed=2).requires_grad_()
    v = make_tensor((2, 2, 5, 3), seed=3).requires_grad_()  # dv != d
    mask = make_mask((2, 2, 3, 5), seed=4)

    def out_and_weights(q, k, v):
        return torch_ref.attention(q, k, v, mask)

    # fast_mode checks random projections of the Jacobian: same bugs
    # caught, a fraction of the finite differences
    assert torch.autograd.gradcheck(out_and_weights, (q, k, v), fast_mode=True)


@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
def test_gradients_module_matches_finite_differences(
    cross, make_module, make_tensor, make_mask
):
    # every parameter becomes an input, via torch.func.functional_call
    module = make_module(4, 2, bias=True)
    names = [name for name, _ in module.named_parameters()]
    params = [p.detach().clone().requires_grad_() for p in module.parameters()]
    x = make_tensor((2, 3, 4), seed=1).requires_grad_()
    tk = 2 if cross else 3
    context = make_tensor((2, tk, 4), seed=2).requires_grad_()
    mask = make_mask((2, 1, 3, tk), seed=3)

    def forward(x, context, *params):
        state = dict(zip(names, params, strict=True))
        c = context if cross else None
        return torch.func.functional_call(
            module, state, (x,), {"mask": mask, "context": c}
        )

    inputs = (x, context, *params)
    assert torch.autograd.gradcheck(forward, inputs, fast_mode=True)
