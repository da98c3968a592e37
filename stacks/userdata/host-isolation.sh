#!/bin/bash
# Spotline's boot script for the GPU instances (AWS Batch, ECS-optimized Amazon Linux 2023).
#
# Closes instance metadata (IMDS) and the ECS agent's introspection API to every ECS task, before
# the ECS agent starts (docs/security.md, "Host isolation"). AWS Batch runs single-node jobs in
# host network mode, so the rules tell a task from the host by cgroup: the OS's services, ecs-init
# and the ECS agent's own container live under system.slice, which exists from boot; ECS puts
# every task's containers under ecstasks.slice/ecstasks-<task>.slice, created later, so anything
# outside system.slice is treated as a task. (A cgroup match must name a cgroup that exists
# when the rule is added: the kernel refuses one for ecstasks.slice at boot.)
#
# Fails closed. IMDS is first closed to every process (the hold rule); it opens to the host only
# after every rule is in place and checked by a probe, so an instance whose rules could not be
# applied never gets the instance credentials its ECS agent needs to join the cluster. The ECS
# agent's unit also runs `--verify` before each start and refuses to start without the rules.
#
# `host-isolation.sh` applies the rules (the user data); `host-isolation.sh --verify` checks them.
# tests/infra/test_host_isolation_netns.py runs this file, as is, in network namespaces.
set -euo pipefail

readonly IMDS_V4=169.254.169.254/32
readonly IMDS_V6=fd00:ec2::254/128
readonly AGENT_API_PORT=51678
readonly HOST_CGROUP=system.slice
readonly CHAIN=SPOTLINE-TASKS
readonly HOLD=spotline-imds-hold
readonly CGROUP_MOUNT=/sys/fs/cgroup
readonly INSTALLED=/usr/local/sbin/spotline-host-isolation
readonly DROP_IN=/etc/systemd/system/ecs.service.d/10-spotline-host-isolation.conf

ipv6() { [[ -d /proc/sys/net/ipv6 ]]; }

# Closes IMDS to every process, the ECS agent included (idempotent).
hold() {
  iptables -w -C OUTPUT -d "$IMDS_V4" -m comment --comment "$HOLD" -j REJECT 2>/dev/null \
    || iptables -w -I OUTPUT 1 -d "$IMDS_V4" -m comment --comment "$HOLD" -j REJECT
  if ipv6; then
    ip6tables -w -C OUTPUT -d "$IMDS_V6" -m comment --comment "$HOLD" -j REJECT 2>/dev/null \
      || ip6tables -w -I OUTPUT 1 -d "$IMDS_V6" -m comment --comment "$HOLD" -j REJECT
  fi
}

release() {
  iptables -w -D OUTPUT -d "$IMDS_V4" -m comment --comment "$HOLD" -j REJECT
  if ipv6; then
    ip6tables -w -D OUTPUT -d "$IMDS_V6" -m comment --comment "$HOLD" -j REJECT
  fi
}

# The rules, as `iptables` arguments after the action: `<table> <chain> <rule...>`.
rules_v4() {
  echo "filter $CHAIN -d $IMDS_V4 -j REJECT"
  echo "filter $CHAIN -o lo -p tcp --dport $AGENT_API_PORT -j REJECT"
  echo "filter OUTPUT -m cgroup ! --path $HOST_CGROUP -j $CHAIN"
  # Bridge-mode containers (docker0): AWS's documented rule; Docker keeps DOCKER-USER as it is.
  echo "filter DOCKER-USER -i docker+ -d $IMDS_V4 -j REJECT"
  echo "filter FORWARD -j DOCKER-USER"
}

rules_v6() {
  echo "filter $CHAIN -d $IMDS_V6 -j REJECT"
  echo "filter $CHAIN -o lo -p tcp --dport $AGENT_API_PORT -j REJECT"
  echo "filter OUTPUT -m cgroup ! --path $HOST_CGROUP -j $CHAIN"
}

apply() {
  local command=$1 table chain rule
  while read -r table chain rule; do
    # shellcheck disable=SC2086 # a rule is several words
    "$command" -w -t "$table" -C "$chain" $rule 2>/dev/null \
      || "$command" -w -t "$table" -I "$chain" 1 $rule
  done
}

check() {
  local command=$1 table chain rule
  while read -r table chain rule; do
    # shellcheck disable=SC2086
    "$command" -w -t "$table" -C "$chain" $rule || {
      echo "spotline host isolation: missing $command -t $table $chain $rule" >&2
      return 1
    }
  done
}

# Exit status 0 when an HTTP request to IMDS (an IMDSv2 token) succeeds from this process.
imds_reachable() {
  curl --silent --output /dev/null --max-time 3 --request PUT \
    --header "X-aws-ec2-metadata-token-ttl-seconds: 60" "http://${IMDS_V4%/32}/latest/api/token"
}

# The rules work: this process (system.slice, like the ECS agent) reaches IMDS, and a process in
# a cgroup outside system.slice (as an ECS task is) does not.
probe() {
  imds_reachable || { echo "spotline host isolation: the host cannot reach IMDS" >&2; return 1; }
  local cgroup="$CGROUP_MOUNT/spotline-probe" status=0
  mkdir -p "$cgroup"
  (echo "$BASHPID" >"$cgroup/cgroup.procs" && imds_reachable) || status=$?
  rmdir "$cgroup"
  if [[ $status -eq 0 ]]; then
    echo "spotline host isolation: a process outside $HOST_CGROUP reaches IMDS" >&2
    return 1
  fi
}

verify() {
  rules_v4 | check iptables
  if ipv6; then rules_v6 | check ip6tables; fi
  if iptables -w -C OUTPUT -d "$IMDS_V4" -m comment --comment "$HOLD" -j REJECT 2>/dev/null; then
    echo "spotline host isolation: IMDS is still held (the boot script failed)" >&2
    return 1
  fi
}

if [[ ${1:-} == --verify ]]; then
  verify
  exit
fi

on_exit() {
  local status=$?
  if [[ $status -ne 0 ]]; then
    hold || true
    echo "spotline host isolation failed (status $status): IMDS stays closed, the ECS agent will not start" >&2
  fi
}
trap on_exit EXIT

hold
# The ECS agent's unit checks the rules before every start (the agent restarts on updates too).
install -D -m 0755 "$0" "$INSTALLED"
mkdir -p "$(dirname "$DROP_IN")"
printf '[Service]\nExecStartPre=%s --verify\n' "$INSTALLED" >"$DROP_IN"
systemctl daemon-reload

mkdir -p /etc/ecs
cat >>/etc/ecs/ecs.config <<'EOF'
ECS_ENABLE_SPOT_INSTANCE_DRAINING=true
ECS_AWSVPC_BLOCK_IMDS=true
ECS_ENABLE_TASK_CPU_MEM_LIMIT=true
EOF

iptables -w -N "$CHAIN"
iptables -w -L DOCKER-USER -n >/dev/null 2>&1 || iptables -w -N DOCKER-USER
# Chains first (reversed: each rule is inserted at the top).
rules_v4 | tac | apply iptables
if ipv6; then
  ip6tables -w -N "$CHAIN"
  rules_v6 | tac | apply ip6tables
fi
rules_v4 | check iptables
if ipv6; then rules_v6 | check ip6tables; fi
release
probe
verify
echo "spotline host isolation: IMDS and the ECS agent's API are closed to ECS tasks"
