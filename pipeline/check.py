"""Check that the pages, the code and the generated numbers agree.

    python -m pipeline.check     # make site, serve and fast run it

Each ``check_*`` takes the repository root (a test passes a small
drifted copy) and returns ``Problem``s: file, line, and the fix, one
line each, no traceback. It runs after generation and before either
engine, so a contributor's mistake is named where it is, not deep in a
build's traceback. What the strict build fails on alone with a clear
message is left to it (a broken link); these catch what it lets
through, or report it without the page line:

- check_code: a code block typed on a page instead of included;
- check_includes: an include whose section does not exist, with the
  nearest names that do;
- check_placeholders: a ``<< number >>`` the data does not have, with
  the names that exist there;
- check_hand_typed: a result typed by hand instead of a placeholder;
- check_math: a formula KaTeX cannot parse, or one holding a control
  character (a backslash escape Python ate: the TAB of "\theta").
"""

import difflib
import re
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

import jinja2

import macros  # beside mkdocs.yml: the filters and data the pages use
from pipeline.typeset_math import MathError, Typesetter

ROOT = Path(__file__).resolve().parents[1]
# Fences that may hold text typed on the page: commands and examples of
# the page syntax itself. Any other fence must only include code.
TYPED_LANGS = {"sh", "bash", "console", "text", "markdown"}
RE_INCLUDE = re.compile(
    r'^[ \t]*-{1,}8<-{1,}[ \t]+"(?P<path>[^":]+)(?::(?P<name>[^"]+))?"',
    re.M,
)
RE_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)"
)
RE_TEMPLATE = re.compile(r"<<.*?>>|<%.*?%>|<#.*?#>", re.S)
# Results the prose argues from; a page shows them through a placeholder
# (listed in the message), never typed, or it keeps the old number when
# the code changes. Values are read from the generated data.
RESULTS = [
    "attention_matrix.weighted_sum.output",
    "softmax_backward.score_grad",
    "softmax_backward.naive_grad",
    "pitfalls.mask_demo.zeroed_after",
    "kv_cache.aligned",
    "kv_cache.upper_left",
    "multiple_heads.total_params",
    "scaling.scaled_weights",
    "experiment.summary.sdpa",
]


@dataclass(frozen=True, order=True)
class Problem:
    path: str
    line: int
    message: str

    def __str__(self):
        return f"{self.path}:{self.line}: {self.message}"


def report(problems):
    return "\n".join(map(str, sorted(problems)))


def pages(root):
    """docs/**/*.md but docs/generated/: (relative path, text)."""
    docs = Path(root) / "docs"
    for path in sorted(docs.rglob("*.md")):
        relative = path.relative_to(root).as_posix()
        if not relative.startswith("docs/generated/"):
            yield relative, path.read_text(encoding="utf-8")


def line_of(text, index):
    return text.count("\n", 0, index) + 1


def load_data(root):
    return macros.load_data(Path(root) / "docs/generated/data")


# ------------------------------------------------------------------ code


