"""The webhook address check sees through IPv6 forms that carry an IPv4 address: a loopback, private or
link-local IPv4 address inside 6to4, Teredo, NAT64, IPv4-mapped or IPv4-compatible form is as refused as the
address itself. The URLs are IPv6 literals: resolving them needs no DNS."""

from __future__ import annotations

import pytest

from app.monitors.alerts.webhooks import WebhookAddressError, check_url, post_event


def _teredo(server: str, client: str, port: int = 40000) -> str:
    """A Teredo address (2001::/32): the server's IPv4, flags, then the client's port and IPv4 inverted."""
    server_bits = [int(part) for part in server.split(".")]
    client_bits = [int(part) ^ 0xFF for part in client.split(".")]
    words = [0x2001, 0, server_bits[0] << 8 | server_bits[1], server_bits[2] << 8 | server_bits[3], 0x8000,
             port ^ 0xFFFF, client_bits[0] << 8 | client_bits[1], client_bits[2] << 8 | client_bits[3]]
    return ":".join(f"{word:x}" for word in words)


INSIDE = {
    "6to4 of 127.0.0.1": "2002:7f00:1::",
    "6to4 of 127.0.0.1, another subnet": "2002:7f00:1:42::1",
    "6to4 of 10.0.0.1": "2002:a00:1::",
    "6to4 of 192.168.1.1": "2002:c0a8:101::",
    "6to4 of 169.254.169.254 (cloud metadata)": "2002:a9fe:a9fe::",
    "IPv4-mapped 127.0.0.1": "::ffff:127.0.0.1",
    "IPv4-mapped 169.254.169.254": "::ffff:a9fe:a9fe",
    "IPv4-compatible 127.0.0.1": "::127.0.0.1",
    "IPv4-compatible 10.1.2.3": "::a01:203",
    "NAT64 of 127.0.0.1": "64:ff9b::7f00:1",
    "NAT64 of 192.168.0.10": "64:ff9b::c0a8:a",
    "local-use NAT64": "64:ff9b:1::808:808",
    "Teredo to client 127.0.0.1": _teredo("65.54.227.120", "127.0.0.1"),
    "Teredo to client 10.0.0.5": _teredo("65.54.227.120", "10.0.0.5"),
}


@pytest.mark.parametrize("address", INSIDE.values(), ids=INSIDE.keys())
def test_a_private_ipv4_address_inside_ipv6_is_refused(address: str) -> None:
    with pytest.raises(WebhookAddressError, match="loopback, private or link-local"):
        check_url(f"https://[{address}]/hook", allow_private=False)
    # Nor is a delivery made to it (the check runs again before every delivery).
    outcome = post_event(url=f"https://[{address}]/hook", secret="s", event_id="e", body=b"{}", allow_private=False,
                         timeout=1)
    assert outcome.status_code is None and "private" in (outcome.error or "")


@pytest.mark.parametrize("address", ["2002:7f00:1::", "::ffff:127.0.0.1"])
def test_allowed_when_the_server_allows_private_webhooks(address: str) -> None:
    assert check_url(f"https://[{address}]/hook", allow_private=True).host == address


@pytest.mark.parametrize("address", [
    "2606:4700:4700::1111",  # plain global IPv6
    "2002:808:808::",  # 6to4 of 8.8.8.8
    "::ffff:8.8.8.8",
])
def test_public_addresses_stay_accepted(address: str) -> None:
    assert check_url(f"https://[{address}]/hook", allow_private=False).host == address
