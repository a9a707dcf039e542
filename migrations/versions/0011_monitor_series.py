"""monitors: series, one per label set, each with its own points, detector state, incidents and alert sequence

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25

Every monitor gets one series holding what it stored so far (its points, their state, its open incident and its
event sequence), with the empty label set; on a monitor fed by Prometheus (a query, or remote write) that series'
labels are left unknown (NULL), and the first label set that reaches the monitor afterwards takes it over, so
the stream it followed goes on with its history. Points and events gain the series they belong to.

The downgrade keeps each monitor's first series (the one migrated up, or else its oldest) and deletes the
others' points and events: a monitor of several series is one stream again.
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

# What a series holds of a stream's state, as the monitors table held it before.
STATE = ("point_count", "first_epoch", "last_epoch", "revision", "relearn_revision", "event_seq",
         "open_anomaly_epoch", "alertmanager_refreshed_at")
POINT_COLUMNS = ("monitor_id", "epoch", "timestamp", "value", "expected", "lower", "upper", "score", "is_anomaly",
                 "direction", "warmup", "feedback")


def _point_table(name: str, *, with_series: bool) -> sa.Table:
    columns = [
        sa.Column("monitor_id", sa.String(32), sa.ForeignKey("monitors.id", ondelete="CASCADE"), primary_key=True),
    ]
    if with_series:
        columns.append(sa.Column("series_id", sa.BigInteger(),
                                 sa.ForeignKey("monitor_series.id", ondelete="CASCADE"), primary_key=True))
    columns += [
        sa.Column("epoch", sa.BigInteger(), primary_key=True),
        sa.Column("timestamp", sa.String(40), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("expected", sa.Float(), nullable=False),
        sa.Column("lower", sa.Float(), nullable=False),
        sa.Column("upper", sa.Float(), nullable=False),
        sa.Column("score", sa.Float(), nullable=False),
        sa.Column("is_anomaly", sa.Boolean(), nullable=False),
        sa.Column("direction", sa.String(8), nullable=True),
        sa.Column("warmup", sa.Boolean(), nullable=False),
        sa.Column("feedback", sa.String(16), nullable=True),
    ]
    return op.create_table(name, *columns)


def _sqlite() -> bool:
    return op.get_bind().dialect.name == "sqlite"


def upgrade() -> None:
    op.create_table(
        "monitor_series",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("monitor_id", sa.String(32), sa.ForeignKey("monitors.id", ondelete="CASCADE"), nullable=False),
        sa.Column("labels_key", sa.String(32), nullable=False),
        sa.Column("labels", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(), nullable=False),
        sa.Column("point_count", sa.BigInteger(), nullable=False),
        sa.Column("first_epoch", sa.BigInteger(), nullable=True),
        sa.Column("last_epoch", sa.BigInteger(), nullable=True),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        sa.Column("relearn_revision", sa.BigInteger(), nullable=False),
        sa.Column("event_seq", sa.BigInteger(), nullable=False),
        sa.Column("open_anomaly_epoch", sa.BigInteger(), nullable=True),
        sa.Column("alertmanager_refreshed_at", sa.DateTime(), nullable=True),
        sa.UniqueConstraint("monitor_id", "labels_key", name="uq_monitor_series_labels"),
        sqlite_autoincrement=True,
    )
    state = ", ".join(STATE)
    op.execute(
        f"INSERT INTO monitor_series (monitor_id, labels_key, labels, created_at, last_seen_at, {state}) "
        "SELECT id, '', CASE WHEN prometheus_query IS NULL AND remote_write_selector IS NULL THEN '{}' END, "
        f"created_at, updated_at, {state} FROM monitors ORDER BY id"
    )

    # The points: keyed by their series too.
    kept = ", ".join(POINT_COLUMNS)
    if _sqlite():
        _point_table("monitor_points_next", with_series=True)
        op.execute(f"INSERT INTO monitor_points_next (series_id, {kept}) SELECT s.id, "
                   + ", ".join(f"p.{c}" for c in POINT_COLUMNS)
                   + " FROM monitor_points p JOIN monitor_series s ON s.monitor_id = p.monitor_id")
        op.drop_table("monitor_points")
        op.rename_table("monitor_points_next", "monitor_points")
    else:
        op.add_column("monitor_points", sa.Column("series_id", sa.BigInteger(), nullable=True))
        op.execute("UPDATE monitor_points SET series_id = s.id FROM monitor_series s "
                   "WHERE s.monitor_id = monitor_points.monitor_id")
        op.alter_column("monitor_points", "series_id", existing_type=sa.BigInteger(), nullable=False)
        op.drop_constraint("monitor_points_pkey", "monitor_points", type_="primary")
        op.create_primary_key("monitor_points_pkey", "monitor_points", ["monitor_id", "series_id", "epoch"])
        op.create_foreign_key("monitor_points_series_id_fkey", "monitor_points", "monitor_series", ["series_id"],
                              ["id"], ondelete="CASCADE")

    # The events: numbered per series.
    with op.batch_alter_table("monitor_events") as batch:
        batch.add_column(sa.Column("series_id", sa.BigInteger(), nullable=True))
    op.execute("UPDATE monitor_events SET series_id = "
               "(SELECT s.id FROM monitor_series s WHERE s.monitor_id = monitor_events.monitor_id)")
    with op.batch_alter_table("monitor_events") as batch:
        batch.alter_column("series_id", existing_type=sa.BigInteger(), nullable=False)
        batch.drop_constraint("uq_monitor_events_monitor_seq", type_="unique")
        batch.create_unique_constraint("uq_monitor_events_series_seq", ["series_id", "seq"])

    with op.batch_alter_table("monitors") as batch:
        for name in STATE:
            batch.drop_column(name)
        batch.add_column(sa.Column("series_refused", sa.BigInteger(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("series_refused_at", sa.DateTime(), nullable=True))


def downgrade() -> None:
    first = "(SELECT min(f.id) FROM monitor_series f WHERE f.monitor_id = monitors.id)"
    with op.batch_alter_table("monitors") as batch:
        batch.drop_column("series_refused_at")
        batch.drop_column("series_refused")
        batch.add_column(sa.Column("point_count", sa.BigInteger(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("first_epoch", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("last_epoch", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("revision", sa.BigInteger(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("relearn_revision", sa.BigInteger(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("event_seq", sa.BigInteger(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("open_anomaly_epoch", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("alertmanager_refreshed_at", sa.DateTime(), nullable=True))
    for name in STATE:
        fallback = "0" if name in ("point_count", "revision", "relearn_revision", "event_seq") else "NULL"
        op.execute(f"UPDATE monitors SET {name} = COALESCE((SELECT s.{name} FROM monitor_series s "
                   f"WHERE s.id = {first}), {fallback})")
    # A revision the old code has never seen, so no process keeps a state it would take for this one.
    op.execute("UPDATE monitors SET revision = revision + 1, relearn_revision = revision + 1")

    others = "series_id NOT IN (SELECT min(f.id) FROM monitor_series f GROUP BY f.monitor_id)"
    op.execute(f"DELETE FROM monitor_delivery_attempts WHERE event_id IN (SELECT id FROM monitor_events WHERE "
               f"{others})")
    op.execute(f"DELETE FROM monitor_events WHERE {others}")
    with op.batch_alter_table("monitor_events") as batch:
        batch.drop_constraint("uq_monitor_events_series_seq", type_="unique")
        batch.create_unique_constraint("uq_monitor_events_monitor_seq", ["monitor_id", "seq"])
        batch.drop_column("series_id")

    op.execute(f"DELETE FROM monitor_points WHERE {others}")
    kept = ", ".join(POINT_COLUMNS)
    if _sqlite():
        _point_table("monitor_points_before", with_series=False)
        op.execute(f"INSERT INTO monitor_points_before ({kept}) SELECT {kept} FROM monitor_points")
        op.drop_table("monitor_points")
        op.rename_table("monitor_points_before", "monitor_points")
    else:
        op.drop_constraint("monitor_points_series_id_fkey", "monitor_points", type_="foreignkey")
        op.drop_constraint("monitor_points_pkey", "monitor_points", type_="primary")
        op.drop_column("monitor_points", "series_id")
        op.create_primary_key("monitor_points_pkey", "monitor_points", ["monitor_id", "epoch"])
    op.drop_table("monitor_series")
