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
from urllib.parse import SplitResult, urlsplit

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


def _is_private(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return _is_private(address.ipv4_mapped)
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


def resolve(target: WebhookTarget, *, allow_private: bool) -> list[str]:
    """Every address the host resolves to, all of them public unless private ones are allowed."""
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
            f"Host {target.host!r} resolves to a loopback, private or link-local address ({private[0]}); "
            "such webhooks are refused unless the server sets ALLOW_PRIVATE_WEBHOOKS=1"
        )
    return addresses


def check_url(url: str, *, allow_private: bool) -> WebhookTarget:
    """The caller-facing check: https (or http to an allowed private address), resolving, not private."""
    target = parse_url(url)
    addresses = resolve(target, allow_private=allow_private)
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


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """Connects to one already-checked address while verifying the certificate for the URL's host name."""

    def __init__(self, host: str, port: int, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self._address = address

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]


class _PinnedHTTPConnection(http.client.HTTPConnection):
    def __init__(self, host: str, port: int, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


def post_event(
    *, url: str, secret: str, event_id: str, body: bytes, allow_private: bool, timeout: float
) -> DeliveryOutcome:
    """One signed POST; never raises (every failure is an outcome the queue records and retries)."""
    started = time.perf_counter()

    def outcome(status: int | None, error: str | None) -> DeliveryOutcome:
        return DeliveryOutcome(status, error[:500] if error else None, (time.perf_counter() - started) * 1000.0)

    try:
        target = parse_url(url)
        address = resolve(target, allow_private=allow_private)[0]
        if target.scheme == "http" and not (allow_private and _is_private(ipaddress.ip_address(address))):
            return outcome(None, "plain http is allowed only to a private address with ALLOW_PRIVATE_WEBHOOKS=1")
    except WebhookAddressError as exc:
        return outcome(None, str(exc))
    timestamp = int(time.time())
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        EVENT_ID_HEADER: event_id,
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: sign(secret, timestamp, body),
    }
    connection_type = _PinnedHTTPSConnection if target.scheme == "https" else _PinnedHTTPConnection
    connection = connection_type(target.host, target.port, address, timeout)
    try:
        connection.request("POST", target.path, body=body, headers=headers)
        response = connection.getresponse()
        response.read(64 * 1024)  # a receiver's body is not ours to keep; read a little so the socket closes
        return outcome(response.status, None if 200 <= response.status < 300 else f"HTTP {response.status}")
    except (OSError, http.client.HTTPException) as exc:
        return outcome(None, f"{type(exc).__name__}: {exc}")
    finally:
        connection.close()
