"""The simulated Cloud TPU: the in-memory cloud and its state records. Only the emulator
(`podmanager/emulator/`) runs it; tests may drive it in-process."""
