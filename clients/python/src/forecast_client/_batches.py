"""Batches from the client's side: a long pandas frame to the service's CSV upload (streamed in pieces), the
batch's status, the polling schedule, a small progress bar, and the results' CSV back to a frame."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import IO, TYPE_CHECKING, Any

from forecast_client._errors import ForecastClientError
from forecast_client._series import _pandas_frequency, infer_frequency, normalize_frequency

if TYPE_CHECKING:
    import pandas as pd

FINISHED = frozenset({"done", "failed", "cancelled"})
# Rows per CSV piece handed to the connection: a few MB of text, so a frame of any size streams in bounded memory.
UPLOAD_ROWS = 50_000
# Polling: the first look soon (small batches finish in a second), then further apart, never more than this.
POLL_FIRST, POLL_GROWTH, POLL_MAX = 0.5, 1.5, 10.0
FORECAST_COLUMNS = ["unique_id", "timestamp", "lower", "median", "upper"]
ERROR_COLUMNS = ["unique_id", "code", "message", "details"]


class Records(tuple[dict[str, Any], ...]):
    """Rows as plain dicts, which is how a frame's ``attrs`` hold the series that failed and a backtest's summary
    (``pd.DataFrame(records)`` makes a frame of them). Not a DataFrame: pandas compares attrs when it concatenates
    frames, and so when it prints a wide one, and a DataFrame has no truth value. Shared between frames rather
    than copied: pandas deep-copies attrs on every operation (each column read, each group of a groupby), which
    would copy every failed series' record each time."""

    __slots__ = ()

    def __deepcopy__(self, memo: dict[int, Any]) -> Records:
        return self


def records(frame: pd.DataFrame) -> Records:
    """The frame's rows, with numpy scalars as Python ones so that the attrs also serialise to JSON (parquet)."""
    return Records(frame.to_dict("records"))


@dataclass(frozen=True)
class Batch:
    """A batch as GET /batches/{id} describes it. ``error`` is set when its upload could not be read."""

    id: str
    kind: str
    status: str
    total: int
    done: int
    failed: int
    model_id: str | None
    parameters: dict[str, Any]
    created_at: datetime | None
    finished_at: datetime | None
    expires_at: datetime | None
    error: dict[str, Any] | None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Batch:
        progress = body.get("progress") or {}
        return cls(
            id=str(body["id"]),
            kind=str(body["kind"]),
            status=str(body["status"]),
            total=int(progress.get("total") or 0),
            done=int(progress.get("done") or 0),
            failed=int(progress.get("failed") or 0),
            model_id=body.get("model_id"),
            parameters=dict(body.get("parameters") or {}),
            created_at=_instant(body.get("created_at")),
            finished_at=_instant(body.get("finished_at")),
            expires_at=_instant(body.get("expires_at")),
            error=body.get("error"),
        )


def _instant(value: Any) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


class BatchFailed(ForecastClientError):
    """The batch as a whole failed (its upload could not be read) or was cancelled; ``batch`` says which."""

    def __init__(self, batch: Batch) -> None:
        reason = (batch.error or {}).get("message") if batch.status == "failed" else "it was cancelled"
        super().__init__(f"batch {batch.id} {batch.status}: {reason}")
        self.batch = batch


class BatchTimeout(TimeoutError, ForecastClientError):
    """The batch did not finish within the wait asked for; it goes on, resume it with its ``batch_id``."""

    def __init__(self, batch: Batch) -> None:
        super().__init__(f"batch {batch.id} not finished ({batch.done + batch.failed:,} of {batch.total:,} series); "
                         f"resume with batch_id={batch.id!r}")
        self.batch = batch
        self.batch_id = batch.id


# -- the frame going in -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PreparedFrame:
    """The three columns in upload order, with what is needed to give results back in the input's terms."""

    frame: pd.DataFrame
    frequency: str
    tz: tzinfo | None
    ids: dict[str, Any]  # the id as sent (text) -> the id as given, so results keep the input's id type
    # Covariate columns after the three (their future rows, value empty, already in the frame), and those whose
    # values are categories even when numbers.
    exog: tuple[str, ...] = ()
    categorical: frozenset[str] = frozenset()


