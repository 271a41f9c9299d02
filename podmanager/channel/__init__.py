"""The channel: how a client on another machine (a laptop) reaches a cluster's controller.

HTTPS with a certificate the controller makes at its first boot and every client pins, and a
per-cluster bearer token (docs/channel.md says why). Here: what both ends share (the table of
verbs, `verbs.py`; their records, `records.py`, `cluster_status.py`, `service_summary.py`; the
errors) and the controller's side (`server.py`, answering each verb with the API it is given:
`controller/daemon/channel_service.py` over the controller's `Cluster`); the laptop's side is
`client/`, which imports neither Ray nor JAX."""
