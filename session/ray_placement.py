"""Where ``bench --ray`` puts its shards' actors (``--ray-placement``), checked before a run.

* ``cpu`` (the default): one CPU per actor, as few nodes as the actors fit on (a Ray
  placement group with the ``PACK`` strategy): the shards stay close together.
* ``node``: one actor per node (``STRICT_SPREAD``): each shard has a host, its network
  interface and its cores to itself, for a fleet no single host can load.

The actors' CPUs are reserved as one placement group before any actor starts, so a run
never starts half its shards. Whether the cluster can hold them is checked before the
run directory is written: more shards than nodes with ``node`` (or than CPUs) is bad
input, one line naming the flag and the fix.
"""

from __future__ import annotations

from typing import Any

from workloads.errors import InputError

#: ``--ray-placement`` values and the placement group strategy of each.
PLACEMENTS = {"cpu": "PACK", "node": "STRICT_SPREAD"}
DEFAULT_PLACEMENT = "cpu"
#: How long the cluster gets to reserve the actors' CPUs.
RESERVE_TIMEOUT_S = 60.0


def require_ray() -> Any:
    """The ``ray`` module, or an ``InputError`` saying how to get it."""
    try:
        import ray
    except ImportError:
        raise InputError(
            "--ray", "needs the ray package", "pip install 'prefillscope[ray]'"
        ) from None
    return ray


def check_flags(address: str | None, placement: str | None) -> None:
    """``--ray`` usable (the package is installed) and ``--ray-placement`` known and only
    with ``--ray``; before anything starts."""
    if address is None:
        if placement is not None:
            raise InputError(
                "--ray-placement", "places Ray actors", "add --ray auto or drop --ray-placement"
            )
        return
    require_ray()
    if placement is not None and placement not in PLACEMENTS:
        raise InputError(
            "--ray-placement", f"unknown placement {placement!r}", f"use {' or '.join(PLACEMENTS)}"
        )


def connect(address: str) -> Any:
    """The ``ray`` module, connected to the cluster at ``address`` (``local``: one
    started here for the run)."""
    ray = require_ray()
    if not ray.is_initialized():
        try:
            ray.init(address=None if address == "local" else address)
        except ConnectionError as exc:  # no cluster there
            reason = str(exc).split(". ")[0]
            raise InputError(
                "--ray",
                f"{address}: {reason}",
                "start one (ray start --head), give its address, or use --ray local",
            ) from None
    return ray


def check_cluster(address: str, placement: str | None, shards: int) -> None:
    """``InputError`` when the cluster cannot hold ``shards`` actors as placed."""
    ray = connect(address)
    nodes = [n for n in ray.nodes() if n.get("Alive") and n["Resources"].get("CPU", 0) >= 1]
    if (placement or DEFAULT_PLACEMENT) == "node" and shards > len(nodes):
        raise InputError(
            "--ray-placement",
            f"node puts each of the {shards} shards on a node of its own, and the cluster "
            f"has {len(nodes)} node{'s' if len(nodes) != 1 else ''} with a CPU",
            f"pass --workers {len(nodes)} or use --ray-placement cpu",
        )
    cpus = int(sum(n["Resources"]["CPU"] for n in nodes))
    if shards > cpus:
        raise InputError(
            "--workers",
            f"{shards} shards need a CPU each and the Ray cluster has {cpus}",
            f"pass --workers {cpus} or fewer",
        )


def reserve(ray: Any, placement: str | None, shards: int) -> Any:
    """A ready placement group of one CPU per shard, placed as asked."""
    from ray.util.placement_group import placement_group, remove_placement_group

    strategy = PLACEMENTS[placement or DEFAULT_PLACEMENT]
    group = placement_group([{"CPU": 1}] * shards, strategy=strategy)
    if not group.wait(RESERVE_TIMEOUT_S):
        remove_placement_group(group)
        raise RuntimeError(
            f"the Ray cluster did not reserve {shards} CPUs ({strategy}) "
            f"within {RESERVE_TIMEOUT_S:g} s"
        )
    return group


def in_bundle(group: Any, index: int) -> Any:
    """The scheduling strategy that puts an actor in bundle ``index`` of ``group``."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index)


def release(group: Any) -> None:
    from ray.util.placement_group import remove_placement_group

    remove_placement_group(group)