def prepare_frame(
    df: pd.DataFrame, frequency: str | None, id_col: str, time_col: str, value_col: str,
    exog: tuple[str, ...] = (), categorical: frozenset[str] = frozenset(),
) -> PreparedFrame:
    import pandas as pd

    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"forecast_many takes a pandas DataFrame in long format, not {type(df).__name__}")
    missing = [name for name in (id_col, time_col, value_col) if name not in df.columns]
    if missing:
        raise ValueError(f"the frame has no column {missing[0]!r} (columns: {', '.join(map(str, df.columns))}); "
                         "name the columns with id_col=, time_col=, value_col=")
    if df.empty:
        raise ValueError("the frame has no rows")
    covariates = df[list(exog)].reset_index(drop=True)
    frame = df[[id_col, time_col, value_col]]
    frame.columns = pd.Index(["unique_id", "timestamp", "value"])
    if frame["unique_id"].isna().any():
        raise ValueError(f"column {id_col!r} has missing ids")
    stamps = frame["timestamp"]
    if not pd.api.types.is_datetime64_any_dtype(stamps):
        if pd.api.types.is_object_dtype(stamps) and stamps.map(type).eq(str).all():
            stamps = pd.to_datetime(stamps, format="ISO8601")
        else:
            stamps = pd.to_datetime(stamps)
    if stamps.isna().any():
        raise ValueError(f"column {time_col!r} has missing timestamps (row {int(stamps.isna().to_numpy().argmax())})")
    frame = pd.DataFrame({"unique_id": frame["unique_id"].to_numpy(), "timestamp": stamps.reset_index(drop=True),
                          "value": pd.to_numeric(frame["value"], errors="coerce").reset_index(drop=True)})
    for name in exog:
        frame[name] = covariates[name]
    # The service wants each series' rows in time order; statsforecast-style frames usually are already.
    if not _in_time_order(frame):
        frame = frame.sort_values(["unique_id", "timestamp"], kind="stable", ignore_index=True)
    tz = stamps.dt.tz
    resolved = normalize_frequency(frequency) if frequency is not None else _frame_frequency(frame)
    ids = {str(value): value for value in pd.unique(frame["unique_id"])}
    return PreparedFrame(frame=frame, frequency=resolved, tz=tz, ids=ids, exog=tuple(exog),
                         categorical=frozenset(categorical))


def _frame_frequency(frame: pd.DataFrame) -> str:
    """The spacing of the longest series (its first 200 points): a frame's series share one frequency."""
    import pandas as pd

    sizes = frame.groupby("unique_id", sort=False).size()
    longest = frame.loc[frame["unique_id"] == sizes.idxmax(), "timestamp"].iloc[:200]
    if len(longest) < 2:
        raise ValueError("cannot infer the frequency from series of one point; pass frequency=")
    index = pd.DatetimeIndex(longest)
    # pandas' inference first, as forecast() does for a Series: it knows a zone's days across a DST change.
    return _pandas_frequency(index) or infer_frequency(list(index.to_pydatetime()))


def _in_time_order(frame: pd.DataFrame) -> bool:
    """Whether each series' rows are in time order (equal times allowed, as the service judges them). Vectorised:
    a groupby check costs a Python call per series (0.6 s for 9,000 series)."""
    import numpy as np
    import pandas as pd

    codes, _ = pd.factorize(frame["unique_id"])
    order = np.argsort(codes, kind="stable")
    codes, times = codes[order], frame["timestamp"].to_numpy()[order]
    same = codes[1:] == codes[:-1]
    return bool((times[1:][same] >= times[:-1][same]).all())


def csv_pieces(prepared: PreparedFrame, rows: int = UPLOAD_ROWS) -> Iterator[bytes]:
    """The upload body, ``rows`` rows at a time: the frame is never written out whole. The text is what pandas'
    ``to_csv`` writes (csv quoting of ids, NaN as an empty cell, floats in their shortest exact form), built from
    each distinct id and timestamp formatted once: to_csv formats every cell and took most of a submission."""
    import pandas as pd

    yield ",".join(["unique_id", "timestamp", "value", *map(_csv_field, prepared.exog)]).encode() + b"\n"
    frame = prepared.frame
    id_codes, ids = pd.factorize(frame["unique_id"])
    id_text = [_csv_field(str(value)) for value in ids]
    for start in range(0, len(frame), rows):
        part = frame.iloc[start:start + rows]
        time_codes, times = pd.factorize(part["timestamp"])
        time_text = _service_times(pd.Series(times)).tolist()
        values = part["value"].to_numpy()
        value_text = list(map(repr, values.tolist()))
        for missing in (values != values).nonzero()[0].tolist():
            value_text[missing] = ""
        columns = [map(id_text.__getitem__, id_codes[start:start + rows].tolist()),
                   map(time_text.__getitem__, time_codes.tolist()), value_text]
        if prepared.exog:
            from forecast_client._covariates import cell_texts

            columns += [cell_texts(part[name], name in prepared.categorical) for name in prepared.exog]
        lines = map(",".join, zip(*columns, strict=True))
        yield ("\n".join(lines) + "\n").encode()


