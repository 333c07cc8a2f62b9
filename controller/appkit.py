"""A small helper for your own apps (``routing.policy = "app"``): the run's fabric map.

Apps that learn the topology themselves (LLDP, MAC learning) need nothing from here.
An app that wants to route the leaf–spine deliberately can ask for the map the fabric
was built from — switches with their DPIDs, hosts with IP, MAC and leaf port, and the
leaf–spine links with their ports::

    from incastlab.controller.appkit import fabric_map

    fmap = fabric_map()            # None when not started by incastlab
    if fmap is not None:
        for host in fmap.hosts:
            ...                    # host.name, host.ip, host.mac, host.leaf, host.leaf_port

The launcher puts the path of the run's ``fabric.json`` into ``INCASTLAB_FABRIC``
before it loads your apps (see incastlab.topologies.fabricmap for the fields).
"""
from __future__ import annotations

import os

from incastlab.topologies.fabricmap import FabricMap

ENV_FABRIC = "INCASTLAB_FABRIC"


def fabric_map() -> FabricMap | None:
    """The fabric map of the running experiment, or None outside one. Raises the
    map's FabricError when the file named by ``INCASTLAB_FABRIC`` cannot be read."""
    path = os.environ.get(ENV_FABRIC)
    return FabricMap.load(path) if path else None
