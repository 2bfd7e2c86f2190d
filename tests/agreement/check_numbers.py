"""Numbers the prose argues from: shown as the data has them, typed
nowhere by hand."""

import math
import re
from dataclasses import dataclass
from pathlib import Path

from .check_placeholders import (
    NO_DATA,
    RE_BLOCK,
    RE_COMMENT,
    RE_RAW,
    RE_VARIABLE,
    expression_names,
    load_data,
    placeholders,
    resolve,
)
from .check_site import html_text, site_page
from .pages import DATA, Problem, blank, line_of, page_paths, rel

# --------------------------------------------------------- known results

# A separator between two numbers as a page might type it, in text or
# in LaTeX: "1.5, 1", "1.5,\ 1", "1.5,\,1".
SEP = r"\s*,(?:\s|\\[ ,;:!]|~)*"
MINUS = r"(?:-|\u2212)\s*"
END = r"(?!\.?\d)"  # a sentence's full stop may follow
START = r"(?<![\d.\-\u2212])"

# Results the prose argues from (source text), which pages must take from
# the generated data through a placeholder, never type: a page that types
# them keeps the old number when the code changes. Each regex is narrow
# enough not to match the inputs of the same examples ([2, 0], [8, -8],
# [1000, 1000], [10, 20, 30, 40, 50], (0.5, 0.5)).
HAND_TYPED = (
    (START + r"1\.5" + SEP + r"1(?:\.0+)?" + END,
     "the weighted sum [1.5, 1]", "<< weighted_sum.output | vec >>"),
    (START + r"0\.25" + SEP + MINUS + r"0\.25" + END,
     "the score gradient (0.25, -0.25)",
     "<< softmax_backward.score_grad | vec >>"),
    (START + r"0\.25" + SEP + r"0(?:\.0+)?" + END,
     "the naive gradient (0.25, 0)",
     "<< softmax_backward.naive_grad | vec >>"),
    (START + r"0\.5" + SEP + r"0(?:\.0+)?" + END,
     "the zeroed-after-softmax weights [0.5, 0]",
     "<< pitfalls.mask_demo.zeroed_after | vec >>"),
    (START + r"25(?:\.0+)?" + SEP + r"30(?:\.0+)?" + END,
     "the KV-cache output [25, 30]", "<< kv_cache.aligned | vec >>"),
    (START + r"10(?:\.0+)?" + SEP + r"15(?:\.0+)?" + END,
     "the upper-left output [10, 15]", "<< kv_cache.upper_left | vec >>"),
    (START + r"1(?:,|\{,\}|\\,|\s)?048(?:,|\{,\}|\\,|\s)?576" + END,
     "the parameter count 4 d_model^2 = 1048576",
     "<< multiple_heads.total_params | num >>"),
    (START + r"0\.88\d*" + END,
     "a scaled weight of softmax([8, -8] / 8)",
     "<< scaling.scaled_weights | vec >>"),
    (START + r"1\.1\d*e-0?7" + END,
     "a float32-sized difference such as 1.19e-07",
     "<< parity.summary.sdpa | sci >>"),
)


def check_hand_typed(root):
    """No page types a known result outside a placeholder."""
    root = Path(root)
    problems = []
    for source in page_paths(root):
        text = (root / source).read_text(encoding="utf-8")
        clean = blank(text, RE_RAW, RE_COMMENT, RE_BLOCK, RE_VARIABLE)
        for pattern, what, fix in HAND_TYPED:
            for m in re.finditer(pattern, clean):
                problems.append(Problem(
                    source, line_of(clean, m.start()),
                    f"'{m.group()}' types {what} by hand; it goes stale "
                    f"when the code changes: write {fix} instead"))
    return problems


# ---------------------------------------------------------------- claims


@dataclass(frozen=True)
class Claim:
    """A result the prose argues from: where it is shown, which data it
    comes from, and what the source text says it is."""

    page: str
    key: str  # dotted path into the generated data
    what: str
    expected: object = None  # the value the prose states, or None
    holds: object = None  # or a predicate the value must satisfy


CLAIMS = (
    Claim("docs/index.md", "weighted_sum.output",
          "the weighted sum of [2, 0] and [0, 4]", [1.5, 1.0]),
    Claim("docs/scaling.md", "scaling.scores",
          "the two scores at head size 64", [8.0, -8.0]),
    Claim("docs/scaling.md", "scaling.scaled_weights",
          "the weights after dividing by sqrt(64): the second still "
          "contributes", None, lambda w: 0.05 < w[1] < 0.5),
    Claim("docs/scaling.md", "scaling.unscaled_weights",
          "the weights without scaling: almost all on the first", None,
          lambda w: w[0] > 0.999),
    Claim("docs/scaling.md", "scaling.shift_output",
          "softmax([1000, 1000])", [0.5, 0.5]),
    Claim("docs/softmax-backward.md", "softmax_backward.score_grad",
          "the score gradient", [0.25, -0.25]),
    Claim("docs/softmax-backward.md", "softmax_backward.naive_grad",
          "the wrong, diagonal-only gradient", [0.25, 0.0]),
    Claim("docs/pitfalls.md", "pitfalls.mask_demo.masked_before",
          "masking before the softmax", [1.0, 0.0]),
    Claim("docs/pitfalls.md", "pitfalls.mask_demo.zeroed_after",
          "zeroing after the softmax", [0.5, 0.0]),
    Claim("docs/kv-cache.md", "kv_cache.aligned",
          "the position-aligned cache output", [25.0, 30.0]),
    Claim("docs/kv-cache.md", "kv_cache.upper_left",
          "the upper-left (is_causal=True) output", [10.0, 15.0]),
    Claim("docs/multiple-heads.md", "multiple_heads.total_params",
          "4 d_model^2 parameters", 1048576),
)


