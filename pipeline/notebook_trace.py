"""Which functions of the carried ``mha_ref`` files a page's run called.

Generation copies this file beside a page's notebook when it runs it,
and runs two cells around the page's own (kernel.py adds them and takes
them out again: the saved notebook never has them): ``start()`` before
the first, ``report()`` after the last, which prints one JSON line,
``{"mha_ref/numpy_ref.py": ["attention", ...]}``. cProfile (C, builtins
off) sees every Python call of the kernel's thread at little cost.
Standard library only: it runs in the page's kernel.
"""

import cProfile
import json
import os

MARK = "mha-ref ran: "  # the line report() prints starts so
_profile = cProfile.Profile(subcalls=False, builtins=False)  # calls only


def start():
    _profile.enable()


def report():
    _profile.disable()
    folder = os.path.join(os.getcwd(), "mha_ref") + os.sep
    ran = {}
    for entry in _profile.getstats():
        code = entry.code
        filename = getattr(code, "co_filename", "")
        if not os.path.isabs(filename):
            filename = os.path.join(os.getcwd(), filename)
        if filename.startswith(folder):
            path = "mha_ref/" + filename[len(folder) :].replace(os.sep, "/")
            ran.setdefault(path, set()).add(code.co_qualname)
    print(MARK + json.dumps({p: sorted(n) for p, n in sorted(ran.items())}))
