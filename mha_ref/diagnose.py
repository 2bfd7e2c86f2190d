"""Check anyone's attention against the reference and name the mistake.

``attention(fn)`` runs ``fn(q, k, v, mask)`` and ``layer(fn)`` runs
``fn(x, w_q, w_k, w_v, w_o, n_head, causal)`` on small deterministic
cases. Where an output is wrong, the checker replays the known mistakes
of a from-scratch implementation (the pitfalls page, the conventions
page), alone and two at a time, and names those that reproduce it.

    python -m mha_ref.diagnose my_attention.py:attention
    python -m mha_ref.diagnose my_layer.py:layer --layer --framework torch

Exit status: 0 when the function agrees, 1 with findings, 2 for a usage
error. Masks are boolean with True = blocked; weights act as x @ w.
"""

import argparse
import importlib.util
import itertools
import math
import sys
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

FRAMEWORKS = ("numpy", "torch")
RTOL, ATOL = 1e-5, 1e-6  # a float32 computation of a float64 case passes


@dataclass(frozen=True)
class Case:
    """One input the checker ran: its shapes and its mask."""

    shapes: dict
    mask: str

    def __str__(self):
        shapes = ", ".join(f"{k} {v}" for k, v in self.shapes.items())
        return f"{shapes}, mask {self.mask}"


@dataclass(frozen=True)
class Finding:
    """A named mistake, what to do, and the smallest case that shows it."""

    name: str
    message: str
    case: Case | None = None

    def __str__(self):
        where = f" [case: {self.case}]" if self.case is not None else ""
        return f"{self.name}: {self.message}{where}"


@dataclass
class Report:
    """``ok`` when every case agrees; else one finding per mistake."""

    findings: list = field(default_factory=list)
    cases: int = 0

    @property
    def ok(self):
        return not self.findings

    def __str__(self):
        if self.ok:
            return f"ok: agrees with the reference on {self.cases} cases"
        return "\n".join(str(finding) for finding in self.findings)


# -- the reference, with every known mistake as a switch ------------------


@dataclass(frozen=True)
class Mistakes:
    """Which mistakes to replay: all off is the reference."""

    scale: str = "sqrt_d_head"  # or "none", "d_head", "sqrt_d_model"
    mask_polarity: bool = False  # True read as allowed
    mask_ignored: bool = False
    mask_after_softmax: bool = False  # zeroed after, not -inf before
    softmax_axis: bool = False  # normalised over queries
    causal_mask: str = "future"  # or "diagonal", "past", "inverted", ...
    head_split: bool = False  # reshape to (B, H, T, dh), no transpose
    head_merge: bool = False  # reshape to (B, T, d_model), no transpose
    weight_layout: bool = False  # x @ w.T, nn.Linear's storage
    output_projection: bool = False  # W_O left out


def attend(q, k, v, mask, mistakes=Mistakes(), d_model=None):
    """softmax(q k^T / sqrt(d) masked) v in float64 torch, with the
    mistakes switched on; a row left with no key comes out NaN."""
    d = q.shape[-1]
    scores = q @ k.transpose(-2, -1)  # (B, H, Tq, Tk)
    divisor = {
        "sqrt_d_head": math.sqrt(d),
        "none": 1.0,
        "d_head": float(d),
        "sqrt_d_model": math.sqrt(d_model or d),
    }[mistakes.scale]
    scores = scores / divisor
    blocked = None if mistakes.mask_ignored else mask
    if blocked is not None and mistakes.mask_polarity:
        blocked = ~blocked
    if blocked is not None and not mistakes.mask_after_softmax:
        scores = scores.masked_fill(blocked, -math.inf)
    weights = torch.softmax(scores, dim=-2 if mistakes.softmax_axis else -1)
    if blocked is not None and mistakes.mask_after_softmax:
        weights = weights.masked_fill(blocked, 0.0)
    return weights @ v  # (B, H, Tq, d)


CAUSAL = {  # the blocked pattern, for query i and key j
    "future": lambda i, j: j > i,  # the right one
    "diagonal": lambda i, j: j >= i,
    "past": lambda i, j: j < i,
    "inverted": lambda i, j: j <= i,
    "missing": None,
}


