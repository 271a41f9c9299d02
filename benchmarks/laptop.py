"""Issue 36's figures: a dry-run cluster driven from a "laptop" folder through its controller VM,
against the same cluster with this machine as its controller (`controller.local: true`, the
only mode before).

    python benchmarks/laptop.py [--repeats 5] [--mode both|local|vm|network]

For each mode, in a fresh $PODMANAGER_HOME (and, for the VM, a separate simulated cloud folder):
`up` of two v4-8 (the controller VM included), `status` (the CLI, a new process each time, as
a user runs it), a short run's wall time (`podmanager run hello.py`: submit, three lines, the
summary), and the delay from a line printed on a host to the same line shown on the laptop
(`time.time()` printed by the program, compared when the follower receives it: one clock, one
machine). Medians of --repeats; prints a markdown table. The previous main (no VM mode) runs
with `--mode local`. `--mode network` measures the VM mode twice, back to back: every simulated
machine sharing this one's loopback, then each in its own network namespace behind the firewall
(the emulator's namespace mode, issue 47: Linux as root).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

PODMANAGER = [sys.executable, "-m", "podmanager"]
HELLO = "import time\nfor i in range(3):\n    print('hello', i, flush=True)\n    time.sleep(0.2)\n"
STAMPS = textwrap.dedent("""
    import time
    for i in range(20):
        print(f"stamp {time.time():.6f}", flush=True)
        time.sleep(0.25)
""")


def spec(local: bool) -> str:
    controller = "" if local else "controller: {local: false}\n"
    return (f"name: bench\n{controller}simulation: {{create_latency_s: 0.0, delete_latency_s: 0.0}}\n"
            "slices:\n  - {accelerator: v4-8, count: 2}\n")


def timed(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 900) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[2:])} failed:\n{done.stdout}\n{done.stderr}")
    return took


STATUS_IN_PROCESS = textwrap.dedent("""
    import statistics, sys, time
    from podmanager import api
    cluster = api.resolve_cluster("bench")
    cluster.status()  # the first opens the connection
    took = []
    for _ in range(int(sys.argv[1])):
        start = time.perf_counter()
        cluster.status()
        took.append(time.perf_counter() - start)
    print(statistics.median(took))
""")


def line_delays(cwd: Path, env: dict[str, str]) -> list[float]:
    """Seconds from each line's print on a host to its arrival here, as `podmanager run` shows it."""
    process = subprocess.Popen([*PODMANAGER, "run", "-c", "bench", "--slices", "0", "stamps.py"], cwd=cwd, env=env,
                               stdout=subprocess.PIPE, text=True)
    delays = []
    assert process.stdout is not None
    for line in process.stdout:
        arrived = time.time()
        if "stamp " in line:
            delays.append(arrived - float(line.rsplit(" ", 1)[-1]))
    process.wait(timeout=300)
    return delays[1:]  # the first waits for the attempt to start


def measure(local: bool, repeats: int, network: str = "loopback") -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix="pm-bench-laptop-"))
    project = root / "project"
    project.mkdir()
    (project / "spec.yaml").write_text(spec(local))
    (project / "hello.py").write_text(HELLO)
    (project / "stamps.py").write_text(STAMPS)
    env = {**os.environ, "PODMANAGER_HOME": str(root / "home"), "PODMANAGER_SIM_HOME": str(root / "cloud"),
           "PODMANAGER_SIM_NETWORK": network}
    try:
        up = timed([*PODMANAGER, "up", "-f", "spec.yaml", "--dry-run"], project, env)
        status = [timed([*PODMANAGER, "status", "-c", "bench", "--json"], project, env) for _ in range(repeats)]
        in_process = subprocess.run([sys.executable, "-c", STATUS_IN_PROCESS, str(repeats)], cwd=project, env=env,
                                    capture_output=True, text=True, timeout=300, check=True)
        runs = [timed([*PODMANAGER, "run", "-c", "bench", "--slices", "0", "hello.py"], project, env)
                for _ in range(repeats)]
        delays = line_delays(project, env)
        return {"up_s": up, "status_s": statistics.median(status), "status_api_s": float(in_process.stdout.split()[-1]),
                "run_s": statistics.median(runs),
                "line_s": statistics.median(delays)}
    finally:
        subprocess.run([*PODMANAGER, "down", "-c", "bench"], cwd=project, env=env, capture_output=True, timeout=600)
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--mode", choices=["both", "local", "vm", "network"], default="both")
    args = parser.parse_args()
    modes = {"local": [(True, "loopback")], "vm": [(False, "loopback")],
             "both": [(True, "loopback"), (False, "loopback")],
             "network": [(False, "loopback"), (False, "namespaces")]}[args.mode]
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print("| controller | up (2 x v4-8) s | status (CLI) s | status (API) s | run hello.py s | host line -> laptop s |")
    print("|---|---|---|---|---|---|")
    for local, network in modes:
        figures = measure(local, args.repeats, network)
        name = "this machine (local)" if local else "VM over the channel" + (
            ", namespaces" if network == "namespaces" else "")
        print(f"| {name} | {figures['up_s']:.1f} | "
              f"{figures['status_s']:.2f} | {figures['status_api_s']:.3f} | {figures['run_s']:.2f} | {figures['line_s']:.3f} |")
        print(json.dumps(figures), file=sys.stderr)


if __name__ == "__main__":
    main()
