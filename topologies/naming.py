"""The one place where fabric names, DPIDs, ports, MACs and IPs are decided.

The controller, the runner and the analysis all rely on these rules; nobody
re-derives them. With S spines, L leaves and H hosts per leaf (1-based indices):

=========  ======================  ======================  ==========================
node       name                    DPID (16 hex digits)    addresses
=========  ======================  ======================  ==========================
spine j    ``sp{j}``               ``0x0001_0000_0000_00jj`` -
leaf i     ``lf{i}``               ``0x0002_0000_0000_00ii`` -
host       ``h{n}``, n = (i-1)·H+k  -                      IP ``10.0.{i}.{k}/16``,
                                                           MAC ``02:00:00:00:{i:02x}:{k:02x}``
=========  ======================  ======================  ==========================

Ports (fixed, so the controller needs no discovery):

- leaf i, port k (1..H)      -> host k of leaf i (interface ``lf{i}-eth{k}``)
- leaf i, port H + j         -> spine j          (interface ``lf{i}-eth{H+j}``)
- spine j, port i            -> leaf i           (interface ``sp{j}-eth{i}``)
- host, port 0 / ``h{n}-eth0`` -> its leaf

All names are short enough for Linux's 15-character interface names. The ``02:``
MAC prefix is a locally administered unicast address. The 10.0.0.0/16 addresses exist
only inside the emulated hosts' network namespaces.
"""
from __future__ import annotations

MAX_SPINES = 99
MAX_LEAVES = 99
MAX_HOSTS_PER_LEAF = 99  # keeps lf{i}-eth{H+S} within 15 characters and k within one octet
SUBNET = "10.0.0.0/16"
PREFIX_LEN = 16
SPINE_DPID_BASE = 0x0001_0000_0000_0000
LEAF_DPID_BASE = 0x0002_0000_0000_0000
OUR_NAME_PATTERN = r"^(sp|lf)\d+(-eth\d+)?$|^h\d+(-eth\d+)?$"


def spine_name(j: int) -> str:
    return f"sp{j}"


def leaf_name(i: int) -> str:
    return f"lf{i}"


def host_index(leaf: int, k: int, hosts_per_leaf: int) -> int:
    """Global 1-based host number of host k (1-based) on leaf i (1-based)."""
    return (leaf - 1) * hosts_per_leaf + k


def host_name(leaf: int, k: int, hosts_per_leaf: int) -> str:
    return f"h{host_index(leaf, k, hosts_per_leaf)}"


def host_position(n: int, hosts_per_leaf: int) -> tuple[int, int]:
    """(leaf, k) of global host number n; inverse of host_index."""
    return (n - 1) // hosts_per_leaf + 1, (n - 1) % hosts_per_leaf + 1


def spine_dpid(j: int) -> int:
    return SPINE_DPID_BASE + j


def leaf_dpid(i: int) -> int:
    return LEAF_DPID_BASE + i


def dpid_str(dpid: int) -> str:
    """The 16-hex-digit form Mininet and OVS take (``other_config:datapath-id``)."""
    return f"{dpid:016x}"


def host_ip(leaf: int, k: int) -> str:
    return f"10.0.{leaf}.{k}"


def host_mac(leaf: int, k: int) -> str:
    return f"02:00:00:00:{leaf:02x}:{k:02x}"


def leaf_host_port(k: int) -> int:
    """Leaf port facing its host k."""
    return k


def leaf_uplink_port(j: int, hosts_per_leaf: int) -> int:
    """Leaf port facing spine j."""
    return hosts_per_leaf + j


def spine_downlink_port(i: int) -> int:
    """Spine port facing leaf i."""
    return i


def intf_name(node: str, port: int) -> str:
    return f"{node}-eth{port}"
