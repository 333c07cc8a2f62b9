"""topologies/placement.py: known fabric shapes and roles give known host lists, star and
leaf-spine alike; a request the fabric cannot hold gives the error the spec raises; the
module is pure (stdlib and incastlab.topologies only). Rootless and fast."""
import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from incastlab.spec import SpecError, loads_spec
from incastlab.topologies.placement import (
    FabricShape,
    Placement,
    fabric_shape,
    interfaces,
    place,
    place_jobs,
    star_senders,
)

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Ask:
    """A job's roles, as incastlab.jobs.base.Roles gives them (placement needs no job)."""

    servers: int
    workers: int
    worker_noun: str = "workers"
    server_noun: str = "PS host"
    count_field: str = "workload.workers"


def leafspine(leaves: int, per_leaf: int, spines: int = 2) -> FabricShape:
    return fabric_shape("leafspine", spines, leaves, per_leaf, None, Ask(0, 1))


def hosts(shape, roles, *args) -> tuple[tuple[str, ...], tuple[str, ...]]:
    placed, errors = place(shape, roles, *args)
    assert errors == [] and isinstance(placed, Placement)
    return placed.servers, placed.workers


def problems(shape, roles, *args) -> list[str]:
    placed, errors = place(shape, roles, *args)
    assert placed is None
    return errors


def spec_errors(*overrides) -> list[str]:
    with pytest.raises(SpecError) as info:
        loads_spec("", list(overrides))
    return info.value.errors


# --- leaf-spine -------------------------------------------------------------------------

def test_leafspine_servers_first_on_their_leaf_workers_round_robin_from_the_next():
    # 2 leaves x 2 hosts: the PS is h1 (leaf 1); workers leaf 2, leaf 1, leaf 2
    assert hosts(leafspine(2, 2), Ask(1, 3)) == (("h1",), ("h3", "h2", "h4"))
    # the PS on leaf 2: workers start on leaf 1 (h1), then leaf 2's free host (h4)
    assert hosts(leafspine(2, 2), Ask(1, 3), 2) == (("h3",), ("h1", "h4", "h2"))
    # two PS hosts fill leaf 1 of 3 x 2: workers on leaves 2, 3, 2, 3
    assert hosts(leafspine(3, 2), Ask(2, 4)) == (("h1", "h2"), ("h3", "h5", "h4", "h6"))


def test_leafspine_without_servers_starts_at_leaf_1():
    assert hosts(leafspine(3, 2), Ask(0, 4, "ring ranks")) == ((), ("h1", "h3", "h5", "h2"))
    assert hosts(leafspine(1, 4), Ask(0, 3)) == ((), ("h1", "h2", "h3"))


def test_leafspine_worker_leaves_as_given():
    assert hosts(leafspine(2, 4), Ask(1, 3), 1, [2]) == (("h1",), ("h5", "h6", "h7"))
    assert hosts(leafspine(3, 2), Ask(1, 3), 1, [3, 1]) == (("h1",), ("h5", "h2", "h6"))


def test_star_workers_first_servers_last():
    # senders not given: just enough for the job (4 workers + 1 receiver - 1 = 4)
    shape = fabric_shape("star", 2, 9, 9, None, Ask(1, 4))
    assert shape == FabricShape("star", 0, 1, 5, None)
    assert hosts(shape, Ask(1, 4)) == (("h5",), ("h1", "h2", "h3", "h4"))
    # more senders than the job uses: the receiver is still the last host
    shape = fabric_shape("star", 2, 2, 2, 6, Ask(1, 2))
    assert (shape.hosts, hosts(shape, Ask(1, 2))) == (7, (("h7",), ("h1", "h2")))
    # no servers: every host a worker; at least one sender
    ring = Ask(0, 3, "ring ranks")
    assert hosts(fabric_shape("star", 2, 2, 2, None, ring), ring) == ((), ("h1", "h2", "h3"))
    assert star_senders(None, Ask(0, 1)) == 1 and star_senders(3, Ask(0, 1)) == 3


def test_star_and_leafspine_differ_for_the_same_roles():
    roles = Ask(1, 3)
    star = fabric_shape("star", 2, 2, 2, None, roles)
    clos = fabric_shape("leafspine", 2, 2, 2, None, roles)
    assert (star.spines, star.leaves, clos.spines, clos.leaves) == (0, 1, 2, 2)
    assert hosts(star, roles) == (("h4",), ("h1", "h2", "h3"))
    assert hosts(clos, roles) == (("h1",), ("h3", "h2", "h4"))
    assert not any(name.startswith("sp") for name in interfaces(star))
    assert {"sp1-eth1", "sp2-eth2", "lf2-eth4", "h4-eth0"} <= interfaces(clos)
    assert "lf1-eth5" not in interfaces(clos) and "h5-eth0" not in interfaces(clos)


# --- requests the fabric cannot hold: the spec's errors ---------------------------------

