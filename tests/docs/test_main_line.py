"""The path's main line stays the main line (issue 45, item 3).

On the four path pages below, at most 10% of the visible prose words are
in paragraphs that name a library or its functions, a model family, a
variant a later page teaches, or an edge case. Such a paragraph belongs
in a collapsed box titled for what it holds (``??? note "In PyTorch and
flash-attn"``) or on the page that owns it, with a link.

Measured on the Markdown source. Visible prose is what a reader sees
without opening anything: not the front matter, headings, code (fenced
blocks, includes), tables, math (``$$`` blocks and inline ``$...$``),
HTML controls, figures, nor anything inside a collapsed box (``???``,
not ``???+``), at any depth. A paragraph is a block of lines between
blank lines; each list item is a paragraph of its own. An open
admonition's body is visible and counts; its title line does not. A
placeholder (``<< page.name >>``) counts as one word, as the number it
becomes.

"PyTorch" and "NumPy" alone name the languages of the site's own code,
which the stated reader knows a little of, and are not flagged; their
attention functions and modules are. GPT and BERT as kinds of model
("a GPT-style decoder", "BERT-style") are not flagged; GPT-2 is.
"""

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = ("attention-matrix", "scaling", "multiple-heads", "softmax-backward")
LIMIT = 0.10

# What takes a paragraph off the main line, by kind; case-sensitive
# unless the pattern says (?i).
WORDS = {
    "library": (
        r"\bSDPA\b",
        r"scaled_dot_product_attention",
        r"MultiheadAttention",
        r"(?i:\bflash[-_]attn\b)",
        r"\bFlashAttention",
        r"\bFlexAttention\b|\bflex_attention\b",
        r"Hugging\s+Face",
        r"\btransformers\b",  # the library; the architecture is capitalised
        r"\bxformers\b",
        r"\bcuDNN\b",
        r"\bvLLM\b",
        r"\bJAX\b",
        r"\bTensorFlow\b",
        r"\bis_causal\b|\benable_gqa\b|\battn_mask\b",
    ),
    "model family": (
        r"\bGemma\b",
        r"\bLlama\b",
        r"\bGPT-(?!style\b)\w+",
        r"\bgpt-oss\b",
        r"\bMistral\b|\bMixtral\b",
        r"\bQwen\b",
        r"\bDeepSeek\b",
        r"\bFalcon\b",
        r"\bPaLM\b",
        r"\bT5\b",
        r"\bViT\b|\bViT-\w+",
        r"\bPhi-\d",
        r"\bBLOOM\b",
    ),
    "later variant": (
        r"\bRoPE\b|(?i:\brotary\b)",
        r"\bGQA\b|\bMQA\b|(?i:\bgrouped[- ](?:query|key|heads?)\b)",
        r"(?i:\bmulti-query\b)",
        r"(?i:\bKV[- ]cache|\bkey/value cache)",
        r"(?i:\bsoft-?cap)",
        r"\bALiBi\b",
        r"(?i:\bsinks?\b)",
        r"\bMLA\b|(?i:\blatent attention\b)",
        r"(?i:\bsliding[- ]window)",
    ),
    "edge case": (
        r"\bNaN\b",
        r"(?i:\bempty[ _]rows?\b)",
        r"(?i:\bfully masked\b)",
        r"(?i:\bno allowed key\b)",
        r"(?i:\blow precision\b|\bhalf precision\b)",
        r"\b(?:float16|fp16|bfloat16|bf16)\b",
        r"(?i:\bfast path\b)",
    ),
}
PATTERNS = {
    kind: re.compile("|".join(f"(?:{p})" for p in patterns))
    for kind, patterns in WORDS.items()
}


@dataclass
class Paragraph:
    line: int  # 1-based, in the page's source
    text: str
    words: int
    kinds: tuple  # what it names, by kind: empty on the main line


def _visible_blocks(markdown):
    """(line, text) of each visible prose paragraph of ``markdown``."""
    lines = markdown.split("\n")
    i = 0
    if lines and lines[0].strip() == "---":  # front matter
        i = lines.index("---", 1) + 1
    blocks, current, start = [], [], 0

    def flush():
        if current:
            blocks.append((start + 1, " ".join(current)))
        current.clear()

    hidden_below = None  # indent of the collapsed box we are inside
    fence = None  # the fence that opened the code block we are inside
    in_math = in_html = False
    while i < len(lines):
        raw = lines[i]
        text = raw.strip()
        indent = len(raw) - len(raw.lstrip())
        i += 1
        if hidden_below is not None:
            if not text or indent > hidden_below:
                continue
            hidden_below = None
        if fence:
            if text.startswith(fence):
                fence = None
            continue
        if in_math:
            in_math = not text.endswith("$$")
            continue
        if in_html:
            in_html = not text.startswith("</div>")
            continue
        if not text:
            flush()
            continue
        if m := re.match(r"(```+|~~~+)", text):
            flush()
            fence = m[1]
            continue
        if text.startswith("$$"):
            flush()
            in_math = not (len(text) > 2 and text.endswith("$$"))
            continue
        if text.startswith("<div"):
            flush()
            in_html = "</div>" not in text
            continue
        if re.match(r"\?\?\?(?!\+)", text):  # a collapsed box
            flush()
            hidden_below = indent
            continue
        if re.match(
            r"(!!!|\?\?\?\+|===|#|\||--8<--|<%|<#|\*\[|<< figure\()",
            text,
        ) or re.fullmatch(r"</?\w+[^>]*>", text):
            flush()  # a title, heading, table, include, template, figure
            continue
        if re.match(r"([-*+]|\d+\.)\s", text):  # a list item
            flush()
        if not current:
            start = i - 1
        current.append(text)
    flush()
    return blocks


