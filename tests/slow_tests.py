"""Rewrite tests/slow_tests.txt from a junit file of a fast-tier run.

    pytest -m "not slow" -n auto --junitxml=/tmp/fast.xml
    python tests/slow_tests.py /tmp/fast.xml --seconds 5

Every fast-tier test that took ``--seconds`` or more is added to the list (the tests already
listed stay: the list only grows, so a test does not flip between tiers with the load).

    pytest -n auto --junitxml=/tmp/full.xml
    python tests/slow_tests.py /tmp/full.xml --file-seconds /tmp/fast.xml

rewrites tests/file_seconds.txt instead: each test file's seconds in a full run and in a
fast-tier run, from which tests/conftest.py hands the files to the xdist workers longest
first (so that no long file starts last and runs alone at the end).
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIST = Path(__file__).with_name("slow_tests.txt")
FILE_SECONDS = Path(__file__).with_name("file_seconds.txt")
FILE_SECONDS_HEADER = """\
# Seconds of each test file in one full run and one fast-tier (-m "not slow") run, on 2 shared
# cores (relative figures: only the order matters).  tests/conftest.py hands the files to the
# xdist workers in decreasing order of the run's column (files not listed first).  Regenerate
# with `python tests/slow_tests.py FULL.xml --file-seconds FAST.xml` (see its docstring).
# full fast path"""


def file_seconds(junit: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for case in ET.parse(junit).iter("testcase"):
        path = node_id(case.get("classname"), case.get("name")).split("::")[0]
        out[path] = out.get(path, 0.0) + float(case.get("time") or 0)
    return out


def write_file_seconds(full: dict[str, float], fast: dict[str, float]) -> None:
    rows = sorted(set(full) | set(fast), key=lambda p: -full.get(p, 0.0))
    FILE_SECONDS.write_text("\n".join(
        [FILE_SECONDS_HEADER] + [f"{full.get(p, 0.0):.0f} {fast.get(p, 0.0):.0f} {p}"
                                 for p in rows]) + "\n")
    print(f"{len(rows)} files in {FILE_SECONDS}")


def node_id(classname: str, name: str) -> str:
    parts = classname.split(".")
    for i in range(len(parts), 0, -1):
        path = "/".join(parts[:i]) + ".py"
        if (ROOT / path).exists():
            return "::".join([path, *parts[i:], name])
    raise ValueError(f"no test file for {classname}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--file-seconds", metavar="FAST_JUNIT",
                        help="rewrite file_seconds.txt from JUNIT (a full run) and FAST_JUNIT")
    args = parser.parse_args()
    if args.file_seconds:
        write_file_seconds(file_seconds(args.junit), file_seconds(args.file_seconds))
        return
    lines = LIST.read_text().splitlines()
    header = [line for line in lines if line.startswith("#")]
    ids = {line for line in lines if line and not line.startswith("#")}
    for case in ET.parse(args.junit).iter("testcase"):
        if float(case.get("time") or 0) >= args.seconds:
            ids.add(node_id(case.get("classname"), case.get("name")))
    LIST.write_text("\n".join(header + sorted(ids)) + "\n")
    print(f"{len(ids)} tests in {LIST}")


if __name__ == "__main__":
    main()
