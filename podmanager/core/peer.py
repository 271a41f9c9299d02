"""Who is on the other end of a local TCP connection: servers that admit only their owner.

A dry run's servers (the emulator's gRPC API, its REST routes, each simulated VM's metadata
server) listen on 127.0.0.1, where every local user can connect. A real metadata server
answers only its own VM, and the real APIs demand credentials; here the one thing that tells
the owner apart is the connecting process's user. On Linux the kernel knows the owner of
every TCP socket of this network namespace: the client's socket is the one whose local address
is the peer address the server saw and whose remote address is the server's own. The kernel is
asked for that one socket by its addresses (sock_diag, as `ss` asks it), or where that is not
possible the tables /proc/net/tcp and tcp6 are read (their uid column).

Use `refusal(host, port)` (None: admitted, else why not) or `owner_only(host, port)` in any
server; `OwnerOnlyRequests` does it for `http.server` handlers (once per connection, a 403),
`OwnerOnlyInterceptor` for gRPC servers (every call, PERMISSION_DENIED). An aiohttp server
calls `refusal(*request.transport.get_extra_info("peername")[:2], server=...sockname[:2])` in a
middleware.

Without /proc/net (macOS, ...) the owner of a socket cannot be read cheaply: only loopback
peers are admitted there, whoever they are (the README's list of what differs says so).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
import sys
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import grpc

PROC_NET = Path("/proc/net")
TIME_WAIT = "06"  # /proc/net/tcp's state of a closed connection's leftover: its uid is 0, it is nobody's


def owner_uid() -> int:
    """The uid admitted: the user running this server."""
    return os.geteuid()


def _word(packed: bytes) -> str:
    """4 address bytes as /proc/net prints them: the 32-bit word in host byte order, in hex."""
    return f"{int.from_bytes(packed, sys.byteorder):08X}"


def proc_address(host: str, port: int) -> list[tuple[str, str]]:
    """The forms (file name, "ADDR:PORT") an address takes in /proc/net/tcp and tcp6: an IPv4
    address appears in tcp, and in tcp6 as ::ffff:a.b.c.d when the socket is dual-stack."""
    ip = _ip(host)
    forms: list[tuple[str, bytes]] = []
    if isinstance(ip, ipaddress.IPv4Address):
        forms.append(("tcp", ip.packed))
    forms.append(("tcp6", _as_v6(ip).packed))
    return [(name, "".join(_word(packed[i:i + 4]) for i in range(0, len(packed), 4)) + f":{port:04X}")
            for name, packed in forms]


def socket_uid(host: str, port: int, *, server: tuple[str, int] | None = None) -> int | None:
    """The uid owning the TCP socket whose local address is host:port (with `server` its remote
    address, which tells it apart from an unrelated socket on the same port), or None when this
    machine has no such socket. With `server` known the kernel is asked for that one socket
    (sock_diag, as `ss` asks: about a millisecond); else, or where that is refused, the socket
    tables are read (tens of milliseconds on a busy machine)."""
    if server is not None:
        try:
            return _diag_uid(host, port, server)
        except (OSError, AttributeError):  # AttributeError: no AF_NETLINK on this platform
            pass  # no sock_diag here (a sandbox, an old kernel): the tables say the same
    return _table_uid(host, port, server=server)


NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLMSG_ERROR = 2
NLM_F_REQUEST = 1
INET_DIAG_NOCOOKIE = 0xFFFFFFFF
TCP_TIME_WAIT = 6


def _diag_uid(host: str, port: int, server: tuple[str, int]) -> int | None:
    """One exact sock_diag lookup of the socket host:port -> server (its 4-tuple): as IPv4, then
    as a dual-stack IPv6 socket."""
    local, remote = _ip(host), _ip(server[0])
    tries = []
    if isinstance(local, ipaddress.IPv4Address) and isinstance(remote, ipaddress.IPv4Address):
        tries.append((socket.AF_INET, local.packed.ljust(16, b"\0"), remote.packed.ljust(16, b"\0")))
    tries.append((socket.AF_INET6, _as_v6(local).packed, _as_v6(remote).packed))
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as diag:
        diag.settimeout(1.0)
        for family, src, dst in tries:
            # inet_diag_req_v2: family, protocol, ext, pad, states; inet_diag_sockid: sport, dport
            # (big-endian), src, dst, interface, cookie (none)
            request = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF) + struct.pack(
                "!HH", port, server[1]) + src + dst + struct.pack("=III", 0, INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE)
            diag.send(struct.pack("=LHHLL", 16 + len(request), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, 1, 0) + request)
            answer = diag.recv(65536)
            _, kind = struct.unpack_from("=LH", answer)
            if kind == NLMSG_ERROR:
                continue  # -ENOENT: no such socket in this family
            state, = struct.unpack_from("=B", answer, 16 + 1)  # inet_diag_msg: family, state, ...
            uid, = struct.unpack_from("=I", answer, 16 + 4 + 48 + 12)  # ... the sockid, 3 counters, uid
            if state != TCP_TIME_WAIT:
                return uid
    return None


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    ip = ipaddress.ip_address(host.strip("[]").split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _as_v6(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> ipaddress.IPv6Address:
    return ip if isinstance(ip, ipaddress.IPv6Address) else ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + ip.packed)


def _table_uid(host: str, port: int, *, server: tuple[str, int] | None = None) -> int | None:
    """`socket_uid` read from /proc/net/tcp and tcp6."""
    remotes = {name: form for name, form in proc_address(*server)} if server else {}
    for name, local in proc_address(host, port):
        try:
            table = (PROC_NET / name).read_text()
        except FileNotFoundError:
            continue
        needle = f": {local} {remotes[name]} " if name in remotes else f": {local} "
        start = table.find(needle)
        while start >= 0:
            fields = table[start + 2:table.find("\n", start)].split()
            if fields[2] != TIME_WAIT:  # columns: local, remote, state, queues, timer, retransmits, uid
                return int(fields[6])
            start = table.find(needle, start + 1)
    return None


def refusal(host: str, port: int, *, server: tuple[str, int] | None = None) -> str | None:
    """None when the process at host:port runs as this server's user; else why it is refused."""
    if not (PROC_NET / "tcp").exists():
        if ipaddress.ip_address(host.strip("[]").split("%")[0]).is_loopback:
            return None  # no way to read the peer's user here: loopback is the bound (see the docstring)
        return f"the connection from {host} is not local; this server admits only its owner's local processes"
    uid = socket_uid(host, port, server=server)
    if uid is None:
        return (f"the connection from {host}:{port} is from no process of this machine; "
                "this server admits only its owner's local processes")
    if uid != owner_uid():
        return (f"the connection from {host}:{port} is from uid {uid}; this server admits only its owner "
                f"(uid {owner_uid()}), whose dry-run cloud it is")
    return None