def fences(text):
    """(language, first line number, body lines) of each fenced block."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        match = RE_FENCE.match(lines[i])
        i += 1
        if not match:
            continue
        start, close = i, match["indent"] + match["fence"]
        while i < len(lines) and not lines[i].startswith(close):
            i += 1
        yield match["lang"], start + 1, lines[start:i]
        i += 1


def check_code(root):
    problems = []
    for page, text in pages(root):
        for lang, first, body in fences(text):
            if lang in TYPED_LANGS:
                continue
            for offset, line in enumerate(body):
                if line.strip() and not RE_INCLUDE.match(line):
                    problems.append(
                        Problem(
                            page,
                            first + offset,
                            (
                                "code typed on the page: put it in a named "
                                "section of a tested file and include it "
                                'with --8<-- "mha_ref/<file>.py:<section>"'
                            ),
                        )
                    )
                    break
    return problems


SECTION = re.compile(r"# --8<-- \[start:([a-z][-_0-9a-z]*)\]")


def check_includes(root):
    problems = []
    for page, text in pages(root):
        for match in RE_INCLUDE.finditer(text):
            path, name = match["path"], match["name"]
            where = Path(root) / path
            line = line_of(text, match.start())
            if not where.is_file():
                if not path.startswith("docs/generated/"):  # made later
                    problems.append(Problem(page, line, f"{path}: no file"))
                continue
            source = where.read_text(encoding="utf-8")
            if name and f"[start:{name}]" not in source:
                names = SECTION.findall(source)
                near = difflib.get_close_matches(name, names, n=3)
                hint = f"did you mean {', '.join(near)}? " if near else ""
                problems.append(
                    Problem(
                        page,
                        line,
                        f"{path} has no section {name!r}: {hint}"
                        f"(its sections: {', '.join(names) or 'none'})",
                    )
                )
    return problems


# ---------------------------------------------------------- placeholders


class MethodShownError(TypeError):
    """A placeholder that prints a method: Jinja finds ``d.keys`` (the
    dict method) before the data key "keys"."""


def _shown(value):
    if isinstance(value, jinja2.Undefined):  # callable, but not a method
        value._fail_with_undefined_error()
    if callable(value):
        raise MethodShownError(
            f"the placeholder prints {value!r}, not data: a key named "
            'like a dict method must be written name["key"]'
        )
    return value


def render(text, data):
    """A page as mkdocs-macros renders it (strict), with the same data."""
    env = jinja2.Environment(
        finalize=_shown,
        variable_start_string="<<",
        variable_end_string=">>",
        block_start_string="<%",
        block_end_string="%>",
        comment_start_string="<#",
        comment_end_string="#>",
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.filters.update(macros.FILTERS)
    env.globals["figure"] = lambda name: macros.figure(data, name)
    return env.from_string(text).render(**data)


def rendered_pages(root, data):
    """(page, rendered text or None, problem or None) of each page."""
    for page, text in pages(root):
        try:
            yield page, render(text, data), None
        except jinja2.TemplateSyntaxError as exc:
            yield page, None, Problem(page, exc.lineno, str(exc))
        except Exception as exc:  # UndefinedError, a filter's TypeError
            lines = [
                f.lineno
                for f in traceback.extract_tb(exc.__traceback__)
                if f.filename == "<template>"
            ]
            line = lines[-1] if lines else 0
            message = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, jinja2.UndefinedError):
                where = text.split("\n")[line - 1] if line else text
                message = _missing(data, where) or message
            yield page, None, Problem(page, line, message)


PLACEHOLDER = re.compile(r"<<(.*?)>>")
NAME = re.compile(r"(?<![\w.])([A-Za-z_]\w*(?:\.\w+)*)")
STRING = re.compile(r"'[^']*'|\"[^\"]*\"")


def _names(line):
    """Dotted names a line's placeholders read (before any filter)."""
    for match in PLACEHOLDER.finditer(line):
        expression = STRING.sub("", match[1]).split("|")[0]
        yield from NAME.findall(expression)


def _missing(data, line):
    """What a placeholder on ``line`` names that the data lacks, and the
    names that exist there (one line)."""
    for dotted in _names(line):
        parts, value = dotted.split("."), data
        for depth, key in enumerate(parts):
            if isinstance(value, dict) and key in value:
                value = value[key]
                continue
            if not isinstance(value, dict):
                break  # a list's method or index: not ours to judge
            owner = ".".join(parts[:depth]) or "the pages' data"
            names = sorted(value)
            near = difflib.get_close_matches(key, names, n=3)
            hint = f"did you mean {', '.join(near)}? " if near else ""
            if depth == 0:
                what, there = f"no page variable {key!r}", "page variables"
            else:
                what, there = f"{owner} has no {key!r}", "its names"
            return (
                f"<< {dotted} >>: {what}; {hint}({there}: "
                f"{', '.join(names)}; a page script names its outputs "
                "with glue.value)"
            )
    return None


def check_placeholders(root, rendered=None):
    """``rendered``: rendered_pages' items, when main has them already."""
    if rendered is None:
        rendered = rendered_pages(root, load_data(root))
    return [p for _, _, p in rendered if p]


# ------------------------------------------------------ hand-typed results

NUMBER = r"[-\u2212]?\d+(?:(?:,|\{,\})\d{3})*(?:\.\d+)?(?:e[-+]?\d+)?"
SEP = r"\s*,(?:\s|\\[ ,;:!]|~)*"


def _typed(token):
    """The float a typed number means, and its significant digits."""
    text = token.replace("\u2212", "-").replace("{,}", "").replace(",", "")
    mantissa = text.split("e")[0].lstrip("-").replace(".", "").lstrip("0")
    return float(text), max(len(mantissa), 1)


def _matches(token, value):
    typed, digits = _typed(token)
    return float(f"{float(value):.{digits - 1}e}") == typed or typed == value


def _lookup(data, dotted):
    value = data
    for key in dotted.split("."):
        value = value[key]
    return value


