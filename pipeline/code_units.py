"""What a page's run read of a Python file: its functions, one by one.

A page is keyed on the functions of ``mha_ref`` its run executed, not on
whole files: an edit of ``numpy_ref.causal_mask`` reruns the pages that
called it, not every page that imports ``numpy_ref``. A file splits into
units:

- each function and method (decorators included), by its qualified
  name (``attention``, ``MultiHeadAttention.__call__``), with the
  comment lines indented inside it after its last statement (a
  section's end marker, a closing note): they read as its body, so an
  edit there is an edit of the function, not of every page's skeleton;
- the skeleton: the file with every function and method left out. The
  imports, constants and class bodies (what runs when a class is
  defined) are in it, which every run of a page that carries the file
  executes, so it is in every such key. A class is no unit of its own:
  its body is in the skeleton, each method a unit.

``unit_of(qualname)`` maps what the trace saw (``f.<locals>.g``, a
comprehension's frame) to the unit that holds its source.
"""

import ast
import hashlib
import io
import tokenize

from pipeline import config, memo

FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _start(node):
    """The first line of a definition, its decorators included."""
    return min([node.lineno, *(d.lineno for d in node.decorator_list)])


def _end(node, lines):
    """The last line of a definition: its last statement's, or that of
    a comment indented deeper than the ``def`` that follows it (blank
    lines between are crossed; a comment at the ``def``'s own column or
    shallower belongs to what comes next)."""
    end = node.end_lineno
    i = end  # 0-based index of the line after the last statement
    while i < len(lines):
        stripped = lines[i].strip()
        if not stripped:
            i += 1
            continue
        indent = len(lines[i]) - len(lines[i].lstrip())
        if not stripped.startswith("#") or indent <= node.col_offset:
            break
        i += 1
        end = i
    return end


def units(text):
    """(skeleton, {qualname: source}) of a Python file's text."""
    lines = text.splitlines(keepends=True)
    found, skipped = {}, set()

    def visit(body, prefix):
        for node in body:
            name = f"{prefix}{getattr(node, 'name', '')}"
            if isinstance(node, FUNCTIONS):
                span = range(_start(node) - 1, _end(node, lines))
                found[name] = "".join(lines[i] for i in span)
                skipped.update(span)
            elif isinstance(node, ast.ClassDef):  # its body: the skeleton
                visit(node.body, f"{name}.")

    visit(config.parse_python(text).body, "")
    skeleton = "".join(s for i, s in enumerate(lines) if i not in skipped)
    return skeleton, found


def unit_of(qualname):
    """The unit holding the code object ``qualname`` ran: the definition
    that encloses a nested function or a comprehension; None for module
    level code (in the skeleton)."""
    outer = qualname.split(".<locals>", 1)[0]
    parts = [p for p in outer.split(".") if not p.startswith("<")]
    return ".".join(parts) or None


def digest(text):
    return hashlib.sha256(text.encode()).hexdigest()


def code_digest(source):
    """sha256 of what ``source`` does: its tokens without comments and
    line breaks inside brackets, so an edit of a comment (or of where a
    line breaks) changes no unit and reruns no page; the page shows the
    new text at once, with its old numbers (generation's "code" refresh).
    Docstrings and every other string stay in. No page may print
    mha_ref's source or its line numbers (tests/pipeline/test_code_units
    holds the scripts to that): a comment line moves them."""
    kept = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type not in (tokenize.COMMENT, tokenize.NL):
                kept.append(f"{token.type}:{token.string}")
    except (tokenize.TokenError, SyntaxError):  # not Python: its text
        return digest(source)
    return digest("\n".join(kept))


def fingerprint(text, ran):
    """What a run that executed the units ``ran`` read of this file: the
    skeleton's digest and each unit's (None: the unit is gone)."""
    digests = memo.fact("unit digests", text, _digests)
    if "unparsable" in digests:  # unparsable now: the run must be redone
        return digests
    return {
        "skeleton": digests["skeleton"],
        "ran": {name: digests["units"].get(name) for name in sorted(ran)},
    }


def _digests(text):
    try:
        skeleton, found = units(text)
    except SyntaxError:
        return {"unparsable": digest(text)}
    return {
        "skeleton": code_digest(skeleton),
        "units": {name: code_digest(src) for name, src in found.items()},
    }
