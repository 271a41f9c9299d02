"""The durable store: clusters, runs and the event log, in SQLite under $PODMANAGER_HOME."""

from podmanager.state.store import ClusterRecord, Event, StateStore

__all__ = ["ClusterRecord", "Event", "StateStore"]