def layer_forward(x, w_q, w_k, w_v, w_o, n_head, causal, mistakes):
    """The multi-head layer with the mistakes switched on."""
    if mistakes.weight_layout:
        w_q, w_k, w_v, w_o = w_q.T, w_k.T, w_v.T, w_o.T
    b, t, d_model = x.shape
    d_head = d_model // n_head

    def split(m):  # (B, T, d_model) -> (B, H, T, dh)
        if mistakes.head_split:
            return m.reshape(b, n_head, t, d_head)
        return m.reshape(b, t, n_head, d_head).transpose(1, 2)

    q, k, v = split(x @ w_q), split(x @ w_k), split(x @ w_v)
    mask, rule = None, CAUSAL[mistakes.causal_mask]
    if causal and rule is not None:
        i = torch.arange(t)[:, None]
        mask = rule(i, torch.arange(t)[None, :])  # (T, T)
    out = attend(q, k, v, mask, mistakes, d_model)  # (B, H, T, dh)
    if mistakes.head_merge:
        merged = out.reshape(b, t, d_model)
    else:
        merged = out.transpose(1, 2).reshape(b, t, d_model)
    return merged if mistakes.output_projection else merged @ w_o


ATTENTION_MISTAKES = {
    "scale": [Mistakes(scale="none"), Mistakes(scale="d_head")],
    "mask_polarity": [Mistakes(mask_polarity=True)],
    "mask_ignored": [Mistakes(mask_ignored=True)],
    "mask_after_softmax": [Mistakes(mask_after_softmax=True)],
    "softmax_axis": [Mistakes(softmax_axis=True)],
}
LAYER_MISTAKES = {
    "scale": [Mistakes(scale=s) for s in ("none", "d_head", "sqrt_d_model")],
    "causal_mask": [Mistakes(causal_mask=c) for c in CAUSAL if c != "future"],
    "head_split": [Mistakes(head_split=True)],
    "head_merge": [Mistakes(head_merge=True)],
    "weight_layout": [Mistakes(weight_layout=True)],
    "output_projection": [Mistakes(output_projection=True)],
    "softmax_axis": [Mistakes(softmax_axis=True)],
    "mask_after_softmax": [Mistakes(mask_after_softmax=True)],
}


def explain(name, m, d_head=None, d_model=None):
    """What the mistake is, in one sentence, with the fix."""
    if name == "scale":
        by = {
            "none": "nothing",
            "d_head": "d_head" + (f" = {d_head}" if d_head else ""),
            "sqrt_d_model": "sqrt(d_model)"
            + (f" = {math.sqrt(d_model):.4g}" if d_model else ""),
        }[m.scale]
        return f"the scores are divided by {by}, not by sqrt(d_head)"
    if name == "causal_mask":
        return {
            "diagonal": "the causal mask blocks the diagonal too: a query "
            "must see its own key (block j > i, not j >= i)",
            "past": "the causal mask blocks the past instead of the "
            "future (block j > i, not j < i)",
            "inverted": "the causal mask is inverted: each query sees "
            "only later keys (True must mean blocked)",
            "missing": "no causal mask is applied: each query sees the "
            "keys after it",
        }[m.causal_mask]
    return {
        "mask_polarity": "the mask is read as True = allowed (SDPA's "
        "boolean convention); here True = blocked: pass ~mask to SDPA, "
        "or fill scores where mask is True with -inf",
        "mask_ignored": "the mask is not applied",
        "mask_after_softmax": "the mask is applied after the softmax: "
        "blocked keys took their share, rows sum to less than 1; fill "
        "blocked scores with -inf before the softmax",
        "softmax_axis": "the softmax normalises over the queries (axis "
        "-2); it must run over the keys (the last axis)",
        "head_split": "the heads are split by reshaping (B, T, d_model) "
        "straight to (B, H, T, d_head); reshape to (B, T, H, d_head), "
        "then swap axes 1 and 2",
        "head_merge": "the heads are merged by reshaping (B, H, T, d_head) "
        "straight to (B, T, d_model); swap axes 1 and 2 first",
        "weight_layout": "the weights are used as x @ w.T (nn.Linear's "
        "(out, in) storage); here Q = X W_Q uses them as x @ w",
        "output_projection": "W_O is not applied: y = concat(heads) @ W_O",
    }[name]


