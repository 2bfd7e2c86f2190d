"""mha_ref.diagnose: every finding is produced by its planted mistake
and by nothing correct, alone and in pairs, in both frameworks.

The planted mistakes are written here, apart from the checker's own
replay of them (diagnose.attend, diagnose.layer_forward), so a replay
that drifts from the mistake it names fails these tests."""

import math
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mha_ref import diagnose, diagnose_examples, numpy_ref, torch_ref

# -- a user's attention, with mistakes planted by keyword -----------------


def user_attention(q, k, v, mask, bugs=(), xp="numpy"):
    """softmax(q k^T / sqrt(d) masked) v, as a learner writes it."""
    if xp == "torch":
        q, k, v = (a.numpy() for a in (q, k, v))
        mask = None if mask is None else mask.numpy()
    d = q.shape[-1]
    s = np.einsum("...qd,...kd->...qk", q, k)
    s = s / {"no scale": 1.0, "scale by d": d}.get(
        next((b for b in bugs if "scale" in b), ""), math.sqrt(d)
    )
    if "polarity" in bugs and mask is not None:
        mask = ~mask
    if "ignore mask" in bugs:
        mask = None
    if mask is not None and "mask after" not in bugs:
        s = np.where(mask, -np.inf, s)
    axis = -2 if "axis" in bugs else -1
    with np.errstate(invalid="ignore"):
        p = np.exp(s - s.max(axis, keepdims=True))
        p = p / p.sum(axis, keepdims=True)
    if mask is not None and "mask after" in bugs:
        p = np.where(mask, 0.0, p)
    out = p @ v
    return torch.from_numpy(out) if xp == "torch" else out


ATTENTION_BUGS = {
    "no scale": "scale",
    "scale by d": "scale",
    "polarity": "mask_polarity",
    "ignore mask": "mask_ignored",
    "mask after": "mask_after_softmax",
    "axis": "softmax_axis",
}


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("bug", sorted(ATTENTION_BUGS))
def test_diagnose_attention_names_each_planted_mistake(bug, framework):
    def fn(q, k, v, mask):
        return user_attention(q, k, v, mask, (bug,), framework)

    report = diagnose.attention(fn, framework=framework)
    assert not report.ok
    assert [f.name for f in report.findings] == [ATTENTION_BUGS[bug]]
    assert str(report).startswith(ATTENTION_BUGS[bug] + ":")


def test_diagnose_attention_scale_message_says_which():
    none = diagnose.attention(lambda *a: user_attention(*a, ("no scale",)))
    by_d = diagnose.attention(lambda *a: user_attention(*a, ("scale by d",)))
    assert "divided by nothing" in none.findings[0].message
    assert "divided by d_head = 4" in by_d.findings[0].message


@pytest.mark.parametrize(
    "bugs", [("no scale", "axis"), ("polarity", "scale by d")]
)
def test_diagnose_attention_names_two_mistakes_at_once(bugs):
    report = diagnose.attention(lambda *a: user_attention(*a, bugs))
    assert sorted(f.name for f in report.findings) == sorted(
        ATTENTION_BUGS[b] for b in bugs
    )


def test_diagnose_attention_smallest_case_shows_the_mask():
    report = diagnose.attention(lambda *a: user_attention(*a, ("polarity",)))
    case = report.findings[0].case
    assert case.shapes["q"] == (1, 1, 3, 4)
    assert "random (3, 3)" in str(case)


# -- correct implementations in other styles: no finding ------------------


def loops(q, k, v, mask):
    out = np.zeros_like(q)
    for idx in np.ndindex(*q.shape[:-2]):
        for i in range(q.shape[-2]):
            s = k[idx] @ q[idx][i] / math.sqrt(q.shape[-1])
            if mask is not None:
                row = np.broadcast_to(mask, (*q.shape[:-1], k.shape[-2]))
                s = np.where(row[idx][i], -np.inf, s)
            w = np.exp(s - s.max())
            out[idx][i] = (w / w.sum()) @ v[idx]
    return out


def sdpa(q, k, v, mask):
    allowed = None if mask is None else ~mask  # SDPA: True = allowed
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)


def float32(q, k, v, mask):
    out, _ = numpy_ref.attention(
        q.astype(np.float32), k.astype(np.float32), v.astype(np.float32), mask
    )
    return out


@pytest.mark.parametrize(
    ("fn", "framework"),
    [
        (numpy_ref.attention, "numpy"),
        (user_attention, "numpy"),
        (loops, "numpy"),
        (float32, "numpy"),
        (torch_ref.attention, "torch"),
        (sdpa, "torch"),
    ],
)
def test_diagnose_attention_passes_correct_code(fn, framework):
    report = diagnose.attention(fn, framework=framework)
    assert report.ok, str(report)
    assert str(report) == "ok: agrees with the reference on 5 cases"


# -- the layer -----------------------------------------------------------


