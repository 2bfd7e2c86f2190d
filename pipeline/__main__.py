"""python -m pipeline [--force] [--only TOPIC] [--out DIR]"""

import argparse
import sys
from pathlib import Path

from pipeline.build import Project, build


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m pipeline",
        description="Compute every number, table and figure of the site.",
    )
    parser.add_argument(
        "--force", action="store_true", help="ignore the cache"
    )
    parser.add_argument(
        "--only",
        action="append",
        metavar="TOPIC",
        help="run only this topic (repeatable)",
    )
    parser.add_argument(
        "--out", type=Path, help="output folder (default docs/generated)"
    )
    args = parser.parse_args(argv)
    failed = build(Project(out=args.out), force=args.force, only=args.only)
    if failed:
        print(f"generation failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
