"""The Going-further pages lead with their lesson and stay readable.

Each page in the nav's Going-further part (and *What trained heads
do*, wherever it sits) opens with the problem it solves and the idea
that solves it: its first 120 visible words name no library, function,
version or model (a paper's or an algorithm's name, such as
FlashAttention or Longformer, may appear). Its visible prose (outside
collapsed boxes, code, tables and math: test_main_line's reading) is at
most 2,000 words; traces and diagnostics go into collapsed boxes.
"""

import re
from pathlib import Path

import pytest

from tests.docs.test_main_line import WORDS, _visible_blocks, paragraphs

ROOT = Path(__file__).resolve().parents[2]
OPENING_WORDS = 120
MAX_WORDS = 2000
ALSO = ("trained-heads",)  # Going further in spirit wherever it sits

# What may not come before the lesson: a library or a model family (as
# the main-line check names them, an algorithm's name allowed), a
# function or module in code, a version number.
ALGORITHMS = (r"\bFlashAttention",)
NAMES = re.compile(
    "|".join(
        f"(?:{p})"
        for kind in ("library", "model family")
        for p in WORDS[kind]
        if p not in ALGORITHMS
    )
    + r"|`[^`]*[(.][^`]*`"  # code naming a function or a module
    + r"|\b\d+\.\d+\.\d+\b"  # a version
)


def going_further(mkdocs_yml):
    """The page names listed under the nav's Going further part."""
    lines = mkdocs_yml.split("\n")
    at = lines.index("  - Going further:") + 1
    names = []
    while at < len(lines) and lines[at].startswith("      - "):
        found = re.search(r"(?P<page>[\w-]+)\.md\s*$", lines[at])
        if found:
            names.append(found["page"])
        at += 1
    return names


def pages():
    listed = going_further((ROOT / "mkdocs.yml").read_text("utf-8"))
    return sorted(set(listed) | set(ALSO))


def opening(markdown, n=OPENING_WORDS):
    """The first ``n`` visible words, as written (code kept)."""
    words = []
    for _, text in _visible_blocks(markdown):
        words += text.split()
        if len(words) >= n:
            break
    return " ".join(words[:n])


def opening_names(markdown):
    return [m[0] for m in NAMES.finditer(opening(markdown))]


def visible_words(markdown):
    return sum(p.words for p in paragraphs(markdown))


def test_the_going_further_part_is_found():
    assert {"kv-cache", "latent", "cost", "masks"} <= set(pages())


@pytest.mark.parametrize("name", pages())
def test_going_further_page_opens_with_its_lesson(name):
    markdown = (ROOT / "docs" / f"{name}.md").read_text(encoding="utf-8")
    found = opening_names(markdown)
    assert not found, (
        f"docs/{name}.md names {found} in its first {OPENING_WORDS} "
        "visible words: open with the problem and the idea, then the "
        f"libraries and models. It opens: {opening(markdown)[:300]} ..."
    )


@pytest.mark.parametrize("name", pages())
def test_going_further_page_keeps_its_visible_prose_short(name):
    markdown = (ROOT / "docs" / f"{name}.md").read_text(encoding="utf-8")
    words = visible_words(markdown)
    assert words <= MAX_WORDS, (
        f"docs/{name}.md has {words} visible prose words (at most "
        f"{MAX_WORDS}): fold traces, sources and diagnostics into "
        "collapsed boxes, or cut what only repeats"
    )


DRIFTED = """\
# A page

Hugging Face's `LlamaAttention.forward` (transformers 5.24.0) masks
after the scale.

??? note "Where each rule was read"

    Word after word that nobody sees unless they open the box.
"""


def test_a_drifted_opening_and_a_long_page_are_caught():
    assert opening_names(DRIFTED) == [
        "Hugging Face",
        "`LlamaAttention.forward`",
        "transformers",
        "5.24.0",
    ]
    fine = "# A page\n\nA cache keeps the keys. FlashAttention tiles.\n"
    assert opening_names(fine) == []
    long = "# A page\n\n" + "word " * (MAX_WORDS + 1) + "\n"
    assert visible_words(long) == MAX_WORDS + 1
    assert visible_words(DRIFTED) == 9  # the box is not counted
