"""The page linter: the pages, the code and the generated numbers agree.

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
- check_hand_typed: a result typed by hand instead of a placeholder (the
  results are what the pages' placeholders read: found, not listed);
- check_answers: a number typed in an exercise's answer (a ``??? success``
  block), where every number is a placeholder;
- check_math: a formula KaTeX cannot parse, or one holding a control
  character (a backslash escape Python ate: the TAB of "\theta").
"""

import ast
import difflib
import hashlib
import json
import re
import sys
import traceback
from pathlib import Path

import jinja2

from pipeline import config, memo
from pipeline.page_data import variable
from pipeline.pages import (
    ANY_INCLUDE,
    Problem,
    include_problems,
    line_of,
    page_scripts,
    pages,
)
from pipeline.typeset_math import FORMULA_CACHE, MathError, Typesetter

ROOT = config.ROOT
TEMPLATES = ROOT / config.CACHE / "templates"  # pages' compiled Jinja
# Fences that may hold text typed on the page: commands and examples of
# the page syntax itself. Any other fence must only include code.
TYPED_LANGS = {"sh", "bash", "console", "text", "markdown"}
RE_INCLUDE = ANY_INCLUDE
RE_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)"
)
RE_TEMPLATE = re.compile(r"<<.*?>>|<%.*?%>|<#.*?#>", re.S)


def load_data(root):
    data = Path(root) / config.GENERATED / "data"
    return config.site_glue().load_data(data)


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


def check_includes(root):
    """An include whose file or section does not exist (pages.py: the
    same check runs before generation)."""
    return include_problems(root)


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


def render(text, data, name="page"):
    """A page as mkdocs-macros renders it (strict), with the same data.
    Its compiled template is kept in .cache/templates, by its text."""
    glue = config.site_glue()  # macros.py: the filters, figure()
    delimiters = config.template_delimiters()  # mkdocs.yml's, as macros
    settings = hashlib.sha256(repr(sorted(delimiters.items())).encode())
    try:
        TEMPLATES.mkdir(parents=True, exist_ok=True)
        compiled = jinja2.FileSystemBytecodeCache(str(TEMPLATES))
    except OSError:  # a read-only checkout: compiled every time
        compiled = None
    env = jinja2.Environment(
        finalize=_shown,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        # a page's name with the settings its code is compiled for:
        # another text under that name is compiled again (jinja2 checks)
        loader=jinja2.FunctionLoader(lambda _: text),
        bytecode_cache=compiled,
        **delimiters,
    )
    env.filters.update(glue.FILTERS)
    env.globals["figure"] = lambda name: glue.figure(data, name)
    env.globals["glossary"] = lambda: glue.glossary_table(
        glue.glossary_entries(config.glossary_file())
    )
    template = env.get_template(f"{name} {settings.hexdigest()[:16]}")
    return template.render(**data)


def rendered_pages(root, data):
    """(page, rendered text or None, problem or None) of each page."""
    for page, text in pages(root):
        try:
            yield page, render(text, data, page), None
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
                message = _missing(data, where, root) or message
            yield page, None, Problem(page, line, message)


PLACEHOLDER = re.compile(r"<<(.*?)>>")
NAME = re.compile(r"(?<![\w.])([A-Za-z_]\w*(?:\.\w+)*)")
STRING = re.compile(r"'[^']*'|\"[^\"]*\"")


def _names(line):
    """Dotted names a line's placeholders read (before any filter)."""
    for match in PLACEHOLDER.finditer(line):
        expression = STRING.sub("", match[1]).split("|")[0]
        yield from NAME.findall(expression)


def _missing(data, line, root=ROOT):
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
                what += _not_generated(key, root)
            else:
                what, there = f"{owner} has no {key!r}", "its names"
            return (
                f"<< {dotted} >>: {what}; {hint}({there}: "
                f"{', '.join(names)}; a page script names its outputs "
                "with glue.value)"
            )
    return None


def _not_generated(key, root):
    """Why a page variable may be missing: its script has not run."""
    script = f"{config.SCRIPTS}/{key.replace('_', '-')}.py"
    if (Path(root) / script).is_file():
        return f" ({script} has not run, or failed: see generation)"
    return f" (no {script} glues it yet)"


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


def _too_short(tokens):
    """Typed numbers too short to tell a result from an input: a lone
    whole number of under seven significant digits (a size, a length:
    512, 4096), a lone fraction of under three, a list of one-digit
    numbers (0, 4; 0.5, 0.5; 1000, 1000)."""
    digits = [_significant(t) for t in tokens]
    if len(tokens) > 1:
        return max(digits) < 2
    whole = not re.search(r"[.e]", tokens[0])
    return digits[0] < (7 if whole else 3)


def _significant(token):
    """Significant digits of a typed number (1000 has one, 1.50 three)."""
    text = token.replace("\u2212", "-").replace("{,}", "").replace(",", "")
    mantissa = text.split("e")[0].lstrip("-")
    digits = mantissa.replace(".", "").lstrip("0")
    if "." not in mantissa:
        digits = digits.rstrip("0")
    return max(len(digits), 1)


