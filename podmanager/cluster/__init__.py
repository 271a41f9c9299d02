"""What is done to one cluster: its cloud backend, converging to its spec, healing and
replacing slices, tearing it down. The supervisor drives a cluster only through this layer."""
