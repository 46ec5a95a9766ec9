"""``dgl-sni agent deploy``: the aarch64 agent and a hardened systemd unit on each BlueField DPU.

``deploy --hosts FILE [--dry-run]`` copies ``sni-agent-aarch64`` and a ``sni-agent.service``
unit to each DPU listed (``HOST [PCI [NAME]]`` per line) over scp, installs them with sudo and
enables and restarts the unit over ssh (:func:`deploy_commands`). The unit runs the agent with
the least privilege DOCA DMA allows (:data:`HARDENING`, docs/agent.md). Registered on the
command line by :mod:`dgl_sni.agent_cli`.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass


class AgentCliError(Exception):
    """A problem with a ``dgl-sni agent`` command the user must fix (exit code 2), with a
    message saying how (raised by the deploy here and by the agents' lifecycle in
    :mod:`dgl_sni.agent_cli`)."""


def _fail(message: str, code: int = 2) -> int:
    print(f"dgl-sni agent: error: {message}", file=sys.stderr)
    return code

DEFAULT_AARCH64 = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                               "dpu_agent", "bin", "sni-agent-aarch64")
DEFAULT_REMOTE_DIR = "/opt/sni-agent"
UNIT_NAME = "sni-agent.service"
DRY_RUN_STAGE = "STAGE"  # how a dry run names the local folder the unit files would be written to
_HOST = re.compile(r"^(?:[A-Za-z0-9._-]+@)?(?:[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\])$")
_PCI = re.compile(r"^(?:[0-9A-Fa-f]{4}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_REMOTE_DIR = re.compile(r"^/[A-Za-z0-9._/-]*$")


@dataclass(frozen=True)
class DpuHost:
    """One line of the hosts file: the host (as ssh reaches it), its DPU's PCI address, the agent's
    Comch service name."""

    host: str
    pci: str
    name: str = "sni-agent"
    line: int = 0


def parse_hosts(text: str, source: str = "hosts file", default_pci: str | None = None) -> list:
    """The :class:`DpuHost` of each line ``HOST [PCI [NAME]]`` (``#`` comments, blank lines
    skipped); raises :class:`AgentCliError` naming the line of the first bad one."""
    hosts, seen = [], {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{source} line {number}"
        fields = line.split()
        if len(fields) > 3:
            raise AgentCliError(f"{where}: expected 'HOST [PCI [NAME]]', got {len(fields)} fields: {line!r}")
        host, pci, name = fields[0], (fields[1] if len(fields) > 1 else default_pci), \
            (fields[2] if len(fields) > 2 else "sni-agent")
        if not _HOST.match(host):
            raise AgentCliError(f"{where}: {host!r} is not a host name or address")
        if pci is None:
            raise AgentCliError(f"{where}: no PCI address for {host}: give it on the line (HOST PCI) or with --pci")
        if not _PCI.match(pci):
            raise AgentCliError(f"{where}: {pci!r} is not a PCI address such as 03:00.0 or 0000:03:00.0")
        if not _NAME.match(name):
            raise AgentCliError(f"{where}: agent name {name!r} may hold only letters, digits, '.', '_' and '-'")
        if host in seen:
            raise AgentCliError(f"{where}: {host} is listed already on line {seen[host]} (one DPU per host: "
                                "each host gets one sni-agent unit)")
        seen[host] = number
        hosts.append(DpuHost(host, pci, name, number))
    if not hosts:
        raise AgentCliError(f"{source} lists no host (one DPU per line: HOST [PCI [NAME]])")
    return hosts


# The agent's service runs with the least privilege DOCA DMA allows (docs/agent.md): a dynamic
# user of its own; one capability, CAP_IPC_LOCK, because registering its tables for DMA pins
# their pages (beyond RLIMIT_MEMLOCK without it); of the devices only the RDMA verbs devices
# (/dev/infiniband/uverbs*, through which DOCA opens the BlueField's mlx5 functions) and of the
# sockets only AF_UNIX and AF_NETLINK (verbs finds its devices over RDMA netlink), no IP traffic
# (Comch and DMA run over PCIe). In --doca mode it writes no file: its tables are anonymous memory,
# its log the journal.
HARDENING = (
    "DynamicUser=yes",
    "NoNewPrivileges=yes",
    "CapabilityBoundingSet=CAP_IPC_LOCK",
    "AmbientCapabilities=CAP_IPC_LOCK",
    "LimitMEMLOCK=infinity",
    "DevicePolicy=closed",
    "DeviceAllow=char-infiniband_verbs rw",
    "ProtectSystem=strict",
    "ProtectHome=yes",
    "PrivateTmp=yes",
    "PrivateMounts=yes",
    "IPAddressDeny=any",
    "ProtectKernelTunables=yes",
    "ProtectKernelModules=yes",
    "ProtectKernelLogs=yes",
    "ProtectControlGroups=yes",
    "ProtectClock=yes",
    "ProtectHostname=yes",
    "ProtectProc=invisible",
    "ProcSubset=pid",
    "RestrictNamespaces=yes",
    "RestrictRealtime=yes",
    "RestrictSUIDSGID=yes",
    "RestrictAddressFamilies=AF_UNIX AF_NETLINK",
    "LockPersonality=yes",
    "MemoryDenyWriteExecute=yes",
    "RemoveIPC=yes",
    "UMask=0077",
    "SystemCallArchitectures=native",
    "SystemCallFilter=@system-service",
    "SystemCallFilter=~@privileged @resources",
)


def unit_text(dpu: DpuHost, remote_dir: str = DEFAULT_REMOTE_DIR) -> str:
    """The systemd unit that runs the agent on ``dpu``, hardened (:data:`HARDENING`)."""
    return (
        "[Unit]\n"
        f"Description=dgl-sni agent (sni-agent) on the BlueField at {dpu.pci}\n"
        "After=network-online.target\n"
        "Wants=network-online.target\n"
        "\n"
        "[Service]\n"
        f"ExecStart={remote_dir}/sni-agent --doca --pci {dpu.pci} --name {dpu.name}\n"
        "Restart=on-failure\n"
        "RestartSec=2\n"
        + "".join(f"{line}\n" for line in HARDENING) +
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n")


def unit_path(stage: str, dpu: DpuHost) -> str:
    """Where the unit of ``dpu`` is written locally before scp."""
    return os.path.join(stage, f"sni-agent-{dpu.host}.service")


def deploy_commands(hosts: list, binary: str, stage: str, user: str | None = None, port: int | None = None,
                    remote_dir: str = DEFAULT_REMOTE_DIR) -> list:
    """Every command of a deploy, in order: ``(dpu, argv)``. Per host: scp the binary and the unit
    (from ``stage``) to the login's home, install both with sudo, reload systemd, enable and
    (re)start the agent (a redeploy replaces a running one)."""
    remote_bin, remote_unit = f"{remote_dir}/sni-agent", f"/etc/systemd/system/{UNIT_NAME}"
    install = " && ".join([
        f"sudo install -D -m 0755 sni-agent.new {shlex.quote(remote_bin)}",
        f"sudo install -D -m 0644 {UNIT_NAME}.new {shlex.quote(remote_unit)}",
        f"rm -f sni-agent.new {UNIT_NAME}.new"])
    start = " && ".join(["sudo systemctl daemon-reload", "sudo systemctl enable sni-agent",
                         "sudo systemctl restart sni-agent"])
    scp_port = ["-P", str(port)] if port else []
    ssh_port = ["-p", str(port)] if port else []
    commands = []
    for dpu in hosts:
        target = f"{user}@{dpu.host}" if user and "@" not in dpu.host else dpu.host
        commands += [
            (dpu, ["scp", *scp_port, binary, f"{target}:sni-agent.new"]),
            (dpu, ["scp", *scp_port, unit_path(stage, dpu), f"{target}:{UNIT_NAME}.new"]),
            (dpu, ["ssh", *ssh_port, target, install]),
            (dpu, ["ssh", *ssh_port, target, start]),
        ]
    return commands


def _check_aarch64(binary: str) -> str | None:
    """Why ``binary`` cannot run on the DPU's Arm cores, or None."""
    if not os.path.isfile(binary):
        return f"no aarch64 agent binary {binary}: build it with `make agent-aarch64`"
    with open(binary, "rb") as fh:
        head = fh.read(20)
    if len(head) < 20 or head[:4] != b"\x7fELF" or int.from_bytes(head[18:20], "little") != 183:  # EM_AARCH64
        return f"{binary} is not an aarch64 ELF executable: build the DPU's with `make agent-aarch64`"
    return None


