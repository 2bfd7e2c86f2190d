r"""The search index reads its formulas as text (after the build).

    plain_math_in_search_index(site)   # postbuild.py runs it

Both engines index a page before the math step typesets it, so the
index holds the raw TeX that arithmatex wrote, and a search result's
snippet shows it: ``\(m\theta_i\)``. This step rewrites every formula
in the index's titles and texts as the plain text a reader would type
or read: ``mθᵢ``, ``QKᵀ/√d_k``, ``softmax(S)``. Searching still finds
the words around it; the page itself keeps KaTeX's typeset math.

MkDocs writes ``search/search_index.json`` (``docs``), Zensical
``search.json`` (``items``); both have ``title`` and ``text``.
"""

import html
import json
import re
from pathlib import Path

INDEXES = ("search/search_index.json", "search.json")
FORMULA = re.compile(r"\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)

SYMBOLS = {
    "alpha": "α",
    "beta": "β",
    "gamma": "γ",
    "delta": "δ",
    "epsilon": "ε",
    "varepsilon": "ε",
    "theta": "θ",
    "lambda": "λ",
    "mu": "μ",
    "pi": "π",
    "sigma": "σ",
    "tau": "τ",
    "phi": "φ",
    "omega": "ω",
    "Delta": "Δ",
    "Sigma": "Σ",
    "ell": "ℓ",
    "top": "ᵀ",
    "cdot": "·",
    "times": "×",
    "odot": "⊙",
    "otimes": "⊗",
    "approx": "≈",
    "in": "∈",
    "infty": "∞",
    "le": "≤",
    "leq": "≤",
    "ge": "≥",
    "geq": "≥",
    "neq": "≠",
    "ne": "≠",
    "to": "→",
    "rightarrow": "→",
    "mapsto": "↦",
    "sum": "∑",
    "prod": "∏",
    "partial": "∂",
    "nabla": "∇",
    "dots": "…",
    "ldots": "…",
    "cdots": "⋯",
    "langle": "⟨",
    "rangle": "⟩",
    "lfloor": "⌊",
    "rfloor": "⌋",
    "lceil": "⌈",
    "rceil": "⌉",
    "pm": "±",
    "bmod": " mod ",
    "mid": "|",
    "quad": " ",
    "qquad": " ",
}
# commands that are a name: \exp(x) reads exp(x)
NAMES = {"exp", "log", "max", "min", "sin", "cos", "softmax", "arg", "det"}
# commands whose argument is the text: \mathbf{q} reads q
WRAPPERS = {
    "mathbf",
    "boldsymbol",
    "mathbb",
    "mathrm",
    "mathit",
    "mathcal",
    "operatorname",
    "text",
    "textrm",
    "texttt",
    "textbf",
    "textit",
    "mathbin",
    "mathrel",
    "mathop",
    "hat",
    "bar",
}
# sizing and spacing: nothing to read
DROPPED = {
    "left",
    "right",
    "big",
    "Big",
    "bigg",
    "Bigg",
    "bigl",
    "bigr",
    "Bigl",
    "Bigr",
    "textstyle",
    "displaystyle",
    "scriptstyle",
    "limits",
    "nolimits",
}
SUB = dict(
    zip(
        "0123456789+-=()aehijklmnoprstuvxβγ",
        "₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎ₐₑₕᵢⱼₖₗₘₙₒₚᵣₛₜᵤᵥₓᵦᵧ",
        strict=True,
    )
)
SUP = dict(
    zip(
        "0123456789+-=()abcdefghijklmnoprstuvwxyzT",
        "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ᵃᵇᶜᵈᵉᶠᵍʰⁱʲᵏˡᵐⁿᵒᵖʳˢᵗᵘᵛʷˣʸᶻᵀ",
        strict=True,
    )
)


def _group(tex, at):
    """(the argument starting at ``at``, the index after it)."""
    while at < len(tex) and tex[at] == " ":
        at += 1
    if at >= len(tex):
        return "", at
    if tex[at] == "{":
        depth = 0
        for end in range(at, len(tex)):
            depth += {"{": 1, "}": -1}.get(tex[end], 0)
            if depth == 0:
                return tex[at + 1 : end], end + 1
        return tex[at + 1 :], len(tex)
    if tex[at] == "\\":
        name = re.match(r"\\([A-Za-z]+|.)", tex[at:])
        return name[0], at + len(name[0])
    return tex[at], at + 1


def _script(text, table, mark):
    """``text`` as Unicode sub- or superscripts, else mark + text."""
    if text == "ᵀ" and table is SUP:
        return "ᵀ"
    if text and all(c in table for c in text):
        return "".join(table[c] for c in text)
    return mark + (text if re.fullmatch(r"\w+", text) else f"({text})")


def _wrap(text):
    """``text`` in parentheses when it is more than one term."""
    return f"({text})" if re.search(r"[ +\-−·×/=,;]", text) else text


def tex_to_text(tex):
    r"""Plain text for one formula's TeX.

    >>> tex_to_text(r"m\theta_i")
    'mθᵢ'
    >>> tex_to_text(r"\frac{QK^\top}{\sqrt{d_k}}")
    'QKᵀ/√dₖ'
    >>> tex_to_text(r"\frac{1}{\sqrt{d_k}} \sum_{j=1}^{T} e^{s_j - m}")
    '1/√dₖ ∑ⱼ₌₁ᵀ e^(sⱼ - m)'
    >>> tex_to_text(r"\mathbf q_i \cdot \mathbf k_j")
    'qᵢ · kⱼ'
    >>> tex_to_text(r"d_\text{model} = 32")
    'd_model = 32'
    """
    out, at = [], 0
    while at < len(tex):
        c = tex[at]
        if c == "\\":
            match = re.match(r"\\([A-Za-z]+)|\\(.)", tex[at:])
            at += len(match[0])
            name = match[1]
            if name is None:  # \, \! \  \\ \{ \} \| \;
                sym = match[2]
                out.append(
                    {"{": "{", "}": "}", "|": "‖", "\\": "; "}.get(
                        sym, " " if sym in ", ;:" else ""
                    )
                )
            elif name in ("frac", "dfrac", "tfrac"):
                top, at = _group(tex, at)
                bottom, at = _group(tex, at)
                top, bottom = tex_to_text(top), tex_to_text(bottom)
                out.append(f"{_wrap(top)}/{_wrap(bottom)}")
            elif name == "sqrt":
                arg, at = _group(tex, at)
                out.append("√" + _wrap(tex_to_text(arg)))
            elif name == "tilde":
                arg, at = _group(tex, at)
                out.append(tex_to_text(arg) + "\u0303")
            elif name in ("begin", "end"):
                _, at = _group(tex, at)
            elif name == "tag":
                arg, at = _group(tex, at)
                out.append(f"  ({tex_to_text(arg)})")
            elif name in WRAPPERS:
                arg, at = _group(tex, at)
                out.append(tex_to_text(arg))
            elif name in SYMBOLS:
                out.append(SYMBOLS[name])
            elif name in NAMES:
                out.append(name)
            elif name not in DROPPED:
                out.append(name)  # unknown: its name reads better than \x
        elif c in "_^":
            arg, at = _group(tex, at + 1)
            if arg.startswith("\\") and arg[1:] in WRAPPERS:  # _\text{x}
                inner, at = _group(tex, at)
                arg = f"{arg}{{{inner}}}"
            text = tex_to_text(arg).strip()
            out.append(
                _script(text, SUB, "_")
                if c == "_"
                else _script(text, SUP, "^")
            )
        elif c in "{}":
            at += 1
        elif c in "&~":
            out.append(" ")
            at += 1
        else:
            out.append(c)
            at += 1
    return re.sub(r"[ \t\n]+", " ", "".join(out)).strip()


def plain_math(text):
    """``text`` (HTML) with each \\(..\\) and \\[..\\] formula as plain
    text; the TeX in it is HTML-escaped (&amp;, &lt;), and so is the
    text it becomes."""

    def plain(match):
        tex = html.unescape(match[1] or match[2])
        return html.escape(tex_to_text(tex), quote=False)

    return FORMULA.sub(plain, text)


def plain_math_in_search_index(site):
    """Rewrite the formulas of the built ``site``'s search index as text;
    returns how many entries changed (0 when it has no index)."""
    changed = 0
    for name in INDEXES:
        path = Path(site) / name
        if not path.is_file():
            continue
        index = json.loads(path.read_text(encoding="utf-8"))
        for entry in index.get("docs", []) + index.get("items", []):
            for field in ("title", "text"):
                value = entry.get(field)
                if isinstance(value, str) and FORMULA.search(value):
                    entry[field] = plain_math(value)
                    changed += 1
        if changed:
            path.write_text(
                json.dumps(index, ensure_ascii=False, separators=(",", ":")),
                encoding="utf-8",
            )
    return changed