def split_key(key):
    name, *keys = key.split(".")
    return name, keys


def _close(value, expected):
    if isinstance(expected, list):
        return (isinstance(value, list) and len(value) == len(expected)
                and all(_close(v, e) for v, e in zip(value, expected,
                                                     strict=True)))
    try:
        return math.isclose(float(value), float(expected), rel_tol=1e-9,
                            abs_tol=1e-12)
    except (TypeError, ValueError):
        return False


def _number_forms(x):
    """Every way num(x, digits) can print x, for 0 to 6 digits."""
    from scripts.macros import num  # what the pages use

    forms = {num(x, d) for d in range(7)}
    whole = isinstance(x, (int, float)) and float(x).is_integer()
    if whole and abs(x) >= 1000:
        forms.add(f"{int(x):,}")
        forms.add(f"{int(x):,}".replace(",", "{,}"))
        forms.add(f"{int(x):,}".replace(",", "\\,"))
    return sorted(forms, key=len, reverse=True)


def shown_pattern(value):
    """A regex matching ``value`` as vec/num print it, at any digits, in
    brackets or parentheses or bare, with text or TeX separators."""
    def one(x):
        alts = []
        for form in _number_forms(x):
            body = re.escape(form.lstrip("-"))
            alts.append((MINUS if form.startswith("-") else "") + body)
        return "(?:" + "|".join(alts) + ")"

    if isinstance(value, list):
        inner = SEP.join(one(x) for x in value)
    else:
        inner = one(value)
    return re.compile(START + r"(?<!-)" + inner + END)


def page_text(path):
    """All visible text of a built page, math included, as one string
    with the minus sign normalised."""
    return " ".join(t for _, t, _ in html_text(path)).replace("\u2212", "-")


def check_claims(root, data=None):
    """Each claim holds in the data, and the rendered page shows it."""
    root = Path(root)
    data = load_data(root) if data is None else data
    if data is None:
        return [NO_DATA]
    problems = []
    for claim in CLAIMS:
        name, keys = split_key(claim.key)
        script = f"scripts/{name}.py"
        data_file = f"{DATA}/{name}.json"
        if name not in data:
            problems.append(Problem(
                data_file, 0,
                f"missing, but {claim.page} shows {claim.what} from it "
                f"({claim.key}); make {script}'s compute() write it"))
            continue
        value, error = resolve(data, name, keys)
        if error:
            problems.append(Problem(
                data_file, 0,
                f"{error}; {claim.page} shows {claim.what} from "
                f"{claim.key}: add it to compute() in {script}"))
            continue
        if claim.expected is not None and not _close(value,
                                                      claim.expected):
            problems.append(Problem(
                data_file, 0,
                f"{claim.key} is {value!r}, but the prose of {claim.page} "
                f"argues from {claim.what} = {claim.expected!r}; fix "
                f"{script} (or mha_ref), or rewrite the claim"))
        if claim.holds is not None and not claim.holds(value):
            problems.append(Problem(
                data_file, 0,
                f"{claim.key} is {value!r}: that no longer supports "
                f"'{claim.what}' on {claim.page}; fix {script} or the "
                "prose"))
        built = site_page(root, claim.page)
        if not built.is_file():
            problems.append(Problem(
                claim.page, 0,
                f"{rel(root, built)} is missing: run `make site`"))
            continue
        if not shown_pattern(value).search(page_text(built)):
            problems.append(Problem(
                claim.page, _placeholder_line(root, claim),
                f"the rendered page ({rel(root, built)}) does not show "
                f"{claim.what} as the data has it ({_vec(value)}); write "
                f"<< {claim.key} | vec >> (or | num) where the prose "
                "states it, instead of a typed number"))
    return problems


def _vec(value):
    from scripts.macros import vec

    return vec(value)


def _placeholder_line(root, claim):
    """The line of the page's placeholder for the claim, else 0."""
    path = Path(root) / claim.page
    if not path.is_file():
        return 0
    text = path.read_text(encoding="utf-8")
    name, keys = split_key(claim.key)
    for offset, expr in placeholders(text):
        try:
            chains, _ = expression_names(expr)
        except SyntaxError:
            continue
        if (name, keys) in chains:
            return line_of(text, offset)
    return 0
