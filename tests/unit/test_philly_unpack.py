"""The packed Philly table is unpacked whole: a reader never sees a half-written file."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from bench.policy_bench import setup as pb


def test_the_table_is_renamed_into_place_and_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    packed = tmp_path / "philly.csv.gz"
    with gzip.open(packed, "wb") as sink:
        sink.write(b"a,b\\n1,2\\n")
    monkeypatch.setattr(pb, "SHARED_TRACE", tmp_path / "absent.csv")
    monkeypatch.setattr(pb, "PACKED_TRACE", packed)
    monkeypatch.setattr(pb, "_TRACE_CACHE", {})
    monkeypatch.setattr(pb.tempfile, "gettempdir", lambda: str(tmp_path))
    # A reader that opened the old table keeps reading it whole while it is replaced.
    (tmp_path / f"spotline-philly-{pb.os.getuid()}.csv").write_bytes(b"old,table\\n")
    with (tmp_path / f"spotline-philly-{pb.os.getuid()}.csv").open("rb") as reader:
        path = pb.philly_path()
        assert reader.read() == b"old,table\\n"
    assert path is not None and path.read_bytes() == b"a,b\\n1,2\\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")] == []
