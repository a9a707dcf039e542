"""Webhook addresses, event signatures, and one signed POST to a receiver.

The address check runs twice: when a monitor's ``webhook_url`` is set (a 400 for the caller) and again
right before every delivery, against the addresses the host resolves to at that moment, and the request
then goes to exactly the address that was checked. Checking only at creation would let a DNS name that
later resolves to 127.0.0.1 (rebinding) make the server probe its own network.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import ipaddress
import secrets
import socket
import ssl
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import SplitResult, urlsplit

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer, WriteableBuffer

SIGNATURE_HEADER = "X-Monitor-Signature"
TIMESTAMP_HEADER = "X-Monitor-Timestamp"
EVENT_ID_HEADER = "X-Monitor-Event-Id"
USER_AGENT = "forecast-service-monitors/1"
SECRET_PREFIX = "whsec_"
MAX_URL_LENGTH = 2048


class WebhookAddressError(ValueError):
    """A webhook URL this service will not call; the message is safe to show to the caller."""


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_hex(32)


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """``sha256=<hex>`` of HMAC-SHA256 over ``"<timestamp>." + body``: the timestamp is signed so a receiver
    that refuses old timestamps also refuses replays of a captured delivery."""
    mac = hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def verify(secret: str, timestamp: int, body: bytes, signature: str) -> bool:
    """What a receiver does (documented, and used by the tests' receiver)."""
    return hmac.compare_digest(sign(secret, timestamp, body), signature)


# IPv6 forms that carry an IPv4 address in their last 32 bits, which a translator or tunnel on the way delivers
# to: NAT64's well-known prefix (RFC 6052) and the deprecated IPv4-compatible addresses (RFC 4291).
_NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
# NAT64 for a site's own use (RFC 8215): where it leads is the site's choice, so never public.
_NAT64_LOCAL_USE = ipaddress.IPv6Network("64:ff9b:1::/48")


def _embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address leads to through 6to4, Teredo (its server and client), NAT64 or the
    IPv4-compatible form; ``https://[2002:7f00:1::]/`` is 127.0.0.1 to a host with a 6to4 route."""
    found: list[ipaddress.IPv4Address] = []
    if address.sixtofour is not None:
        found.append(address.sixtofour)
    if address.teredo is not None:
        found.extend(address.teredo)
    if address in _NAT64_WELL_KNOWN or address in _IPV4_COMPATIBLE:
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return found


def _is_private(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return _is_private(address.ipv4_mapped)
        if address in _NAT64_LOCAL_USE or any(_is_private(inner) for inner in _embedded_ipv4(address)):
            return True
    return (
        address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
        or not address.is_global
    )


@dataclass(frozen=True)
class WebhookTarget:
    url: str
    scheme: str
    host: str
    port: int
    path: str


def parse_url(url: str) -> WebhookTarget:
    """The URL's parts, or WebhookAddressError for anything that is not a plain http(s) URL."""
    if len(url) > MAX_URL_LENGTH:
        raise WebhookAddressError(f"Must be at most {MAX_URL_LENGTH} characters")
    try:
        parts: SplitResult = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise WebhookAddressError("Must be a valid http(s) URL") from exc
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise WebhookAddressError("Must be an https URL")
    if parts.username is not None or parts.password is not None:
        raise WebhookAddressError("Must not carry credentials in the URL; verify the signature header instead")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    default_port = 443 if parts.scheme == "https" else 80
    return WebhookTarget(url=url, scheme=parts.scheme, host=parts.hostname, port=port or default_port, path=path)


def resolve(target: WebhookTarget, *, allow_private: bool, field: str = "webhook_url") -> list[str]:
    """Every address the host resolves to, all of them public unless private ones are allowed. The refusal
    names ``field`` and never the address: it would map the server's internal names for the caller."""
    try:
        infos = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise WebhookAddressError(f"Host {target.host!r} does not resolve") from exc
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addresses:
        raise WebhookAddressError(f"Host {target.host!r} does not resolve")
    private = [a for a in addresses if _is_private(ipaddress.ip_address(a.split("%", 1)[0]))]
    if private and not allow_private:
        raise WebhookAddressError(
            f"Host {target.host!r} resolves to a loopback, private or link-local address; {field} may point there "
            "only when the server sets ALLOW_PRIVATE_WEBHOOKS=1"
        )
    return addresses


def check_url(url: str, *, allow_private: bool, field: str = "webhook_url") -> WebhookTarget:
    """The caller-facing check: https (or http to an allowed private address), resolving, not private."""
    target = parse_url(url)
    addresses = resolve(target, allow_private=allow_private, field=field)
    if target.scheme == "http":
        all_private = all(_is_private(ipaddress.ip_address(a.split("%", 1)[0])) for a in addresses)
        if not (allow_private and all_private):
            raise WebhookAddressError("Must be an https URL (plain http only to an allowed private address)")
    return target


@dataclass(frozen=True)
class DeliveryOutcome:
    status_code: int | None
    error: str | None
    duration_ms: float

    @property
    def acknowledged(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def _time_left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out (the whole attempt's time limit)")
    return left


def _arm(sock: socket.socket, deadline: float | None) -> None:
    if deadline is not None:
        sock.settimeout(_time_left(deadline))


class _DeadlineSocket(socket.socket):
    """A socket that gives each send and receive only what is left of one attempt's time. A plain socket
    timeout restarts with every read, so a receiver trickling its answer a byte at a time would hold a
    delivery (and its sender's slot) for as long as it liked."""

    deadline: float | None = None  # time.monotonic() at which the attempt ends

    def send(self, data: ReadableBuffer, flags: int = 0) -> int:
        _arm(self, self.deadline)
        return super().send(data, flags)

    def sendall(self, data: ReadableBuffer, flags: int = 0) -> None:
        _arm(self, self.deadline)  # sendall counts its timeout for the whole call
        super().sendall(data, flags)

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        _arm(self, self.deadline)
        return super().recv(bufsize, flags)

    def recv_into(self, buffer: WriteableBuffer, nbytes: int = 0, flags: int = 0) -> int:
        _arm(self, self.deadline)
        return super().recv_into(buffer, nbytes, flags)


class _DeadlineSSLSocket(ssl.SSLSocket):
    """The same over TLS (the handshake itself is bounded by the time left when it starts)."""

    deadline: float | None = None  # time.monotonic() at which the attempt ends

    def send(self, data: ReadableBuffer, flags: int = 0) -> int:
        _arm(self, self.deadline)
        return super().send(data, flags)

    def sendall(self, data: ReadableBuffer, flags: int = 0) -> None:
        _arm(self, self.deadline)
        super().sendall(data, flags)

    def recv(self, buflen: int = 1024, flags: int = 0) -> bytes:
        _arm(self, self.deadline)
        return super().recv(buflen, flags)

    def recv_into(self, buffer: WriteableBuffer, nbytes: int | None = None, flags: int = 0) -> int:
        _arm(self, self.deadline)
        return super().recv_into(buffer, nbytes, flags)  # type: ignore[arg-type]


def _connect(address: str, port: int, deadline: float) -> _DeadlineSocket:
    plain = socket.create_connection((address, port), _time_left(deadline))
    # The same connection, as a socket that arms itself; it keeps the connect's timeout until its first use.
    sock = _DeadlineSocket(plain.family, plain.type, plain.proto, fileno=plain.detach())
    sock.settimeout(plain.gettimeout())
    sock.deadline = deadline
    return sock


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """Connects to one already-checked address while verifying the certificate for the URL's host name."""

    def __init__(self, host: str, port: int, address: str, deadline: float) -> None:
        context = ssl.create_default_context()
        context.sslsocket_class = _DeadlineSSLSocket
        super().__init__(host, port, timeout=max(0.001, deadline - time.monotonic()), context=context)
        self._address = address
        self._deadline = deadline

    def connect(self) -> None:
        sock = self._context.wrap_socket(  # type: ignore[attr-defined]
            _connect(self._address, self.port, self._deadline), server_hostname=self.host
        )
        sock.deadline = self._deadline
        self.sock = sock


class _PinnedHTTPConnection(http.client.HTTPConnection):
    def __init__(self, host: str, port: int, address: str, deadline: float) -> None:
        super().__init__(host, port, timeout=max(0.001, deadline - time.monotonic()))
        self._address = address
        self._deadline = deadline

    def connect(self) -> None:
        self.sock = _connect(self._address, self.port, self._deadline)


@dataclass(frozen=True)
class HttpAnswer:
    """One request's outcome: the status and the start of the body, or an error; never raised."""

    status_code: int | None
    body: bytes
    error: str | None
    duration_ms: float
    truncated: bool = False  # the body went on past max_answer_bytes


def send_request(
    *,
    method: str,
    url: str,
    body: bytes | None,
    headers: dict[str, str],
    allow_private: bool,
    timeout: float,
    max_answer_bytes: int = 64 * 1024,
) -> HttpAnswer:
    """One request to a checked address (the same rules as a webhook's), bounded as a whole by ``timeout``;
    failures are answers, never exceptions. Webhooks, Alertmanager and Prometheus all go through here."""
    started = time.perf_counter()
    deadline = time.monotonic() + timeout

    def answer(status: int | None, content: bytes, error: str | None) -> HttpAnswer:
        truncated = len(content) > max_answer_bytes
        return HttpAnswer(status, content[:max_answer_bytes], error[:500] if error else None,
                          (time.perf_counter() - started) * 1000.0, truncated)

    try:
        target = parse_url(url)
        address = resolve(target, allow_private=allow_private)[0]
        if target.scheme == "http" and not (allow_private and _is_private(ipaddress.ip_address(address))):
            return answer(None, b"", "plain http is allowed only to a private address with ALLOW_PRIVATE_WEBHOOKS=1")
    except WebhookAddressError as exc:
        return answer(None, b"", str(exc))
    connection_type = _PinnedHTTPSConnection if target.scheme == "https" else _PinnedHTTPConnection
    connection = connection_type(target.host, target.port, address, deadline)
    try:
        connection.request(method, target.path, body=body, headers={"User-Agent": USER_AGENT, **headers})
        response = connection.getresponse()
        content = response.read(max_answer_bytes + 1)
        return answer(response.status, content,
                      None if 200 <= response.status < 300 else f"HTTP {response.status}")
    except (OSError, http.client.HTTPException) as exc:
        return answer(None, b"", f"{type(exc).__name__}: {exc}")
    finally:
        connection.close()


def post_event(
    *, url: str, secret: str, event_id: str, body: bytes, allow_private: bool, timeout: float
) -> DeliveryOutcome:
    """One signed POST; never raises (every failure is an outcome the queue records and retries).

    ``timeout`` bounds the whole attempt from here (connecting, TLS, sending, and every byte of the answer),
    not each socket operation; the address check's DNS lookup is part of it but cannot be cut short."""
    timestamp = int(time.time())
    headers = {
        "Content-Type": "application/json",
        EVENT_ID_HEADER: event_id,
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: sign(secret, timestamp, body),
    }
    # A receiver's body is not ours to keep; a little is read so the socket closes.
    answer = send_request(method="POST", url=url, body=body, headers=headers, allow_private=allow_private,
                          timeout=timeout)
    return DeliveryOutcome(answer.status_code, answer.error, answer.duration_ms)