def owner_only(host: str, port: int, *, server: tuple[str, int] | None = None) -> bool:
    return refusal(host, port, server=server) is None


class OwnerOnlyRequests(BaseHTTPRequestHandler):
    """An `http.server` handler base that answers every request of a connection from anyone
    but the owner with `refuse(reason)` (default: a plain 403) instead of its `do_*`."""

    _refused: str | None = None
    _checked = False

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if not self._checked:  # one handler per connection: its peer is asked once
            host, port = self.client_address[:2]
            self._refused = refusal(host, port, server=self.connection.getsockname()[:2])
            self._checked = True
        if self._refused is None:
            return True
        self.refuse(self._refused)
        return False

    def refuse(self, reason: str) -> None:
        body = f"403 Forbidden: {reason}\n".encode()
        self.send_response(403)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def listening_address(host: str, port: int) -> tuple[str, int] | None:
    """The address a server bound to host:port is reached at, as its clients' sockets name it;
    None for a wildcard (0.0.0.0, ::) or a name, reached at more than one."""
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    return None if ip.is_unspecified else (str(ip), port)


def grpc_peer(peer: str) -> tuple[str, int] | None:
    """grpc's `context.peer()` ("ipv4:127.0.0.1:5000", "ipv6:[::1]:5000") as (host, port);
    None for any other kind (a Unix socket)."""
    kind, _, address = peer.partition(":")
    host, _, port = address.rpartition(":")
    if kind not in ("ipv4", "ipv6") or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


class OwnerOnlyInterceptor(grpc.ServerInterceptor):
    """Refuses every gRPC call from anyone but the owner with PERMISSION_DENIED, saying why.
    `server`: the (host, port) the server listens on, when known (a sharper match)."""

    def __init__(self, server: tuple[str, int] | None = None):
        self.server = server

    def _refusal(self, context: grpc.ServicerContext) -> str | None:
        address = grpc_peer(context.peer())
        if address is None:
            return f"the connection from {context.peer()} is not TCP; this server admits only its owner's processes"
        return refusal(*address, server=self.server)

    def intercept_service(self, continuation: Callable[[Any], Any], handler_call_details: Any) -> Any:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        kind = next(name for name in ("unary_unary", "unary_stream", "stream_unary", "stream_stream")
                    if getattr(handler, name) is not None)
        inner = getattr(handler, kind)

        def guarded(request: Any, context: grpc.ServicerContext) -> Any:
            refused = self._refusal(context)
            if refused is not None:
                context.abort(grpc.StatusCode.PERMISSION_DENIED, refused)
            return inner(request, context)

        return handler._replace(**{kind: guarded})  # grpc's handlers are named tuples
