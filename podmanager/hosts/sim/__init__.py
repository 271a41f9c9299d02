"""Simulated TPU VMs: each host of a READY simulated slice boots as a local Ray node."""