def deploy(hosts_file: str, binary: str | None = None, dry_run: bool = False, user: str | None = None,
           port: int | None = None, remote_dir: str = DEFAULT_REMOTE_DIR, pci: str | None = None,
           out=sys.stdout) -> int:
    """``dgl-sni agent deploy``; returns the exit code (1: a command failed)."""
    try:
        with open(hosts_file) as fh:
            text = fh.read()
    except OSError as err:
        raise AgentCliError(f"cannot read the hosts file: {err}") from None
    if pci is not None and not _PCI.match(pci):
        raise AgentCliError(f"--pci {pci!r} is not a PCI address such as 03:00.0 or 0000:03:00.0")
    if not _REMOTE_DIR.match(remote_dir) or "//" in remote_dir or remote_dir != "/" and remote_dir.endswith("/"):
        raise AgentCliError(f"--remote-dir {remote_dir!r} must be an absolute path of letters, digits, "
                            "'.', '_', '-' and '/' (it goes into the unit's ExecStart)")
    if user is not None and not re.fullmatch(r"[A-Za-z0-9._-]+", user):
        raise AgentCliError(f"--user {user!r} is not a user name")
    if port is not None and not 0 < port < 65536:
        raise AgentCliError(f"--ssh-port {port} is not a port")
    hosts = parse_hosts(text, hosts_file, pci)
    binary = os.path.abspath(binary or DEFAULT_AARCH64)
    problem = _check_aarch64(binary)
    if dry_run:
        if problem:
            print(f"# warning: {problem}", file=out)
        print(f"# dry run: nothing is run; unit files are written to a temporary folder, {DRY_RUN_STAGE} below",
              file=out)
        for dpu in hosts:
            print(f"# {unit_path(DRY_RUN_STAGE, dpu)} ({dpu.host}, line {dpu.line}):", file=out)
            for line in unit_text(dpu, remote_dir).splitlines():
                print(f"#   {line}".rstrip(), file=out)
        for _, argv in deploy_commands(hosts, binary, DRY_RUN_STAGE, user, port, remote_dir):
            print(shlex.join(argv), file=out)
        return 0
    if problem:
        raise AgentCliError(problem)
    stage = tempfile.mkdtemp(prefix="sni-agent-deploy-")
    try:
        for dpu in hosts:
            with open(unit_path(stage, dpu), "w") as fh:
                fh.write(unit_text(dpu, remote_dir))
        done = []
        commands = deploy_commands(hosts, binary, stage, user, port, remote_dir)
        last = {dpu.host: k for k, (dpu, _) in enumerate(commands)}  # each host's final command
        for k, (dpu, argv) in enumerate(commands):
            print(f"+ {shlex.join(argv)}", file=out, flush=True)
            try:
                code = subprocess.run(argv, stdin=subprocess.DEVNULL).returncode
            except FileNotFoundError:
                raise AgentCliError(f"{argv[0]} is not installed (deploy runs ssh and scp)") from None
            if code != 0:
                left = [h.host for h in hosts if h.host not in done and h is not dpu]
                return _fail(f"deploy to {dpu.host} (hosts file line {dpu.line}) failed: `{shlex.join(argv)}` "
                             f"exited with code {code}"
                             + (f"; deployed: {', '.join(done)}" if done else "; no host was deployed")
                             + (f"; not touched: {', '.join(left)}" if left else ""), 1)
            if k == last[dpu.host]:
                done.append(dpu.host)
                print(f"{dpu.host}: sni-agent installed in {remote_dir} and started "
                      f"(--doca --pci {dpu.pci} --name {dpu.name})", file=out)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return 0


