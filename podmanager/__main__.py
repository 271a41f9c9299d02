"""The `podmanager` command's entry point, apart from the CLI: Ctrl-C while the CLI's modules
load (typer, rich, pydantic: the command's first few tenths of a second) ends the command as
quietly as it does later, exit 130 and no traceback."""

from __future__ import annotations

import os
import sys


def main() -> None:
    try:
        from podmanager.cli import main as run_command
    except KeyboardInterrupt:
        sys.stderr.write("\n")
        sys.stderr.flush()
        os._exit(130)
    run_command()


if __name__ == "__main__":
    main()
