"""A built site on 127.0.0.1, for a headless Chromium to visit.

Shared by the benchmarks (bench/reading.py) and the browser tests
(tests/browser/conftest.py).
"""

import contextlib
import functools
import http.server
import sys
import threading

# Headless Chromium that never phones home; the profile is a fresh one
# (Playwright makes a temporary user-data-dir for each launch).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves a folder without logging, with the types a site needs."""

    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".svg": "image/svg+xml",
        ".woff2": "font/woff2",
        ".js": "text/javascript",
        ".mjs": "text/javascript",
        ".json": "application/json",
        ".ipynb": "application/json",
    }

    def log_message(self, format, *args):
        pass


class _QuietServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # a browser context closed mid-download (the search index, fonts)
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@contextlib.contextmanager
def serve(directory):
    """Serve `directory` on 127.0.0.1 at a free port; yield the origin."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = _QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
