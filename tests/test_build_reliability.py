"""The build works offline, fails loudly, and survives an interruption.

Everything runs in a temporary copy of the repository's files (what git
tracks or would track; no docs/generated, no .cache, no site), so these
tests never touch the working tree. The copy is generated once, offline,
and each test then breaks one thing and checks the build says so:

- offline: `python -m scripts.build` and `mkdocs build --strict` run in
  a fresh network namespace (`unshare -n`, or `unshare -rn` where user
  namespaces are allowed). Where neither is permitted (a Docker
  container without CAP_SYS_ADMIN, say), a sitecustomize on PYTHONPATH
  makes every non-loopback socket connection and name lookup raise
  instead; both are shown to block the network before they are trusted.
- a topic that raises, a missing snippet and a KaTeX parse error each
  fail the build (or the browser tests) with a message naming the file.
- interrupting generation (SIGINT mid-run), a truncated output or a
  deleted cache key leave the next build correct: byte-identical to a
  clean one.
"""

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.build

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 900  # a whole generation from scratch on a slow machine

# Loaded by every Python process started with it on PYTHONPATH (the
# build, mkdocs, the notebook's kernel): only loopback is reachable.
SOCKET_GUARD = '''
import socket

_LOCAL = {"localhost", "127.0.0.1", "::1", None, ""}
_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex
_real_getaddrinfo = socket.getaddrinfo


def _check(host):
    if host not in _LOCAL and not str(host).startswith("127."):
        raise OSError(f"network blocked by the offline build test: {host}")


def _connect(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6):
        _check(address[0])
    return _real_connect(self, address)


def _connect_ex(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6):
        _check(address[0])
    return _real_connect_ex(self, address)


def _getaddrinfo(host, *args, **kwargs):
    _check(host.decode() if isinstance(host, bytes) else host)
    return _real_getaddrinfo(host, *args, **kwargs)


socket.socket.connect = _connect
socket.socket.connect_ex = _connect_ex
socket.getaddrinfo = _getaddrinfo
'''
PROBE = (
    "import socket\n"
    "try:\n"
    "    socket.create_connection(('pypi.org', 443), timeout=5).close()\n"
    "except OSError as error:\n"
    "    print('blocked:', error)\n"
    "else:\n"
    "    print('CONNECTED')\n"
)


def in_ci():
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false")


def skip_or_fail(reason):
    """Skip with `reason`, or fail with it in CI (CI=true)."""
    if in_ci():
        pytest.fail(f"{reason} (CI is set: failing instead of skipping)",
                    pytrace=False)
    pytest.skip(reason)


@dataclass
class Offline:
    """How to run a command with no network: a prefix and environment."""

    how: str
    prefix: list
    env: dict

    def run(self, args, cwd, extra_env=None, check=False):
        """Run `args` offline in `cwd`; stdout and stderr as one text."""
        env = {**self.env, **(extra_env or {})}
        done = subprocess.run(
            self.prefix + args, cwd=cwd, env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            timeout=TIMEOUT_S, check=False,
        )
        if check and done.returncode != 0:
            pytest.fail(f"{' '.join(args)} failed ({self.how}):\n"
                        f"{done.stdout[-4000:]}", pytrace=False)
        return done


def _namespace_prefix():
    """['unshare', '-n'] or ['unshare', '-rn'] where allowed, else None."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    options = [["-rn"], ["-n"]]
    if os.geteuid() == 0:
        options.reverse()
    for option in options:
        done = subprocess.run([unshare, *option, "true"],
                              capture_output=True, check=False)
        if done.returncode == 0:
            return [unshare, *option]
    return None


@pytest.fixture(scope="module")
def offline(tmp_path_factory):
    """An Offline runner, proven to block a connection to pypi.org."""
    env = dict(os.environ)
    prefix = _namespace_prefix()
    if prefix is not None:
        runner = Offline(f"network namespace ({' '.join(prefix)})",
                         prefix, env)
    else:
        guard = tmp_path_factory.mktemp("socket-guard")
        (guard / "sitecustomize.py").write_text(SOCKET_GUARD)
        paths = [str(guard), env.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        runner = Offline("socket guard (unshare not permitted)", [], env)
    probe = runner.run([sys.executable, "-c", PROBE], cwd=REPO)
    if "blocked:" not in probe.stdout:
        pytest.fail(f"the offline runner ({runner.how}) does not block the "
                    f"network:\n{probe.stdout}", pytrace=False)
    return runner


def repository_files():
    """Files git tracks or would track (not ignored), relative paths."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"],
            cwd=REPO, capture_output=True, check=True,
        ).stdout.decode()
        names = [n for n in listed.split("\0") if n]
    except (OSError, subprocess.CalledProcessError):  # not a checkout
        skip = {".git", ".venv", "site", "build", ".cache", "generated"}
        names = [
            p.relative_to(REPO).as_posix() for p in REPO.rglob("*")
            if p.is_file() and not skip & set(p.relative_to(REPO).parts)
            and "__pycache__" not in p.parts
        ]
    return [n for n in names if (REPO / n).is_file()]


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    """A temporary copy of the repository's files, nothing generated."""
    root = tmp_path_factory.mktemp("repo")
    for name in repository_files():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, root / name)
    return root


