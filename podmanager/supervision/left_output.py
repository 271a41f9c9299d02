"""An attempt's output that no supervisor collected: its processes ran on while the supervisor
(or the Ray head) was down. A supervisor started again reads it from each host's output file
into the run's logs before a new launch of the attempt writes over that file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ray.exceptions import RayError

from podmanager.attempts.logs import RunFolder
from podmanager.attempts.remote import Remote
from podmanager.core.records import HostSlot


def keep_left_output(run_id: str, attempt: int, agents: list[tuple[HostSlot, Any]], base: dict[str, int],
                     logs: RunFolder, remote: Remote, warn: Callable[[str], None]) -> None:
    """Append to `logs` what each host's processes of `attempt` wrote past what the logs hold
    (`base`: each host's log size when the attempt was launched); a host that cannot answer
    or read its file keeps its lines, and `warn` says so."""
    for slot, agent in agents:
        if slot.label not in base:
            continue
        while True:
            offset = max(0, logs.size(slot) - base[slot.label])
            try:
                left = remote.get(agent.left_output.remote(run_id, attempt, offset), timeout=30)
            except RayError as error:
                warn(f"run {run_id}: {slot.label}'s output from before the supervisor restarted was not read: {error}")
                break
            if not left:
                break
            logs.append(slot, left)
