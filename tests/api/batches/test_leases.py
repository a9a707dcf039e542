"""The batch store's leases on SQLite and PostgreSQL: one holder per chunk, a lease that runs out passes the
chunk on, a holder that lost its lease cannot store results, and a batch is done with its last chunk."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from app.batches import leases, preparation, store, stored_results, sweep
from app.db import Database
from tests.support import migrate, settings_for

TTL = timedelta(hours=1)


@pytest.fixture
def database(database_url: str) -> Iterator[Database]:
    settings = settings_for(database_url)
    migrate(settings)
    db = Database(settings)
    yield db
    db.dispose()


def new_batch(database: Database, count: int = 4, chunk_series: int = 2, lease_seconds: float = 60) -> store.Batch:
    series = [{"id": f"s{i}", "timestamps": [], "values": []} for i in range(count)]
    return store.create_batch(database, key_id="key_1", account_id="acct", kind="forecast",
                              parameters={"fields": {}, "headers": {"X-Model-Id": "forecast-model-1"}}, series=series,
                              chunk_series=chunk_series, lease_seconds=lease_seconds)


def test_one_holder_and_results_stored_once(database: Database) -> None:
    batch = new_batch(database)
    first = leases.claim_chunk(database, batch.id, 1, lease_seconds=60)
    assert first is not None and [s["id"] for s in first.series] == ["s1", "s2"]
    assert leases.claim_chunk(database, batch.id, 1, lease_seconds=60) is None
    assert leases.complete_chunk(database, first, [b'{"id":"s1"}\n', b'{"id":"s2"}\n'], succeeded=2, failed=0,
                                ttl=TTL)
    assert not leases.complete_chunk(database, first, [b"again\n"], succeeded=2, failed=0, ttl=TTL)
    assert leases.claim_chunk(database, batch.id, 1, lease_seconds=60) is None
    running = store.get_batch(database, "acct", batch.id)
    assert running is not None and running.status == "running" and running.series_done == 2
    assert list(stored_results.done_outputs(database, batch.id)) == [b'{"id":"s1"}\n{"id":"s2"}\n']


def test_the_first_chunks_grow_from_one_series_to_the_chunk_size(database: Database) -> None:
    batch = new_batch(database, count=10, chunk_series=4)
    assert batch.chunks_total == 4
    claimed = [leases.claim_chunk(database, batch.id, seq, lease_seconds=60) for seq in range(4)]
    assert [[s["id"] for s in chunk.series] for chunk in claimed if chunk is not None] == [
        ["s0"], ["s1", "s2"], ["s3", "s4", "s5", "s6"], ["s7", "s8", "s9"]]
    assert [chunk.first_index for chunk in claimed if chunk is not None] == [0, 1, 3, 7]


def test_a_lease_that_runs_out_passes_the_chunk_on(database: Database) -> None:
    batch = new_batch(database, count=3)  # chunks of 1 and 2 series
    stalled = leases.claim_chunk(database, batch.id, 1, lease_seconds=0.2)
    assert stalled is not None
    time.sleep(0.3)
    assert sweep.requeue_stalled(database, held_only=True, lease_seconds=60).chunks == [(batch.id, 1)]
    # Marked as queued again: the next sweep does not enqueue it a second time.
    assert sweep.requeue_stalled(database, lease_seconds=60).chunks == []
    taker = leases.claim_chunk(database, batch.id, 1, lease_seconds=60)
    assert taker is not None
    assert not leases.renew(database, stalled, lease_seconds=60)
    assert not leases.complete_chunk(database, stalled, [b"late\n"], succeeded=1, failed=1, ttl=TTL)
    assert leases.complete_chunk(database, taker, [b"x\n"], succeeded=1, failed=1, ttl=TTL)
    first = leases.claim_chunk(database, batch.id, 0, lease_seconds=60)
    assert first is not None and leases.complete_chunk(database, first, [b"y\n"], succeeded=1, failed=0, ttl=TTL)
    done = store.get_batch(database, "acct", batch.id)
    assert done is not None and done.status == "done" and (done.series_done, done.series_failed) == (2, 1)
    assert done.expires_at is not None and done.finished_at is not None
    assert list(stored_results.done_outputs(database, batch.id)) == [b"y\n", b"x\n"]


def test_work_never_taken_within_a_lease_is_queued_again(database: Database,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # The sweep's clock is set, not waited for: with a lease of 0.3 s a loaded machine once took longer than the
    # lease between queuing the batch and the first sweep.
    queued = store.now_utc()
    batch = new_batch(database, count=3, lease_seconds=60)  # chunks of 1 and 2 series
    monkeypatch.setattr(sweep, "now_utc", lambda: queued + timedelta(seconds=1))
    # Queued a moment ago: its task may still be waiting in the engine's queue.
    assert sweep.requeue_stalled(database, lease_seconds=60).chunks == []
    monkeypatch.setattr(sweep, "now_utc", lambda: queued + timedelta(seconds=120))
    # Not taken within a lease: its task was lost (a consumer killed between taking it and claiming the chunk),
    # and it is queued again, whatever else the queue holds; a finishing worker leaves that to the sweep.
    assert sweep.requeue_stalled(database, held_only=True, lease_seconds=60).chunks == []
    assert sorted(sweep.requeue_stalled(database, lease_seconds=60).chunks) == [(batch.id, 0), (batch.id, 1)]
    assert sweep.requeue_stalled(database, lease_seconds=60).chunks == []  # once per lease
    # The old task and the new one both run: the first takes the chunk, the second does nothing, and the
    # chunk's results are stored once.
    taker = leases.claim_chunk(database, batch.id, 0, lease_seconds=60)
    assert taker is not None and leases.claim_chunk(database, batch.id, 0, lease_seconds=60) is None
    assert leases.complete_chunk(database, taker, [b"r0\n"], succeeded=1, failed=0, ttl=TTL)
    assert leases.claim_chunk(database, batch.id, 0, lease_seconds=60) is None
    assert list(stored_results.done_outputs(database, batch.id)) == [b"r0\n"]


def test_cancel_leaves_a_record_and_no_data(database: Database) -> None:
    batch = new_batch(database)
    holder = leases.claim_chunk(database, batch.id, 0, lease_seconds=60)
    assert holder is not None
    assert not store.cancel(database, "other-account", batch.id, ttl=TTL)
    assert store.cancel(database, "acct", batch.id, ttl=TTL)
    assert not leases.complete_chunk(database, holder, [b"x\n"], succeeded=2, failed=0, ttl=TTL)
    cancelled = store.get_batch(database, "acct", batch.id)
    assert cancelled is not None and cancelled.status == "cancelled" and cancelled.series_done == 0
    assert leases.claim_chunk(database, batch.id, 1, lease_seconds=60) is None


def uploaded(database: Database) -> tuple[str, str]:
    """A CSV batch whose upload has arrived, and a lease on splitting it."""
    batch_id = store.start_upload(database, key_id="key_1", account_id="acct", kind="forecast",
                                  parameters={"fields": {}, "headers": {"X-Model-Id": "forecast-model-1"}})
    store.add_upload_piece(database, batch_id, 0, b"unique_id,timestamp,value\n")
    store.finish_upload(database, batch_id, series_total=3, upload_bytes=26, lease_seconds=60)
    token = preparation.claim_preparation(database, batch_id, lease_seconds=60)
    assert token is not None
    return batch_id, token


def one_series(name: str) -> list[dict[str, object]]:
    return [{"id": name, "timestamps": [], "values": []}]


def test_a_split_under_way_hands_out_chunks_and_the_batch_ends_with_its_last(database: Database) -> None:
    batch_id, token = uploaded(database)
    assert preparation.add_prepared_chunk(database, batch_id, token, seq=0, first_index=0, series=one_series("a"),
                                    lease_seconds=60)
    assert not preparation.add_prepared_chunk(database, batch_id, "another", seq=1, first_index=1,
                                        series=one_series("b"), lease_seconds=60)
    first = leases.claim_chunk(database, batch_id, 0, lease_seconds=60)
    assert first is not None and leases.complete_chunk(database, first, [b"a\n"], succeeded=1, failed=0, ttl=TTL)
    # Every chunk stored so far is done, but the split is not: the batch runs on.
    running = store.get_batch(database, "acct", batch_id)
    assert running is not None and running.status == "running" and running.series_done == 1
    assert preparation.add_prepared_chunk(database, batch_id, token, seq=1, first_index=1,
                                    series=one_series("b") + one_series("c"), lease_seconds=60)
    assert preparation.finish_preparation(database, batch_id, token, total=3, ttl=TTL)
    second = leases.claim_chunk(database, batch_id, 1, lease_seconds=60)
    assert second is not None and [s["id"] for s in second.series] == ["b", "c"] and second.first_index == 1
    assert leases.complete_chunk(database, second, [b"b\n", b"c\n"], succeeded=1, failed=1, ttl=TTL)
    done = store.get_batch(database, "acct", batch_id)
    assert done is not None and done.status == "done" and (done.series_done, done.series_failed) == (2, 1)
    assert done.chunks_total == 2 and list(stored_results.done_outputs(database, batch_id)) == [b"a\n", b"b\nc\n"]


def test_a_split_whose_chunks_are_all_done_ends_the_batch_itself(database: Database) -> None:
    batch_id, token = uploaded(database)
    assert preparation.add_prepared_chunk(database, batch_id, token, seq=0, first_index=0, series=one_series("a"),
                                    lease_seconds=60)
    chunk = leases.claim_chunk(database, batch_id, 0, lease_seconds=60)
    assert chunk is not None and leases.complete_chunk(database, chunk, [b"a\n"], succeeded=1, failed=0, ttl=TTL)
    assert preparation.finish_preparation(database, batch_id, token, total=1, ttl=TTL)
    done = store.get_batch(database, "acct", batch_id)
    assert done is not None and done.status == "done" and done.series_total == 1 and done.expires_at is not None


def test_a_split_dropped_or_failed_midway_leaves_no_chunks_results_or_counts(database: Database) -> None:
    batch_id, token = uploaded(database)
    assert preparation.add_prepared_chunk(database, batch_id, token, seq=0, first_index=0, series=one_series("a"),
                                    lease_seconds=60)
    holder = leases.claim_chunk(database, batch_id, 0, lease_seconds=60)
    assert holder is not None and leases.complete_chunk(database, holder, [b"a\n"], succeeded=1, failed=0, ttl=TTL)
    assert not preparation.restart_preparation(database, batch_id, "another")
    assert preparation.restart_preparation(database, batch_id, token)
    queued = store.get_batch(database, "acct", batch_id)
    assert queued is not None and queued.status == "queued" and (queued.series_done, queued.chunks_total) == (0, 0)
    assert list(stored_results.done_outputs(database, batch_id)) == []
    assert preparation.add_prepared_chunk(database, batch_id, token, seq=0, first_index=0, series=one_series("a"),
                                    lease_seconds=60)
    late = leases.claim_chunk(database, batch_id, 0, lease_seconds=60)
    assert late is not None and leases.complete_chunk(database, late, [b"a\n"], succeeded=0, failed=1, ttl=TTL)
    error = {"code": "INVALID_REQUEST", "message": "The CSV could not be read.", "details": {}}
    assert preparation.fail_batch(database, batch_id, token, error, ttl=TTL)
    failed = store.get_batch(database, "acct", batch_id)
    assert failed is not None and failed.status == "failed" and failed.error == error
    assert (failed.series_done, failed.series_failed, failed.chunks_total) == (0, 0, 0)
    assert list(stored_results.done_outputs(database, batch_id)) == []
    assert not preparation.add_prepared_chunk(database, batch_id, token, seq=0, first_index=0, series=one_series("a"),
                                        lease_seconds=60)


def test_a_batch_whose_every_series_failed_ends_failed_with_the_count(database: Database) -> None:
    batch = new_batch(database, count=3)  # chunks of 1 and 2 series
    for seq, failed in ((0, 1), (1, 2)):
        chunk = leases.claim_chunk(database, batch.id, seq, lease_seconds=60)
        assert chunk is not None
        assert leases.complete_chunk(database, chunk, [b"{}\n"] * failed, succeeded=0, failed=failed, ttl=TTL)
    ended = store.get_batch(database, "acct", batch.id)
    assert ended is not None and ended.status == "failed" and ended.finished_at is not None
    assert ended.error == {"code": "DATA_VALIDATION_ERROR",
                           "message": "Every series of the batch failed; each one's error is in its results.",
                           "details": {"field": "series", "issue": "every series failed", "failed": 3}}
    sized = store.create_batch(database, key_id="key_1", account_id="acct", kind="forecast", parameters={},
                               series=[{"id": "x", "timestamps": [], "values": []}], chunk_series=2,
                               lease_seconds=60, body_bytes=1234)
    assert store.stored_bytes(database, "acct") == 1234  # the quota's measure, on either database
    assert store.cancel(database, "acct", sized.id, ttl=TTL) and store.stored_bytes(database, "acct") == 0


def test_chunks_are_claimed_by_fair_share_between_accounts(database: Database) -> None:
    """A small batch of another account waited behind every chunk of a large one queued before it; the next
    chunk is now the fairest: of the account with the fewest chunks being computed, then its oldest batch."""
    series = [{"id": f"s{i}", "timestamps": [], "values": []} for i in range(40)]
    big = store.create_batch(database, key_id="key_a", account_id="acct-a", kind="forecast",
                             parameters={"fields": {}, "headers": {"X-Model-Id": "forecast-model-1"}}, series=series,
                             chunk_series=2, lease_seconds=60)
    first = leases.claim_fairest_chunk(database, lease_seconds=60)
    assert first is not None and (first.batch_id, first.seq) == (big.id, 0)
    small = store.create_batch(database, key_id="key_b", account_id="acct-b", kind="forecast",
                               parameters={"fields": {}, "headers": {"X-Model-Id": "forecast-model-1"}},
                               series=series[:1], chunk_series=2, lease_seconds=60)
    # acct-a has a chunk being computed, acct-b none: acct-b's chunk goes next, though queued after acct-a's.
    second = leases.claim_fairest_chunk(database, lease_seconds=60)
    assert second is not None and (second.batch_id, second.seq) == (small.id, 0)
    # Both accounts now compute one chunk each and only acct-a waits: its chunks follow, in order.
    third = leases.claim_fairest_chunk(database, lease_seconds=60)
    assert third is not None and (third.batch_id, third.seq) == (big.id, 1)
    store.cancel(database, "acct-a", big.id, ttl=TTL)
    assert leases.claim_fairest_chunk(database, lease_seconds=60) is None


def test_an_account_never_served_goes_before_one_just_served(database: Database) -> None:
    """With one worker free at a time, the large batch's account (its chunk just done, none computing) tied at
    zero with a newcomer and won by its older batch: the newcomer waited a whole poller round or chunk. Ties
    now go to the account served least recently."""
    series = [{"id": f"s{i}", "timestamps": [], "values": []} for i in range(40)]
    fields = {"fields": {}, "headers": {"X-Model-Id": "forecast-model-1"}}
    big = store.create_batch(database, key_id="key_a", account_id="acct-a", kind="forecast", parameters=fields,
                             series=series, chunk_series=2, lease_seconds=60)
    small = store.create_batch(database, key_id="key_b", account_id="acct-b", kind="forecast", parameters=fields,
                               series=series[:1], chunk_series=2, lease_seconds=60)
    # acct-a's first chunk was claimed before acct-b's batch arrived (oldest batch first among the never served).
    first = leases.claim_fairest_chunk(database, lease_seconds=60)
    assert first is not None and first.batch_id == big.id
    assert leases.complete_chunk(database, first, [b"{}\n", b"{}\n"], succeeded=2, failed=0, ttl=TTL)
    # Neither computes now; acct-a was served, acct-b never: acct-b's chunk goes next.
    second = leases.claim_fairest_chunk(database, lease_seconds=60)
    assert second is not None and (second.batch_id, second.seq) == (small.id, 0)
    assert leases.complete_chunk(database, second, [b"{}\n"], succeeded=1, failed=0, ttl=TTL)
    third = leases.claim_fairest_chunk(database, lease_seconds=60)
    assert third is not None and (third.batch_id, third.seq) == (big.id, 1)
