"""Page kernels forked from one warm process: imports paid once a run.

Starting a kernel and importing torch, numpy and matplotlib costs about
4.5 CPU-seconds, more than most pages compute. So a generation run
starts one "zygote": a standalone interpreter (the same sys.path as
notebooks.standalone_kernel_argv: no repository) that imports those
packages and ipykernel, then waits on a Unix socket. Each page's kernel
is a small client process (what jupyter_client starts and signals):
it asks the zygote to fork, and the forked child, in the client's
folder and environment, becomes the kernel. Each page still gets a
fresh process of its own; nothing a page does reaches another. The
client forwards interrupts to the child and exits with it; if the
client dies, the zygote kills the child.

The zygote is one thread (a select loop), so forking it is safe.
"""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

# The slow imports, done once in the zygote, before any fork.
WARM = ("numpy", "torch", "matplotlib", "matplotlib.figure", "ipykernel")

SERVER = r"""
import json, os, select, signal, socket, sys
sys.path[1:1] = PATHS
import importlib
for name in WARM:
    try:
        importlib.import_module(name)
    except ImportError:
        pass
from ipykernel import kernelapp

listener = socket.socket(socket.AF_UNIX)
listener.bind(SOCKET)
listener.listen(64)
children = {}  # client connection -> child pid


def stop(*_):  # no interpreter teardown: with torch loaded it takes 0.5 s
    for pid in children.values():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    os._exit(0)


signal.signal(signal.SIGTERM, stop)


def spawn(conn):
    request = json.loads(conn.makefile().readline())
    pid = os.fork()
    if pid == 0:  # the page's kernel
        listener.close()
        for c in list(children) + [conn]:
            c.close()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["ipykernel_launcher", "-f", request["connection_file"]]
        try:
            kernelapp.launch_new_instance()
        finally:
            os._exit(0)
    conn.sendall(f"{pid}\n".encode())
    children[conn] = pid


while True:
    ready, _, _ = select.select([listener, *children], [], [], 0.2)
    for sock in ready:
        if sock is listener:
            spawn(listener.accept()[0])
        elif not sock.recv(1):  # the client is gone: so is its kernel
            try:
                os.kill(children[sock], signal.SIGKILL)
            except ProcessLookupError:
                pass
    while True:  # reap the kernels that ended; tell their clients
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        for conn, child in list(children.items()):
            if child == pid:
                try:
                    conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
                except OSError:
                    pass
                conn.close()
                del children[conn]
"""

CLIENT = r"""
import json, os, signal, socket, sys, time
for attempt in range(1200):  # the zygote imports for a few seconds
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.connect(sys.argv[1])
        break
    except OSError:
        sock.close()
        time.sleep(0.05)
request = {"cwd": os.getcwd(), "env": dict(os.environ),
           "connection_file": sys.argv[2]}
sock.sendall((json.dumps(request) + "\n").encode())
replies = sock.makefile()
pid = int(replies.readline())
for number in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT):
    signal.signal(number, lambda n, _: os.kill(pid, n))
code = replies.readline().strip()
sys.exit(int(code) if code.lstrip("-").isdigit() else 1)
"""


class Zygote:
    """``with Zygote(paths, env) as z: z.kernel_argv()`` while it runs."""

    def __init__(self, paths, env):
        self.paths, self.env = list(paths), dict(env)

    def __enter__(self):
        self.folder = tempfile.TemporaryDirectory(prefix="mha-zygote-")
        self.socket = str(Path(self.folder.name, "fork.sock"))
        code = (
            SERVER.replace("PATHS", repr(self.paths))
            .replace("WARM", repr(WARM))
            .replace("SOCKET", repr(self.socket))
        )
        self.process = subprocess.Popen(
            [sys.executable, "-E", "-S", "-c", code],
            env={**os.environ, **self.env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        return self

    def kernel_argv(self):
        """A kernelspec argv: the client, which waits for the zygote."""
        client = [sys.executable, "-E", "-S", "-c", CLIENT]
        return [*client, self.socket, "{connection_file}"]

    def __exit__(self, *exc):
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.folder.cleanup()
        return False


def started():
    """The zygote for page kernels as notebooks.py defines them."""
    from pipeline.notebooks import KERNEL_ENV, standalone_paths

    return Zygote(standalone_paths(), KERNEL_ENV)