def check_hand_typed(root):
    data = load_data(root)
    problems = []
    for page, text in pages(root):
        # placeholders are allowed: blank them, keeping line numbers
        clean = RE_TEMPLATE.sub(lambda m: re.sub(r"[^\n]", " ", m[0]), text)
        clean = RE_INCLUDE.sub("", clean)
        for dotted in RESULTS:
            try:
                value = _lookup(data, dotted)
            except (KeyError, TypeError):
                continue  # check_placeholders names a missing value

            values = value if isinstance(value, list) else [value]
            if len(values) == 1 and _typed(str(values[0]))[1] < 3:
                continue  # too short to tell from an input
            pattern = SEP.join([f"({NUMBER})"] * len(values))
            for match in re.finditer(rf"(?<![\w.]){pattern}(?![\w.])", clean):
                if all(map(_matches, match.groups(), values)):
                    problems.append(
                        Problem(
                            page,
                            line_of(clean, match.start()),
                            f"{match[0]!r} types the result {dotted} by hand; "
                            f"it goes stale when the code changes: write "
                            f"<< {dotted} | vec >> (or num, sci) instead",
                        )
                    )
    return problems


# ------------------------------------------------------------------ math

RE_MATH = re.compile(
    r"\$\$(?P<display>.+?)\$\$|\\\[(?P<bracket>.+?)\\\]"
    r"|(?<![\\$])\$(?P<inline>[^$\n]+?)\$|\\\((?P<paren>.+?)\\\)",
    re.S,
)


def formulas(text):
    """(line, TeX, display) of each formula outside code blocks."""
    lines = text.split("\n")
    for _, first, body in fences(text):  # blank code, keep line numbers
        for i in range(first - 1, first - 1 + len(body)):
            lines[i] = ""
    text = re.sub(r"`[^`\n]*`", "", "\n".join(lines))
    for match in RE_MATH.finditer(text):
        display = match["display"] or match["bracket"]
        tex = display or match["inline"] or match["paren"]
        yield line_of(text, match.start()), tex, display is not None


# What "\t" of "\theta", "\f" of "\frac", "\b" of "\beta", "\r" of
# "\rho", "\v" of "\vec" and "\a" of "\alpha" become in a Python string
# without r"": KaTeX parses them, and "m\theta" renders as "m heta".
EATEN = {
    "\t": "TAB (the \\t of \\theta, \\tau)",
    "\f": "a form feed (the \\f of \\frac)",
    "\b": "a backspace (the \\b of \\beta, \\boldsymbol)",
    "\r": "a carriage return (the \\r of \\rho, \\right)",
    "\v": "a vertical tab (the \\v of \\vec, \\varepsilon)",
    "\a": "a bell (the \\a of \\alpha)",
}


def check_math(root, typesetter=None, rendered=None):
    """Every formula on every page typeset by the vendored KaTeX.

    The same Typesetter as the build's post-step (pipeline/typeset_math),
    so a formula that fails here also fails `make site`. A formula with
    a control character in it parses, and shows the wrong letters.
    """
    typesetter = typesetter or Typesetter()
    if rendered is None:
        rendered = rendered_pages(root, load_data(root))
    problems = []
    for page, text, _problem in rendered:
        for line, tex, display in formulas(text or ""):
            eaten = sorted({EATEN[c] for c in tex if c in EATEN})
            if eaten:
                message = (
                    f"{tex.strip()!r} holds {' and '.join(eaten)}: a "
                    f"backslash escape read by Python; double the "
                    f"backslash, or write the string as r'...'"
                )
                problems.append(Problem(page, line, message))
            try:
                typesetter.render(tex.strip(), display)
            except MathError as exc:
                message = f"KaTeX cannot parse {tex.strip()!r}: {exc}"
                problems.append(Problem(page, line, message))
    return problems


CHECKS = [
    check_code,
    check_includes,
    check_placeholders,
    check_hand_typed,
    check_math,
]


def main(root=ROOT):
    from pipeline.postbuild import FORMULA_CACHE

    problems = []
    try:
        # each page rendered once, for its placeholders and its formulas
        rendered = list(rendered_pages(root, load_data(root)))
        for check in CHECKS:
            if check is check_math:  # the build's formula cache: cheap
                typesetter = Typesetter(cache=FORMULA_CACHE)
                problems += check(root, typesetter, rendered)
                typesetter.save()
            elif check is check_placeholders:
                problems += check(root, rendered)
            else:
                problems += check(root)
    except FileNotFoundError as exc:  # no generated data yet
        print(exc, file=sys.stderr)
        return 1
    for problem in sorted(set(problems)):
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
