"""A torch_ref module's twin in numpy_ref: the same weights, to check one
implementation against the other.

Apart from torch_ref so that torch_ref does not import numpy_ref: a page
that runs only the torch code (the trained heads) does not carry, and
rerun on an edit of, the NumPy reference. ``torch_ref.to_numpy`` is
this function under its first name, imported only when called.
"""

from mha_ref import numpy_ref


# --8<-- [start:to-numpy]
def to_numpy(module):
    """A numpy_ref.MultiHeadAttention holding the same weights.

    bfloat16 weights, which NumPy has no dtype for, come as float32
    (exactly: every bfloat16 is a float32); others keep their dtype.
    """
    _check_module(module)  # a torch_ref.MultiHeadAttention
    has_bias = module.wq.bias is not None
    twin = numpy_ref.MultiHeadAttention(
        module.d_model,
        module.n_head,
        n_kv_head=module.n_kv_head,
        bias=has_bias,
        rope=module.rope,
        rope_base=module.rope_base,
    )

    def as_array(p):
        p = p.detach().cpu()
        if str(p.dtype) == "torch.bfloat16":  # no bfloat16 in NumPy
            p = p.float()  # exact: a bfloat16 is a truncated float32
        return p.numpy().copy()

    layers = (module.wq, module.wk, module.wv, module.wo)
    # nn.Linear is (out, in) for x @ W.T; numpy_ref uses x @ W: transpose
    twin.Wq, twin.Wk, twin.Wv, twin.Wo = (
        as_array(lin.weight).T for lin in layers
    )
    if has_bias:
        twin.bq, twin.bk, twin.bv, twin.bo = (
            as_array(lin.bias) for lin in layers
        )
    return twin
    # --8<-- [end:to-numpy]


def _check_module(module):
    names = ("d_model", "n_head", "n_kv_head", "rope", "rope_base")
    layers = ("wq", "wk", "wv", "wo")
    if not all(hasattr(module, name) for name in (*names, *layers)):
        raise TypeError(
            f"module must be a torch_ref.MultiHeadAttention (d_model, "
            f"n_head and the nn.Linear layers wq, wk, wv, wo), got "
            f"{type(module).__name__}"
        )
