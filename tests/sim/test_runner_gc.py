"""A run moves what exists before it out of the cyclic collector's sight and collects less often
while it runs (`runner._few_collections`); the process's collector is as it was afterwards,
whether the run ended or failed."""

from __future__ import annotations

import gc

import pytest

from spotline.sim import runner


def test_a_run_collects_less_often_and_gives_the_collector_back() -> None:
    before = gc.get_threshold()
    with runner._few_collections():
        assert gc.get_threshold()[0] == runner.GC_THRESHOLD_DURING_RUN
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_a_failed_run_gives_the_collector_back() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError, match="boom"), runner._few_collections():
        raise RuntimeError("boom")
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_what_a_caller_froze_stays_frozen() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with runner._few_collections():
            pass
        assert gc.get_freeze_count() >= frozen > 0
    finally:
        gc.unfreeze()
