"""Reserved blocks in the simulator: hand-computed scenarios, and the peers' behaviour at the end.

The cluster: 8 On-Demand GPUs plus one block of 1 instance x 8 GPUs. Settings as `helpers`
(restart 100 s, checkpoint every 1000 s, 50 s to write).
"""

from __future__ import annotations

import pytest

from spotline.sim.blocks import Reservation, ReservationError, parse_reservation
from tests.sim.helpers import run

H = 3600.0


def block(start_h: float, end_h: float, instances: int = 1) -> Reservation:
    return Reservation(instances, 8, start_h, end_h)


def account(rows: list[tuple[str, float, float, int, str, str]], policy: str, *blocks: Reservation) -> dict:
    result = run(rows, policy, gpus=8, reservations=list(blocks))
    return result.metrics


class TestParse:
    def test_a_block(self) -> None:
        assert parse_reservation("8x8:24:192") == Reservation(8, 8, 24.0, 192.0)

    @pytest.mark.parametrize(
        "text, says",
        [
            ("8x8", "expected NxG:START_H:END_H"),
            ("0x8:0:10", "at least 1 instance"),
            ("8x8:10:5", "must be after START_H"),
            ("8x8:1:1.25", "longer than the 30 min"),
        ],
    )
    def test_bad_values_name_the_flag(self, text: str, says: str) -> None:
        with pytest.raises(ReservationError, match="--reservation") as caught:
            parse_reservation(text)
        assert says in str(caught.value)


class TestSpotline:
    def test_the_block_comes_first_and_its_hours_are_useful(self) -> None:
        # Given a 1-hour job submitted while the block is open
        rows = [("a", 0.0, 3600.0, 8, "t", "normal")]
        # When Spotline runs it
        metrics = account(rows, "spotline", block(0, 10))
        # Then it runs in the block (prepaid), and the block's account counts its hour as useful
        reserved = metrics["reservation_account"]
        assert reserved["block_gpu_hours"] == pytest.approx(80.0)
        assert reserved["useful_gpu_hours"] == pytest.approx(8.0)
        assert reserved["unsaved_gpu_hours_lost_at_end"] == 0.0
        assert metrics["cost_per_useful_gpu_hour"] == 0.0

    def test_a_job_is_checkpointed_before_the_end_and_resumes_elsewhere(self) -> None:
        # Given a 3-hour job in a block that ends 2 h after it starts (usable for 1.5 h)
        rows = [("a", 0.0, 3 * H, 8, "t", "normal")]
        # When Spotline runs it
        result = run(rows, "spotline", gpus=8, reservations=[block(0, 2)])
        metrics = result.metrics
        # Then it left the block with a checkpoint before the termination: nothing unsaved lost
        reserved = metrics["reservation_account"]
        assert reserved["unsaved_gpu_hours_lost_at_end"] == 0.0
        assert reserved["useful_gpu_hours"] > 8 * 1.3
        assert metrics["completed"] == 1
        job = result.jobs[0]
        assert job.preemptions == 0 and job.interruptions == 0

    def test_the_batch_peer_loses_the_work_since_its_last_checkpoint(self) -> None:
        # Given the same job under FIFO (AWS Batch: nothing happens at expiry)
        rows = [("a", 0.0, 3 * H, 8, "t", "normal")]
        metrics = account(rows, "fifo", block(0, 2))
        # Then the termination at 1.5 h kills it: the work since its last periodic checkpoint is lost
        # (checkpoints of 1000 s of progress, each durable 50 s later: at 5400 s, 5000 s are durable).
        reserved = metrics["reservation_account"]
        assert reserved["unsaved_gpu_hours_lost_at_end"] == pytest.approx(8 * 400 / H)

    def test_the_draining_peer_stops_at_the_warning_without_a_checkpoint(self) -> None:
        rows = [("a", 0.0, 3 * H, 8, "t", "normal")]
        metrics = account(rows, "kueue", block(0, 2))
        # The warning comes at 2 h - 40 min = 4800 s: 4800 s of progress, 4000 s durable.
        reserved = metrics["reservation_account"]
        assert reserved["unsaved_gpu_hours_lost_at_end"] == pytest.approx(8 * 800 / H)

    def test_a_job_that_fits_nowhere_before_the_end_stays_out(self) -> None:
        # Given a block that is about to drain, and a job whose first checkpoint lands after it
        rows = [("a", 1.0 * H, 2 * H, 8, "t", "normal")]
        metrics = account(rows, "spotline", block(0, 1.75))
        # Then it runs On-Demand: the block did no work, and lost none
        reserved = metrics["reservation_account"]
        assert reserved["useful_gpu_hours"] == 0.0
        assert reserved["unsaved_gpu_hours_lost_at_end"] == 0.0

    def test_no_block_before_it_opens(self) -> None:
        # Given two 8-GPU jobs at 0 and a block that opens at 1 h: one waits for it, or for On-Demand
        rows = [("a", 0.0, 2 * H, 8, "t", "normal"), ("b", 0.0, 2 * H, 8, "t", "normal")]
        result = run(rows, "spotline", gpus=8, reservations=[block(1, 10)])
        # Then the second starts when the block opens, at 1 h, and runs there
        starts = sorted(j.first_start or 0.0 for j in result.jobs)
        assert starts == [0.0, pytest.approx(H)]
        assert result.metrics["reservation_account"]["useful_gpu_hours"] == pytest.approx(16.0)

    def test_the_block_is_refilled_at_once_while_jobs_queue(self) -> None:
        # Given three 2-hour jobs of 8 GPUs at 0, on 8 On-Demand GPUs and a block of 8
        rows = [(n, 0.0, 2 * H, 8, "t", "normal") for n in "abc"]
        result = run(rows, "spotline", gpus=8, reservations=[block(0, 10)])
        # Then the third starts as soon as GPUs free up, and no block GPU idles while it waits
        starts = sorted(j.first_start or 0.0 for j in result.jobs)
        assert starts == [0.0, 0.0, pytest.approx(2 * H)]
        reserved = result.metrics["reservation_account"]
        assert reserved["idle_gpu_hours_while_a_queued_job_fit"] == 0.0
        assert reserved["useful_gpu_hours"] == pytest.approx(32.0)
