"""Checkers that keep the pages, the code and the generated data in step.

Each ``check_*`` function takes the repository root (so a test can run it
on a small copy in a temporary folder) and returns a list of
``Problem``s: the file, the line, and a message that says how to fix it.
An empty list means the check passed. Nothing here imports MkDocs.

What the checks enforce (CONTRIBUTING.md explains the workflow):

- code on pages is only ever included, from a named section of a tested
  file, and every section in mha_ref/ and scripts/ is shown somewhere
  (check_code.py);
- every ``<< placeholder >>`` names a value the generation step wrote
  (check_placeholders.py);
- the results the prose argues from appear on the rendered page as the
  data has them, and no page types one of them by hand
  (check_numbers.py);
- the built HTML holds no template syntax or snippet marker, and its
  code blocks hold only included code (check_site.py);
- the >>> examples a page shows run as shown (check_code.py).

pages.py holds the parsers they share. This module gathers them all.
"""

from .check_code import (
    check_code_blocks,
    check_includes,
    check_page_examples,
    check_sections,
    make_targets,
)
from .check_numbers import (
    CLAIMS,
    HAND_TYPED,
    check_claims,
    check_hand_typed,
    shown_pattern,
)
from .check_placeholders import (
    CUSTOM_FILTERS,
    RE_VARIABLE,
    check_placeholders,
    expression_names,
    load_data,
)
from .check_site import (
    LEFTOVERS,
    check_site_code,
    check_site_fresh,
    check_site_html,
    html_text,
    pre_blocks,
    site_page,
)
from .pages import (
    DATA,
    LITERAL_BLOCKS,
    Problem,
    fences,
    includes,
    page_examples,
    page_paths,
    parse_sections,
    report,
    split_target,
)

__all__ = [
    "CLAIMS", "CUSTOM_FILTERS", "DATA", "HAND_TYPED", "LEFTOVERS",
    "LITERAL_BLOCKS", "RE_VARIABLE", "Problem", "check_claims",
    "check_code_blocks", "check_hand_typed", "check_includes",
    "check_page_examples", "check_placeholders", "check_sections",
    "check_site_code", "check_site_fresh", "check_site_html",
    "expression_names", "fences", "html_text", "includes", "load_data",
    "make_targets", "page_examples", "page_paths", "parse_sections",
    "pre_blocks", "report", "shown_pattern", "site_page", "split_target",
]
