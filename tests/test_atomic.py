"""Files replaced whole (``ldpsim._src._atomic.atomic_open``): the manifest, the sweep's CSV and
sidecar, a run's widened CSV and a frontier table are all written through it."""

from __future__ import annotations

import pytest

from ldpsim._src._atomic import atomic_open


def test_the_new_text_replaces_the_old_and_no_temporary_file_is_left(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("old\n")
    with atomic_open(path, newline="") as f:
        f.write("a,b\r\n1,2\r\n")
        assert path.read_text() == "old\n"          # readers see the old file until the end
    assert path.read_bytes() == b"a,b\r\n1,2\r\n"    # newline="": written as given
    assert [p.name for p in tmp_path.iterdir()] == ["t.csv"]


def test_an_error_in_the_block_keeps_the_old_file_and_removes_the_temporary(tmp_path):
    path = tmp_path / "m.json"
    path.write_text("{}\n")
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_open(path, encoding="utf-8") as f:
            f.write('{"half": ')
            raise RuntimeError("boom")
    assert path.read_text() == "{}\n"
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]


def test_a_new_file_is_created(tmp_path):
    path = tmp_path / "new.txt"
    with atomic_open(path) as f:
        f.write("x")
    assert path.read_text() == "x"
