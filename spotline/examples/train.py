"""A small, real, resumable training loop: `python -m spotline.examples.train --steps N`.

A two-layer MLP (tanh, softmax) learns, with Adam, the labels a random "teacher" network gives
to Gaussian inputs; the data, the initial weights and the mini-batch order all come from
`--seed`. The Spotline agent restores the newest durable checkpoint (weights, Adam moments,
step and the RNG state), checkpoints periodically, on request, on a Spot notice and on SIGTERM,
and reports progress = step / N. So a run interrupted at any step and resumed ends with weights
bit-identical to an uninterrupted run with the same seed.

The learning rate is `--lr`, else a sweep's `lr` (`SPOTLINE_PARAM_LR`), else 0.01; the run logs
it and the final JSON line carries it. `--step-time-s T` adds T seconds of simulated work per
step (the agent wakes early from it when a checkpoint cannot wait) so a demo run lasts a
controlled time. At the end the final weights are
written to the checkpoint store (a manifest with `final: true`) and one JSON line goes to stdout
with their SHA-256. Exit status: 0 when finished, 143 when stopped by SIGTERM (after its
checkpoint), 2 for a checkpoint that belongs to a different configuration or
an unreadable learning rate.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from spotline.agent import EXIT_STOPPED, Agent

log = logging.getLogger("spotline.examples.train")
# A sweep over `lr` (`sweep: {lr: [...]}` in the job spec) gives each element its value here.
LR_ENV = "SPOTLINE_PARAM_LR"
DEFAULT_LR = 0.01

Array = np.ndarray[Any, np.dtype[np.float64]]
Labels = np.ndarray[Any, np.dtype[np.int64]]
PARAM_NAMES = ("W1", "b1", "W2", "b2")
ADAM_BETA1, ADAM_BETA2, ADAM_EPS = 0.9, 0.999, 1e-8


@dataclass(frozen=True)
class TrainConfig:
    steps: int
    seed: int = 0
    hidden: int = 32
    batch_size: int = 64
    lr: float = 0.01
    samples: int = 2048
    features: int = 16
    classes: int = 3

    def identity(self) -> dict[str, Any]:
        """What a checkpoint must agree on to be resumed (all but the number of steps, which a
        resumed run may extend)."""
        body = asdict(self)
        del body["steps"]
        return body


@dataclass
class TrainState:
    step: int
    params: dict[str, Array]
    adam_m: dict[str, Array]
    adam_v: dict[str, Array]
    rng: np.random.Generator  # draws the mini-batches

    def to_checkpoint(self, config: TrainConfig) -> dict[str, Any]:
        return {
            "step": self.step,
            "config": config.identity(),
            "params": self.params,
            "adam_m": self.adam_m,
            "adam_v": self.adam_v,
            # The bit generator's state (128-bit integers for PCG64): without it a resumed run
            # would draw different mini-batches from the uninterrupted one.
            "rng": self.rng.bit_generator.state,
        }

    @classmethod
    def from_checkpoint(cls, body: Mapping[str, Any]) -> TrainState:
        rng = np.random.default_rng()
        rng.bit_generator.state = body["rng"]
        return cls(
            step=int(body["step"]),
            params=dict(body["params"]),
            adam_m=dict(body["adam_m"]),
            adam_v=dict(body["adam_v"]),
            rng=rng,
        )


def make_dataset(config: TrainConfig) -> tuple[Array, Labels]:
    """Inputs and teacher labels, a pure function of the seed (so never checkpointed)."""
    rng = np.random.default_rng([config.seed, 0])
    x = rng.standard_normal((config.samples, config.features))
    teacher_hidden = rng.standard_normal((config.features, 2 * config.hidden))
    teacher_out = rng.standard_normal((2 * config.hidden, config.classes))
    y = np.argmax(np.tanh(x @ teacher_hidden) @ teacher_out, axis=1).astype(np.int64)
    return x, y


def initial_state(config: TrainConfig) -> TrainState:
    init = np.random.default_rng([config.seed, 1])
    params = {
        "W1": init.standard_normal((config.features, config.hidden)) * np.sqrt(1.0 / config.features),
        "b1": np.zeros(config.hidden),
        "W2": init.standard_normal((config.hidden, config.classes)) * np.sqrt(1.0 / config.hidden),
        "b2": np.zeros(config.classes),
    }
    return TrainState(
        step=0,
        params=params,
        adam_m={name: np.zeros_like(value) for name, value in params.items()},
        adam_v={name: np.zeros_like(value) for name, value in params.items()},
        rng=np.random.default_rng([config.seed, 2]),
    )


def forward(params: Mapping[str, Array], x: Array) -> tuple[Array, Array]:
    """Hidden activations and class probabilities."""
    hidden = np.tanh(x @ params["W1"] + params["b1"])
    logits = hidden @ params["W2"] + params["b2"]
    logits = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(logits)
    return hidden, exp / exp.sum(axis=1, keepdims=True)


def train_step(state: TrainState, config: TrainConfig, x: Array, y: Labels) -> float:
    """One Adam step on a mini-batch; returns the batch loss. Mutates `state`."""
    batch = state.rng.integers(0, config.samples, size=config.batch_size)
    xb, yb = x[batch], y[batch]
    params = state.params
    hidden, probs = forward(params, xb)
    loss = float(-np.mean(np.log(probs[np.arange(len(yb)), yb] + 1e-12)))
    d_logits = probs.copy()
    d_logits[np.arange(len(yb)), yb] -= 1.0
    d_logits /= len(yb)
    d_hidden = (d_logits @ params["W2"].T) * (1.0 - hidden**2)
    grads = {
        "W2": hidden.T @ d_logits,
        "b2": d_logits.sum(axis=0),
        "W1": xb.T @ d_hidden,
        "b1": d_hidden.sum(axis=0),
    }
    t = state.step + 1
    for name in PARAM_NAMES:
        state.adam_m[name] = ADAM_BETA1 * state.adam_m[name] + (1 - ADAM_BETA1) * grads[name]
        state.adam_v[name] = ADAM_BETA2 * state.adam_v[name] + (1 - ADAM_BETA2) * grads[name] ** 2
        m_hat = state.adam_m[name] / (1 - ADAM_BETA1**t)
        v_hat = state.adam_v[name] / (1 - ADAM_BETA2**t)
        params[name] = params[name] - config.lr * m_hat / (np.sqrt(v_hat) + ADAM_EPS)
    state.step = t
    return loss


def weights_sha256(params: Mapping[str, Array]) -> str:
    """A digest of the exact bits of the weights (names, dtypes and shapes included)."""
    digest = hashlib.sha256()
    for name in PARAM_NAMES:
        value = np.ascontiguousarray(params[name])
        digest.update(f"{name}:{value.dtype.str}:{value.shape};".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def accuracy(params: Mapping[str, Array], x: Array, y: Labels) -> float:
    return float(np.mean(np.argmax(forward(params, x)[1], axis=1) == y))


def train(
    config: TrainConfig,
    agent: Agent,
    *,
    step_time_s: float = 0.0,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Run (or resume) training under `agent`; returns the process exit status."""
    x, y = make_dataset(config)
    restored = agent.restore()
    if restored is None:
        state = initial_state(config)
    else:
        written_with = restored.state.get("config") if isinstance(restored.state, dict) else None
        if written_with != config.identity():
            log.error(
                "checkpoint %s was written with %s, not %s",
                restored.record.uri,
                written_with,
                config.identity(),
            )
            return 2
        state = TrainState.from_checkpoint(restored.state)
        log.info("resuming from step %d", state.step)
    resumed_from = state.step if restored is not None else None

    started = clock()
    busy_s = 0.0  # time in training steps (compute + simulated work), for utilization
    log_every = max(1, config.steps // 10)
    loss = float("nan")
    while state.step < config.steps:
        step_started = clock()
        loss = train_step(state, config, x, y)
        if step_time_s > 0:
            agent.pause(step_time_s)
        busy_s += clock() - step_started
        utilization = busy_s / max(clock() - started, 1e-9)
        if state.step % log_every == 0:
            log.info("step %d/%d loss %.4f", state.step, config.steps, loss)
        if not agent.step(
            state.step,
            state.step / config.steps,
            lambda: state.to_checkpoint(config),
            utilization=min(1.0, utilization),
        ):
            return EXIT_STOPPED

    digest = weights_sha256(state.params)
    record = agent.finish(state.step, state.to_checkpoint(config), meta={"weights_sha256": digest})
    result = {
        "job_id": agent.job_id,
        "steps": state.step,
        "seed": config.seed,
        "lr": config.lr,
        "weights_sha256": digest,
        "accuracy": accuracy(state.params, x, y),
        "last_loss": loss,
        "resumed_from_step": resumed_from,
        "checkpoint_uri": record.uri if record else None,
    }
    print(json.dumps(result), flush=True)
    return 0


def learning_rate(given: float | None, env: Mapping[str, str]) -> tuple[float, str]:
    """The learning rate and where it came from: --lr, else a sweep's `lr` (LR_ENV), else the
    default. Raises ValueError naming LR_ENV when its value is not a number."""
    if given is not None:
        return given, "--lr"
    text = env.get(LR_ENV)
    if text is None:
        return DEFAULT_LR, "default"
    try:
        return float(text), f"{LR_ENV}={text}"
    except ValueError:
        raise ValueError(f"{LR_ENV}={text!r} is not a number") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m spotline.examples.train",
        description="A small resumable training loop under the Spotline agent.",
    )
    parser.add_argument("--steps", type=int, required=True, help="total training steps")
    parser.add_argument("--seed", type=int, default=0, help="seeds the data, the weights and the batches")
    parser.add_argument("--step-time-s", type=float, default=0.0, help="simulated work per step (seconds)")
    parser.add_argument(
        "--lr",
        type=float,
        default=None,
        help=f"Adam's learning rate (default: {LR_ENV}, a sweep's `lr`, else {DEFAULT_LR})",
    )
    parser.add_argument(
        "--checkpoint-uri",
        default=None,
        help="s3://bucket/prefix/ or file:///dir/ (default: SPOTLINE_CHECKPOINT_URI)",
    )
    parser.add_argument(
        "--checkpoint-interval-s",
        type=float,
        default=None,
        help="periodic checkpoint interval (default: SPOTLINE_CHECKPOINT_INTERVAL_S or 600)",
    )
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be >= 1")
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    overrides: dict[str, Any] = {}
    if args.checkpoint_uri:
        overrides["checkpoint_uri"] = args.checkpoint_uri
    if args.checkpoint_interval_s is not None:
        overrides["checkpoint_interval_s"] = args.checkpoint_interval_s
    try:
        lr, lr_from = learning_rate(args.lr, os.environ)
    except ValueError as error:
        parser.error(str(error))
    if not lr > 0:
        parser.error(f"the learning rate must be above 0, got {lr} ({lr_from})")
    log.info("learning rate %g (%s)", lr, lr_from)
    config = TrainConfig(steps=args.steps, seed=args.seed, lr=lr)
    with Agent.from_env(**overrides) as agent:
        return train(config, agent, step_time_s=args.step_time_s)


if __name__ == "__main__":
    sys.exit(main())