def generate(offline, copy, *args):
    return offline.run([sys.executable, "-u", "-m", "scripts.build", *args],
                       cwd=copy)


def mkdocs(offline, copy, site, generation=False):
    """`mkdocs build --strict` into `site`; the hook may skip generating."""
    extra = {} if generation else {"MHA_REF_SKIP_GENERATION": "1"}
    return offline.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d",
         str(site)], cwd=copy, extra_env=extra,
    )


def snapshot(folder):
    """Every file under `folder` by relative path -> bytes."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*")) if p.is_file()
    }


@pytest.fixture(scope="module")
def generated(offline, copy):
    """The copy after one offline generation from scratch: its output."""
    return generate(offline, copy)


@pytest.fixture(scope="module")
def reference(generated, copy):
    """docs/generated of the clean offline build, as bytes."""
    if generated.returncode != 0:
        pytest.fail("the clean generation failed, see "
                    "test_generation_runs_offline:\n"
                    f"{generated.stdout[-3000:]}", pytrace=False)
    return snapshot(copy / "docs" / "generated")


@contextlib.contextmanager
def edited(path, text):
    """`path` holds `text` inside the block, its old bytes (or nothing)
    after it."""
    path = Path(path)
    old = path.read_bytes() if path.exists() else None
    path.write_text(text, encoding="utf-8")
    try:
        yield path
    finally:
        if old is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(old)


def ran_topics(output):
    """The task names a build's output reports as run."""
    return set(re.findall(r"^\s+ran\s+(\S+)", output, re.M))


# ------------------------------------------------------------- offline


def test_socket_guard_blocks_network(tmp_path):
    # The fallback where no namespace can be made: shown to work here too.
    (tmp_path / "sitecustomize.py").write_text(SOCKET_GUARD)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, text=True,
        capture_output=True, timeout=60, check=False,
    )
    assert done.stdout.startswith("blocked: network blocked"), (
        done.stdout + done.stderr)


def test_generation_runs_offline(generated, offline):
    assert generated.returncode == 0, (
        f"generation failed offline ({offline.how}):\n"
        f"{generated.stdout[-4000:]}"
    )
    assert "0 failed" in generated.stdout


def test_site_builds_offline_strict(reference, offline, copy, tmp_path):
    # The hook runs generation again: everything must come from the cache.
    done = mkdocs(offline, copy, tmp_path / "site", generation=True)
    assert done.returncode == 0, (
        f"mkdocs build --strict failed offline ({offline.how}):\n"
        f"{done.stdout[-4000:]}"
    )
    assert (tmp_path / "site" / "index.html").is_file()
    assert ran_topics(done.stdout) == set(), done.stdout[-2000:]
    assert snapshot(copy / "docs" / "generated") == reference


# ------------------------------------------------------------- failures


def test_failing_topic_fails_build_naming_file(
    reference, offline, copy, tmp_path
):
    broken = copy / "scripts" / "zz_broken.py"
    source = (
        '"""A topic that raises, written by test_build_reliability."""\n\n\n'
        "def compute():\n"
        '    raise RuntimeError("broken on purpose")\n'
    )
    with edited(broken, source):
        done = generate(offline, copy)
        assert done.returncode != 0
        assert "scripts/zz_broken.py" in done.stdout, done.stdout[-2000:]
        assert "broken on purpose" in done.stdout
        site = mkdocs(offline, copy, tmp_path / "site", generation=True)
        assert site.returncode != 0, "mkdocs built a site past a failure"
        assert "scripts/zz_broken.py" in site.stdout, site.stdout[-2000:]
    assert generate(offline, copy).returncode == 0  # and the orphan goes
    assert snapshot(copy / "docs" / "generated") == reference


