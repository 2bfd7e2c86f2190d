"""Which functions of the carried ``mha_ref`` files a page's run called.

Generation copies this file beside a page's notebook when it runs it,
and runs two cells around the page's own (kernel.py adds them and takes
them out again: the saved notebook never has them): ``start()`` before
the first, ``report()`` after the last, which prints one JSON line,
``{"mha_ref/numpy_ref.py": ["attention", ...]}``.

``start()`` puts an import hook in front of the others for the package
``mha_ref`` only: each of its modules is compiled from its source with
one call added at the top of every function's body (after its
docstring), which notes the function's qualified name
(``Layer.forward.<locals>.inner``, as its code object names it). Only
calls into ``mha_ref`` cost anything, a set's ``add``; a profiler saw
every Python call of numpy, torch and matplotlib too (a fifth of a
page's time). The added call takes the line and column of the
statement it precedes, so line numbers, docstrings and the files
themselves are as written. Standard library only: it runs in the
page's kernel.

``start(compiled)``: a folder where each module's compiled code is kept
by the sha256 of its source, this file and Python's version, so a page
whose files did not change does not parse and compile them again (a
tenth of a second a page); the code is given the file's path as it
loads.
"""

import ast
import hashlib
import importlib.abc
import importlib.machinery
import json
import marshal
import os
import sys
import types

MARK = "mha-ref ran: "  # the line report() prints starts so
PACKAGE = "mha_ref"
NOTE = "__mha_ref_ran__"  # the name the added call calls
_ran = {}  # {absolute path: {qualname}}
_compiled = None  # the folder of compiled code (start's argument)


def start(compiled=None):
    global _compiled
    _compiled = compiled
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def report():
    folder = os.path.join(os.getcwd(), PACKAGE) + os.sep
    ran = {}
    for filename, names in _ran.items():
        if filename.startswith(folder):
            path = f"{PACKAGE}/" + filename[len(folder) :].replace(os.sep, "/")
            ran[path] = sorted(names)
    print(MARK + json.dumps(dict(sorted(ran.items()))))


class _Finder(importlib.abc.MetaPathFinder):
    """mha_ref and its submodules, found where Python finds them, loaded
    by _Loader."""

    def find_spec(self, fullname, path, target=None):
        if fullname != PACKAGE and not fullname.startswith(f"{PACKAGE}."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and type(spec.loader) is (
            importlib.machinery.SourceFileLoader
        ):
            spec.loader = _Loader(fullname, spec.origin)
        return spec


class _Loader(importlib.machinery.SourceFileLoader):
    """A source file compiled with the noting calls; no bytecode cache
    read or written (a cached file would hold code without them)."""

    def get_code(self, fullname):
        path = self.get_filename(fullname)
        return _code(self.get_data(path), path)

    def exec_module(self, module):
        names = _ran.setdefault(os.path.abspath(module.__file__), set())
        module.__dict__[NOTE] = names.add
        super().exec_module(module)


def _code(source, path):
    """``source`` compiled with the noting calls, as from ``path``."""
    if _compiled is None:
        return _compile(source, path)
    with open(__file__, "rb") as this:
        mine = this.read()
    key = hashlib.sha256(b"\0".join([mine, sys.version.encode(), source]))
    name = key.hexdigest()
    kept = os.path.join(_compiled, name[:2], f"{name}.code")
    try:
        with open(kept, "rb") as handle:
            code = marshal.load(handle)
        os.utime(kept)  # used: kept by the build's pruning
    except (OSError, EOFError, ValueError, TypeError):
        code = _compile(source, path)
        os.makedirs(os.path.dirname(kept), exist_ok=True)
        partial = f"{kept}.{os.getpid()}.part"
        with open(partial, "wb") as handle:
            marshal.dump(code, handle)
        os.replace(partial, kept)  # whole or absent, as two pages race
    return _named(code, path)


def _compile(source, path):
    tree = _Noting().visit(ast.parse(source, path))
    return compile(tree, path, "exec", dont_inherit=True)


def _named(code, path):
    """``code`` and the code objects inside it, from file ``path``."""
    inner = tuple(
        _named(c, path) if isinstance(c, types.CodeType) else c
        for c in code.co_consts
    )
    return code.replace(co_filename=path, co_consts=inner)


class _Noting(ast.NodeTransformer):
    """Adds ``__mha_ref_ran__("<qualname>")`` to each function's body."""

    def __init__(self):
        self.prefix = []

    def visit_ClassDef(self, node):
        self.prefix.append(node.name)
        self.generic_visit(node)
        self.prefix.pop()
        return node

    def visit_FunctionDef(self, node):
        qualname = ".".join([*self.prefix, node.name])
        self.prefix += [node.name, "<locals>"]
        self.generic_visit(node)
        del self.prefix[-2:]
        first = 1 if ast.get_docstring(node, clean=False) is not None else 0
        where = node.body[min(first, len(node.body) - 1)]
        call = ast.Expr(
            ast.Call(ast.Name(NOTE, ast.Load()), [ast.Constant(qualname)], [])
        )
        for child in ast.walk(call):
            ast.copy_location(child, where)
        node.body.insert(first, call)
        return node

    def visit_AsyncFunctionDef(self, node):
        return self.visit_FunctionDef(node)