def _plain(text):
    """The words a reader sees: math, link targets and markup removed."""
    text = re.sub(r"<<.*?>>", " N ", text)  # a placeholder: one number
    text = re.sub(r"<%.*?%>|<#.*?#>", " ", text)
    text = re.sub(r"\$[^$]+\$", " ", text)  # inline math
    text = re.sub(r"\]\([^)]*\)", "]", text)  # link targets
    text = re.sub(r"\{[#:.][^}]*\}", " ", text)  # attribute lists
    return re.sub(r"[`*_\[\]]", lambda m: "_" if m[0] == "_" else "", text)


def paragraphs(markdown):
    """Each visible prose paragraph, with its words and what it names."""
    found = []
    for line, text in _visible_blocks(markdown):
        plain = _plain(text)
        words = len(re.findall(r"[^\s]*\w[^\s]*", plain))
        kinds = tuple(
            kind for kind, rx in PATTERNS.items() if rx.search(plain)
        )
        found.append(Paragraph(line, plain, words, kinds))
    return found


def off_line_share(markdown):
    """(share of visible prose words off the main line, paragraphs)."""
    found = paragraphs(markdown)
    total = sum(p.words for p in found)
    off = sum(p.words for p in found if p.kinds)
    return (off / total if total else 0.0), found


def report(name, markdown):
    """One line per paragraph off the main line, and the share."""
    share, found = off_line_share(markdown)
    total = sum(p.words for p in found)
    lines = [
        f"docs/{name}.md: {share:.0%} of {total} visible prose words are "
        f"off the main line (at most {LIMIT:.0%}); move these paragraphs "
        "into a collapsed box titled for what they hold, or to the page "
        "that owns them, with a link:"
    ]
    for p in found:
        if p.kinds:
            head = " ".join(p.text.split()[:8])
            lines.append(
                f"  docs/{name}.md:{p.line}: {p.words} words "
                f"({', '.join(p.kinds)}): {head} ..."
            )
    return "\n".join(lines)


@pytest.mark.parametrize("name", PAGES)
def test_path_page_stays_on_the_main_line(name):
    markdown = (ROOT / "docs" / f"{name}.md").read_text(encoding="utf-8")
    share, _ = off_line_share(markdown)
    assert share <= LIMIT, report(name, markdown)


MAIN = """\
# A page

The scores compare every query with every key, one dot product per pair
of positions, and the softmax turns each row into weights that sum to
one. The output is the weighted sum of the value rows.

$$
S = QK^\\top / \\sqrt{d_k}
$$

```python
out = F.scaled_dot_product_attention(q, k, v)  # code: never counted
```

| library | mask |
|---------|------|
| SDPA | True = allowed |
"""
ASIDE = """\
PyTorch's SDPA returns zeros for a row with no allowed key, where a
plain softmax returns NaN.
"""


def test_main_line_share_flags_a_drifted_aside():
    share, found = off_line_share(MAIN + "\n" + ASIDE)
    assert share > LIMIT
    flagged = [p for p in found if p.kinds]
    assert len(flagged) == 1
    assert flagged[0].kinds == ("library", "edge case")
    assert flagged[0].line == len(MAIN.split("\n")) + 1


def test_main_line_share_skips_collapsed_boxes_code_tables_and_math():
    boxed = '??? note "In PyTorch"\n    ' + ASIDE.replace("\n", "\n    ")
    share, found = off_line_share(MAIN + "\n" + boxed + "\nAfter it.\n")
    assert share == 0
    assert [p.words for p in found] == [37, 2]


def test_main_line_share_counts_open_boxes_and_list_items():
    opened = '???+ note "In PyTorch"\n    ' + ASIDE.replace("\n", "\n    ")
    share, _ = off_line_share(MAIN + "\n" + opened)
    assert share > LIMIT
    listed = "- a query reads its past;\n- SDPA reads the mask backwards.\n"
    found = paragraphs(listed)
    assert [bool(p.kinds) for p in found] == [False, True]


def test_main_line_share_lets_gpt_and_bert_name_kinds_of_model():
    kinds = "A GPT-style decoder masks the future; BERT does not.\n"
    assert off_line_share(kinds)[0] == 0
    assert off_line_share("GPT-2 small has 12 heads.\n")[0] == 1