@pytest.mark.parametrize(
    "include, named",
    [
        ("mha_ref/no_such_file.py", "mha_ref/no_such_file.py"),
        ("mha_ref/numpy_ref.py:no-such-section", "no-such-section"),
    ],
    ids=["missing-file", "missing-section"],
)
def test_missing_snippet_fails_build_naming_file(
    reference, offline, copy, tmp_path, include, named
):
    page = copy / "docs" / "review.md"
    text = page.read_text("utf-8") + f'\n```python\n--8<-- "{include}"\n```\n'
    with edited(page, text):
        done = mkdocs(offline, copy, tmp_path / "site")
    assert done.returncode != 0, "mkdocs built a page with a missing snippet"
    assert "review.md" in done.stdout, done.stdout[-2000:]
    assert named in done.stdout, done.stdout[-2000:]


@pytest.mark.browser
def test_katex_parse_error_fails_browser_tests_naming_page(
    reference, offline, copy, tmp_path
):
    page = copy / "docs" / "review.md"
    text = page.read_text("utf-8") + "\nBroken on purpose: $\\frac{1}$.\n"
    site = tmp_path / "site"
    with edited(page, text):
        built = mkdocs(offline, copy, site)
    # KaTeX parses in the browser: the build passes, the page test fails.
    assert built.returncode == 0, built.stdout[-3000:]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-o", "addopts=", "-k", "test_page_loads_offline and review",
         str(REPO / "tests" / "browser" / "test_site_pages.py")],
        cwd=REPO, env={**os.environ, "MHA_SITE_DIR": str(site)},
        text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        timeout=TIMEOUT_S, check=False,
    )
    if done.returncode == 0 and " skipped" in done.stdout:
        skip_or_fail(f"the browser test skipped:\n{done.stdout[-1000:]}")
    assert done.returncode == 1, done.stdout[-3000:]
    assert "1 failed" in done.stdout, done.stdout[-3000:]
    assert "review (review/)" in done.stdout, done.stdout[-3000:]
    assert "KaTeX error: \\frac{1}" in done.stdout, done.stdout[-3000:]


# ------------------------------------------------------------- recovery


def cleared_keys(cache):
    """Tasks whose cache record holds no key: cleared while they ran."""
    return {
        p.relative_to(cache).with_suffix("").as_posix()
        for p in cache.rglob("*.json")
        if '"key": null' in p.read_text()
    }


def test_interrupted_generation_leaves_next_build_correct(
    reference, offline, copy, tmp_path
):
    # Only `scaling` needs running (its key is gone): interrupt it mid-run.
    # (Not --force: some topics time things, so their bytes would differ.)
    cache = copy / ".cache" / "generated"
    (cache / "scaling.json").unlink()
    log = tmp_path / "build.log"
    with open(log, "w") as sink:
        build = subprocess.Popen(
            offline.prefix + [sys.executable, "-u", "-m", "scripts.build"],
            cwd=copy, env=offline.env, stdout=sink, stderr=subprocess.STDOUT,
        )
        # A topic clears its key just before it runs: wait for that.
        deadline = time.monotonic() + TIMEOUT_S
        while build.poll() is None and time.monotonic() < deadline:
            if cleared_keys(cache):
                build.send_signal(signal.SIGINT)
                break
            time.sleep(0.02)
        build.wait(timeout=TIMEOUT_S)
    output = log.read_text()
    assert build.returncode != 0, f"the build was not interrupted:\n{output}"
    assert "KeyboardInterrupt" in output, output[-2000:]
    assert cleared_keys(cache) == {"scaling"}, output[-2000:]

    after = generate(offline, copy)
    assert after.returncode == 0, after.stdout[-3000:]
    assert ran_topics(after.stdout) == {"scaling"}, after.stdout
    again = generate(offline, copy)
    assert ran_topics(again.stdout) == set(), again.stdout
    assert snapshot(copy / "docs" / "generated") == reference


@pytest.mark.parametrize(
    "damage",
    ["truncate-data", "delete-figure", "delete-key"],
)
def test_damaged_output_or_key_is_rebuilt(reference, offline, copy, damage):
    out = copy / "docs" / "generated"
    if damage == "truncate-data":
        data = out / "data" / "scaling.json"
        data.write_bytes(data.read_bytes()[: len(data.read_bytes()) // 2])
    elif damage == "delete-figure":
        figures = sorted((out / "figures").glob("scaling-*.svg"))
        assert figures, "the scaling topic draws no figure"
        figures[0].unlink()
    else:
        (copy / ".cache" / "generated" / "scaling.json").unlink()
    done = generate(offline, copy)
    assert done.returncode == 0, done.stdout[-3000:]
    assert ran_topics(done.stdout) == {"scaling"}, done.stdout
    assert snapshot(out) == reference
