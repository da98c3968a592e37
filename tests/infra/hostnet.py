"""An emulated GPU instance for the host-isolation tests, built of network namespaces and cgroups.

Everything lives in throwaway namespaces: the "host" network namespace (where the user data's
iptables rules go, so the machine's own rules are never touched), a namespace behind it holding
a fake instance metadata service on 169.254.169.254 and fd00:ec2::254, and a cgroup subtree that
plays the instance's cgroup v2 root (`system.slice` for the OS and the ECS agent; ECS tasks under
`ecstasks.slice`, created after boot the way the ECS agent creates them).

The boot script runs as cloud-init runs user data: in `system.slice/cloud-final.service`, in a
cgroup namespace rooted at the instance's subtree (so its `--path system.slice` names the
instance's cgroup) and a mount namespace where `/sys/fs/cgroup` is that root and `/etc` and
`/usr/local` are overlays on a temporary directory (what it writes stays there). `systemctl` is a
stub that records its arguments (no systemd here).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

HOST_ADDRESS = "10.0.2.15"
GATEWAY = "10.0.2.1"
IMDS_V4 = "169.254.169.254"
IMDS_V6 = "fd00:ec2::254"
CREDENTIALS_ENDPOINT = "169.254.170.2"
AGENT_API_PORT = 51678
CREDENTIALS_PROXY_PORT = 51679
BRIDGE_GATEWAY = "172.17.0.1"

_COUNTER = itertools.count()

# A tiny HTTP server: answers every GET/PUT with 200 and a body naming it; prints "ready" once bound.
_SERVER = textwrap.dedent(
    """
    import socket, sys
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    host, port, name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    class Handler(BaseHTTPRequestHandler):
        def _answer(self):
            body = name.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        do_GET = do_PUT = _answer
        def log_message(self, *args):
            pass
    class Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        def server_bind(self):
            if self.address_family == socket.AF_INET6:
                self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            super().server_bind()
    server = Server((host, port), Handler)
    print("ready", flush=True)
    server.serve_forever()
    """
)

# Tries each URL (PUT for IMDS's token, GET otherwise) and prints {name: what happened}.
_PROBE = textwrap.dedent(
    """
    import json, sys, urllib.request
    results = {}
    for name, url in json.loads(sys.argv[1]).items():
        method = "PUT" if url.endswith("/api/token") else "GET"
        request = urllib.request.Request(url, method=method)
        try:
            with urllib.request.urlopen(request, timeout=3) as response:
                results[name] = "reached " + response.read().decode()
        except Exception as error:
            reason = getattr(error, "reason", error)
            results[name] = f"blocked ({type(reason).__name__}: {reason})"
    print(json.dumps(results))
    """
)


# Captures packets on the loopback interface for a few seconds; prints "listening" when ready,
# then "captured" if any packet held the needle (argv[1]).
_SNIFF = textwrap.dedent(
    """
    import socket, sys, time
    needle = sys.argv[1].encode()
    sniffer = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    sniffer.bind(("lo", 0))
    sniffer.settimeout(0.2)
    print("listening", flush=True)
    deadline = time.time() + float(sys.argv[2])
    while time.time() < deadline:
        try:
            packet = sniffer.recv(65535)
        except TimeoutError:
            continue
        if needle in packet:
            print("captured", flush=True)
            break
    """
)
# Docker's default capabilities (a container's, unless its task definition adds or drops some).
DOCKER_DEFAULT_CAPABILITIES = (
    "chown,dac_override,fowner,fsetid,kill,setgid,setuid,setpcap,net_bind_service,net_raw,"
    "sys_chroot,mknod,audit_write,setfcap"
)


def missing_prerequisites() -> str | None:
    """Why these tests cannot run here (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces and cgroups need root"
    for tool in ("ip", "iptables", "ip6tables", "nsenter", "unshare", "curl"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (`make test` installs iptables, iproute2 and curl)"
    probe = f"slprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` is unavailable here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], check=False)
    if cgroup2_mount() is None:
        return "no cgroup v2 hierarchy is mounted"
    return None


def cgroup2_mount() -> Path | None:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split(" - ")
        if len(fields) == 2 and fields[1].split()[0] == "cgroup2":
            return Path(fields[0].split()[4])
    return None


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


@dataclass
class Instance:
    """One emulated instance. Use as a context manager: everything is removed on exit."""

    workdir: Path
    name: str = field(default_factory=lambda: f"sl{os.getpid() % 100000}x{next(_COUNTER)}")
    processes: list[subprocess.Popen[str]] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        mount = cgroup2_mount()
        assert mount is not None
        self.cgroup_root = mount / f"spotline-test-{self.name}"
        self.host = f"{self.name}-host"
        self.imds = f"{self.name}-imds"
        self.upper = self.workdir / "upper"
        self.stubs = self.workdir / "stubs"
        self.systemctl_log = self.workdir / "systemctl.log"

    # --- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> Instance:
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _build(self) -> None:
        for ns in (self.host, self.imds):
            _run("ip", "netns", "add", ns)
            self.namespaces.append(ns)
            _run("ip", "-n", ns, "link", "set", "lo", "up")
        _run(
            "ip",
            "-n",
            self.host,
            "link",
            "add",
            "eth0",
            "type",
            "veth",
            "peer",
            "name",
            "imds0",
            "netns",
            self.imds,
        )
        for ns, device, addresses in (
            (self.host, "eth0", [f"{HOST_ADDRESS}/24", "fd00:1::2/64"]),
            (self.imds, "imds0", [f"{GATEWAY}/24", f"{IMDS_V4}/32", "fd00:1::1/64", f"{IMDS_V6}/128"]),
        ):
            for address in addresses:
                _run(
                    "ip",
                    "-n",
                    ns,
                    "addr",
                    "add",
                    address,
                    "dev",
                    device,
                    *(["nodad"] if ":" in address else []),
                )
            _run("ip", "-n", ns, "link", "set", device, "up")
        _run("ip", "-n", self.host, "route", "add", "default", "via", GATEWAY)
        _run("ip", "-n", self.host, "-6", "route", "add", f"{IMDS_V6}/128", "via", "fd00:1::1")
        self.cgroup_root.mkdir()
        for cgroup in (
            "system.slice/cloud-final.service",
            "system.slice/ecs.service",
            "system.slice/docker-ecsagent.scope",
        ):
            (self.cgroup_root / cgroup).mkdir(parents=True)
        # The fake instance metadata service, and the "VPC" beside it (the same server, 10.0.2.1).
        self.serve(self.imds, None, "::", 80, "imds")
        # The AMI's /etc/ecs (the ECS agent's config directory) and the systemctl stub.
        (self.upper / "etc" / "ecs").mkdir(parents=True)
        (self.upper / "usr-local").mkdir(parents=True)
        self.stubs.mkdir()
        stub = self.stubs / "systemctl"
        stub.write_text(f'#!/bin/sh\necho "$*" >> {self.systemctl_log}\n')
        stub.chmod(0o755)

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        if self.cgroup_root.exists():
            kill = self.cgroup_root / "cgroup.kill"
            if kill.exists():
                kill.write_text("1")
            for directory in sorted(self.cgroup_root.rglob("*"), key=lambda p: len(p.parts), reverse=True):
                if directory.is_dir():
                    _rmdir(directory)
            _rmdir(self.cgroup_root)
        for ns in self.namespaces:
            _run("ip", "netns", "del", ns, check=False)
        self.namespaces.clear()

    # --- running things "on the instance" -----------------------------------------------------
    def _enter(
        self, cgroup: str, netns: str, argv: Sequence[str], *, own_cgroupns: bool = False
    ) -> list[str]:
        """argv, run in `cgroup` (relative to the instance's root, made if missing) and `netns`."""
        directory = self.cgroup_root / cgroup
        directory.mkdir(parents=True, exist_ok=True)
        inner = ["nsenter", f"--net=/run/netns/{netns}", "--", *argv]
        if own_cgroupns:  # a container's private cgroup namespace (Docker's default on cgroup v2)
            inner = ["unshare", "--cgroup", "--", *inner]
        return ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(directory), *inner]

    def serve(self, netns: str, cgroup: str | None, host: str, port: int, name: str) -> None:
        """A long-running HTTP server named `name` (its answers' body)."""
        argv = [sys.executable, "-c", _SERVER, host, str(port), name]
        if cgroup is None:
            command = ["ip", "netns", "exec", netns, *argv]
        else:
            command = self._enter(cgroup, netns, argv)
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        self.processes.append(process)
        assert process.stdout is not None
        line = process.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(
                f"server {name} did not start: {process.stderr.read() if process.stderr else ''}"
            )

    def probe(self, cgroup: str, urls: dict[str, str], *, netns: str | None = None) -> dict[str, str]:
        """What a process in `cgroup` (in `netns`, default the host's) gets from each URL."""
        argv = self._enter(
            cgroup,
            netns or self.host,
            [sys.executable, "-c", _PROBE, json.dumps(urls)],
            own_cgroupns=cgroup.startswith("ecstasks.slice"),
        )
        done = _run(*argv)
        result: dict[str, str] = json.loads(done.stdout)
        return result

    def sniffer(self, cgroup: str, needle: str, seconds: float = 10.0) -> subprocess.Popen[str]:
        """A host-network task capturing the loopback interface with Docker's default
        capabilities (CAP_NET_RAW among them); reads "listening" before returning."""
        bounding = ",".join(f"+{c}" for c in DOCKER_DEFAULT_CAPABILITIES.split(","))
        argv = [
            "setpriv",
            f"--bounding-set=-all,{bounding}",
            "--",
            sys.executable,
            "-c",
            _SNIFF,
            needle,
            str(seconds),
        ]
        process = subprocess.Popen(
            self._enter(cgroup, self.host, argv, own_cgroupns=True),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.processes.append(process)
        assert process.stdout is not None
        if process.stdout.readline().strip() != "listening":
            raise RuntimeError(
                f"the sniffer did not start: {process.stderr.read() if process.stderr else ''}"
            )
        return process

    def iptables(self, *args: str, command: str = "iptables") -> str:
        return _run("nsenter", f"--net=/run/netns/{self.host}", "--", command, "-w", *args).stdout

    def boot(
        self, script: str | Path, *args: str, fail_on: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Runs a user-data script (a file, or its text) as cloud-init does, in the host namespace.
        `fail_on`: an `iptables` that refuses any rule containing that word (e.g. `cgroup`: a kernel
        without the cgroup match)."""
        if isinstance(script, str):
            path = self.workdir / f"user-data-{uuid.uuid4().hex[:6]}.sh"
            path.write_text(script)
            script = path
        if fail_on is not None:
            for tool in ("iptables", "ip6tables"):
                wrapper = self.stubs / tool
                real = shutil.which(tool)
                wrapper.write_text(
                    f'#!/bin/sh\ncase "$*" in *{fail_on}*)\n'
                    f'  echo "{tool}: no such match: {fail_on}" >&2; exit 2;;\nesac\n'
                    f'exec {real} "$@"\n'
                )
                wrapper.chmod(0o755)
        work = self.workdir / "overlay-work"
        mounts = " && ".join(
            [
                "mount -t cgroup2 cgroup2 /sys/fs/cgroup",
                f"mkdir -p {work}/etc {work}/usr-local",
                f"mount -t overlay overlay -o lowerdir=/etc,upperdir={self.upper}/etc,"
                f"workdir={work}/etc /etc",
                "mkdir -p /usr/local",
                f"mount -t overlay overlay -o lowerdir=/usr/local,upperdir={self.upper}/usr-local,"
                f"workdir={work}/usr-local /usr/local",
                "echo $$ > /sys/fs/cgroup/system.slice/cloud-final.service/cgroup.procs",
                f'exec env PATH={self.stubs}:"$PATH" nsenter --net=/run/netns/{self.host} -- bash "$0" "$@"',
            ]
        )
        argv = [
            "sh",
            "-c",
            'echo $$ > "$0/cgroup.procs" && exec "$@"',
            str(self.cgroup_root),
            "unshare",
            "--cgroup",
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            mounts,
            str(script),
            *args,
        ]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120)

    def written(self, path: str) -> Path:
        """Where a file the boot script wrote under /etc or /usr/local is (the overlay's upper layer)."""
        for prefix, layer in (("/etc/", "etc"), ("/usr/local/", "usr-local")):
            if path.startswith(prefix):
                return self.upper / layer / path.removeprefix(prefix)
        raise ValueError(f"{path}: the boot script writes under /etc and /usr/local only")

    # --- what Docker and the ECS agent do after boot -------------------------------------------
    def start_docker(self) -> None:
        """dockerd's bridge: docker0, forwarding, its FORWARD and NAT rules (after the user data)."""
        ns = ["ip", "-n", self.host]
        _run(*ns, "link", "add", "docker0", "type", "bridge")
        _run(*ns, "addr", "add", f"{BRIDGE_GATEWAY}/16", "dev", "docker0")
        _run(*ns, "link", "set", "docker0", "up")
        _run("ip", "netns", "exec", self.host, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        self.iptables("-P", "FORWARD", "DROP")
        if (
            subprocess.run(
                [
                    "nsenter",
                    f"--net=/run/netns/{self.host}",
                    "--",
                    "iptables",
                    "-w",
                    "-L",
                    "DOCKER-USER",
                    "-n",
                ],
                capture_output=True,
            ).returncode
            != 0
        ):
            self.iptables("-N", "DOCKER-USER")
        self.iptables("-I", "FORWARD", "1", "-j", "DOCKER-USER")
        self.iptables(
            "-A",
            "FORWARD",
            "-o",
            "docker0",
            "-m",
            "conntrack",
            "--ctstate",
            "RELATED,ESTABLISHED",
            "-j",
            "ACCEPT",
        )
        self.iptables("-A", "FORWARD", "-i", "docker0", "!", "-o", "docker0", "-j", "ACCEPT")
        self.iptables(
            "-t", "nat", "-A", "POSTROUTING", "-s", "172.17.0.0/16", "!", "-o", "docker0", "-j", "MASQUERADE"
        )

    def start_agent(self, credentials: str = "task-credentials") -> None:
        """The ECS agent (its container, in system.slice): its introspection API on every address,
        its task credentials proxy on 127.0.0.1 (answering `credentials`), and ecs-init's
        redirect of 169.254.170.2:80 to it."""
        agent = "system.slice/docker-ecsagent.scope"
        self.serve(self.host, agent, "::", AGENT_API_PORT, "ecs-agent-api")
        self.serve(self.host, agent, "127.0.0.1", CREDENTIALS_PROXY_PORT, credentials)
        self.iptables(
            "-t",
            "nat",
            "-A",
            "OUTPUT",
            "-d",
            f"{CREDENTIALS_ENDPOINT}/32",
            "-p",
            "tcp",
            "--dport",
            "80",
            "-j",
            "REDIRECT",
            "--to-ports",
            str(CREDENTIALS_PROXY_PORT),
        )

    def start_task(self, port: int | None = None) -> str:
        """A host-network-mode task as the ECS agent starts one: its cgroup made now, after boot,
        under ecstasks.slice (the agent's ecstasks-<task>.slice, Docker's docker-<id>.scope). With
        `port`, the task serves on 127.0.0.1:port. Returns the container's cgroup."""
        task = uuid.uuid4().hex
        cgroup = f"ecstasks.slice/ecstasks-{task}.slice/docker-{uuid.uuid4().hex}.scope"
        (self.cgroup_root / cgroup).mkdir(parents=True)
        if port is not None:
            self.serve(self.host, cgroup, "127.0.0.1", port, f"task-{task[:8]}")
        return cgroup

    def start_bridge_container(self) -> tuple[str, str]:
        """A bridge-mode container: its own namespace on docker0 through a veth. (netns, cgroup)."""
        index = len(self.namespaces)
        ns = f"{self.name}-c{index}"
        _run("ip", "netns", "add", ns)
        self.namespaces.append(ns)
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        _run(
            "ip",
            "-n",
            self.host,
            "link",
            "add",
            f"veth{index}",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            ns,
        )
        _run("ip", "-n", self.host, "link", "set", f"veth{index}", "master", "docker0", "up")
        _run("ip", "-n", ns, "addr", "add", f"172.17.0.{index + 2}/16", "dev", "eth0")
        _run("ip", "-n", ns, "link", "set", "eth0", "up")
        _run("ip", "-n", ns, "route", "add", "default", "via", BRIDGE_GATEWAY)
        return ns, self.start_task()


def _rmdir(path: Path) -> None:
    for _ in range(50):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:  # processes still leaving after cgroup.kill
            time.sleep(0.05)
    path.rmdir()


def urls(*names: str) -> dict[str, str]:
    """The probe's targets by name."""
    every = {
        "imds": f"http://{IMDS_V4}/latest/api/token",
        "imds_v6": f"http://[{IMDS_V6}]/latest/api/token",
        "vpc": f"http://{GATEWAY}/",
        "agent_api": f"http://127.0.0.1:{AGENT_API_PORT}/v1/metadata",
        "agent_api_v6": f"http://[::1]:{AGENT_API_PORT}/v1/metadata",
        "agent_api_host_address": f"http://{HOST_ADDRESS}:{AGENT_API_PORT}/v1/metadata",
        "credentials": f"http://{CREDENTIALS_ENDPOINT}/v2/credentials/its-own-id",
    }
    return {name: every[name] for name in names}


def reached(results: dict[str, str]) -> set[str]:
    return {name for name, outcome in results.items() if outcome.startswith("reached")}
