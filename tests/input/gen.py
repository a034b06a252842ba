"""Generator of malformed inventories: each case is one change to a copy of ``inventory/lab``.

A :class:`Case` names the file it breaks and the key the error must name. Values come from a pool
of wrong types, out-of-range numbers and shell payloads (each payload would create
:data:`MARKER` if a shell ran it), applied to every fabtune setting whose category refuses them;
structural cases break the files themselves (bytes, YAML shape, group tree, vars file layout).
Deterministic: the same cases in the same order on every run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml

#: the file a shell payload would create (relative to the node shell's working folder)
MARKER = "PWNED_MARKER"

PAYLOADS = [f"1;touch {MARKER}", f"$(touch {MARKER})", f"`touch {MARKER}`", f"x\ntouch {MARKER}",
            f"1 && touch {MARKER}", f"a|touch {MARKER}", f"'; touch {MARKER}; '"]
#: values wrong for every category below except where ``VALID`` says otherwise
POOL: list[Any] = [True, False, None, 22.5, -1, 10**20, "", " ", "../../x", "/abs", [1], {"a": 1},
                   "0-99999999", "\u2028", "é" * 70] + PAYLOADS
#: category -> predicate of the pool values that are valid there (so they are not cases)
VALID: dict[str, Callable[[Any], bool]] = {
    "bool": lambda v: isinstance(v, bool),
    "optional": lambda v: v is None,
    "optional_int": lambda v: v is None,  # an int or null ("leave it alone": mtu)
    "sysctl_value": lambda v: v in (-1, "0-99999999"),
    "name": lambda v: v == "0-99999999",  # a valid interface, user or DNS name (if not an existing one)
    "path": lambda v: v in ("../../x", "/abs", "0-99999999"),
    "optional_path": lambda v: v is None or v in ("../../x", "/abs", "0-99999999"),
    "sysroot": lambda v: v in ("/abs", "0-99999999"),
}

G, S, A, H, N1, L1 = ("group_vars/gpu_nodes.yml", "group_vars/switches.yml", "group_vars/all.yml",
                      "hosts.yaml", "host_vars/node01.yml", "host_vars/leaf01.yml")
#: (file, path inside it, category)
LOCATIONS: list[tuple[str, tuple, str]] = [
    (G, ("mtu",), "optional_int"), (G, ("nic_qos", "trust"), "enum"), (G, ("nic_qos", "pfc_priority"), "int"),
    (G, ("nic_qos", "ecn"), "bool"), (G, ("nic_qos", "roce_dscp"), "int"), (G, ("nic_qos", "cnp_dscp"), "int"),
    (G, ("nic_qos", "cnp_priority"), "int"), (G, ("sysctl",), "mapping"), (G, ("irq_affinity",), "enum"),
    (G, ("sysctl", "kernel.numa_balancing"), "sysctl_value"), (G, ("fabtune_sysroot",), "sysroot"),
    (N1, ("irq_cpus",), "optional"), (N1, ("nics",), "list"),
    (N1, ("nics", 0, "netdev"), "name"), (N1, ("nics", 0, "rdma_device"), "name"), (N1, ("nics", 0, "rail"), "int"),
    (N1, ("nics", 0, "ipv4"), "ipv4"), (N1, ("nics", 0, "switch"), "name"), (N1, ("nics", 0, "switch_port"), "name"),
    (S, ("platform",), "enum"), (S, ("port_mtu",), "int"), (S, ("roce", "mode"), "enum"),
    (S, ("roce", "pfc_priority"), "int"), (S, ("roce", "trust"), "enum"), (S, ("roce", "lossless_tc"), "int"),
    (S, ("roce", "dscp_to_switch_priority"), "mapping"), (S, ("roce", "cnp_priority"), "int"),
    (S, ("roce", "ecn_min_bytes"), "int"), (S, ("roce", "ecn_probability"), "int"),
    (L1, ("ports",), "list"), (L1, ("port_mtu_overrides",), "mapping"),
    (H, ("all", "children", "gpu_nodes", "hosts", "node01", "ansible_host"), "name"),
    (H, ("all", "children", "gpu_nodes", "hosts", "node01", "ansible_port"), "int"),
    (H, ("all", "children", "gpu_nodes", "hosts", "node01", "ansible_user"), "name"),
    (A, ("fabtune_ssh_key_file",), "optional_path"), (A, ("fabtune_known_hosts_file",), "optional_path"),
    (A, ("ansible_become",), "bool"), (A, ("ansible_become_user",), "name"),
]


@dataclass
class Case:
    """One malformed inventory: ``apply(inv)`` breaks a lab copy; the error must name ``file`` and
    start its key with ``key`` (None: any key)."""

    name: str
    file: str
    key: str | None
    apply: Callable[[Path], None]


def _set(data: Any, path: tuple, value: Any) -> None:
    for part in path[:-1]:
        data = data[part]
    data[path[-1]] = value


def _value_case(rel: str, path: tuple, value: Any, i: int) -> Case:
    def apply(inv: Path) -> None:
        data = yaml.safe_load((inv / rel).read_text()) or {}
        _set(data, path, value)
        (inv / rel).write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))

    key = ".".join(str(p) for p in (path[5:] if rel == H else path))
    if key == "sysctl.kernel.numa_balancing":
        key = "sysctl"
    return Case(f"{rel}:{key}={value!r}#{i}", rel, key, apply)


def _key_case(rel: str, path: tuple, bad_key: Any, value: Any, key: str, i: int) -> Case:
    def apply(inv: Path) -> None:
        data = yaml.safe_load((inv / rel).read_text()) or {}
        _set(data, path, {bad_key: value})
        (inv / rel).write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))

    return Case(f"{rel}:{key}[{bad_key!r}]#{i}", rel, key, apply)


def _text_case(rel: str, text: str | bytes, key: str | None, name: str) -> Case:
    def apply(inv: Path) -> None:
        (inv / rel).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            (inv / rel).write_bytes(text)
        else:
            (inv / rel).write_text(text)

    return Case(name, rel, key, apply)


def value_cases() -> Iterator[Case]:
    """Every pool value at every location where it is wrong."""
    i = 0
    for rel, path, cat in LOCATIONS:
        for value in POOL:
            if VALID.get(cat, lambda v: False)(value):
                continue
            i += 1
            yield _value_case(rel, path, value, i)


def key_cases() -> Iterator[Case]:
    """Bad names used as mapping keys: sysctl names, port overrides, DSCP map entries."""
    bad = PAYLOADS + ["", "a b", "/proc/x", "kernel..x", ".kernel", 5, True, "kernel.x/y", "net"]
    i = 0
    for k in bad:
        i += 1
        yield _key_case(G, ("sysctl",), k, 1, "sysctl", i)
    for k in PAYLOADS + ["eth0", "swp1-9999999", 5, "", "swp1 swp2"]:
        i += 1
        yield _key_case(L1, ("port_mtu_overrides",), k, 9216, "port_mtu_overrides", i)
    for k in ["26", 64, -1, True, "x"]:
        i += 1
        yield _key_case(S, ("roce", "dscp_to_switch_priority"), k, 3, "roce", i)


def _hosts(body: str) -> str:
    return "all:\n  children:\n" + body


STRUCTURE: list[tuple[str, str | bytes, str | None]] = [
    (H, b"all: \xff\xfe\n", "byte"), (H, "", "-"), (H, "[]\n", "-"), (H, "just a string\n", "-"),
    (H, "all: [1]\n", "all"), (H, "all:\n  hosts: [node01]\n", "all.hosts"),
    (H, "all:\n  children: [gpu_nodes]\n", "all.children"),
    (H, _hosts("    gpu_nodes:\n      hosts:\n        node01: [1]\n"), "all.children.gpu_nodes.hosts.node01"),
    (H, _hosts("    gpu_nodes:\n      hosts:\n        node01: text\n"), "all.children.gpu_nodes.hosts.node01"),
    (H, _hosts("    gpu_nodes:\n      hosts:\n        123: {}\n"), "all.children.gpu_nodes.hosts.123"),
    (H, _hosts("    gpu_nodes:\n      hosts:\n        ../../x: {}\n"), "all.children.gpu_nodes.hosts"),
    (H, _hosts("    gpu_nodes:\n      hosts:\n        /abs: {}\n"), "all.children.gpu_nodes.hosts"),
    (H, _hosts("    gpu_nodes:\n      hosts:\n        node[01:04]: {}\n"), "all.children.gpu_nodes.hosts"),
    (H, _hosts("    gpu_nodes:\n      hosts:\n        'node01;touch x': {}\n"), "all.children.gpu_nodes.hosts"),
    (H, _hosts("    gpu_nodes:\n      host: {}\n"), "all.children.gpu_nodes.host"),
    (H, _hosts("    gpu_nodes:\n      vars: [1]\n"), "all.children.gpu_nodes.vars"),
    (H, _hosts("    gpu_nodes: [1]\n"), "all.children.gpu_nodes"),
    (H, "all: &a\n  children:\n    g: *a\n", "line"),
    (H, _hosts("    g:\n      children:\n        g2:\n          children:\n            g: {}\n"), "g2.children.g"),
    (H, _hosts("    g:\n      children:\n        all: {}\n"), "all.children.g.children.all"),
    (H, "all:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(80)), "line"),
    (H, "all:\n  children:\n  children:\n", "children"),
    (H, "all:\n\tchildren:\n", "line"),
    (H, _hosts("    gpu_nodes:\n      hosts:\n        node01: {ansible_port: 22101, 1: x}\n"),
     "all.children.gpu_nodes.hosts.node01.1"),
]
for _rel in (G, S, A, N1, L1):
    STRUCTURE += [(_rel, b"mtu: 9000\nx: \xc3\x28\n", "byte"), (_rel, "mtu: 9000\nmtu: 9000\n", "mtu"),
                  (_rel, "- 1\n- 2\n", "-"), (_rel, "a: [\n", "line"), (_rel, "a: 'x\x00'\n", None),
                  (_rel, "a: &a [*a]\n", "line"), (_rel, "a:" + " [" * 100 + " ]" * 100 + "\n", None),
                  (_rel, "a: &a [1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b]\n"
                         "d: &d [*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d]\nf: [*e,*e,*e,*e,*e,*e]\n",
                   "line")]
STRUCTURE += [("group_vars/gpu-nodes.yml", "mtu: 9000\n", "-"), ("host_vars/node09.yml", "mtu: 9000\n", "-"),
              ("host_vars/node01.yaml", "mtu: 4200\n", "-"), ("host_vars/node01", "mtu: 4200\n", "-")]


def _folder_case(rel: str, extra: str, text: str, key: str | None, name: str) -> Case:
    """Move ``rel`` into the folder form (``group_vars/gpu_nodes/main.yml``) and add a broken ``extra``."""
    def apply(inv: Path) -> None:
        folder = (inv / rel).with_suffix("")
        folder.mkdir()
        (inv / rel).rename(folder / "main.yml")
        (folder / extra).write_text(text)

    return Case(name, str(Path(rel).with_suffix("") / extra), key, apply)


def structure_cases() -> Iterator[Case]:
    """Broken files: bytes, YAML, shapes, group trees, vars file layout."""
    for i, (rel, text, key) in enumerate(STRUCTURE):
        case = _text_case(rel, text, key, f"structure#{i}:{rel}")
        if rel == "host_vars/node01":  # Ansible reads this one; the error names the one it ignores
            case.file = N1
        yield case
    for rel in (G, S, N1):
        yield _folder_case(rel, "extra.yml", "a: [\n", "line", f"folder:{rel}:yaml")
        yield _folder_case(rel, "extra.yml", "mtu: 1\nmtu: 2\n", "mtu", f"folder:{rel}:dup")
        yield _folder_case(rel, "zz.yml", "mtu: true\nport_mtu: true\nports: true\n", None, f"folder:{rel}:type")


def cross_cases() -> Iterator[Case]:
    """Values each valid alone, refused together (duplicates across NICs or hosts, QoS rules)."""
    specs = [(N1, ("nics", 1, "netdev"), "enp12s0np0", "nics"), (N1, ("nics", 1, "rdma_device"), "mlx5_0", "nics"),
             (N1, ("nics", 1, "ipv4"), "10.0.0.2/24", "nics.0.ipv4"),
             (H, ("all", "children", "gpu_nodes", "hosts", "node02", "ansible_port"), 22101, "ansible_host"),
             (G, ("nic_qos", "cnp_dscp"), 26, "nic_qos.cnp_dscp"), (G, ("nic_qos", "cnp_priority"), 3, "nic_qos.cnp_priority"),
             (G, ("nic_qos", "pfc_priority"), 4, "nic_qos.pfc_priority"), (G, ("nic_qos", "trust"), "pcp", "nic_qos.trust"),
             (G, ("mtu",), 9216, "port_mtu"), (S, ("roce", "dscp_to_switch_priority"), {26: 0, 48: 6}, "roce"),
             (N1, ("nics", 0, "switch_port"), "swp77", "nics.0.switch_port"),
             (N1, ("nics", 0, "switch"), "leaf09", "nics.0.switch"), (G, ("pfc_priorty",), 3, "pfc_priorty")]
    for i, (rel, path, value, key) in enumerate(specs):
        case = _value_case(rel, path, value, i)
        case.key = key
        case.file = S if key in ("port_mtu", "roce") else "host_vars/node02.yml" if key == "nics.0.ipv4" else rel
        yield case


def all_cases() -> list[Case]:
    """Every generated case (over 500)."""
    return [*value_cases(), *key_cases(), *structure_cases(), *cross_cases()]
