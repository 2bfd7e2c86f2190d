"""The command line: python -m bench [--only ...] [--quick]."""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import bench
from bench import report as report_files
from bench.build_times import bench_build, build_site, copy_repo
from bench.env import environment
from bench.implementations import (
    IMPL_LENGTHS,
    QUICK_LENGTHS,
    THREAD_VARS,
    bench_impl,
)
from bench.katex_prerender import katex_decision, prerender
from bench.reading import bench_reading, reading_pages
from bench.timing import ROOT, say

OUT = ROOT / "bench"
PARTS = ("build", "reading", "impl", "katex")


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
        help="fewer runs and sizes (a smoke test)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=OUT,
        help="folder for report.json and report.md (default: bench/)",
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
    runs = 2 if args.quick else 3
    rounds = 2 if args.quick else 5
    start = time.perf_counter()
    report = {"environment": environment()}
    with tempfile.TemporaryDirectory(prefix="mha-bench-") as tmp:
        repo = Path(tmp) / "repo"
        needs_site = {"build", "reading", "katex"} & set(parts)
        if needs_site:
            copy_repo(repo)
            if "build" in parts:
                report["build"] = bench_build(
                    repo, rounds, cold_runs=1 if args.quick else 3
                )
            else:
                build_site(repo)
        pages = reading_pages(repo) if needs_site else []
        sites = {"client": repo / "site"}
        prerendered = None
        if "katex" in parts:
            prerendered = prerender(
                repo / "site", Path(tmp) / "katex-site", runs
            )
            sites["prerendered"] = Path(tmp) / "katex-site"
        if "reading" in parts or "katex" in parts:
            reading = bench_reading(sites, pages, 3 if args.quick else 7)
            report["reading"] = {"client": reading["client"]}
            if prerendered:
                report["katex"] = katex_decision(prerendered, reading)
                report["reading"]["prerendered"] = reading["prerendered"]
    if "impl" in parts:
        report["impl"] = bench_impl(
            QUICK_LENGTHS if args.quick else IMPL_LENGTHS, args.threads
        )
    report["environment"]["load_average_at_end"] = os.getloadavg()
    report["seconds_total"] = time.perf_counter() - start
    report_files.write(report, args.out)
    say(f"wrote {args.out / 'report.md'} in {report['seconds_total']:.0f} s")


if __name__ == "__main__":
    main()
