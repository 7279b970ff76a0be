"""Rewrite tests/slow_tests.txt from a junit file of a fast-tier run.

    pytest -m "not slow" -n auto --junitxml=/tmp/fast.xml
    python tests/slow_tests.py /tmp/fast.xml --seconds 5

Every fast-tier test that took ``--seconds`` or more is added to the list (the tests already
listed stay: the list only grows, so a test does not flip between tiers with the load).
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIST = Path(__file__).with_name("slow_tests.txt")


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
    args = parser.parse_args()
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
