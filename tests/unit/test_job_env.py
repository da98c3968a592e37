"""A job's own environment (`env`): names, sizes, reserved names and secrets are refused with an
error that names the variable; what passes is kept as written."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from spotline.domain.models import MAX_ENV_VALUE, MAX_ENV_VARS, JobSpec

BASE: dict[str, Any] = {"name": "a", "gpus": 1, "image": "img", "command": ["python", "train.py"]}


def test_plain_settings_pass_as_written() -> None:
    env = {"LR": "3e-4", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "_X9": ""}
    assert JobSpec.model_validate({**BASE, "env": env}).env == env
    assert JobSpec.model_validate(BASE).env is None


REFUSED = {
    "lower case": ({"lr": "1"}, "'lr' is not a variable name"),
    "starts with a digit": ({"9LIVES": "1"}, "is not a variable name"),
    "a dash": ({"MY-VAR": "1"}, "is not a variable name"),
    "too long a name": ({"X" * 129: "1"}, "is not a variable name"),
    "AWS's": ({"AWS_REGION": "us-east-1"}, "AWS_REGION is reserved"),
    "Spotline's": ({"SPOTLINE_JOB_ID": "x"}, "SPOTLINE_JOB_ID is reserved"),
    "ECS's": ({"ECS_CONTAINER_METADATA_URI": "x"}, "is reserved"),
    "the rendezvous": ({"MASTER_ADDR": "10.0.0.1"}, "MASTER_ADDR is reserved"),
    "too long a value": ({"X": "x" * (MAX_ENV_VALUE + 1)}, "X: 4097 characters"),
    "a NUL byte": ({"X": "a\0b"}, "X: contains a NUL byte"),
    "too many": ({f"V{i}": "1" for i in range(MAX_ENV_VARS + 1)}, "65 variables, at most 64"),
    "not a string": ({"X": 1}, "valid string"),
    "a token by name": ({"HF_TOKEN": "abc"}, "HF_TOKEN: its name says it holds a secret"),
    "an API key by name": ({"WANDB_API_KEY": "abc"}, "its name says it holds a secret"),
    "a password by name": ({"DB_PASSWORD": "abc"}, "its name says it holds a secret"),
    "an AWS key by value": ({"KEY_ID": "AKIAIOSFODNN7EXAMPLE"}, "looks like an AWS access key id"),
    "a private key by value": ({"PEM": "-----BEGIN RSA PRIVATE KEY-----\nx"}, "looks like a private key"),
    "a GitHub token by value": ({"GH": "ghp_" + "a" * 36}, "looks like a GitHub token"),
    "a Hugging Face token by value": ({"HUB": "hf_" + "A" * 34}, "looks like a Hugging Face token"),
    "a password in a URL": ({"DATABASE_URL": "postgres://me:hunter2@db:5432/x"}, "a URL with a password"),
}


@pytest.mark.parametrize(("env", "message"), REFUSED.values(), ids=list(REFUSED))
def test_bad_env_is_refused_naming_the_variable(env: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        JobSpec.model_validate({**BASE, "env": env})
    (error,) = caught.value.errors()
    assert error["loc"][0] == "env" and message in error["msg"]


def test_a_secret_is_refused_with_a_pointer_to_secrets_handling() -> None:
    with pytest.raises(ValidationError) as caught:
        JobSpec.model_validate({**BASE, "env": {"HF_TOKEN": "hf_" + "x" * 34}})
    assert "Secrets Manager" in str(caught.value) and "security.md" in str(caught.value)
