"""The contention bench's loss tables (`bench.contention.print_losses`, `print_accounts`): every
policy's loss metrics, and the account beside the preempting peer with the least churn."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from bench import contention
from bench.policy_bench import runs as pb
from bench.policy_bench.setup import EVAL_POLICIES


def _churn(value: float) -> dict[str, Any]:
    return {"preemption_churn_per_1k_useful_gpu_h": value}


def test_the_best_preempting_peer_has_the_least_churn_and_fifo_is_never_it() -> None:
    runs = {"fifo": _churn(0.0), "slurm": _churn(9.0), "kueue-classic": _churn(4.0), "spotline": _churn(1.0)}
    assert contention.best_preempting(runs) == "kueue-classic"


def test_the_tables_print_every_policy_s_loss_metrics() -> None:
    sample = pb.Sample("synth", 7, jobs=150, load=1.2, gpus=32)
    runs = pb.run_sample(sample, EVAL_POLICIES, workers=1)
    console = Console(record=True, width=400)
    contention.print_losses(sample.label, [runs, runs], console)
    contention.print_accounts(sample.label, runs, console)
    text = console.export_text()
    for name in EVAL_POLICIES:
        assert name in text
    spotline = runs["spotline"]
    churn = f"{spotline['preemption_churn_per_1k_useful_gpu_h']:.1f}"
    assert "preemption churn (lost GPU-h per 1k useful)" in text and churn in text
    assert "Spot waste (lost GPU-h per 1k Spot GPU-h)" in text
    assert "mean ± 95% CI over 2 seeds" in text
    assert "the preempting peer with the least churn" in text
