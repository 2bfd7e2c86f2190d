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
"""

import ast
import importlib.abc
import importlib.machinery
import json
import os
import sys

MARK = "mha-ref ran: "  # the line report() prints starts so
PACKAGE = "mha_ref"
NOTE = "__mha_ref_ran__"  # the name the added call calls
_ran = {}  # {absolute path: {qualname}}


def start():
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
        tree = _Noting().visit(ast.parse(self.get_data(path), path))
        return compile(tree, path, "exec", dont_inherit=True)

    def exec_module(self, module):
        names = _ran.setdefault(os.path.abspath(module.__file__), set())
        module.__dict__[NOTE] = names.add
        super().exec_module(module)


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
