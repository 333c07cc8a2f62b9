"""Open vSwitch's select-group selection method, encoded by hand (no os-ken import).

OVS takes a select group's hash method and fields from a Netronome experimenter
group property, NTRT_SELECTION_METHOD, carried only in OpenFlow 1.5 group mods
(Documentation/group-selection-method-property.txt in OVS; ovs-ofctl(8)
"selection_method"). os-ken has a generic experimenter group property, but its
serialize() is broken (packs a list of ints as a string and returns nothing), so the
bytes are built here and wrapped in an object os-ken's OFPGroupMod can serialize.

Layout (big-endian), padded with zeros to a multiple of 8 bytes:
    u16 type = 0xffff (OFPGPT_EXPERIMENTER)   u16 length (without the padding)
    u32 experimenter = 0x0000154d (NTR)       u32 exp_type = 1 (SELECTION_METHOD)
    u32 pad                                    char selection_method[16] (NUL padded)
    u64 selection_method_param                 the hashed fields as OXM entries
An entry is the 4-byte OXM header followed by a value that OVS reads as a mask of the
bits to hash; all ones hashes the whole field (OVS's oxm_put_field_array and
oxm_pull_field_array; ovs-ofctl writes ``fields(ip_src)`` the same way).
"""
from __future__ import annotations

import struct

NTR_VENDOR_ID = 0x0000154D
NTRT_SELECTION_METHOD = 1
OFPGPT_EXPERIMENTER = 0xFFFF
OXM_CLASS_OPENFLOW_BASIC = 0x8000

# name (as ovs-ofctl spells it) -> (OXM field number, value length in bytes)
HASH_FIELDS = {
    "eth_dst": (3, 6), "eth_src": (4, 6), "eth_type": (5, 2), "vlan_vid": (6, 2),
    "ip_proto": (10, 1), "ip_src": (11, 4), "ip_dst": (12, 4),
    "tcp_src": (13, 2), "tcp_dst": (14, 2), "udp_src": (15, 2), "udp_dst": (16, 2),
    "sctp_src": (17, 2), "sctp_dst": (18, 2),
}
DEFAULT_HASH_FIELDS = ("ip_src", "ip_dst", "ip_proto", "tcp_src", "tcp_dst")


def oxm_header(name: str) -> int:
    """The 32-bit OXM header (class, field, no mask, length) of field ``name``."""
    field, length = HASH_FIELDS[name]
    return (OXM_CLASS_OPENFLOW_BASIC << 16) | (field << 9) | length


def selection_method_property(method: str = "hash", fields=DEFAULT_HASH_FIELDS,
                              param: int = 0) -> bytes:
    """Bytes of one NTRT_SELECTION_METHOD group property (see the module docstring)."""
    name = method.encode("ascii")
    if not 1 <= len(name) <= 15:
        raise ValueError(f"selection method must be 1 to 15 characters, got {method!r}")
    unknown = [f for f in fields if f not in HASH_FIELDS]
    if unknown:
        raise ValueError(f"unknown hash fields {unknown}; allowed: {', '.join(HASH_FIELDS)}")
    oxms = b"".join(struct.pack("!I", oxm_header(f)) + b"\xff" * HASH_FIELDS[f][1]
                    for f in fields)
    length = 40 + len(oxms)
    body = struct.pack("!HHII4x16sQ", OFPGPT_EXPERIMENTER, length, NTR_VENDOR_ID,
                       NTRT_SELECTION_METHOD, name, param) + oxms
    return body + bytes(-len(body) % 8)


class SelectionMethodProp:
    """Stands in an os-ken 1.5 OFPGroupMod's ``properties`` list (it only calls
    ``serialize()``)."""

    def __init__(self, method: str = "hash", fields=DEFAULT_HASH_FIELDS, param: int = 0):
        self.method, self.fields, self.param = method, tuple(fields), param

    def serialize(self) -> bytes:
        return selection_method_property(self.method, self.fields, self.param)
