"""What the simulated network makes is named after its emulator's prefix, so that whatever a
crash left behind can be found and removed: namespaces `PREFIX-...` (everything inside them,
links and bridges, goes with them) and, in the machine's own namespace, the one link `PREFIXl`
to the laptop's home router. `cleanup_leftovers` removes all of that, and ends whatever a
leftover namespace still runs. Each prefix in use is claimed by its process in `CLAIMS`
(pid and start time): a prefix whose process is gone (a crashed emulator, a killed test) is an
orphan, which the next network made on this machine removes (`cleanup_orphans`)."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import psutil

PREFIX = re.compile(r"^pm[0-9a-f]{6}$")  # one length: no prefix begins another
# `ip netns exec NAME` bind-mounts the files of /etc/netns/NAME over /etc (ip-netns(8)): a VM's
# /etc/hosts, which names its metadata server, lives there and goes with its namespace.
NETNS_ETC = Path("/etc/netns")
# Who holds each prefix: /run is the machine's own and emptied at boot, as its namespaces are.
CLAIMS = Path("/run/podmanager-network")


def new_prefix() -> str:
    return "pm" + secrets.token_hex(3)


def checked(prefix: str) -> str:
    if not PREFIX.match(prefix):
        raise ValueError(f"network prefix {prefix!r} is not 'pm' and 6 hex digits (see network/names.py)")
    return prefix


def namespace(prefix: str, what: str) -> str:
    return f"{checked(prefix)}-{what}"


def root_link(prefix: str) -> str:
    """The laptop's link to its home router, in the machine's own namespace (at most 15 characters)."""
    return f"{checked(prefix)}l"


def run(*argv: str, stdin: str | None = None) -> str:
    """A command of `ip` or `nft`; its failure raises with what it said."""
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:6])} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def namespaces_of(prefix: str) -> list[str]:
    listed = run("ip", "netns", "list")
    names = [line.split()[0] for line in listed.splitlines() if line.strip()]
    return sorted(n for n in names if n.startswith(checked(prefix) + "-"))


def root_links_of(prefix: str) -> list[str]:
    listed = run("ip", "-o", "link", "show")
    names = [line.split(":", 2)[1].strip().split("@")[0] for line in listed.splitlines() if line.strip()]
    return sorted(n for n in names if n.startswith(checked(prefix)))


def etc_dirs_of(prefix: str) -> list[Path]:
    if not NETNS_ETC.is_dir():
        return []
    return sorted(p for p in NETNS_ETC.iterdir() if p.name.startswith(checked(prefix) + "-"))


def leftovers(prefix: str) -> list[str]:
    """What of this prefix is still there: namespaces, links of the machine's namespace, and
    namespaces' /etc files."""
    return ([f"netns {n}" for n in namespaces_of(prefix)] + [f"link {n}" for n in root_links_of(prefix)]
            + [f"etc {p}" for p in etc_dirs_of(prefix)])


def cleanup_leftovers(prefix: str) -> list[str]:
    """Remove everything of `prefix`, whoever made it and whatever became of them; what was removed."""
    removed = []
    for name in namespaces_of(prefix):
        for pid in run("ip", "netns", "pids", name).split():
            try:
                os.kill(int(pid), signal.SIGKILL)  # a process left in it would keep it alive
            except ProcessLookupError:
                pass
        run("ip", "netns", "delete", name)
        removed.append(f"netns {name}")
    for name in root_links_of(prefix):
        # Deleting one end of a veth pair deletes both; a namespace still held open (a socket)
        # would otherwise keep this end, and its route, in the machine's namespace.
        try:
            run("ip", "link", "delete", name)
        except RuntimeError:
            if name in root_links_of(prefix):
                raise
        removed.append(f"link {name}")
    for folder in etc_dirs_of(prefix):
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(f"etc {folder}")
    release(prefix)  # nothing of it is left to claim
    return removed


def _process_tag(pid: int) -> str:
    return f"{pid} {psutil.Process(pid).create_time():.3f}"


def claim(prefix: str) -> None:
    """This process holds `prefix` until `release` (or until it is gone: then it is an orphan)."""
    CLAIMS.mkdir(mode=0o700, parents=True, exist_ok=True)
    (CLAIMS / checked(prefix)).write_text(_process_tag(os.getpid()))


def release(prefix: str) -> None:
    (CLAIMS / checked(prefix)).unlink(missing_ok=True)


def orphans() -> list[str]:
    """The claimed prefixes whose process is gone (a pid reused since is another process)."""
    found = []
    for path in sorted(CLAIMS.glob("pm*")) if CLAIMS.is_dir() else []:
        if not PREFIX.match(path.name):
            continue
        words = path.read_text().split()
        try:
            alive = bool(words) and _process_tag(int(words[0])) == " ".join(words)
        except (psutil.Error, ValueError):
            alive = False
        if not alive:
            found.append(path.name)
    return found


def cleanup_orphans() -> list[str]:
    """Remove everything of every orphaned prefix; what was removed."""
    removed = []
    for prefix in orphans():
        removed += cleanup_leftovers(prefix)
        release(prefix)
    return removed


@lru_cache(maxsize=1)
def unavailable() -> str | None:
    """Why the simulated network cannot be made here (None: it can): it needs Linux, root, and
    the `ip` (iproute2) and `nft` (nftables) commands."""
    if sys.platform != "linux":
        return f"network namespaces need Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return "network namespaces need root (run as root, or stay with the loopback mode)"
    missing = [tool for tool in ("ip", "nft") if shutil.which(tool) is None]
    if missing:
        return (f"missing {' and '.join(missing)}: install Debian's iproute2 and nftables packages "
                "(apt-get install -y iproute2 nftables)")
    probe = namespace(new_prefix(), "probe")
    try:
        run("ip", "netns", "add", probe)
    except RuntimeError as refused:
        return f"this machine refuses network namespaces: {refused}"
    run("ip", "netns", "delete", probe)
    return None
