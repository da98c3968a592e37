"""Roles with a path map to their team: an assumed-role session names its
role without the path, so roles match by account and name."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError

from spotline.control.errors import Unauthorized
from spotline.control.jobs import team_for_identity
from spotline.control.settings import SpotlineConfig, principal_key

SSO_ROLE = "arn:aws:iam::123456789012:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_ML_0123abcd"
SSO_SESSION = "arn:aws:sts::123456789012:assumed-role/AWSReservedSSO_ML_0123abcd/alice@example.com"


def _plane(identities: dict[str, str]) -> Any:
    return SimpleNamespace(config=SimpleNamespace(identities=identities))


@pytest.mark.parametrize(
    ("arn", "key"),
    [
        (SSO_ROLE, "arn:aws:iam::123456789012:role/AWSReservedSSO_ML_0123abcd"),
        ("arn:aws:iam::123456789012:role/plain", "arn:aws:iam::123456789012:role/plain"),
        ("arn:aws:iam::123456789012:user/team/bob", "arn:aws:iam::123456789012:user/team/bob"),
        ("AKIALOCALKEY", "AKIALOCALKEY"),
    ],
)
def test_principal_key(arn: str, key: str) -> None:
    assert principal_key(arn) == key


def test_an_sso_session_maps_to_the_team_of_its_role_configured_with_its_path() -> None:
    plane = _plane({SSO_ROLE: "ml"})
    assert team_for_identity(plane, {"userArn": SSO_SESSION}) == "ml"


def test_the_same_name_in_another_account_is_not_the_role() -> None:
    plane = _plane({SSO_ROLE: "ml"})
    other = SSO_SESSION.replace("123456789012", "210987654321")
    with pytest.raises(Unauthorized):
        team_for_identity(plane, {"userArn": other})


def test_two_forms_of_one_role_with_different_teams_are_refused() -> None:
    with pytest.raises(ValidationError, match="are the same role"):
        SpotlineConfig.model_validate(
            {
                "pools": [
                    {
                        "name": "p",
                        "gpu_type": "a100",
                        "purchase": "spot",
                        "capacity_gpus": 8,
                        "job_queue": "q",
                    }
                ],
                "job_definition": "d",
                "identities": {
                    SSO_ROLE: "ml",
                    "arn:aws:iam::123456789012:role/AWSReservedSSO_ML_0123abcd": "cv",
                },
            }
        )
