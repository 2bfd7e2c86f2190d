"""Placeholders on pages: each << expr >> reads a value generation wrote.

The pages' mkdocs-macros expressions are parsed as Python (close enough
for what pages use) to find the data they read and the filters they
apply; resolve() follows the keys into docs/generated/data/*.json.
check_numbers.py uses the same parser for the claims.
"""

import ast
import json
import re
from pathlib import Path

from .pages import DATA, Problem, blank, line_of, page_paths

# mkdocs-macros delimiters (mkdocs.yml): << var >>, <% block %>, <# c #>.
RE_RAW = re.compile(r"<%-?\s*raw\s*-?%>.*?<%-?\s*endraw\s*-?%>", re.S)
RE_COMMENT = re.compile(r"<#.*?#>", re.S)
RE_VARIABLE = re.compile(r"<<-?(?P<expr>.*?)-?>>", re.S)
RE_BLOCK = re.compile(r"<%-?(?P<stmt>.*?)-?%>", re.S)
RE_FOR = re.compile(r"^\s*for\s+(?P<names>[\w\s,()]+?)\s+in\s+(?P<expr>.+)$",
                    re.S)
RE_MACRO = re.compile(r"^\s*(?:macro|call)\s+(?P<names>\w+\s*\(.*\))\s*$",
                      re.S)
RE_SET = re.compile(r"^\s*set\s+(?P<names>[\w\s,]+?)\s*=\s*(?P<expr>.+)$",
                    re.S)
# The filters scripts/macros.py registers; Jinja's own come from jinja2.
CUSTOM_FILTERS = {"num", "sci", "vec"}
# Variables mkdocs-macros defines itself, and Jinja's loop helpers.
BUILTIN_NAMES = {"config", "environment", "extra", "files", "filters",
                 "filters_builtin", "git", "macros", "navigation", "page",
                 "plugin", "loop", "range", "true", "false", "none",
                 "True", "False", "None", "namespace", "dict", "lipsum",
                 "cycler", "joiner", "context", "macros_info", "now",
                 "fix_url", "pretty", "relative_url"}


# What the checks that read the data report when there is none.
NO_DATA = Problem(DATA, 0, "no generated data: run `make generate` "
                           "(python -m scripts.build) first")


def load_data(root):
    """{name: value} of docs/generated/data/*.json, or None if absent."""
    folder = Path(root) / DATA
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not files:
        return None
    return {p.stem: json.loads(p.read_text(encoding="utf-8"))
            for p in files}


def _jinja_filters():
    try:
        from jinja2.filters import FILTERS
    except ImportError:  # pragma: no cover - jinja2 comes with mkdocs
        return set()
    return set(FILTERS)


class _Names(ast.NodeVisitor):
    """The variable chains (name, [key, ...]) an expression reads, and
    the filters it applies."""

    def __init__(self):
        self.chains, self.filters = [], []

    def chain(self, node):
        keys = []
        while True:
            if isinstance(node, ast.Attribute):
                keys.append(node.attr)
                node = node.value
            elif isinstance(node, ast.Subscript):
                index = node.slice
                if isinstance(index, ast.Constant):
                    keys.append(index.value)
                else:
                    self.visit(index)
                    keys = []  # a computed index: check the prefix only
                node = node.value
            else:
                break
        return node, keys[::-1]

    def visit_Attribute(self, node):
        self._read(node)

    def visit_Subscript(self, node):
        self._read(node)

    def visit_Name(self, node):
        self.chains.append((node.id, []))

    def _read(self, node):
        head, keys = self.chain(node)
        if isinstance(head, ast.Name):
            self.chains.append((head.id, keys))
        else:
            self.visit(head)

    def _filter(self, node):
        if isinstance(node, ast.Name):
            self.filters.append(node.id)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            self.filters.append(node.func.id)
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                self.visit(arg)
        else:
            self.visit(node)

    def visit_BinOp(self, node):
        if isinstance(node.op, ast.BitOr):  # Jinja: value | filter
            self.visit(node.left)
            self._filter(node.right)
        else:
            self.generic_visit(node)

    def visit_Call(self, node):
        if isinstance(node.func, ast.Name):  # num(x): a function
            self.filters.append(node.func.id)
        else:
            self.visit(node.func)
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            self.visit(arg)

    def visit_Compare(self, node):  # `x is defined`: tests are not names
        self.visit(node.left)
        for op, right in zip(node.ops, node.comparators, strict=True):
            if isinstance(op, (ast.Is, ast.IsNot)) and isinstance(
                    right, (ast.Name, ast.Call)):
                continue
            self.visit(right)


