"""The per-account quota on stored batch data (docs/batches.md, Limits): the bytes of an account's stored
batch submissions (a CSV upload as received, a JSON batch's body), from submission until the batch expires or
is deleted. A submission that cannot fit beside what is stored is refused with 429 and nothing is kept; one
larger than the quota by itself is a 413. Rate limits bound how often a key submits, not how much it keeps:
without this, one account could fill the database's disk for everyone."""

from __future__ import annotations

from datetime import UTC, datetime

from app.batches import store
from app.db import Database
from app.errors import InputTooLarge, QuotaExceeded
from app.series.instants import moment_text

# Asked again after this long when none of the account's batches has an expiry yet (all still running).
RETRY_SECONDS = 60


def larger_than_quota(size: int, quota: int) -> InputTooLarge:
    return InputTooLarge(
        f"The batch's {size:,} bytes are more than the account's quota of {quota:,} bytes of stored batch data.",
        details={"field": "body", "issue": "larger than the account's batch data quota", "provided": f"{size} bytes",
                 "maximum": quota},
    )


def over_quota(database: Database, account_id: str, *, stored: int, size: int, quota: int) -> QuotaExceeded:
    expiry = store.first_expiry(database, account_id)
    now = datetime.now(UTC)
    wait = max(1, int((expiry - now).total_seconds())) if expiry is not None and expiry > now else RETRY_SECONDS
    return QuotaExceeded(
        f"The account keeps {stored:,} bytes of batch data; {size:,} more would pass its quota of {quota:,} "
        f"bytes. Delete finished batches (DELETE /batches/{{id}}) or wait for them to expire.",
        details={"limit": quota, "window": "stored batch data", "stored": stored, "provided": f"{size} bytes",
                 **({"reset_time": moment_text(expiry)} if expiry is not None else {})},
        retry_after=wait,
    )


def check(database: Database, account_id: str, *, size: int, quota: int, counted: int = 0) -> None:
    """Refuses ``size`` more bytes of the account's batch data past ``quota``. ``counted``: bytes of this
    submission already counted in what is stored (an upload's pieces so far)."""
    if size + counted > quota:
        raise larger_than_quota(size + counted, quota)
    stored = store.stored_bytes(database, account_id)
    if stored + size > quota:
        raise over_quota(database, account_id, stored=stored - counted, size=size + counted, quota=quota)
