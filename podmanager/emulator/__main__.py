"""`python -m podmanager.emulator --project P`: a project's background emulator (see service.py)."""

import logging
import os
import sys

from podmanager.emulator.server import main

main()
# Stopped cleanly: its state saved, its record removed. The interpreter's own teardown (gRPC and
# the Google client libraries) takes a second more, which `down` and every test would wait for.
logging.shutdown()
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
