"""The channel: how a client on another machine (a laptop) reaches a cluster's controller.

HTTPS with a certificate the controller makes at its first boot and every client pins, and a
per-cluster bearer token (docs/channel.md says why). `client.py` is the laptop's side and
imports neither Ray nor JAX; `server.py` is the controller's, answering each request with the
API it is given (`api/channel_service.py` over this machine's `Cluster`)."""
