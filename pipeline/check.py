"""``python -m pipeline.check``: the page linter (page_linter.py).

The command every Make target and the contributors' guide type; the
linter itself lives in page_linter.py under the name of its stage.
"""

import sys

from pipeline.page_linter import *  # noqa: F403 (the linter, by its old name)
from pipeline.page_linter import main

if __name__ == "__main__":
    sys.exit(main())
