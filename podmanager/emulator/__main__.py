"""`python -m podmanager.emulator --project P`: a project's background emulator (see service.py)."""

from podmanager.emulator.service import main

main()
