"""Page kernels forked from one warm process: imports paid once a run.

Starting a kernel and importing torch, numpy and matplotlib costs about
4.5 CPU-seconds, more than most pages compute. So a generation run
starts one fork server: a standalone interpreter (the kernel's sys.path,
no repository) that imports those packages and ipykernel, then waits on
a Unix socket. Each page's kernel is a small client process (what
jupyter_client starts and signals): it asks the server to fork, and the
forked child, in the client's folder and environment, becomes the
kernel. Each page still gets a fresh process of its own; nothing a page
does reaches another. The client forwards interrupts to the child and
exits with it; if the client dies, the server kills the child; if the
process that started the server dies (even by SIGKILL), the server kills
every child and exits; if the server itself dies (even by SIGKILL: then
it kills nothing), each kernel gets Linux's parent-death signal. No
kernel outlives its generation.

This file is both: imported, ``WarmKernels`` starts and stops the
server; run by path (``python -E -S warm_kernels.py server|client``,
standard library only, no site), it is the server or a client. The
server is one thread (a select loop), so forking it is safe.
"""

import contextlib
import ctypes
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The slow imports, done once in the server, before any fork: the
# packages pages use, and what each kernel imports as it starts (its
# debugger support alone took 0.15 s a kernel; matplotlib's inline
# backend at the first figure). Each with the package a page must import
# for it to be worth importing (None: every kernel needs it): torch alone
# is 1.5 CPU-seconds, wasted on a run of pages that never import it.
WARM = (
    ("numpy", "numpy"),
    ("torch", "torch"),
    ("matplotlib", "matplotlib"),
    ("matplotlib.figure", "matplotlib"),
    ("ipykernel", None),
    ("ipykernel.kernelapp", None),
    ("ipykernel.ipkernel", None),
    ("ipykernel.debugger", None),
    ("matplotlib_inline.backend_inline", "matplotlib"),
)
THIS = Path(__file__).resolve()
CONNECT_TRIES = 1200  # x 50 ms: the server imports for a few seconds
PR_SET_PDEATHSIG = 1  # prctl(2): a signal when the parent ends


class WarmKernels:
    """``with WarmKernels(paths, env) as w: w.kernel_argv()`` while it
    runs; leaving the block stops the server and every kernel. ``warm``:
    the modules the server imports first (names)."""

    def __init__(self, paths, env, warm=None):
        self.paths, self.env = list(paths), dict(env)
        self.warm = [m for m, _ in WARM] if warm is None else list(warm)

    def __enter__(self):
        self.folder = tempfile.TemporaryDirectory(prefix="mha-warm-")
        self.socket = str(Path(self.folder.name, "fork.sock"))
        request = json.dumps({"paths": self.paths, "warm": self.warm})
        self.process = subprocess.Popen(
            [sys.executable, "-E", "-S", str(THIS), "server", self.socket],
            env={**os.environ, **self.env, "MHA_REF_WARM": request},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        return self

    def kernel_argv(self):
        """A kernelspec argv: the client, which waits for the server."""
        client = [sys.executable, "-E", "-S", str(THIS), "client"]
        return [*client, self.socket, "{connection_file}"]

    def __exit__(self, *exc):
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.folder.cleanup()
        return False


def started(imports=None):
    """The fork server for page kernels as kernel.py defines them.
    ``imports``: the top-level packages the pages to run import (their
    scripts and carried files); None, any page may come: all of WARM."""
    from pipeline.kernel import KERNEL_ENV, standalone_paths

    warm = [
        module
        for module, needed in WARM
        if needed is None or imports is None or needed in imports
    ]
    return WarmKernels(standalone_paths(), KERNEL_ENV, warm)


# ------------------------------------------ run by path: the server


def serve(path):
    """Import the slow packages, then fork a kernel for each client."""
    request = json.loads(os.environ.pop("MHA_REF_WARM"))
    # debugpy warns on import that Python's frozen modules may hide
    # breakpoints: nothing a page's reader can act on
    os.environ["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    sys.path[0] = ""  # as under -c: the kernel's folder, not this one's
    sys.path[1:1] = request["paths"]
    import importlib

    for name in request["warm"]:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    from ipykernel import kernelapp

    parent, server = os.getppid(), os.getpid()
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(64)
    children = {}  # client connection -> child pid

    def stop(*_):  # no interpreter teardown: with torch it takes 0.5 s
        for pid in children.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    # Ctrl-C reaches the whole process group: the one who started the
    # server stops it (SIGTERM), after its kernels' clients
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def spawn(conn):
        request = json.loads(conn.makefile().readline())
        pid = os.fork()
        if pid == 0:  # the page's kernel
            _die_with(server)
            listener.close()
            for c in [*children, conn]:
                c.close()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGHUP, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            sys.argv = ["ipykernel_launcher", "-f", request["file"]]
            try:
                kernelapp.launch_new_instance()
            finally:
                os._exit(0)
        conn.sendall(f"{pid}\n".encode())
        children[conn] = pid

    while True:
        if os.getppid() != parent:  # its generation is gone: so is it
            stop()
        ready, _, _ = select.select([listener, *children], [], [], 0.2)
        for sock in ready:
            if sock is listener:
                spawn(listener.accept()[0])
            elif not sock.recv(1):  # the client is gone: so is its kernel
                with contextlib.suppress(ProcessLookupError):
                    os.kill(children[sock], signal.SIGKILL)
        _reap(children)


def _die_with(server):
    """In a kernel: end when the server ends, even by SIGKILL (then it
    cannot kill its kernels itself). Linux's parent-death signal; where
    there is none, the server's own end still kills them."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != server:  # it ended before the signal was set
        os._exit(1)


def _reap(children):
    """Collect the kernels that ended; tell their clients."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        for conn, child in list(children.items()):
            if child == pid:
                code = os.waitstatus_to_exitcode(status)
                with contextlib.suppress(OSError):
                    conn.sendall(f"{code}\n".encode())
                conn.close()
                del children[conn]


# ------------------------------------------ run by path: a client


def client(path, connection_file):
    """Have the server fork a kernel; live and die with it."""
    for _ in range(CONNECT_TRIES):
        sock = socket.socket(socket.AF_UNIX)
        try:
            sock.connect(path)
            break
        except OSError:
            sock.close()
            time.sleep(0.05)
    request = {
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "file": connection_file,
    }
    sock.sendall((json.dumps(request) + "\n").encode())
    replies = sock.makefile()
    pid = int(replies.readline())
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT):
        signal.signal(number, lambda n, _: os.kill(pid, n))
    code = replies.readline().strip()  # "" when the server is gone
    return int(code) if code.lstrip("-").isdigit() else 1


if __name__ == "__main__":
    if sys.argv[1] == "server":
        serve(sys.argv[2])
    else:
        sys.exit(client(sys.argv[2], sys.argv[3]))