def user_layer(x, w_q, w_k, w_v, w_o, n_head, causal, bugs=(), xp="numpy"):
    """The layer as a learner writes it, in torch, with planted bugs."""
    to_t = torch.from_numpy if xp == "numpy" else torch.as_tensor
    x, w_q, w_k, w_v, w_o = (to_t(a) for a in (x, w_q, w_k, w_v, w_o))
    if "layout" in bugs:
        eye = torch.eye(len(w_q), dtype=w_q.dtype)
        w_q, w_k, w_v, w_o = (  # F.linear(eye, w) = w.T
            F.linear(eye, w) for w in (w_q, w_k, w_v, w_o)
        )
    b, t, d_model = x.shape
    dh = d_model // n_head

    def split(m):
        if "split" in bugs:
            return m.view(b, n_head, t, dh)
        return m.view(b, t, n_head, dh).transpose(1, 2)

    q, k, v = split(x @ w_q), split(x @ w_k), split(x @ w_v)
    s = q @ k.transpose(-2, -1)
    s = s / (math.sqrt(d_model) if "scale" in bugs else math.sqrt(dh))
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    blocked = {"diagonal": j >= i, "past": j < i, "inverted": j <= i}
    mask = next((blocked[k] for k in blocked if k in bugs), j > i)
    if causal and "no causal" not in bugs:
        s = s.masked_fill(mask, -math.inf)
    p = torch.softmax(s, dim=-1)
    out = p @ v  # (B, H, T, dh)
    if "merge" in bugs:
        merged = out.reshape(b, t, d_model)
    else:
        merged = out.transpose(1, 2).reshape(b, t, d_model)
    y = merged if "no wo" in bugs else merged @ w_o
    return y.numpy() if xp == "numpy" else y


LAYER_BUGS = {
    "split": "head_split",
    "merge": "head_merge",
    "scale": "scale",
    "layout": "weight_layout",
    "no wo": "output_projection",
    "diagonal": "causal_mask",
    "past": "causal_mask",
    "inverted": "causal_mask",
    "no causal": "causal_mask",
}


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("bug", sorted(LAYER_BUGS))
def test_diagnose_layer_names_each_planted_mistake(bug, framework):
    def fn(*args):
        return user_layer(*args, bugs=(bug,), xp=framework)

    report = diagnose.layer(fn, framework=framework)
    assert [f.name for f in report.findings] == [LAYER_BUGS[bug]]


@pytest.mark.parametrize(
    ("bug", "words"),
    [
        ("diagonal", "blocks the diagonal"),
        ("past", "past instead of the future"),
        ("inverted", "inverted"),
        ("scale", "sqrt(d_model) = 2.828"),
    ],
)
def test_diagnose_layer_message_says_which_variant(bug, words):
    report = diagnose.layer(lambda *a: user_layer(*a, bugs=(bug,)))
    assert words in report.findings[0].message


@pytest.mark.parametrize(
    "bugs", [("split", "merge"), ("layout", "scale"), ("no wo", "past")]
)
def test_diagnose_layer_names_two_mistakes_at_once(bugs):
    report = diagnose.layer(lambda *a: user_layer(*a, bugs=bugs))
    assert sorted(f.name for f in report.findings) == sorted(
        LAYER_BUGS[b] for b in bugs
    )


@pytest.mark.parametrize("mistake", diagnose_examples.PITFALLS)
def test_diagnose_layer_names_each_pitfall_of_the_pitfalls_page(mistake):
    expected = {
        "split": "head_split",
        "scale": "scale",
        "mask after": "mask_after_softmax",
        "axis": "softmax_axis",
        "merge": "head_merge",
        "layout": "weight_layout",
    }[mistake]
    report = diagnose.layer(diagnose_examples.pitfall_layer(mistake))
    assert [f.name for f in report.findings] == [expected]


def reference_layer(x, w_q, w_k, w_v, w_o, n_head, causal):
    layer = numpy_ref.MultiHeadAttention(x.shape[-1], n_head)
    layer.Wq, layer.Wk, layer.Wv, layer.Wo = w_q, w_k, w_v, w_o
    mask = numpy_ref.causal_mask(x.shape[1]) if causal else None
    return layer(x, mask)


@pytest.mark.parametrize(
    ("fn", "framework"),
    [
        (reference_layer, "numpy"),
        (user_layer, "numpy"),
        (diagnose_examples.einsum_layer, "numpy"),
        (diagnose_examples.loop_layer, "numpy"),
        (
            diagnose_examples.module_layer(diagnose_examples.HFStyleAttention),
            "torch",
        ),
        (lambda *a: user_layer(*a, xp="torch"), "torch"),
    ],
)
def test_diagnose_layer_passes_correct_code(fn, framework):
    report = diagnose.layer(fn, framework=framework)
    assert report.ok, str(report)


def llama_attention(d_model, n_head, scaling=None):
    """diagnose_examples.llama_attention, with a planted scale."""
    module = diagnose_examples.llama_attention(d_model, n_head)
    if scaling is not None:  # a planted mistake: the wrong scale
        module.scaling = scaling(d_model, n_head)
    return module


