"""The simulated Cloud TPU and Compute Engine: the in-memory cloud and its state records.
The emulator serves it; tests may drive it in-process."""
