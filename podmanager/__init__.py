"""podmanager: a Ray-orchestrated manager for Cloud TPU pod slices."""

from podmanager.api import Cluster, ClusterStatus

__all__ = ["Cluster", "ClusterStatus"]
__version__ = "0.1.0"
