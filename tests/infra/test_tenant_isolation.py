"""Tenant isolation in the template (docs/security.md): each team's job role reaches
its own checkpoints, its own jobs' signal items and its own event source, and nothing of any
other team's; no role but the control plane's functions reads the jobs table's job items.

The policies are walked statement by statement, resource pattern by resource pattern and
condition by condition, against concrete names of every other team's resources (IAM's `*` and
`?` wildcards matched as IAM matches them). The stack is synthesized once here with three
teams and `checkpoint_kms_per_team` on (so the key policies are walked too), with the
AwsSolutions checks; the default context's stack (two teams, no keys) is walked as well.
"""

from __future__ import annotations

import fnmatch
import itertools
import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App

import app as cdk_app
from spotline import resources as r
from stacks.batch import KEY_USE_ACTIONS
from tests.infra.support import Synthesized, cdk_context, source_dirs
from tests.infra.test_stack import as_list, flatten, statements_of_role

TEAMS = ("research", "product", "research-2")
JOB = "job-0123456789abcdef"

# Actions that read or write data of one team (what a team's role may hold, on its own things).
S3_OBJECT_ACTIONS = {"s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload", "s3:DeleteObject"}
TABLE_READS = {"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query", "dynamodb:Scan"}


def iam_match(pattern: str, value: str) -> bool:
    """IAM's wildcard match: `*` any run of characters, `?` one character, nothing else special."""
    return fnmatch.fnmatchcase(value, pattern.replace("[", "[[]"))


@pytest.fixture(scope="module")
def three_teams(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synthesized]:
    """The stack with three teams (one name a prefix of another's) and a KMS key per team."""
    tmp: Path = tmp_path_factory.mktemp("tenants")
    functions_dir, statemachines_dir, real = source_dirs(tmp / "sources")
    context = cdk_context()
    context["teams"] = [{"team": t, "nominal_gpus": 16} for t in TEAMS]
    context["identities"] = {f"arn:aws:iam::123456789012:role/spotline-{t}": t for t in TEAMS}
    context["checkpoint_kms_per_team"] = True
    outdir = tmp / "cdk.out"
    app = App(context=context, outdir=str(outdir))
    stack = cdk_app.build_app(
        app, functions_dir=functions_dir, statemachines_dir=statemachines_dir, build_dir=tmp / "build"
    )
    error: Exception | None = None
    try:
        app.synth()
    except RuntimeError as raised:
        error = raised
    template = json.loads((outdir / f"{stack.stack_name}.template.json").read_text())
    report_path = outdir / "validation-report.json"
    yield Synthesized(
        stack=stack,
        template=None,  # type: ignore[arg-type]  # (the walks read the JSON)
        json=template,
        synth_error=error,
        validation_report=json.loads(report_path.read_text()) if report_path.is_file() else None,
        real_sources=real,
        outdir=outdir,
    )


# --- what one team owns, by name -------------------------------------------------------------


def owned(syn: Synthesized, team: str) -> dict[str, list[str]]:
    """Concrete names of `team`'s things, as the policies would meet them."""
    stack = syn.stack
    bucket = f"<{syn.logical_id(stack.storage.checkpoints)}.Arn>"
    key = stack.compute.team_keys.get(team)
    return {
        "object": [f"{bucket}/{r.checkpoint_prefix(team)}{JOB}/manifest-000000000012.json"],
        "list_prefix": [f"{r.checkpoint_prefix(team)}{JOB}/", r.checkpoint_prefix(team)],
        "leading_key": [r.signal_key(team, JOB)],
        "source": [r.agent_source(team)],
        "key": [f"<{syn.logical_id(key)}.Arn>"] if key is not None else [],
    }


StatementsOf = Callable[[Synthesized, str], list[dict[str, Any]]]


def reach(syn: Synthesized, team: str, statements_of: StatementsOf = statements_of_role) -> list[str]:
    """What `team`'s role's Allow statements reach, each item `kind:name` for every owned name of
    every team that some statement allows (resource and conditions together)."""
    role_id = syn.logical_id(syn.stack.compute.team_roles[team])
    statements = statements_of(syn, role_id)
    denies = [s for s in statements if s["Effect"] == "Deny"]
    found: list[str] = []
    for other in syn.stack.compute.team_roles:
        names = owned(syn, other)
        for statement in (s for s in statements if s["Effect"] == "Allow"):
            actions = set(statement["Action"])
            condition = statement["Condition"] or {}
            resources = statement["Resource"]
            if actions & S3_OBJECT_ACTIONS:
                found += [
                    f"object:{name}"
                    for name in names["object"]
                    if any(iam_match(p, name) for p in resources) and not _denied(denies, name)
                ]
            if "s3:ListBucket" in actions:
                prefixes = condition.get("StringLike", {}).get("s3:prefix")
                assert prefixes, f"{team}: ListBucket without an s3:prefix condition lists every team"
                found += [
                    f"list_prefix:{name}"
                    for name in names["list_prefix"]
                    if any(iam_match(p, name) for p in as_list(prefixes))
                ]
            if actions & TABLE_READS:
                keys = condition.get("ForAllValues:StringLike", {}).get("dynamodb:LeadingKeys")
                assert keys, f"{team}: a table read without a dynamodb:LeadingKeys condition"
                assert not actions & {"dynamodb:Scan", "dynamodb:Query"}, f"{team}: {actions}"
                found += [
                    f"leading_key:{name}"
                    for name in [*names["leading_key"], JOB]  # JOB: a job's own item
                    if any(iam_match(p, name) for p in as_list(keys))
                ]
            if "events:PutEvents" in actions:
                sources = condition.get("StringEquals", {}).get("events:source")
                assert sources, f"{team}: PutEvents without an events:source condition"
                found += [
                    f"source:{name}"
                    for name in [*names["source"], r.SOURCE_AGENT]
                    if name in as_list(sources)
                ]
            if any(a.startswith("kms:") for a in actions):
                found += [f"key:{name}" for name in names["key"] if name in resources]
    return sorted(set(found))