def _matches(token, value):
    typed, digits = _typed(token)
    return float(f"{float(value):.{digits - 1}e}") == typed or typed == value


def _lookup(data, dotted):
    value = data
    for key in dotted.split("."):
        value = value[key]
    return value


def results(root, data):
    """{dotted name: value} of every number (or flat list of numbers) a
    page shows through a placeholder and its page script computes: the
    results the prose argues from, never to be typed by hand. Found, not
    listed: the placeholders on the pages, less what the scripts glue as
    a literal (an input such as ``glue.value("d_model", 512)``)."""
    literal = set()
    for name, script in page_scripts(root).items():
        literal |= _glued_literals(variable(name), script)
    below = tuple(f"{i}." for i in sorted(literal))
    found = {}
    for _, text in pages(root):
        for line in text.split("\n"):
            for dotted in _names(line):
                if dotted in literal or dotted.startswith(below):
                    continue
                try:
                    value = _lookup(data, dotted)
                except (KeyError, TypeError, IndexError):
                    continue  # check_placeholders names a missing value
                values = value if isinstance(value, list) else [value]
                if values and all(_is_number(v) for v in values):
                    found[dotted] = value
    return dict(sorted(found.items()))


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _glued_literals(prefix, script):
    """Dotted names a page script glues as literals, or as names bound
    to literals: its inputs (``glue.value(name, value)`` calls read from
    the script's syntax; a dict literal is read key by key)."""
    text = script.read_text(encoding="utf-8")
    return set(
        memo.fact(
            f"literals glued as {prefix}",
            text,
            lambda t: sorted(_find_glued_literals(prefix, t)),
        )
    )


def _find_glued_literals(prefix, text):
    try:
        tree = config.parse_python(text)
    except SyntaxError:
        return set()
    bound = {}  # module-level name -> the expression bound to it
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                _bind(target, node.value, bound)
    found = set()

    def visit(dotted, node):
        node = bound.get(node.id, node) if isinstance(node, ast.Name) else node
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(
                    key.value, str
                ):
                    visit(f"{dotted}.{key.value}", value)
            return
        try:
            ast.literal_eval(node)
        except (ValueError, TypeError, SyntaxError, RecursionError):
            return
        found.add(dotted)

    for node in ast.walk(tree):
        call = isinstance(node, ast.Call) and len(node.args) >= 2
        if call and ast.unparse(node.func) == "glue.value":
            name = node.args[0]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                visit(f"{prefix}.{name.value}", node.args[1])
    return found


def _bind(target, value, bound):
    if isinstance(target, ast.Name):
        bound[target.id] = value
    elif isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
        for t, v in zip(target.elts, value.elts, strict=False):
            _bind(t, v, bound)


def check_hand_typed(root, data=None):
    data = load_data(root) if data is None else data
    by_length = {}  # results by how many numbers they are
    for dotted, value in results(root, data).items():
        values = value if isinstance(value, list) else [value]
        by_length.setdefault(len(values), []).append((dotted, values))
    patterns = {
        n: re.compile(rf"(?<![\w.]){SEP.join([f'({NUMBER})'] * n)}(?![\w.])")
        for n in by_length
    }

    def typed(text):
        # placeholders are allowed: blank them, keeping line numbers
        clean = RE_TEMPLATE.sub(lambda m: re.sub(r"[^\n]", " ", m[0]), text)
        clean = RE_INCLUDE.sub("", clean)
        found = []
        for n, pattern in patterns.items():
            for match in pattern.finditer(clean):
                tokens = match.groups()
                if _too_short(tokens):
                    continue  # could as well be an input the prose names
                for dotted, values in by_length[n]:
                    if all(map(_matches, tokens, values)):
                        found.append(_typed_problem(clean, match, dotted))
        return found

    # a page is searched again only when it or the results changed
    table = json.dumps(sorted(by_length.items()), default=str)
    problems = []
    for page, text in pages(root):
        asked = f"{table}\0{text}"
        answer = memo.fact("hand-typed", asked, lambda _, t=text: typed(t))
        for line, message in answer:
            problems.append(Problem(page, line, message))
    return problems


def _typed_problem(clean, match, dotted):
    return [
        line_of(clean, match.start()),
        f"{match[0]!r} types the result {dotted} by hand; it goes stale "
        f"when the code changes: write << {dotted} | vec >> (or num, sci) "
        "instead",
    ]


# ------------------------------------------------------- exercise answers

# An exercise's answer: a collapsed block of Material's "success" type,
# ??? success "Answer", nested in the !!! question of the exercise.
RE_ANSWER = re.compile(r"^(?P<indent>[ \t]*)\?\?\?\+?[ \t]+success\b")
# What may hold digits in an answer: inline code, a link's address, and
# a math subscript or exponent ($x_1$, $e^{-2}$): symbols, not results.
RE_ANSWER_ALLOWED = re.compile(
    r"`[^`\n]*`|\]\([^)\n]*\)|[_^](?:\{[^}\n]*\}|\d)"
)
RE_DIGITS = re.compile(r"(?<![\w\\])[-\u2212]?\d+(?:[.,]\d+)*")