# -- the cases ------------------------------------------------------------


def _mask(rng, shape):
    """A random boolean mask (True = blocked) whose every row and every
    column has a blocked and an allowed entry, so that each mistake
    shows, inverted or over the other axis too."""
    while True:
        mask = rng.random(shape) < 0.4
        mixed = [(mask.any(a) & ~mask.all(a)).all() for a in (-1, -2)]
        if all(mixed):
            return mask


def attention_cases():
    """(Case, q, k, v, mask) as float64 NumPy, smallest first."""
    rng = np.random.default_rng(2024)
    specs = [  # B, H, Tq, Tk, d, mask
        (1, 1, 3, 3, 4, "random"),
        (1, 2, 3, 5, 4, "none"),
        (1, 2, 4, 4, 8, "causal"),
        (2, 1, 5, 3, 6, "random per batch"),
        (2, 3, 4, 6, 4, "random"),
    ]
    cases = []
    for b, h, tq, tk, d, kind in specs:
        q = rng.standard_normal((b, h, tq, d))
        k = rng.standard_normal((b, h, tk, d))
        v = rng.standard_normal((b, h, tk, d))
        if kind == "none":
            mask = None
        elif kind == "causal":
            mask = np.triu(np.ones((tq, tk), dtype=bool), 1)
        elif kind == "random":
            mask = _mask(rng, (tq, tk))
        else:
            mask = _mask(rng, (b, 1, tq, tk))
        label = "None" if mask is None else f"{kind} {mask.shape}"
        shapes = {"q": q.shape, "k": k.shape, "v": v.shape}
        cases.append((Case(shapes, label), q, k, v, mask))
    return cases


def layer_cases():
    """(Case, x, w_q, w_k, w_v, w_o, n_head, causal), smallest first."""
    rng = np.random.default_rng(2025)
    specs = [  # B, T, d_model, n_head, causal
        (1, 3, 8, 2, True),
        (1, 4, 6, 1, True),
        (2, 4, 12, 3, False),
        (2, 5, 12, 3, True),
    ]
    cases = []
    for b, t, d_model, n_head, causal in specs:
        x = rng.standard_normal((b, t, d_model))
        w = rng.standard_normal((4, d_model, d_model)) / math.sqrt(d_model)
        shapes = {"x": x.shape, "n_head": n_head}
        case = Case(shapes, "causal" if causal else "None")
        cases.append((case, x, *w, n_head, causal))
    return cases


# -- running the function -------------------------------------------------


def _inputs(arrays, framework, grad=False):
    """Fresh copies in the framework's form (float64 tensors for torch)."""
    out = []
    for a in arrays:
        if framework == "numpy" or not isinstance(a, np.ndarray):
            out.append(a.copy() if isinstance(a, np.ndarray) else a)
        else:
            t = torch.tensor(a)
            floating = t.is_floating_point()
            out.append(t.requires_grad_(grad) if floating else t)
    return out


def _first(result):
    return result[0] if isinstance(result, tuple | list) else result


def _as64(result):
    if isinstance(result, torch.Tensor):
        return result.detach().cpu().double().numpy()
    return np.asarray(result, dtype=np.float64)


def _rows_match(got, want):
    """Per row (last axis compared), and which rows want defines."""
    defined = np.isfinite(want).all(-1)
    with np.errstate(invalid="ignore"):
        close = np.isclose(got, want, rtol=RTOL, atol=ATOL).all(-1)
    return close | ~defined, defined


def _reference(kind, arrays, mistakes):
    tensors = [
        torch.tensor(a) if isinstance(a, np.ndarray) else a for a in arrays
    ]
    with torch.no_grad():
        if kind == "attention":
            return attend(*tensors, mistakes).numpy()
        return layer_forward(*tensors, mistakes).numpy()


