"""Host isolation by execution: the user data's own script (stacks/userdata/host-isolation.sh,
the file the stack embeds) applied in boot order on an emulated instance (tests/infra/hostnet.py:
network namespaces, a fake IMDS, a cgroup tree), then tasks started the way the ECS agent starts
them, in cgroups made after boot. What runs here is the kernel's netfilter and cgroup code with
the script's real iptables commands; what does not is EC2 (the hop limit), systemd (the
ExecStartPre gate is checked by file) and the ECS agent (its cgroup layout is taken from its
source: ecstasks.slice/ecstasks-<task>.slice)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stacks.batch import HOST_ISOLATION_SCRIPT
from tests.infra.hostnet import Instance, missing_prerequisites, reached, urls

pytestmark = pytest.mark.slow

_MISSING = missing_prerequisites()
if _MISSING is not None:
    pytest.skip(f"host isolation runs in network namespaces: {_MISSING}", allow_module_level=True)

# The user data before this script (stacks/batch.py until it): rules added at boot for a cgroup
# (ecstasks.slice) that the ECS agent creates only later, without `set -e`.
OLD_USER_DATA = """#!/bin/bash
echo ECS_ENABLE_SPOT_INSTANCE_DRAINING=true >> /etc/ecs/ecs.config
echo ECS_AWSVPC_BLOCK_IMDS=true >> /etc/ecs/ecs.config
iptables --insert OUTPUT 1 --destination 169.254.169.254/32 --match cgroup --path ecstasks.slice --jump DROP
ip6tables --insert OUTPUT 1 --destination fd00:ec2::254/128 --match cgroup --path ecstasks.slice --jump DROP
iptables --insert FORWARD 1 --in-interface docker+ --destination 169.254.169.254/32 --jump DROP
"""
AGENT = "system.slice/docker-ecsagent.scope"
EVERYTHING = ("imds", "imds_v6", "vpc", "agent_api", "agent_api_v6", "agent_api_host_address", "credentials")


@pytest.fixture
def instance(tmp_path: Path) -> Iterator[Instance]:
    with Instance(tmp_path) as made:
        yield made


def _boot_and_start(instance: Instance, script: str | Path) -> None:
    booted = instance.boot(script)
    assert booted.returncode == 0, booted.stderr
    instance.start_docker()
    instance.start_agent()


def test_a_task_started_after_boot_reaches_neither_imds_nor_the_agents_api(instance: Instance) -> None:
    # Given an instance booted with the user data, then Docker and the ECS agent started
    booted = instance.boot(HOST_ISOLATION_SCRIPT)
    assert booted.returncode == 0, booted.stderr
    instance.start_docker()
    instance.start_agent()
    # When the agent starts a task (its cgroup made only now)
    task = instance.start_task()
    # Then the task reaches the network and its own credentials, but not IMDS or the agent's API
    seen = instance.probe(task, urls(*EVERYTHING))
    assert reached(seen) == {"vpc", "credentials"}, seen
    # While the ECS agent (system.slice) keeps IMDS and its own API
    assert reached(instance.probe(AGENT, urls(*EVERYTHING))) == set(EVERYTHING)


def test_a_bridge_mode_container_cannot_reach_imds(instance: Instance) -> None:
    _boot_and_start(instance, HOST_ISOLATION_SCRIPT)
    namespace, cgroup = instance.start_bridge_container()
    seen = instance.probe(cgroup, urls("imds", "vpc"), netns=namespace)
    assert reached(seen) == {"vpc"}, seen


def test_the_old_user_data_let_a_task_reach_imds(instance: Instance) -> None:
    # The rule for ecstasks.slice is refused at boot (the cgroup does not exist yet) and the
    # script carries on: the task started later reaches IMDS and the agent's API.
    booted = instance.boot(OLD_USER_DATA)
    assert booted.returncode == 0
    assert "RULE_INSERT failed" in booted.stderr or "Invalid argument" in booted.stderr
    instance.start_docker()
    instance.start_agent()
    task = instance.start_task()
    seen = instance.probe(task, urls("imds", "imds_v6", "agent_api"))
    assert reached(seen) == {"imds", "imds_v6", "agent_api"}, seen


@pytest.mark.parametrize("script", ["old", "new"])
def test_only_the_new_user_data_closes_imds_to_tasks(instance: Instance, script: str) -> None:
    _boot_and_start(instance, OLD_USER_DATA if script == "old" else HOST_ISOLATION_SCRIPT)
    seen = instance.probe(instance.start_task(), urls("imds"))
    assert (reached(seen) == {"imds"}) == (script == "old"), seen


def test_the_rules_hold_for_every_task_and_survive_the_agents_restart(instance: Instance) -> None:
    _boot_and_start(instance, HOST_ISOLATION_SCRIPT)
    tasks = [instance.start_task() for _ in range(3)]
    for task in tasks:
        assert reached(instance.probe(task, urls("imds", "agent_api"))) == set()
    # The agent's unit checks the rules before each start: they are there.
    verify = instance.boot(instance.written("/usr/local/sbin/spotline-host-isolation"), "--verify")
    assert verify.returncode == 0, verify.stderr


def test_an_instance_whose_rules_cannot_be_applied_never_gets_credentials(instance: Instance) -> None:
    # Given a kernel (or iptables) without the cgroup match
    booted = instance.boot(HOST_ISOLATION_SCRIPT, fail_on="cgroup")
    # Then the user data fails, loudly
    assert booted.returncode != 0
    assert "IMDS stays closed" in booted.stderr
    # And IMDS stays closed to every process, the ECS agent's included: it cannot get the
    # instance's credentials to register, so the instance never joins the cluster
    instance.start_agent()
    assert reached(instance.probe(AGENT, urls("imds", "imds_v6"))) == set()
    assert reached(instance.probe(instance.start_task(), urls("imds", "imds_v6"))) == set()
    # And the agent's unit refuses to start: its ExecStartPre check fails
    drop_in = instance.written("/etc/systemd/system/ecs.service.d/10-spotline-host-isolation.conf")
    assert drop_in.read_text() == "[Service]\nExecStartPre=/usr/local/sbin/spotline-host-isolation --verify\n"
    assert "daemon-reload" in instance.systemctl_log.read_text()
    verify = instance.boot(instance.written("/usr/local/sbin/spotline-host-isolation"), "--verify")
    assert verify.returncode != 0


def test_the_agent_configuration_keeps_tasks_in_their_own_cgroups(instance: Instance) -> None:
    _boot_and_start(instance, HOST_ISOLATION_SCRIPT)
    config = instance.written("/etc/ecs/ecs.config").read_text().splitlines()
    # Tasks under ecstasks.slice (not Docker's default system.slice), awsvpc tasks without IMDS,
    # Spot instances drained on the interruption warning.
    assert {
        "ECS_ENABLE_TASK_CPU_MEM_LIMIT=true",
        "ECS_AWSVPC_BLOCK_IMDS=true",
        "ECS_ENABLE_SPOT_INSTANCE_DRAINING=true",
    } <= set(config)


def test_tasks_on_one_instance_share_its_network(instance: Instance) -> None:
    # Why teams get instances of their own (`team_instances`, docs/security.md): in host network
    # mode a task reaches another task's loopback service on the same instance, and, with
    # Docker's default CAP_NET_RAW, reads another task's credentials off the loopback as the
    # ECS agent hands them over. The boot script's rules are in place; they cannot stop either.
    booted = instance.boot(HOST_ISOLATION_SCRIPT)
    assert booted.returncode == 0, booted.stderr
    instance.start_docker()
    instance.start_agent(credentials='{"SecretAccessKey": "team-a-secret"}')
    neighbour_port = 29500
    instance.start_task(port=neighbour_port)
    seen = instance.probe(instance.start_task(), {"neighbour": f"http://127.0.0.1:{neighbour_port}/"})
    assert reached(seen) == {"neighbour"}, seen
    # Team B's task listens on the loopback while team A's task fetches its role's credentials
    sniffer = instance.sniffer(instance.start_task(), needle="team-a-secret")
    assert reached(instance.probe(instance.start_task(), urls("credentials"))) == {"credentials"}
    captured, _ = sniffer.communicate(timeout=30)
    assert "captured" in captured
