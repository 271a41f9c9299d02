"""The session's dry-run clusters, one per spec: every test module that asks for the same spec
(`ray_fixtures.module_cluster(SPEC)`) gets the same cluster, brought up once per process (an
xdist worker) instead of once per module, each test handed it clean (`hand_over_clean`).

A live cluster costs CPU (its head, its hosts, their monitors) that two cores cannot spare
for long, so the pool keeps a cluster only while the next test uses it (`keep_for`, after every
test); `order_by_spec` puts the modules of one spec next to each other so that holds for all of
them. A test marked `fresh_cluster` gets a cluster no test had before it, and none after it; one
marked `spends_cluster` gets the shared one, and none has it after it (both run after the other
tests of their spec).

Whatever is left is downed at the session's end (`close`), also after a failure or Ctrl-C: a
session-scoped fixture's finalizer (`cluster_pool` in conftest) runs then too; and what a
worker killed before its finalizer ended left, the controller stops (`sweep_homes`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import pytest
from homes import restore, set_home

if TYPE_CHECKING:
    from podmanager.api import Cluster

FRESH = "fresh_cluster"
FRESH_MEANS = ("on a module's shared dry-run cluster: gets a cluster of the module's spec that no other test has "
               "before or after it (for a head crash, a lost home, a damaged state)")
SPENDS = "spends_cluster"
SPENDS_MEANS = ("on a module's shared dry-run cluster: leaves it unfit for another test (downs it, announces a "
                "preemption for later): runs after the other tests of its spec, and none has the cluster after it")
# The spec of each module that shares a cluster, by the module's `cluster` fixture (what
# `module_cluster` returned): how the pool tells which cluster a collected test will use.
_SPEC_OF_FIXTURE: dict[int, str] = {}


def spec_key(spec: dict) -> str:
    return json.dumps(spec, sort_keys=True)


def register(cluster_fixture: object, spec: dict) -> None:
    """`module_cluster`'s: the module whose `cluster` fixture this is shares the spec's cluster."""
    _SPEC_OF_FIXTURE[id(cluster_fixture)] = spec_key(spec)


def spec_of(item: pytest.Item | None) -> str | None:
    """The spec (its key) of the shared cluster `item`'s module runs on, if any."""
    return _SPEC_OF_FIXTURE.get(id(getattr(getattr(item, "module", None), "cluster", None)))


def key_of(item: pytest.Item | None) -> str | None:
    """The spec of the pooled cluster `item` uses, None if it uses none (or a fresh one)."""
    if item is None or item.get_closest_marker(FRESH):
        return None
    return spec_of(item)


def order_by_spec(items: list[pytest.Item]) -> None:
    """The modules that share a spec's cluster one after another, where the first of them was,
    their `spends_cluster` tests then their `fresh_cluster` tests last; every other order kept:
    one `up` for all of them. (Every xdist worker collects the same items, so all reorder them
    the same way.)"""
    groups: dict[str, list[pytest.Item]] = {}
    order: list[str | pytest.Item] = []  # a spec's key where its first module was, or an item
    for item in items:
        key = spec_of(item)
        if key is None:
            order.append(item)
            continue
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(item)
    for group in groups.values():
        group.sort(key=_last_ones)  # stable: the rest keep their order
    items[:] = [part for entry in order for part in (groups[entry] if isinstance(entry, str) else [entry])]


def _last_ones(item: pytest.Item) -> int:
    return 2 if item.get_closest_marker(FRESH) else 1 if item.get_closest_marker(SPENDS) else 0


@dataclass
class Pooled:
    """A dry-run cluster of the pool's, in a home of its own."""

    spec: dict
    home: Path
    cluster: "Cluster"
    before: set[int]  # Ray-like processes before its `up`: what its `down` must not leave new
    machines: set[str] = field(default_factory=set)


class ClusterPool:
    """Clusters by spec: `bring_up(spec)` makes one, `take_down(it)` ends it (and raises if
    anything of it is left)."""

    def __init__(self, bring_up: Callable[[dict], Any], take_down: Callable[[Any], None]) -> None:
        self._bring_up, self._take_down = bring_up, take_down
        self._live: dict[str, Any] = {}
        self._failed: dict[str, str] = {}  # specs whose `up` failed: not tried again for every test

    def get(self, spec: dict) -> Any:
        """The spec's cluster, brought up if the pool has none."""
        key = spec_key(spec)
        if key in self._failed:
            raise RuntimeError(f"the cluster {spec.get('name')} failed to come up for an earlier test: {self._failed[key]}")
        if key not in self._live:
            try:
                self._live[key] = self._bring_up(spec)
            except Exception as error:
                self._failed[key] = f"{type(error).__name__}: {error}"
                raise
        return self._live[key]

    def keep_for(self, finished: pytest.Item, following: pytest.Item | None) -> None:
        """After a test: down every cluster but the one the following test uses; all of them
        after a `fresh_cluster` or `spends_cluster` test (no test has its cluster after it)."""
        spent = finished.get_closest_marker(FRESH) or finished.get_closest_marker(SPENDS)
        self._down_all(but=None if spent else key_of(following))

    def close(self) -> None:
        self._down_all(but=None)

    def _down_all(self, but: str | None) -> None:
        failures = []
        for key in [k for k in self._live if k != but]:
            try:
                self._take_down(self._live.pop(key))
            except Exception as error:  # every cluster is downed before one failure is told
                failures.append(f"{type(error).__name__}: {error}")
        assert not failures, "; ".join(failures)


