"""`bench.local_runtime` refuses bad counts with an error naming the flag, before it starts
anything."""

from __future__ import annotations

import pytest

from bench import local_runtime


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--admit", "-5"], "argument --admit: -5 is negative"),
        (["--pending", "x"], "argument --pending: 'x' is not a whole number"),
        (["--clients", "0"], "argument --clients: at least 1 client submits"),
    ],
)
def test_a_bad_count_is_named_and_nothing_runs(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def must_not_run(*args: object) -> None:
        raise AssertionError("the bench started")

    monkeypatch.setattr(local_runtime, "pending", must_not_run)
    monkeypatch.setattr(local_runtime, "admissions", must_not_run)
    with pytest.raises(SystemExit) as exited:
        local_runtime.main(argv)
    assert exited.value.code == 2
    assert said in capsys.readouterr().err