def test_diagnose_module_adapter_passes_hugging_faces_llama_attention():
    fn = diagnose_examples.module_layer(llama_attention)
    assert diagnose.layer(fn, framework="torch").ok


def test_diagnose_module_adapter_names_a_mistake_in_a_llama_module():
    def wrong(d_model, n_head):
        return llama_attention(d_model, n_head, lambda d, h: d**-0.5)

    fn = diagnose_examples.module_layer(wrong)
    report = diagnose.layer(fn, framework="torch")
    assert [f.name for f in report.findings] == ["scale"]
    assert "sqrt(d_model)" in report.findings[0].message


def test_diagnose_sdpa_handed_the_mask_as_is_is_mask_polarity():
    report = diagnose.attention(
        diagnose_examples.sdpa_mask_as_is, framework="torch"
    )
    assert [f.name for f in report.findings] == ["mask_polarity"]


# -- wrong shapes, errors, gradients --------------------------------------


def test_diagnose_reports_a_wrong_shape_and_an_exception():
    shape = diagnose.attention(lambda q, k, v, m: q @ k.swapaxes(-1, -2))
    assert [f.name for f in shape.findings] == ["shape"]
    assert "expected output of shape (1, 1, 3, 4)" in str(shape)

    def stub(q, k, v, mask):
        raise NotImplementedError

    raised = diagnose.attention(stub)
    assert [f.name for f in raised.findings] == ["raises"]
    assert "not written yet (stub raises NotImplementedError)" in str(raised)
    oops = diagnose.layer(lambda *a: 1 / 0)
    assert "ZeroDivisionError" in oops.findings[0].message


def test_diagnose_unexplained_names_the_worst_case():
    report = diagnose.attention(lambda q, k, v, m: np.tanh(v[..., :3, :]))
    assert [f.name for f in report.findings] == ["shape"]
    report = diagnose.attention(
        lambda q, k, v, m: numpy_ref.attention(q, k, v, m)[0] * 1.5
    )
    assert [f.name for f in report.findings] == ["unexplained"]
    assert "differs from the reference by up to" in str(report)


class WrongBackward(torch.autograd.Function):
    """Identity forward, a backward that doubles the gradient."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return 2 * grad


def test_diagnose_gradient_wrong_with_right_outputs():
    def fn(q, k, v, mask):
        return torch_ref.attention(WrongBackward.apply(q), k, v, mask)

    report = diagnose.attention(fn, framework="torch")
    assert [f.name for f in report.findings] == ["gradient"]
    assert "respect to q" in report.findings[0].message

    def detached(q, k, v, mask):
        return torch_ref.attention(q, k, v, mask)[0].detach()

    report = diagnose.attention(detached, framework="torch")
    assert [f.name for f in report.findings] == ["gradient"]

    def through_numpy(q, k, v, mask):  # .numpy() refuses a grad tensor
        mask = None if mask is None else mask.numpy()
        out = numpy_ref.attention(q.numpy(), k.numpy(), v.numpy(), mask)
        return torch.from_numpy(out[0])

    report = diagnose.attention(through_numpy, framework="torch")
    assert [f.name for f in report.findings] == ["gradient"]
    assert "require grad, it raises RuntimeError" in str(report)


def test_diagnose_refuses_bad_arguments():
    with pytest.raises(TypeError, match="fn must be callable"):
        diagnose.attention(42)
    with pytest.raises(ValueError, match="framework must be one of"):
        diagnose.layer(numpy_ref.attention, framework="jax")


# -- the command line ----------------------------------------------------


def test_diagnose_command_line_exit_statuses(tmp_path, capsys):
    good = tmp_path / "mine.py"
    good.write_text(
        "from mha_ref import numpy_ref\n"
        "def good(q, k, v, mask):\n"
        "    return numpy_ref.attention(q, k, v, mask)\n"
        "def bad(q, k, v, mask):\n"
        "    return numpy_ref.attention(q, k, v, mask, scale=1.0)\n"
    )
    assert diagnose.main([f"{good}:good"]) == 0
    assert "ok: agrees" in capsys.readouterr().out
    assert diagnose.main([f"{good}:bad"]) == 1
    assert capsys.readouterr().out.startswith("scale:")
    assert diagnose.main([f"{good}:nothing"]) == 2
    assert "has no function 'nothing'" in capsys.readouterr().err
    assert diagnose.main([f"{tmp_path / 'gone.py'}:good"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_diagnose_runs_as_a_module(tmp_path):
    layer = tmp_path / "layer.py"
    layer.write_text(
        "from mha_ref.diagnose_examples import pitfall_layer\n"
        "wrong = pitfall_layer('merge')\n"
    )
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "mha_ref.diagnose",
            f"{layer}:wrong",
            "--layer",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 1, run.stderr
    assert run.stdout.startswith("head_merge:")