def _denied(denies: list[dict[str, Any]], name: str) -> bool:
    return any(
        "s3:PutObject" in d["Action"]
        and not d["Condition"]
        and any(iam_match(p, name) for p in d["Resource"])
        for d in denies
    )


def check_pairs(syn: Synthesized, statements_of: StatementsOf = statements_of_role) -> None:
    teams = list(syn.stack.compute.team_roles)
    assert len(teams) >= 2
    for team in teams:
        mine = reach(syn, team, statements_of)
        # Each team reaches its own things (so the walk below cannot pass by reaching nothing) ...
        expected = {f"{kind}:{name}" for kind, names in owned(syn, team).items() for name in names}
        assert expected <= set(mine), f"{team} cannot reach {sorted(expected - set(mine))}"
        # ... and nothing of any other team's, and neither a job's own item nor the bare source.
        for other in teams:
            if other == team:
                continue
            theirs = {f"{kind}:{name}" for kind, names in owned(syn, other).items() for name in names}
            assert not theirs & set(mine), f"{team}'s role reaches {other}'s {sorted(theirs & set(mine))}"
        assert f"leading_key:{JOB}" not in mine and f"source:{r.SOURCE_AGENT}" not in mine


# --- the tests -------------------------------------------------------------------------------


def test_no_team_role_reaches_another_teams_checkpoints_signals_sources_or_key(
    three_teams: Synthesized,
) -> None:
    assert set(three_teams.stack.compute.team_roles) == set(TEAMS)
    check_pairs(three_teams)


def test_the_default_stack_keeps_its_two_teams_apart(synthesized: Synthesized) -> None:
    check_pairs(synthesized)


def test_each_team_role_holds_exactly_its_data_plane_actions(three_teams: Synthesized) -> None:
    for team, role in three_teams.stack.compute.team_roles.items():
        statements = statements_of_role(three_teams, three_teams.logical_id(role))
        allowed = {a for s in statements if s["Effect"] == "Allow" for a in s["Action"]}
        assert allowed == S3_OBJECT_ACTIONS | {
            "s3:ListBucket",
            "events:PutEvents",
            "dynamodb:GetItem",
            *KEY_USE_ACTIONS,
        }, team
        # Its writes name no other key (the Deny; the agent names its own on every upload).
        (deny,) = [s for s in statements if s["Effect"] == "Deny"]
        key = three_teams.stack.compute.team_keys[team]
        assert deny["Action"] == ["s3:PutObject"]
        assert {flatten(v) for v in deny["Condition"]["StringNotEqualsIfExists"].values()} == {
            f"<{three_teams.logical_id(key)}.Arn>"
        }


def test_each_key_policy_names_only_its_team_role_for_use(three_teams: Synthesized) -> None:
    compute = three_teams.stack.compute
    for team, key in compute.team_keys.items():
        document = three_teams.json["Resources"][three_teams.logical_id(key)]["Properties"]["KeyPolicy"]
        users: set[str] = set()
        for statement in document["Statement"]:
            actions = set(as_list(statement["Action"]))
            principal = flatten(statement["Principal"]["AWS"])
            if actions & {"kms:Decrypt", "kms:GenerateDataKey", "kms:Encrypt", "kms:ReEncrypt*", "kms:*"}:
                users.add(principal)
            else:  # the account administers the key and may not use it
                assert principal.endswith(":root"), principal
                assert all(not a.startswith(("kms:Decrypt", "kms:Encrypt", "kms:Generate")) for a in actions)
        assert users == {f"<{three_teams.logical_id(compute.team_roles[team])}.Arn>"}, team