def _csv_field(text: str) -> str:
    """One cell as the csv module (and so pandas) writes it: quoted only when it holds a comma, quote or break."""
    if any(c in text for c in ',"\r\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


def _service_times(stamps: pd.Series) -> pd.Series:
    """The service's timestamp text, vectorised: strftime formats row by row in Python, which took most of the
    time to submit a million-row frame (6 s of 9)."""
    import numpy as np
    import pandas as pd

    has_fraction = bool((stamps.dt.microsecond != 0).any() or (stamps.dt.nanosecond != 0).any())
    unit = "us" if has_fraction else "s"
    local = stamps if stamps.dt.tz is None else stamps.dt.tz_localize(None)
    # numpy's text for whole seconds is YYYY-MM-DDTHH:MM:SS, and with microseconds .ffffff: strftime's %f.
    text = pd.Series(np.datetime_as_string(local.to_numpy(dtype=f"datetime64[{unit}]"), unit=unit),
                     index=stamps.index, dtype=object)
    if stamps.dt.tz is None:
        return text
    utc = stamps.dt.tz_convert("UTC").dt.tz_localize(None)
    minutes = ((local - utc) // pd.Timedelta(minutes=1)).astype("int64")
    # A zone has a handful of offsets: each is written once.
    offsets = {m: f"{'-' if m < 0 else '+'}{abs(m) // 60:02d}:{abs(m) % 60:02d}" for m in minutes.unique()}
    return text + minutes.map(offsets)


# -- the results coming back ------------------------------------------------------------------------------


def read_forecast_csv(body: IO[bytes], ids: Mapping[str, Any] | None, tz: tzinfo | None) -> pd.DataFrame:
    """The results' CSV (unique_id,timestamp,lower,median,upper,error) as the forecast frame, with the
    series that failed in ``frame.attrs["errors"]``: Records of unique_id, code, message, details."""
    import pandas as pd

    # round_trip: the numbers read back exactly as the service wrote them (pandas' default parser may differ
    # in the last digit), so a batch's forecast equals forecast()'s.
    raw = pd.read_csv(body, dtype={"unique_id": str, "timestamp": str, "error": str}, keep_default_na=False,
                      na_values={"lower": [""], "median": [""], "upper": [""]}, float_precision="round_trip")
    # The service writes an id that a spreadsheet would run as a formula (or that starts with an apostrophe)
    # with one leading apostrophe (docs/batches.md): removing one gives the id back.
    raw["unique_id"] = raw["unique_id"].str.replace(r"^'", "", regex=True)
    failed = raw["error"] != ""
    forecasts = raw.loc[~failed, FORECAST_COLUMNS].reset_index(drop=True)
    forecasts["timestamp"] = _parse_times(forecasts["timestamp"], tz)
    envelopes = [json.loads(text)["error"] for text in raw.loc[failed, "error"]]
    errors = pd.DataFrame({
        "unique_id": raw.loc[failed, "unique_id"].to_numpy(),
        "code": [e.get("code") for e in envelopes],
        "message": [e.get("message") for e in envelopes],
        "details": [e.get("details") or {} for e in envelopes],
    }, columns=ERROR_COLUMNS)
    if ids:
        forecasts["unique_id"] = forecasts["unique_id"].map(ids)
        errors["unique_id"] = errors["unique_id"].map(ids)
    forecasts.attrs["errors"] = records(errors)
    return forecasts


def _parse_times(texts: pd.Series, tz: tzinfo | None) -> pd.Series:
    import pandas as pd

    if texts.empty:
        return pd.Series(pd.DatetimeIndex([], tz=tz), index=texts.index)
    first = texts.iloc[0]
    if not (first.endswith("Z") or first[-6:-5] in "+-" and first[-3:-2] == ":"):
        return pd.to_datetime(texts, format="ISO8601")
    utc = pd.to_datetime(texts, format="ISO8601", utc=True)
    return utc.dt.tz_convert(tz) if tz is not None else utc


# -- waiting ----------------------------------------------------------------------------------------------


def next_poll(previous: float | None, retry_after: float | None) -> float:
    """Seconds until the next look at the batch: Retry-After when the service gave one, else growing."""
    if retry_after is not None:
        return retry_after
    if previous is None:
        return POLL_FIRST
    return min(POLL_MAX, previous * POLL_GROWTH)


class ProgressBar:
    """One line on stderr, redrawn in place: ``batch bat_… [#####.....] 1,234/10,000 series, 3 failed, 12 s``.
    Shown only when stderr is a terminal (unless asked), so logs and pipelines get none of it."""

    WIDTH = 30

    def __init__(self, enabled: bool | None, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = _is_tty(self.stream) if enabled is None else enabled
        self.started = time.monotonic()
        self._drawn = False

    def update(self, batch: Batch) -> None:
        if not self.enabled:
            return
        finished = batch.done + batch.failed
        share = finished / batch.total if batch.total else (1.0 if batch.finished else 0.0)
        filled = int(self.WIDTH * share)
        line = (f"batch {batch.id} [{'#' * filled}{'.' * (self.WIDTH - filled)}] {finished:,}/{batch.total:,} "
                f"series, {batch.failed:,} failed, {batch.status}, {time.monotonic() - self.started:.0f} s")
        self.stream.write("\r" + line + "\x1b[K")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self.enabled and self._drawn:
            self.stream.write("\n")
            self.stream.flush()


def _is_tty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


# -- backtests --------------------------------------------------------------------------------------------


def level_text(confidence: float) -> str:
    """The interval columns' level as statsforecast names them: 95 for 0.95, 97.5 for 0.975."""
    return f"{round(confidence * 100, 6):g}"


def read_backtest_csv(body: IO[bytes], ids: Mapping[str, Any] | None, tz: tzinfo | None, confidence: float,
                      names: tuple[str, str, str]) -> pd.DataFrame:
    """A backtest's CSV (unique_id,cutoff,timestamp,actual,model,lower,median,upper,error) in the shape of
    statsforecast's ``cross_validation``: one row per series, cut-off and timestamp, the actual value, and per
    model its median and interval columns (``<model>``, ``<model>-lo-<level>``, ``<model>-hi-<level>``).
    ``names``: the frame's id, time and value column names, as the input had them."""
    import pandas as pd

    raw = pd.read_csv(body, dtype={"unique_id": str, "cutoff": str, "timestamp": str, "model": str, "error": str},
                      keep_default_na=False, na_values={name: [""] for name in ("actual", "lower", "median", "upper")},
                      float_precision="round_trip")
    failed = raw["error"] != ""
    rows = raw.loc[~failed]
    level = level_text(confidence)
    id_col, time_col, value_col = names
    keys = ["unique_id", "timestamp", "cutoff"]
    wide = rows.pivot_table(index=keys, columns="model", values=["median", "lower", "upper"], sort=False)
    actual = rows.drop_duplicates(keys).set_index(keys)["actual"]
    out = pd.DataFrame({"y": actual})
    for model in dict.fromkeys(rows["model"]):
        out[model] = wide[("median", model)]
        out[f"{model}-lo-{level}"] = wide[("lower", model)]
        out[f"{model}-hi-{level}"] = wide[("upper", model)]
    out = out.reset_index()
    out["timestamp"] = _parse_times(out["timestamp"], tz)
    out["cutoff"] = _parse_times(out["cutoff"], tz)
    if ids:
        out["unique_id"] = out["unique_id"].map(ids)
    out = out[["unique_id", "timestamp", "cutoff", "y", *out.columns[4:]]]
    out = out.rename(columns={"unique_id": id_col, "timestamp": time_col, "y": value_col})
    envelopes = [json.loads(text)["error"] for text in raw.loc[failed, "error"]]
    errors = pd.DataFrame({
        "unique_id": raw.loc[failed, "unique_id"].map(ids) if ids else raw.loc[failed, "unique_id"].to_numpy(),
        "code": [e.get("code") for e in envelopes],
        "message": [e.get("message") for e in envelopes],
        "details": [e.get("details") or {} for e in envelopes],
    }, columns=ERROR_COLUMNS)
    out.attrs["errors"] = records(errors)
    return out