def _check_callable(fn, framework):
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if framework not in FRAMEWORKS:
        raise ValueError(
            f"framework must be one of {FRAMEWORKS}, got {framework!r}"
        )


def attention(fn, *, framework="numpy"):
    """Check ``fn(q, k, v, mask)`` -> (B, H, Tq, d) (or a tuple whose
    first element is it); returns a Report naming each mistake found."""
    _check_callable(fn, framework)
    return _diagnose(
        fn, framework, "attention", attention_cases(), ATTENTION_MISTAKES
    )


def layer(fn, *, framework="numpy"):
    """Check ``fn(x, w_q, w_k, w_v, w_o, n_head, causal)`` -> y (B, T,
    d_model), weights used as x @ w; returns a Report."""
    _check_callable(fn, framework)
    return _diagnose(fn, framework, "layer", layer_cases(), LAYER_MISTAKES)


def _diagnose(fn, framework, kind, cases, known):
    report = Report(cases=len(cases))
    outputs = []  # (case, arrays, got) per case
    for case, *arrays in cases:
        want = _reference(kind, arrays, Mistakes())
        try:
            got = _first(fn(*_inputs(arrays, framework)))
            got64 = _as64(got)
        except NotImplementedError as error:
            where = traceback.extract_tb(error.__traceback__)[-1].name
            message = f"not written yet ({where} raises NotImplementedError)"
            report.findings.append(Finding("raises", message, case))
            return report
        except Exception as error:  # the user's code: any error
            message = f"{type(error).__name__}: {error}".strip(": ")
            report.findings.append(Finding("raises", message, case))
            return report
        if got64.shape != want.shape:
            message = f"expected output of shape {want.shape}, got " + str(
                got64.shape
            )
            report.findings.append(Finding("shape", message, case))
            return report
        outputs.append((case, arrays, got64, want))
    if all(_rows_match(got, want)[0].all() for _, _, got, want in outputs):
        if framework == "torch":
            report.findings += _gradient_findings(fn, kind, cases)
        return report
    report.findings += _name_mistakes(kind, outputs, known)
    return report


def _explains(kind, outputs, mistakes):
    """Whether the mistakes reproduce every output on the rows they
    define, defining at least half the rows and changing some."""
    compared = total = changed = 0
    for _, arrays, got, want in outputs:
        replay = _reference(kind, arrays, mistakes)
        match, defined = _rows_match(got, replay)
        if not match.all():
            return False
        compared += defined.sum()
        total += defined.size
        differs = ~_rows_match(replay, want)[0] & defined
        changed += differs.sum()
    return compared * 2 >= total and changed > 0


def _smallest_case(kind, outputs, mistakes):
    for case, arrays, _, want in outputs:  # smallest first
        replay = _reference(kind, arrays, mistakes)
        match, defined = _rows_match(replay, want)
        if (~match & defined).any():
            return case
    return outputs[0][0]


def _finding(kind, outputs, name, mistakes):
    d_head = d_model = None
    case = _smallest_case(kind, outputs, mistakes)
    if kind == "layer":
        d_model = case.shapes["x"][-1]
        d_head = d_model // case.shapes["n_head"]
    else:
        d_head = case.shapes["q"][-1]
    return Finding(name, explain(name, mistakes, d_head, d_model), case)


def _name_mistakes(kind, outputs, known):
    singles = [(n, m) for n, options in known.items() for m in options]
    for name, mistakes in singles:
        if _explains(kind, outputs, mistakes):
            return [_finding(kind, outputs, name, mistakes)]
    for (n1, m1), (n2, m2) in itertools.combinations(singles, 2):
        if n1 == n2:
            continue
        both = _combine(m1, m2)
        if _explains(kind, outputs, both):
            return [
                _finding(kind, outputs, n1, m1),
                _finding(kind, outputs, n2, m2),
            ]
    worst, gap = outputs[0][0], -1.0
    for case, _, got, want in outputs:
        with np.errstate(invalid="ignore"):
            diff = np.nan_to_num(np.abs(got - want), nan=np.inf).max()
        if diff > gap:
            worst, gap = case, diff
    message = (
        f"the output differs from the reference by up to {gap:.3g}; "
        f"no known mistake, alone or in a pair, reproduces it"
    )
    return [Finding("unexplained", message, worst)]