def test_each_team_job_definition_carries_its_role_and_team(three_teams: Synthesized) -> None:
    compute = three_teams.stack.compute
    for team, definition in compute.job_definitions.items():
        props = three_teams.json["Resources"][three_teams.logical_id(definition)]["Properties"]
        container = props["ContainerProperties"]
        assert container["JobRoleArn"] == {
            "Fn::GetAtt": [three_teams.logical_id(compute.team_roles[team]), "Arn"]
        }
        env = {e["Name"]: e["Value"] for e in container["Environment"]}
        assert env[r.AGENT_ENV_TEAM] == team
        assert (
            flatten(env[r.AGENT_ENV_CHECKPOINT_KMS_KEY])
            == f"<{three_teams.logical_id(compute.team_keys[team])}.Arn>"
        )
        assert props["JobDefinitionName"] == f"{compute.job_definition_name}-{team}"


def test_no_role_but_the_control_planes_reads_the_jobs_table(three_teams: Synthesized) -> None:
    stack = three_teams.stack
    jobs = f"<{three_teams.logical_id(stack.tables[r.JOBS.logical_id])}.Arn>"
    control_plane = {three_teams.logical_id(role) for role in stack.functions.roles.values()}
    team_roles = {three_teams.logical_id(role) for role in stack.compute.team_roles.values()}
    readers: set[str] = set()
    for role_id in three_teams.resources("AWS::IAM::Role"):
        for statement in statements_of_role(three_teams, role_id):
            if statement["Effect"] != "Allow" or not set(statement["Action"]) & TABLE_READS:
                continue
            if not any(
                res == jobs or res.startswith(jobs + "/") or res == "*" for res in statement["Resource"]
            ):
                continue
            if role_id in team_roles:  # bounded to its signal items (checked pair by pair above)
                assert "dynamodb:LeadingKeys" in json.dumps(statement["Condition"])
                continue
            readers.add(role_id)
    assert readers and readers <= control_plane, sorted(readers - control_plane)


def test_agent_rules_match_every_team_source_and_nothing_else() -> None:
    agent_targets = ("checkpoint_completed", r.HEARTBEAT_QUEUE.logical_id)
    rules = [x for x in r.RULES if x.target in agent_targets]
    assert len(rules) == 2
    for rule in rules:
        (matcher,) = rule.pattern["source"]
        assert matcher == {"prefix": r.SOURCE_AGENT_PREFIX}
        for team in TEAMS:
            assert r.agent_source(team).startswith(matcher["prefix"])
            assert r.team_of_agent_source(r.agent_source(team)) == team
    assert r.team_of_agent_source(r.SOURCE_AGENT) is None
    assert r.team_of_agent_source("spotline.api") is None


def test_the_three_team_stack_passes_the_awssolutions_checks(three_teams: Synthesized) -> None:
    assert three_teams.synth_error is None, str(three_teams.synth_error)[:2000]


# --- the walk itself can fail ----------------------------------------------------------------


def test_the_walk_finds_a_shared_prefix_an_open_table_read_and_a_shared_source(
    synthesized: Synthesized,
) -> None:
    """Each way a role could reach another team's things is reported (a walk that found
    nothing would pass everything)."""
    role_id = synthesized.logical_id(synthesized.stack.compute.team_roles["research"])
    bucket = f"<{synthesized.logical_id(synthesized.stack.storage.checkpoints)}.Arn>"
    leaks: Mapping[str, dict[str, Any]] = {
        "object": {
            "Effect": "Allow",
            "Action": ["s3:GetObject"],
            "Resource": [f"{bucket}/checkpoints/*"],
            "Condition": None,
        },
        "list_prefix": {
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": [bucket],
            "Condition": {"StringLike": {"s3:prefix": ["checkpoints/*"]}},
        },
        "leading_key": {
            "Effect": "Allow",
            "Action": ["dynamodb:GetItem"],
            "Resource": ["x"],
            "Condition": {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["signal#*"]}},
        },
        "source": {
            "Effect": "Allow",
            "Action": ["events:PutEvents"],
            "Resource": ["x"],
            "Condition": {"StringEquals": {"events:source": [r.agent_source("product")]}},
        },
    }
    for kind, leak in leaks.items():

        def leaking(syn: Synthesized, rid: str, leak: dict[str, Any] = leak) -> list[dict[str, Any]]:
            return [*statements_of_role(syn, rid), leak] if rid == role_id else statements_of_role(syn, rid)

        with pytest.raises(AssertionError, match=f"research's role reaches product's.*{kind}:"):
            check_pairs(synthesized, leaking)
    check_pairs(synthesized)


def _pairs() -> list[tuple[str, str]]:
    return list(itertools.permutations(TEAMS, 2))


@pytest.mark.parametrize(("team", "other"), _pairs())
def test_team_names_cannot_cover_each_other(team: str, other: str) -> None:
    """A team whose name is a prefix of another's ("research" and "research-2") does not match the
    other's patterns: every pattern ends at a delimiter."""
    assert not iam_match(r.signal_key_pattern(team), r.signal_key(other, JOB))
    assert not iam_match(f"{r.checkpoint_prefix(team)}*", f"{r.checkpoint_prefix(other)}{JOB}/x")