def answer_lines(text):
    """(line number, line) of each line inside an answer block, the
    code blocks in it left out."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        match = RE_ANSWER.match(lines[i])
        i += 1
        if not match:
            continue
        indent, fence = len(match["indent"].expandtabs(4)), None
        while i < len(lines):
            line = lines[i]
            if line.strip() and len(line) - len(line.lstrip()) <= indent:
                break  # the block ends where the indentation does
            opening = RE_FENCE.match(line)
            if fence is None and opening and opening["fence"]:
                fence = opening["fence"]
            elif fence is not None and line.strip().startswith(fence):
                fence = None
            elif fence is None:
                yield i + 1, line
            i += 1


def check_answers(root):
    """A number typed in an exercise's answer: every number there comes
    from the page's script, as a placeholder."""
    problems = []
    for page, text in pages(root):
        # placeholders are allowed: blank them, keeping line numbers
        clean = RE_TEMPLATE.sub(lambda m: re.sub(r"[^\n]", " ", m[0]), text)
        for number, line in answer_lines(clean):
            match = RE_DIGITS.search(RE_ANSWER_ALLOWED.sub(" ", line))
            if match:
                problems.append(
                    Problem(
                        page,
                        number,
                        f"{match[0]!r} typed in an exercise's answer: "
                        "compute it in the page script's Exercises cell, "
                        "glue it (glue.value) and write << page.name >> "
                        "instead",
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
    check_answers,
    check_math,
]


GLUE_CALLS = ("glue.value", "glue.table", "glue.figure", "glue.export")


def glued_names(script):
    """The names a page script glues, read from its syntax; None when a
    name is computed (an f-string, a variable): then nobody can say."""
    try:
        text = Path(script).read_text(encoding="utf-8")
    except OSError:
        return None
    names = memo.fact("glued names", text, _find_glued_names)
    return None if names is None else set(names)


def _find_glued_names(text):
    try:
        tree = config.parse_python(text)
    except SyntaxError:
        return None
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            if ast.unparse(node.func) not in GLUE_CALLS:
                continue
            name = node.args[0]
            if not isinstance(name, ast.Constant):
                return None
            names.add(name.value)
    return sorted(names)


def check_placeholder_names(root):
    """Before generation: a placeholder naming what its page's script
    never glues (``<< scaling.sqrt_d_hed >>``), from the scripts' syntax
    alone. Names a script computes, and variables that are no page's,
    are left to check_placeholders, after generation."""
    problems, glued = [], {}
    scripts = Path(root) / config.SCRIPTS
    for page, text in pages(root):
        for number, line in enumerate(text.split("\n"), start=1):
            for dotted in _names(line):
                variable, _, rest = dotted.partition(".")
                script = scripts / f"{variable.replace('_', '-')}.py"
                if not rest or not script.is_file():
                    continue
                if variable not in glued:
                    glued[variable] = glued_names(script)
                names, key = glued[variable], rest.split(".")[0]
                if names is None or key in names or key == "figures":
                    continue
                near = difflib.get_close_matches(key, sorted(names), n=3)
                hint = f"did you mean {', '.join(near)}? " if near else ""
                problems.append(
                    Problem(
                        page,
                        number,
                        f"<< {dotted} >>: {script.relative_to(root)} "
                        f"glues no {key!r}; {hint}(it glues: "
                        f"{', '.join(sorted(names))})",
                    )
                )
    return problems


def before_generation(root=ROOT):
    """The mistakes found without running anything: typed code, an
    include of a section that does not exist, a placeholder its script
    never glues. ``python -m pipeline`` stops on them (in a second),
    before any page runs; ``make serve`` names them and goes on."""
    found = {
        *check_code(root),
        *check_includes(root),
        *check_placeholder_names(root),
    }
    return sorted(found)


def lint(root=ROOT, typesetter=None):
    """Every check's problems, sorted; each page rendered once. Raises
    FileNotFoundError when nothing was generated yet."""
    data = load_data(root)
    rendered = list(rendered_pages(root, data))
    own = typesetter is None  # the build's formula cache: cheap
    typesetter = typesetter or Typesetter(cache=FORMULA_CACHE)
    problems = [
        *check_code(root),
        *check_includes(root),
        *check_placeholders(root, rendered),
        *check_hand_typed(root, data),
        *check_answers(root),
        *check_math(root, typesetter, rendered),
    ]
    if own:
        typesetter.save()
    return sorted(set(problems))


def main(root=ROOT):
    try:
        problems = lint(root)
    except (FileNotFoundError, ValueError) as exc:  # no data, a bad name
        print(exc, file=sys.stderr)
        return 1
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