def test_too_many_hosts_on_a_leafspine_is_the_spec_error():
    expected = ("workload.workers: 4 workers + 1 PS host need 5 hosts, but the fabric has "
                "4 (2 leaves x 2 hosts)")
    assert problems(leafspine(2, 2), Ask(1, 4)) == [expected]
    assert spec_errors("workload.workers=4") == [expected]
    assert problems(leafspine(2, 2), Ask(0, 5, "ring ranks")) == [
        "workload.workers: 5 ring ranks need 5 hosts, but the fabric has 4 (2 leaves x 2 "
        "hosts)"]


def test_too_many_hosts_on_a_star_is_the_spec_error():
    expected = ("workload.workers: 3 workers + 1 PS host need 4 hosts, but topology.senders "
                "= 2 gives 3")
    shape = fabric_shape("star", 2, 2, 2, 2, Ask(1, 3))
    assert problems(shape, Ask(1, 3)) == [expected]
    assert spec_errors("topology.kind=star", "topology.senders=2", "workload.workers=3") == [
        expected]


def test_leaves_the_fabric_lacks_are_the_spec_errors():
    assert problems(leafspine(2, 2), Ask(1, 1), 3) == [
        "workload.ps_leaf: 3 is not a leaf of this fabric (1 to 2)"]
    assert spec_errors("workload.ps_leaf=3") == problems(leafspine(2, 2), Ask(1, 1), 3)
    assert problems(leafspine(2, 2), Ask(1, 1), 1, [1, 4]) == [
        "workload.worker_leaves: 4 is not a leaf of this fabric (1 to 2)"]
    assert problems(leafspine(2, 2), Ask(1, 3), 1, [2]) == [
        "workload.worker_leaves: 3 workers do not fit on leaves 2, which have 2 free hosts"]
    assert spec_errors("workload.worker_leaves=[2]", "workload.workers=3") == problems(
        leafspine(2, 2), Ask(1, 3), 1, [2])
    assert problems(leafspine(2, 2), Ask(3, 1, server_noun="PS hosts")) == [
        "workload.shards: 3 PS hosts do not fit on leaf 1, which has 2 hosts"]
    star = fabric_shape("star", 2, 2, 2, None, Ask(1, 1))
    assert problems(star, Ask(1, 1), 2, [1, 2]) == [
        "workload.ps_leaf: 2 is not a leaf of this fabric (a star has leaf 1 only)",
        "workload.worker_leaves: [1, 2] is not \"spread\" or [1] (a star has leaf 1 only)"]
    assert spec_errors("topology.kind=star", "workload.ps_leaf=2") == problems(
        star, Ask(1, 1), 2)


def test_the_spec_places_with_this_function():
    spec = loads_spec("", ["topology.leaves=3", "topology.hosts_per_leaf=2",
                           "workload.workers=4", "workload.ps_leaf=2"])
    placed = spec.placement()
    assert (placed.servers, placed.workers) == hosts(leafspine(3, 2), Ask(1, 4), 2)
    # leaves after the PS leaf first: 3, 1, 2, then 3 again
    assert (placed.servers, placed.workers) == (("h3",), ("h5", "h1", "h4", "h6"))


# --- purity -----------------------------------------------------------------------------

def test_placement_imports_only_the_stdlib_and_topologies():
    tree = ast.parse((ROOT / "topologies" / "placement.py").read_text())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    ours = [n for n in names if n.split(".")[0] == "incastlab"]
    assert ours and all(n.startswith("incastlab.topologies") for n in ours), ours
    assert {n.split(".")[0] for n in names} <= {"incastlab", "__future__", "dataclasses",
                                               "typing"}


def test_several_jobs_packed_take_leaves_of_their_own_interleaved_share_them():
    # 2 leaves x 2 hosts: a PS job (1 server + 1 worker) and a 2-rank ring
    packed, errors = place_jobs([(1, 1), (0, 2)], ["ps", "ring"], (2, 2))
    assert errors == [] and packed == [Placement(("h1",), ("h2",)),
                                       Placement((), ("h3", "h4"))]
    shared, _ = place_jobs([(1, 1), (0, 2)], ["ps", "ring"], (2, 2), "interleaved")
    # host 1 of each leaf, then host 2 of each
    assert shared == [Placement(("h1",), ("h3",)),
                      Placement((), ("h2", "h4"))]
    # a 3-host job packed needs 2 leaves of 2: with a 1-host job first, 3 leaves in all
    placed, errors = place_jobs([(0, 1), (1, 2)], ["ring", "incast"], (2, 2))
    assert placed is None and errors == [
        "jobs: the jobs need 4 hosts (jobs[0] (ring) needs 1, jobs[1] (incast) needs 3), "
        "but the fabric has 2 leaves of 2 hosts, and packed jobs need 3 leaves (each job "
        "on its own)"]
