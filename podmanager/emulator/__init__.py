"""The local Cloud TPU emulator: the one process that owns a dry run's simulated cloud.

It serves the simulator (`emulator/sim/`) as the real Cloud TPU API, so a dry run talks to it
through the real client (`GcpCloud`); it alone moves simulated time, fires scripted faults,
boots and kills the simulated VMs and answers their metadata servers. Clients find it by
its record under $PODMANAGER_HOME (`record.py`) and start it when it is not running
(`emulator/launcher.py`).
"""