def up_in_new_home(new_home: Callable[[], Path]) -> Callable[[dict], Pooled]:
    """`bring_up` for dry-run clusters: each `up` in a new home."""

    def bring_up(spec: dict) -> Pooled:
        from ray_fixtures import cluster_machines, ray_like

        from podmanager.api import Cluster

        home = new_home()
        saved = set_home(home)
        try:
            pooled = Pooled(spec, home, Cluster.from_dict(spec), ray_like())
            try:
                pooled.cluster.up(timeout_s=120)
            except BaseException:  # nothing of a cluster that failed to come up may stay
                down_leaving_nothing(pooled)
                raise
            pooled.machines = cluster_machines(pooled.cluster.name)
            return pooled
        finally:
            restore(saved)

    return bring_up


def down_leaving_nothing(pooled: Pooled) -> None:
    """`take_down` for dry-run clusters: `down`, then asserts that nothing of the cluster is
    left: no process of its machines, no new Ray process of its home's, no node in its cloud."""
    from ray_fixtures import cluster_machines, wait_no_leftovers
    from sim_view import sim_nodes

    saved = set_home(pooled.home)
    try:
        try:
            pooled.machines |= cluster_machines(pooled.cluster.name)
        finally:  # whatever went wrong above, nothing of the cluster may outlive the pool
            pooled.cluster.down()
            left = wait_no_leftovers(pooled.machines, pooled.before, home=os.environ["PODMANAGER_HOME"])
            nodes = sim_nodes(pooled.cluster.spec.project)
    finally:
        restore(saved)
    assert not left, f"processes of {pooled.cluster.name} left after down: {left}"
    assert nodes == [], f"nodes of {pooled.cluster.name} left after down: {nodes}"


_pool: ClusterPool | None = None


def open_pool(config: pytest.Config) -> ClusterPool:
    """The session's pool of dry-run clusters (made at the first call), its homes in `homes_root`."""
    global _pool
    if _pool is None:
        root = homes_root(config)
        _pool = ClusterPool(up_in_new_home(lambda: Path(tempfile.mkdtemp(prefix="home-", dir=root))),
                            down_leaving_nothing)
    return _pool


# Where the pooled clusters' homes are: a folder the controller made, so that at the session's
# end it can stop what a worker left (xdist kills a worker that takes over 10 s to end after
# Ctrl-C, in the middle of its `down`).
HOMES_ROOT_KEY = "podmanager_pool_homes"


@cache
def _own_homes_root() -> Path:
    return Path(tempfile.mkdtemp(prefix="pm-pool-"))


def homes_root(config: pytest.Config) -> Path:
    given = getattr(config, "workerinput", {}).get(HOMES_ROOT_KEY)
    return Path(given) if given else _own_homes_root()


def hand_homes_root(node) -> None:  # type: ignore[no-untyped-def]
    """In the controller, as it starts a worker: where the worker keeps its pooled homes."""
    node.workerinput[HOMES_ROOT_KEY] = str(_own_homes_root())


def sweep_homes(*, keep: bool) -> None:
    """In the controller (or a one-process run), at the session's very end: stop every process
    and emulator still tagged with a pooled home (none unless a worker was killed), and remove
    the homes unless `keep` (a failed run's logs are in them)."""
    if not _own_homes_root.cache_info().currsize:
        return
    from podmanager.emulator import launcher
    from podmanager.vm import procs

    root = _own_homes_root()
    for home in sorted(root.iterdir()):
        saved = set_home(home)
        try:
            for cluster in sorted((home / "clusters").glob("*")):
                procs.stop_cluster(cluster.name)
            launcher.stop_all()
        finally:
            restore(saved)
    if not keep:
        shutil.rmtree(root, ignore_errors=True)


def current() -> ClusterPool | None:
    """The session's pool, if a test has opened it."""
    return _pool


def close_pool() -> None:
    global _pool
    pool, _pool = _pool, None
    if pool is not None:
        pool.close()
