"""The test tree mirrors the package by name: `tests/<folder>/test_<module>.py` tests
`podmanager/<folder>/<module>.py`, so a module's tests are found by its name and a test file's
subject by its own.

A module in a subfolder may be tested from the folder above with the subfolder in the name
(`tests/cloud/test_gcp_client.py` for `podmanager/cloud/gcp/client.py`). pytest imports a test
file by its bare name (the end-to-end files import each other by it), so two folders cannot
both hold `test_demo.py`: where the name is taken, the file carries its folder's name too
(`tests/cli/test_cli_demo.py` for `podmanager/cli/demo.py`).
"""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
PACKAGE = TESTS.parent / "podmanager"

# Folders of tests that drive no one module: whole dry-run clusters, the example programs, helpers.
NOT_MIRRORED = {"end_to_end", "workloads", "support"}

# Test files named for no module of their folder, each with why.
EXCEPTIONS = {
    "api/test_checkpoint_submit.py": "a local checkpoint dir refused by `podmanager run` on a GCP-backend cluster "
                                     "in the emulator: the CLI, the API's submit and the real client together",
    "api/test_page_browser.py": "the page in a real browser over records alone: channel/page_files' scripts on "
                                "api/page_data's replies (docs/dashboard.md's screenshots)",
    "attempts/test_cancel_jax_program.py": "a JAX job cancelled and preempted as a host runs it: attempts/launch's "
                                           "environment, vm/workload_runs and runtime/preemption together",
    "attempts/test_output_pieces.py": "a host's output without Ray, end to end: vm/workload_runs reads it, "
                                      "attempts/gang collects it, attempts/logs and the run handle follow it",
    "cli/test_commands.py": "every verb through typer's CliRunner: the CLI as a whole (cli/__init__.py's app)",
    "cli/test_ctrl_c.py": "the console script's entry point, podmanager/__main__.py, above the folders",
    "cli/test_sim_controller_crash.py": "`sim controller-crash` across cli/sim, the client and the emulator's "
                                        "instance VMs; being changed beside this move, so left as it is",
    "cli/test_verb_errors.py": "each verb's errors where the user meets them: every verb's module at once",
    "client/test_client_layer.py": "client/'s imports as a whole, as tests/test_layers.py checks the package's",
    "controller/test_boot_index.py": "the spec's package index through staging, the startup script and a simulated "
                                     "VM's boot; issue 45 changes it beside this move",
    "controller/test_boot_unreachable.py": "controller/startup's script run by bash as a simulated VM runs it "
                                           "(processes); its pure tests are test_startup.py",
    "controller/test_cluster_hosts_crash.py": "cluster_hosts on a real Ray cluster after `up` crashed: a Ray file, "
                                              "apart from test_cluster_hosts.py's fakes for the Ray lane",
    "controller/test_cluster_hosts_ray.py": "cluster_hosts on a real Ray cluster: a Ray file, apart from "
                                            "test_cluster_hosts.py's fakes for the Ray lane",
    "controller/test_controller_vm_secrets.py": "the secrets made from the user's machine (client/controller_machine) "
                                                "and refused to the controller VM, under the emulator's IAM",
    "controller/test_secret_access.py": "the Ray-token secret's grant through cloud/gcp/secrets and "
                                        "ClusterHosts.start, against the emulator's Secret Manager",
    "emulator/test_boot_delay.py": "`simulation.boot_delay_s` across the spec, the simulator and a VM's boot; "
                                   "issue 45 changes emulator/vms.py beside this move",
    "emulator/test_owned_processes.py": "real processes found by their owner (vm/procs) and a simulated VM's lease "
                                        "(emulator/vm_lease) together",
    "emulator/test_vm_image.py": "a simulated VM's disk as its image has it (emulator/vms.py); issue 45 changes "
                                 "it beside this move",
    "emulator/test_vm_network.py": "the namespace mode across emulator/network/ and the controller VM; issue 47 "
                                   "changes it beside this move",
    "provisioning/test_provision.py": "provisioning as `up` drives it, through the Cluster API against the simulator",
    "provisioning/test_reconcile_machine.py": "a Hypothesis state machine over the simulator and the loop together "
                                              "(docs/ARCHITECTURE.md's 'Where to add' names it)",
    "state/test_record_types.py": "every record type of the package checked at once (issue 35)",
    "supervision/test_elastic.py": "elastic runs across supervision/policy, the ledger and the supervisor (on "
                                   "test_supervisor.py's fake cluster)",
    "vm/test_join_refused.py": "vm/join refused by a real Ray head; issue 45 changes the VM's boot beside this move",
}


def module_names(folder: Path) -> set[str]:
    """The names a test file in tests/<folder>/ may carry: each module or package below the
    folder, its subfolders joined by `_`, with or without the folder's own name before it."""
    names = set()
    for path in (PACKAGE / folder).rglob("*.py"):
        module = path.parent if path.name == "__init__.py" else path.with_suffix("")
        if module == PACKAGE / folder:
            continue
        name = "_".join(module.relative_to(PACKAGE / folder).parts)
        names |= {name, f"{folder.name}_{name}"}
    return names


def unnamed_test_files() -> list[str]:
    found = []
    for path in sorted(TESTS.rglob("test_*.py")):
        relative = path.relative_to(TESTS)
        if len(relative.parts) == 1 or relative.parts[0] in NOT_MIRRORED:
            continue  # the suite's own checks (this file, the layers, the harness)
        if path.stem.removeprefix("test_") not in module_names(relative.parent):
            found.append(relative.as_posix())
    return found


def test_every_test_file_is_named_for_the_module_it_tests() -> None:
    unnamed = [name for name in unnamed_test_files() if name not in EXCEPTIONS]
    assert unnamed == [], "test files named for no module of their folder:\n" + "\n".join(unnamed)


def test_every_exception_is_still_one() -> None:
    stale = sorted(set(EXCEPTIONS) - set(unnamed_test_files()))
    assert stale == [], "exceptions now named for a module, or gone:\n" + "\n".join(stale)


def test_no_two_test_files_share_a_name() -> None:
    seen: dict[str, list[str]] = {}
    for path in TESTS.rglob("test_*.py"):
        seen.setdefault(path.name, []).append(path.relative_to(TESTS).as_posix())
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}
