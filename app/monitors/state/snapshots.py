"""A series' detector state saved in the database every SNAPSHOT_ROWS points (more often while the series is
young), so a process that does not hold it (after a restart, or when another process or host served the series), or
holds one more than SNAPSHOT_ROWS points behind, replays only the points stored since.

Without it such a process rebuilt the state by replaying the stored points the series' step and season need
(StreamingDetector.rebuild_rows: 23,101 to 71,651), each judged again, so every restart judged that many points for
every series of a fleet before its verdicts were current again. A saved state is written once per SNAPSHOT_ROWS
points of its series, so its bytes and its encoding are shared by that many points (bench/results/restart.md). A
young series is saved each time it has judged twice the rows it had at its last save (from FIRST_SAVE_ROWS on), so a
process that lacks it replays at most about half its points, not all of them: a fleet created together and moved to
another process (a restart in its first hours) costs that much less. Its states are small (their windows are not
full), so these saves add about as many bytes as the first regular one.

A saved state is used only when it is as valid as a cached one: at a revision no older than the series'
relearn_revision (a "not an anomaly" changed the history it learnt from) and in the layout the running
detector reads (app.compute.detect.snapshot.LAYOUT; another release's state is rebuilt, then saved anew).
"""

from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy import Connection, bindparam, select

from app.compute.detect import snapshot
from app.db import Prepared
from app.monitors.records import monitor_snapshots_table
from app.monitors.state.cache import JudgeState

log = logging.getLogger("app.monitors.snapshots")

# Points a series' state advances between saves (in each process that judges it): what a process that lacks the
# state replays at most, against one save of the state per this many points.
SNAPSHOT_ROWS = 1_000
FIRST_SAVE_ROWS = 64  # a series' first save: a state of fewer rows is cheaper to replay than to read back
# Series created together (a fleet) would otherwise reach each save on the same append and all be saved in
# one transaction: each series' saves come after a share of the interval of its own (by its id).
_SPREAD = 2_654_435_761  # Knuth's multiplicative hash: consecutive ids spread over the whole range

_SNAPSHOTS = monitor_snapshots_table
_READ = Prepared(select(_SNAPSHOTS.c.revision, _SNAPSHOTS.c.last_epoch, _SNAPSHOTS.c.state)
                 .where(_SNAPSHOTS.c.series_id == bindparam("series_id"),
                        _SNAPSHOTS.c.layout == bindparam("layout"),
                        _SNAPSHOTS.c.revision > bindparam("after")))
_DELETE = Prepared(_SNAPSHOTS.delete().where(_SNAPSHOTS.c.series_id == bindparam("series_id")))
_INSERT = Prepared(_SNAPSHOTS.insert())
_NAMES = ("series_id", "monitor_id", "revision", "last_epoch", "layout", "state", "saved_at")


def interval(rows: int) -> int:
    """Points between two saves of a state that has judged ``rows`` rows: half of them (a young series is saved at
    about 64, 128, 256, ... of its rows), at least FIRST_SAVE_ROWS, at most SNAPSHOT_ROWS."""
    return min(SNAPSHOT_ROWS, max(FIRST_SAVE_ROWS, rows // 2))


def unsaved_start(series_id: int, replayed: int, rows: int) -> int:
    """What a state of ``rows`` rows, restored or rebuilt over ``replayed`` points, counts as not yet saved: those
    points, less its series' share of the interval (a rebuild is saved at once; a fleet's saves fall on different
    appends)."""
    return replayed - (series_id * _SPREAD) % SNAPSHOT_ROWS * interval(rows) // SNAPSHOT_ROWS


def restore(connection: Connection, series_id: int, relearn_revision: int, after: int = -1) -> JudgeState | None:
    """The series' saved state, if one can stand for it (see the module's docstring) and is at a revision past
    ``after`` (a state already held), at its saved revision."""
    row = _READ.execute(connection, {"series_id": series_id, "layout": snapshot.LAYOUT, "after": after}).fetchone()
    if row is None or row[0] < relearn_revision:
        return None
    try:
        state = snapshot.decode(bytes(row[2]))
    except snapshot.SnapshotError as exc:
        log.warning("a saved detector state could not be read; rebuilding it",
                    extra={"fields": {"series_id": series_id, "error": str(exc)}})
        return None
    return JudgeState(revision=int(row[0]), detector=state, size=0, last_epoch=int(row[1]))


def forget(connection: Connection, series_id: int) -> None:
    """Deletes the series' saved state (one its detector failed from must not be restored again)."""
    _DELETE.execute(connection, {"series_id": series_id})


def save_if_due(connection: Connection, *, monitor_id: str, series_id: int, judged: JudgeState, points: int,
                now: datetime) -> None:
    """Counts ``points`` more into the state's unsaved points and saves it (in the caller's transaction) once
    they reach its interval. ``judged`` is at its new revision, after those points."""
    judged.unsaved += points
    if judged.unsaved < interval(judged.detector.rows) or judged.last_epoch is None:
        return
    _DELETE.execute(connection, {"series_id": series_id})
    _INSERT.insert_rows(connection, _NAMES, [(series_id, monitor_id, judged.revision, judged.last_epoch,
                                              snapshot.LAYOUT, snapshot.encode(judged.detector), now)])
    judged.unsaved = 0
