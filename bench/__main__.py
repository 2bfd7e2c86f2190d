"""The command line: python -m bench [--only ...] [--quick]."""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import bench
from bench import report as report_files
from bench.decode import bench_decode
from bench.env import environment
from bench.implementations import (
    IMPL_LENGTHS,
    QUICK_LENGTHS,
    THREAD_VARS,
    bench_impl,
)
from bench.roofline import bench_roofline
from bench.site_perf.build_times import (
    bench_build,
    bench_serve,
    build_site,
    copy_repo,
)
from bench.site_perf.engines import bench_engines
from bench.site_perf.katex_prerender import bench_math
from bench.site_perf.reading import bench_reading, reading_pages
from bench.site_perf.suite import bench_suite
from bench.site_perf.weight import bench_weight
from bench.timing import ROOT, say

OUT = ROOT / "bench"
PARTS = (
    "build",
    "reading",
    "impl",
    "katex",
    "decode",
    "roofline",
    "engines",
    "suite",
    "serve",
    "weight",
)


def parse(argv):
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=bench.__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--only",
        default=",".join(PARTS),
        help=f"comma-separated parts of {PARTS}",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="fewer runs and sizes (a smoke test; suite: make fast only)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=OUT,
        help="folder for report.json and report.md (default: bench/)",
    )
    parser.add_argument(
        "--site",
        type=Path,
        default=None,
        help="weight: measure this built site instead of a fresh copy's",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="threads for NumPy and torch in the impl part",
    )
    args = parser.parse_args(argv)
    args.parts = [p for p in args.only.split(",") if p]
    unknown = set(args.parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; choose from {PARTS}")
    return args


def main(argv=None):
    args = parse(argv)
    if "numpy" in sys.modules:
        say("numpy was imported early: --threads may not apply to it")
    for name in THREAD_VARS:  # read by BLAS when numpy is first imported
        os.environ[name] = str(args.threads)
    parts = args.parts
    rounds = 2 if args.quick else 5
    start = time.perf_counter()
    report = {"environment": environment()}
    with tempfile.TemporaryDirectory(prefix="mha-bench-") as tmp:
        repo = Path(tmp) / "repo"
        needs_site = {"build", "reading", "katex"} & set(parts)
        if "weight" in parts and args.site is None:
            needs_site.add("weight")
        if needs_site or "engines" in parts:
            copy_repo(repo)
        if needs_site:
            if "build" in parts:
                report["build"] = bench_build(
                    repo, rounds, cold_runs=1 if args.quick else 3
                )
                if "failed" in report["build"] and (
                    {"reading", "katex"} & set(parts)
                ):
                    build_site(repo)  # they need a site: raises again
            else:
                build_site(repo)
        if "reading" in parts:
            sites = {"client": repo / "site"}
            reading = bench_reading(
                sites, reading_pages(repo), 3 if args.quick else 7
            )
            report["reading"] = {"client": reading["client"]}
        if "weight" in parts:
            report["weight"] = bench_weight(args.site or repo / "site")
        if "engines" in parts:  # MkDocs and Zensical, same rounds
            report["engines"] = bench_engines(repo, rounds)
        if "katex" in parts:
            report["katex"] = bench_math(
                repo, Path(tmp), 3 if args.quick else 5
            )
            report["katex"]["environment"] = report["environment"]
        if "suite" in parts:  # a fresh copy: make test, make fast
            suite = Path(tmp) / "suite"
            copy_repo(suite)
            report["suite"] = bench_suite(
                suite,
                test_runs=0 if args.quick else 1,
                fast_runs=1 if args.quick else 3,
            )
            report["suite"]["quick"] = args.quick
        if "serve" in parts:  # a fresh copy: make serve, then edits
            served = Path(tmp) / "serve"
            copy_repo(served)
            report["serve"] = bench_serve(served, 2 if args.quick else 3)
    if "impl" in parts:
        report["impl"] = bench_impl(
            QUICK_LENGTHS if args.quick else IMPL_LENGTHS, args.threads
        )
    if "decode" in parts:
        report["decode"] = bench_decode(5 if args.quick else 41, args.threads)
    if "roofline" in parts:
        report["roofline"] = bench_roofline(
            3 if args.quick else 7, args.threads
        )
    report["environment"]["load_average_at_end"] = os.getloadavg()
    report["seconds_total"] = seconds = time.perf_counter() - start
    if set(parts) != set(PARTS):  # keep the parts this run did not redo
        report = report_files.merge(report, args.out, parts)
    report_files.write(report, args.out)
    say(f"wrote {args.out / 'report.md'} in {seconds:.0f} s")


if __name__ == "__main__":
    main()
