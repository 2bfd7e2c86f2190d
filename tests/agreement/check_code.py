"""Code on pages: blocks are includes of named, used sections."""

import doctest
import importlib.util
import inspect
import io
import re
from pathlib import Path

from .pages import (
    GENERATED,
    LITERAL_BLOCKS,
    RE_BLOCK_MARKER,
    RE_MARKER,
    RE_PROMPT,
    RE_TRIPLE,
    SECTION_GLOBS,
    SHELL,
    UNTRACKED,
    Problem,
    blank,
    fences,
    includes,
    markdown_sources,
    page_examples,
    parse_sections,
    read_lines,
    rel,
)


def make_targets(root):
    """The targets the Makefile defines, or None without a Makefile."""
    path = Path(root) / "Makefile"
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8")
    return set(re.findall(r"(?m)^([A-Za-z][-\w.]*)\s*:(?!=)", text))


def _check_shell(fence, targets):
    problems = []
    for number, line in fence.body:
        command = re.sub(r"^\s*(?:\$\s+)?", "", line)
        words = command.split("#")[0].split()
        if not words or words[0] != "make" or targets is None:
            continue
        for word in words[1:]:
            if word.startswith("-") or "=" in word:
                continue
            if word not in targets:
                problems.append(Problem(
                    fence.source, number,
                    f"`make {word}`: the Makefile has no target '{word}' "
                    f"(targets: {', '.join(sorted(targets))}); fix the "
                    "command or add the target"))
    return problems


def check_code_blocks(root):
    """Every fenced block on a page is an include of named sections."""
    root = Path(root)
    targets = make_targets(root)
    problems = []
    for source in markdown_sources(root):
        allowed = LITERAL_BLOCKS.get(source, set())
        for fence in fences(read_lines(root, source), source):
            lang = fence.lang or "(no language)"
            if fence.lang in allowed:
                if fence.lang in SHELL:
                    problems += _check_shell(fence, targets)
                continue
            if "hl_lines" in fence.info:
                problems.append(Problem(
                    source, fence.line,
                    "hl_lines numbers drift when the file changes; give "
                    "the highlighted lines a section of their own and "
                    "include that instead"))
            body = [(n, t) for n, t in fence.body if t.strip()]
            found = {inc.line: inc
                     for inc in includes([t for _, t in fence.body],
                                         source, fence.line + 1)}
            block_lines = {n for n, t in fence.body
                           if RE_BLOCK_MARKER.match(t)}
            typed = [(n, t) for n, t in body
                     if (n not in found or found[n].escaped)
                     and n not in block_lines]
            if not body or typed:
                first = typed[0][0] if typed else fence.line
                allow = ""
                if source in LITERAL_BLOCKS:
                    allow = (" (this file may type "
                             f"{'/'.join(sorted(allowed))} blocks)")
                problems.append(Problem(
                    source, first,
                    f"fenced ```{lang} block (opened at line {fence.line})"
                    " is typed on the page, not included; move the code "
                    "into a named section of a tested file (between "
                    "'# --8<-- [start:name]' and '# --8<-- [end:name]' in "
                    "mha_ref/ or scripts/) and make the block's only line "
                    "--8<-- \"path/to/file.py:name\"" + allow))
            for inc in found.values():
                if inc.escaped:
                    continue
                if inc.section is None:
                    how = (f"line range {inc.line_range}" if inc.line_range
                           else "a whole file")
                    problems.append(Problem(
                        source, inc.line,
                        f"the code block includes {how} of {inc.path}; "
                        "line numbers drift and whole files hide what the "
                        "page is about: include a named section, "
                        f"--8<-- \"{inc.path}:name\""))
    return problems


# -------------------------------------------------------------- includes


def _section_index(root, path, cache):
    if path not in cache:
        lines = read_lines(root, path)
        cache[path] = parse_sections(lines, path)
    return cache[path]