def _combine(m1, m2):
    """Both mistakes switched on (they touch different switches)."""
    default = Mistakes()
    changes = {
        f: getattr(m2, f)
        for f in Mistakes.__dataclass_fields__
        if getattr(m2, f) != getattr(default, f)
    }
    return replace(m1, **changes)


def _gradient_findings(fn, kind, cases):
    """Outputs agree: compare d(sum(out * g))/d(inputs) with autograd on
    the reference."""
    names = (
        ("q", "k", "v")
        if kind == "attention"
        else ("x", "w_q", "w_k", "w_v", "w_o")
    )
    rng = np.random.default_rng(7)
    for case, *arrays in cases:
        inputs = _inputs(arrays, "torch", grad=True)
        floats = [
            t
            for t in inputs
            if isinstance(t, torch.Tensor) and t.requires_grad
        ]
        try:
            out = _first(fn(*inputs))
        except Exception as error:  # the user's code: any error
            message = (
                f"with inputs that require grad, it raises "
                f"{type(error).__name__}: {error}"
            )
            return [Finding("gradient", message, case)]
        if not isinstance(out, torch.Tensor) or not out.requires_grad:
            return [
                Finding(
                    "gradient",
                    "the output carries no gradient "
                    "(it left autograd: .detach(), .numpy() or "
                    "no_grad)",
                    case,
                )
            ]
        g = torch.tensor(rng.standard_normal(tuple(out.shape)))
        try:
            got = torch.autograd.grad(
                (out.double() * g).sum(), floats, allow_unused=True
            )
        except RuntimeError as error:
            return [Finding("gradient", f"autograd failed: {error}", case)]
        ref_inputs = _inputs(arrays, "torch", grad=True)
        ref_floats = [
            t
            for t in ref_inputs
            if isinstance(t, torch.Tensor) and t.requires_grad
        ]
        run = attend if kind == "attention" else layer_forward
        ref_out = run(*ref_inputs, Mistakes())
        want = torch.autograd.grad((ref_out * g).sum(), ref_floats)
        for name, a, b in zip(names, got, want, strict=True):
            if a is None:
                return [
                    Finding("gradient", f"no gradient reaches {name}", case)
                ]
            if not torch.allclose(a, b, rtol=RTOL, atol=ATOL):
                gap = (a - b).abs().max().item()
                message = (
                    f"the outputs agree but the gradient with "
                    f"respect to {name} differs by up to {gap:.3g}"
                )
                return [Finding("gradient", message, case)]
    return []


# -- the command line -----------------------------------------------------


def _load(target):
    """FILE.py:NAME -> the function, or a one-line usage error."""
    path, sep, name = target.rpartition(":")
    if not sep or not path or not name:
        raise LookupError(f"expected FILE.py:NAME, got {target!r}")
    file = Path(path)
    if not file.is_file():
        raise LookupError(f"no such file: {path}")
    spec = importlib.util.spec_from_file_location(file.stem, file)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(file.parent.resolve()))
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # the user's file: any error
        raise LookupError(f"{path} does not load: {error!r}") from None
    finally:
        sys.path.pop(0)
    if not hasattr(module, name):
        raise LookupError(f"{path} has no function {name!r}")
    return getattr(module, name)


def main(argv=None):
    """The command line; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m mha_ref.diagnose",
        description="Check an attention function or layer and name the "
        "mistakes in it.",
    )
    parser.add_argument("target", help="FILE.py:NAME")
    parser.add_argument(
        "--layer",
        action="store_true",
        help="NAME is a layer fn(x, w_q, w_k, w_v, w_o, n_head, causal)",
    )
    parser.add_argument("--framework", choices=FRAMEWORKS, default="numpy")
    args = parser.parse_args(argv)
    try:
        fn = _load(args.target)
    except LookupError as error:
        print(f"usage error: {error.args[0]}", file=sys.stderr)
        return 2
    check = layer if args.layer else attention
    report = check(fn, framework=args.framework)
    print(report)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
