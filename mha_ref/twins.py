"""A torch_ref module's twin in numpy_ref: the same weights, to check one
implementation against the other.

Apart from torch_ref so that torch_ref does not import numpy_ref: a page
that runs only the torch code (the trained heads) does not carry, and
rerun on an edit of, the NumPy reference.
"""

from mha_ref import numpy_ref


# --8<-- [start:to-numpy]
def to_numpy(module):
    """A numpy_ref.MultiHeadAttention holding the same weights."""
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
        return p.detach().cpu().numpy().copy()

    # nn.Linear is (out, in) for x @ W.T; numpy_ref uses x @ W: transpose
    twin.Wq, twin.Wk, twin.Wv, twin.Wo = (
        as_array(lin.weight).T
        for lin in (module.wq, module.wk, module.wv, module.wo)
    )
    if has_bias:
        twin.bq, twin.bk, twin.bv, twin.bo = (
            as_array(lin.bias)
            for lin in (module.wq, module.wk, module.wv, module.wo)
        )
    return twin
    # --8<-- [end:to-numpy]
