"""A built site on 127.0.0.1, for a headless Chromium to visit.

Shared by the benchmarks (reading.py and weight.py beside it) and the
browser tests (tests/browser/conftest.py). Text files (HTML, CSS,
JavaScript, JSON, SVG) go out gzip-compressed to a browser that asks for
it, as the site's host (GitHub Pages) sends them, so what a page
transfers here is what a reader downloads.
"""

import contextlib
import functools
import gzip
import http.server
import os
import sys
import threading

COMPRESSED = (".html", ".css", ".js", ".mjs", ".json", ".svg", ".ipynb")

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

    def send_head(self):
        """A text file compressed when the browser accepts gzip."""
        path = self.translate_path(self.path)
        if os.path.isdir(path):
            if not self.path.split("?", 1)[0].endswith("/"):
                return super().send_head()  # its redirect to "path/"
            path = os.path.join(path, "index.html")
        accepts = "gzip" in self.headers.get("Accept-Encoding", "")
        if not (accepts and path.endswith(COMPRESSED)):
            return super().send_head()
        if not os.path.isfile(path):
            return super().send_head()  # redirects and 404s as usual
        with open(path, "rb") as file:
            body = gzip.compress(file.read(), compresslevel=6, mtime=0)
        self.send_response(200)
        self.send_header("Content-Type", self.guess_type(path))
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        return _Body(body)


class _Body:
    """The compressed bytes, read by SimpleHTTPRequestHandler's copy."""

    def __init__(self, body):
        self.body = body

    def read(self, *_):
        body, self.body = self.body, b""
        return body

    def close(self):
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
