"""client/cluster_client.py: the in-process cluster and the remote one are one `ClusterClient`,
so the CLI calls its verbs without asking which it holds."""

from __future__ import annotations

import inspect

import pytest

from podmanager.api.cluster import Cluster
from podmanager.client.cluster_client import ClusterClient
from podmanager.client.remote import RemoteCluster
from podmanager.client.remote_up_down import RemoteSpec

VERBS = sorted(name for name, value in vars(ClusterClient).items()
               if not name.startswith("_") and (callable(value) or isinstance(value, property)))


@pytest.mark.parametrize("kind", [Cluster, RemoteCluster, RemoteSpec])
def test_both_kinds_of_cluster_have_every_verb_with_its_arguments(kind: type) -> None:
    assert {"up", "down", "status", "events", "runs", "submit", "run", "run_handle", "serve", "cancel_service",
            "inject", "head_crash", "controller_crash", "controller_stop"} <= set(VERBS)
    for name in VERBS:
        wanted = vars(ClusterClient)[name]
        found = getattr(kind, name, None)
        assert found is not None, f"{kind.__name__} has no {name}"
        if isinstance(wanted, property):
            continue
        given = inspect.signature(found).parameters
        for parameter in inspect.signature(wanted).parameters.values():
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                continue
            assert parameter.name in given, f"{kind.__name__}.{name} takes no {parameter.name}"
            if parameter.default is not parameter.empty:
                assert given[parameter.name].default == parameter.default, f"{kind.__name__}.{name}({parameter.name})"


def test_the_cli_never_asks_which_kind_of_cluster_it_holds() -> None:
    """No `.runtime` (the controller's own machinery) and no isinstance of a cluster in the CLI."""
    import re
    from pathlib import Path

    cli = Path(__file__).resolve().parents[2] / "podmanager" / "cli"
    asked = [f"{path.name}:{number}" for path in sorted(cli.glob("*.py"))
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if re.search(r"\.runtime\b|isinstance\(target|api\.RemoteCluster\b", line)]
    assert asked == []
