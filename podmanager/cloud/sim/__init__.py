"""The simulated Cloud TPU: the in-memory cloud, its gRPC server (the emulator) and its control
service."""