def check_includes(root):
    """Every --8<-- include names a file and a non-empty section that
    exist, and no page line is a section marker snippets would drop."""
    root = Path(root)
    problems, cache = [], {}
    for source in markdown_sources(root):
        lines = read_lines(root, source)
        in_fence = set()
        for fence in fences(lines, source):
            in_fence.update(n for n, _ in fence.body)
        for number, line in enumerate(lines, 1):
            m = RE_MARKER.match(line)
            if m and not m["escape"]:
                problems.append(Problem(
                    source, number,
                    "this line holds a snippet section marker, so "
                    "pymdownx.snippets deletes the whole line from the "
                    "page; escape it as ';--8<--' or write the name as "
                    "<name>"))
        for inc in includes(lines, source):
            if inc.escaped:
                continue
            where = f"--8<-- \"{inc.path}" + (
                f":{inc.section}\"" if inc.section else "\"")
            if inc.path.startswith(GENERATED):
                continue  # written by `make generate`; the build checks it
            if inc.path.startswith(UNTRACKED) or inc.path.startswith("/"):
                problems.append(Problem(
                    source, inc.line,
                    f"{where}: pages include tracked files by their path "
                    "from the repository root, not build outputs"))
                continue
            if not (root / inc.path).is_file():
                problems.append(Problem(
                    source, inc.line,
                    f"{where}: no file {inc.path} (paths are relative to "
                    "the repository root); fix the path"))
                continue
            if inc.section is None:
                if inc.line not in in_fence and not inc.path.endswith(
                        ".md"):
                    problems.append(Problem(
                        source, inc.line,
                        f"{where} outside a fenced block renders code as "
                        "a paragraph; put it in a ```python block and "
                        "name a section"))
                continue
            sections, _ = _section_index(root, inc.path, cache)
            section = sections.get(inc.section)
            if section is None:
                names = ", ".join(sorted(sections)) or "none"
                problems.append(Problem(
                    source, inc.line,
                    f"{where}: {inc.path} has no section '{inc.section}' "
                    f"(its sections: {names}); fix the name, or add "
                    f"'# --8<-- [start:{inc.section}]' and "
                    f"'# --8<-- [end:{inc.section}]' around the code"))
            elif not any(t.strip() for t in section.body):
                problems.append(Problem(
                    source, inc.line,
                    f"{where}: the section (lines {section.start}-"
                    f"{section.end} of {inc.path}) is empty; put the code "
                    "between its markers"))
            elif inc.line not in in_fence:
                problems.append(Problem(
                    source, inc.line,
                    f"{where} outside a fenced block renders code as a "
                    "paragraph; put the line inside a ```python block"))
    return problems


def check_sections(root):
    """Markers in mha_ref/ and scripts/ pair up, and every section is
    included by some page (no dead sections)."""
    root = Path(root)
    used = set()
    for source in markdown_sources(root):
        for inc in includes(read_lines(root, source), source):
            if inc.section and not inc.escaped:
                used.add((inc.path, inc.section))
    files = sorted({rel(root, p) for pattern in SECTION_GLOBS
                    for p in root.glob(pattern) if p.is_file()})
    problems = []
    for path in files:
        sections, pairing = parse_sections(read_lines(root, path), path)
        problems += pairing
        for name, section in sections.items():
            if (path, name) not in used:
                problems.append(Problem(
                    path, section.start,
                    f"section '{name}' is not shown on any page; include "
                    f"it with --8<-- \"{path}:{name}\" in a ```python "
                    "block, or delete its two marker lines"))
    return problems


def check_page_examples(root):
    """Run the >>> examples as a page shows them (the included section,
    in its module's namespace); report each failing one at its include.

    pytest --doctest-modules runs the same docstrings in the modules;
    this catches a section that cuts an example in half."""
    root = Path(root)
    problems, modules = [], {}
    parser = doctest.DocTestParser()
    for inc, module, text in page_examples(root):
        if RE_PROMPT.search(blank(text, RE_TRIPLE)):
            problems.append(Problem(
                inc.source, inc.line,
                f"the section {inc.path}:{inc.section} ends inside a "
                "docstring with a >>> example, so the page shows it cut "
                "off; move the end marker below the docstring"))
            continue
        if inc.path not in modules:
            spec = importlib.util.spec_from_file_location(
                f"_page_examples_{len(modules)}_{module.replace('.', '_')}",
                root / inc.path)
            loaded = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(loaded)
            modules[inc.path] = loaded
        strings = [inspect.cleandoc(m[2])
                   for m in RE_TRIPLE.finditer(text)]
        shown = "\n\n".join(s for s in strings if RE_PROMPT.search(s))
        globs = dict(vars(modules[inc.path]))
        test = parser.get_doctest(shown, globs, f"{inc.path}:{inc.section}",
                                  str(root / inc.path), 0)
        out = io.StringIO()
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        result = runner.run(test, out=out.write, clear_globs=True)
        if result.failed:
            detail = " ".join(out.getvalue().split())[:600]
            problems.append(Problem(
                inc.source, inc.line,
                f"the >>> example shown from {inc.path}:{inc.section} "
                f"fails as the page shows it ({detail}); fix the docstring "
                "or the code, or widen the section to the whole example"))
    return problems