def expression_names(expr):
    """Parse a Jinja expression as Python (close enough for what pages
    use); returns (chains, filters) or raises SyntaxError."""
    python = re.sub(r"\bnot\s+in\b", " not in ", expr.strip())
    tree = ast.parse(python.replace("~", "+"), mode="eval")
    names = _Names()
    names.visit(tree)
    return names.chains, names.filters


def resolve(data, name, keys):
    """Follow ``keys`` into data[name]; return (value, None) or
    (None, what went wrong)."""
    value, trail = data[name], name
    for key in keys:
        if isinstance(value, dict):
            if key not in value:
                have = ", ".join(map(str, value)) or "none"
                return None, f"{trail} has no key {key!r} (keys: {have})"
            value = value[key]
        elif isinstance(value, list):
            if not isinstance(key, int) or not -len(value) <= key < len(
                    value):
                return None, (f"{trail} is a list of {len(value)}; "
                              f"{key!r} is not an index into it")
            value = value[key]
        else:
            return None, f"{trail} is {value!r}, it has no {key!r}"
        trail += f"[{key}]" if isinstance(key, int) else f".{key}"
    return value, None


def placeholders(text):
    """(offset, expression) of each << >> outside raw blocks/comments."""
    text = blank(text, RE_RAW, RE_COMMENT)
    return [(m.start(), m["expr"]) for m in RE_VARIABLE.finditer(text)]


def check_placeholders(root, data=None):
    """Every << expr >> on a page reads a value generation wrote."""
    root = Path(root)
    data = load_data(root) if data is None else data
    if data is None:
        return [NO_DATA]
    extra = _mkdocs_extra(root)
    filters = CUSTOM_FILTERS | _jinja_filters()
    problems = []
    for source in page_paths(root):
        text = (root / source).read_text(encoding="utf-8")
        clean = blank(text, RE_RAW, RE_COMMENT)
        local = set()
        statements = [(m.start(), m["stmt"], "block")
                      for m in RE_BLOCK.finditer(clean)]
        exprs = [(offset, expr, "variable")
                 for offset, expr in placeholders(text)]
        for offset, expr, kind in sorted(statements + exprs):
            line = line_of(text, offset)
            shown = " ".join(expr.split())
            if kind == "block":
                m = RE_MACRO.match(expr)
                if m:  # the macro's name and its arguments are local
                    local.update(re.findall(r"[A-Za-z_]\w*(?=\s*[(,=)])",
                                            m["names"]))
                    continue
                m = RE_FOR.match(expr) or RE_SET.match(expr)
                if not m:
                    continue  # if/else/endfor...: nothing to resolve
                local.update(re.findall(r"\w+", m["names"]))
                expr = m["expr"]
                expr = re.sub(r"\s+if\s+.*$", "", expr, flags=re.S)
            try:
                chains, used_filters = expression_names(expr)
            except SyntaxError:
                problems.append(Problem(
                    source, line,
                    f"<< {shown} >> is not an expression mkdocs-macros can "
                    "read; write << name.key | filter >>"))
                continue
            for name in used_filters:
                if name not in filters | BUILTIN_NAMES | local:
                    problems.append(Problem(
                        source, line,
                        f"<< {shown} >>: unknown filter or function "
                        f"'{name}'; use num, sci or vec (scripts/macros.py)"
                        " or a Jinja builtin"))
            for name, keys in chains:
                if name in local or name in BUILTIN_NAMES or name in extra:
                    continue
                if name not in data:
                    problems.append(Problem(
                        source, line,
                        f"<< {shown} >>: no generated data named '{name}' "
                        f"(there is {', '.join(sorted(data))}); fix the "
                        f"name, or make scripts/{name}.py's compute() "
                        f"write {DATA}/{name}.json"))
                    continue
                _, error = resolve(data, name, keys)
                if error:
                    problems.append(Problem(
                        source, line,
                        f"<< {shown} >>: {error} in {DATA}/{name}.json; "
                        f"fix the placeholder, or add the key to "
                        f"compute() in scripts/{name}.py"))
    return list(dict.fromkeys(problems))  # a line may repeat one


def _mkdocs_extra(root):
    """Names under `extra:` in mkdocs.yml (macros exposes them too)."""
    path = Path(root) / "mkdocs.yml"
    if not path.is_file():
        return set()
    text = path.read_text(encoding="utf-8")
    m = re.search(r"(?m)^extra:\s*\n((?:[ \t]+.*\n?|\s*\n)*)", text)
    if not m:
        return set()
    return set(re.findall(r"(?m)^  (\w+)\s*:", m.group(1)))
