"""`python -m podmanager.emulator --project P`: a project's background emulator (see service.py)."""

from podmanager.emulator.server import main

main()
