"""The controller VM's daemon: the channel's server end over this machine's API (`api/`), so
above it in the layers (tests/test_layers.py), though it runs on the controller."""
