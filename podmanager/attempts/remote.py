"""How the controller waits on its calls to host agents: Ray's `get`, `wait` and `put`,
behind a seam small enough to fake, so the gang, the attempt runner and the supervisor are
unit-tested without Ray. (Calls themselves stay `agent.method.remote(...)`.)"""

from __future__ import annotations

from typing import Any, Protocol


class Remote(Protocol):
    def get(self, refs: Any, timeout: float | None = None) -> Any:
        """The result(s) of call(s) in flight; raises what the call raised, or GetTimeoutError."""
        ...

    def wait(self, refs: list[Any], num_returns: int, timeout: float | None) -> tuple[list[Any], list[Any]]:
        """(finished, still running) after at most `timeout` seconds."""
        ...

    def put(self, value: Any) -> Any:
        """A reference every host can read `value` through (the shipped working dir)."""
        ...


class RayRemote:
    def get(self, refs: Any, timeout: float | None = None) -> Any:
        import ray

        return ray.get(refs, timeout=timeout)

    def wait(self, refs: list[Any], num_returns: int, timeout: float | None) -> tuple[list[Any], list[Any]]:
        import ray

        return ray.wait(refs, num_returns=num_returns, timeout=timeout)

    def put(self, value: Any) -> Any:
        import ray

        return ray.put(value)


RAY = RayRemote()
