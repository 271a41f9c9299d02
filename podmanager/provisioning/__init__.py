"""Provisioning: the pure plan (desired vs observed slices -> actions) and the loop that carries
it out against a cloud."""
