"""The pandas CSV splitter of batch uploads: a long-format CSV (unique_id,timestamp,value, or Nixtla's
unique_id,ds,y) into its series, either the whole file at once (any row order) or series by series as it is
read (each series' rows contiguous). Pandas loads only when a split runs, in a job worker.

Any further column is a covariate: a series carries its cells as text under ``columns`` (name -> one cell per
row), judged with the series by app.batches.covariates, where a bad cell is that series' own error."""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Iterator
from typing import IO, Any

CSV_COLUMNS = ("unique_id", "timestamp", "value")
NIXTLA_COLUMNS = {"ds": "timestamp", "y": "value"}


class UploadError(Exception):
    def __init__(self, message: str, issue: str, provided: Any = "") -> None:
        super().__init__(message)
        self.envelope = {"code": "INVALID_REQUEST", "message": message,
                         "details": {"field": "body", "issue": issue, "provided": provided}}


class NotGrouped(Exception):
    """A series' rows are not all in one run: the upload cannot be split as it is read."""


class SplitUpload:
    """The series found in an upload, handed out once each in order of first appearance: each is let go of
    as it is handed out, so the worker never holds the rows twice (as rows and as series)."""

    def __init__(self, found: dict[str, tuple[list[list[str]], list[list[Any]], list[list[list[str]]]]],
                 covariates: list[str]) -> None:
        self._found = found
        self._count = len(found)
        self._covariates = covariates

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[dict[str, Any]]:
        while self._found:
            unique_id = next(iter(self._found))
            stamps, values, cells = self._found.pop(unique_id)
            yield _series(unique_id, [t for part in stamps for t in part], [v for part in values for v in part],
                          self._covariates, [[c for part in column for c in part] for column in cells])


def _series(unique_id: str, stamps: list[Any], values: list[Any], covariates: list[str],
            cells: list[list[str]]) -> dict[str, Any]:
    """A series as the workers take it; ``columns`` only when the upload has covariate columns, so a series of a
    three-column upload is stored exactly as before."""
    one: dict[str, Any] = {"id": unique_id, "timestamps": stamps, "values": values}
    if covariates:
        one["columns"] = dict(zip(covariates, cells, strict=True))
    return one


# Rows per parser frame. The whole-file split keeps large frames (every series is held anyway); the streamed
# one reads a small first frame, so the first series reach a worker at once, then frames that bound what it
# holds (a parsed row is several Python objects, so rows per frame, not bytes read, set its memory).
WHOLE_FRAME_ROWS = 500_000
FIRST_FRAME_ROWS = 10_000
FRAME_ROWS = 100_000


def _read_errors() -> tuple[type[BaseException], ...]:
    import pandas as pd

    return (pd.errors.ParserError, pd.errors.ParserWarning, pd.errors.EmptyDataError, UnicodeDecodeError,
            ValueError)


def _unreadable(exc: BaseException) -> UploadError:
    return UploadError("The CSV could not be read.", f"invalid CSV: {str(exc)[:120]}")


def _reader(spool: IO[bytes], rows: int) -> Any:
    import pandas as pd

    # pandas closes the file it reads (through its text wrapper) when it is done or dropped: it reads a
    # duplicate of the spool's descriptor, so the spool stays open for a second reading.
    handle = os.fdopen(os.dup(spool.fileno()), "rb")
    try:
        # index_col=False: pandas would otherwise take a first row with extra fields as a sign that the leading
        # columns are an index, and shift every column; a row too long is an error either way (a warning,
        # made one, for the first row).
        return pd.read_csv(handle, dtype=str, keep_default_na=False, na_filter=False, chunksize=rows,
                           encoding="utf-8-sig", index_col=False)
    except BaseException:
        handle.close()
        raise


def _checked(frame: Any) -> Any:
    if "timestamp" not in frame.columns and "value" not in frame.columns:
        frame = frame.rename(columns=NIXTLA_COLUMNS)  # unique_id,ds,y: the same columns under Nixtla's names
    missing = [column for column in CSV_COLUMNS if column not in frame.columns]
    if missing:
        raise UploadError("The CSV must have the columns unique_id,timestamp,value (or unique_id,ds,y).",
                          "missing column " + missing[0], ",".join(map(str, frame.columns))[:64])
    return frame


def covariate_columns(frame: Any) -> list[str]:
    """The upload's covariate columns, in the file's order: every column but the three of the series."""
    return [str(name) for name in frame.columns if name not in CSV_COLUMNS]


def _values(frame: Any) -> list[Any]:
    import numpy as np

    texts = frame["value"].to_numpy(dtype=object)
    try:
        # Python's float() on each text, correctly rounded as JSON numbers are read (pandas' own parsers may
        # differ in the last digit).
        values: list[Any] = texts.astype(np.float64).tolist()
    except ValueError:
        values = [_cell_value(text) for text in texts.tolist()]
    return values


def _too_many(max_series: int) -> UploadError:
    return UploadError(f"The upload holds more than {max_series:,} series: more than were counted when it "
                       f"arrived, or than a batch may hold.", "too many series", f"more than {max_series}")


def _spool(pieces: Iterator[bytes]) -> IO[bytes]:
    spool = tempfile.TemporaryFile()
    for piece in pieces:
        spool.write(piece)
    spool.seek(0)
    return spool


def series_from_csv(pieces: Iterator[bytes], *, max_series: int) -> SplitUpload:
    """The series of a long-format CSV (unique_id,timestamp,value), in order of first appearance, each row in
    file order, the whole file at once (split_whole)."""
    with _spool(pieces) as spool:
        return split_whole(spool, max_series=max_series)


def split_whole(spool: IO[bytes], *, max_series: int) -> SplitUpload:
    """The series of a long-format CSV (unique_id,timestamp,value), in order of first appearance, each row in
    file order, with every series held until the end (any row order is accepted). Values are numbers where
    the text is one; other text is handed on as it is (and an empty cell as null), so the series check names
    it exactly as it names such a value in JSON."""
    import pandas as pd

    found: dict[str, tuple[list[list[str]], list[list[Any]], list[list[list[str]]]]] = {}
    covariates: list[str] = []
    with warnings.catch_warnings():
        try:
            warnings.simplefilter("error", pd.errors.ParserWarning)
            with _reader(spool, WHOLE_FRAME_ROWS) as reader:
                for frame in reader:
                    frame = _checked(frame)
                    covariates = covariate_columns(frame)
                    values = _values(frame)
                    stamps = frame["timestamp"].to_numpy(dtype=object)
                    cells = [frame[name].to_numpy(dtype=object) for name in covariates]
                    for unique_id, rows in frame.groupby("unique_id", sort=False).indices.items():
                        entry = found.get(unique_id)
                        if entry is None:
                            if len(found) >= max_series:
                                raise _too_many(max_series)
                            entry = found[unique_id] = ([], [], [[] for _ in covariates])
                        entry[0].append(stamps[rows].tolist())
                        entry[1].append([values[row] for row in rows.tolist()])
                        for column, texts in zip(entry[2], cells, strict=True):
                            column.append(texts[rows].tolist())
        except _read_errors() as exc:
            raise _unreadable(exc) from exc
    return SplitUpload(found, covariates)


def _frames(spool: IO[bytes]) -> Iterator[Any]:
    """The parser's frames, a small one first; a read error as the UploadError the whole-file split gives (the
    parser's messages name lines of the file, whatever the frame)."""
    import pandas as pd

    rows = FIRST_FRAME_ROWS
    with warnings.catch_warnings():
        # The filter holds only while the parser runs: the caller may compute series between frames.
        warnings.simplefilter("error", pd.errors.ParserWarning)
        try:
            reader = _reader(spool, FRAME_ROWS)
        except _read_errors() as exc:
            raise _unreadable(exc) from exc
    with reader:
        while True:
            with warnings.catch_warnings():
                warnings.simplefilter("error", pd.errors.ParserWarning)
                try:
                    frame = reader.get_chunk(rows)
                except StopIteration:
                    return
                except _read_errors() as exc:
                    raise _unreadable(exc) from exc
            rows = FRAME_ROWS
            yield _checked(frame)


def grouped_series(spool: IO[bytes], *, max_series: int) -> Iterator[dict[str, Any]]:
    """The series of a CSV whose series' rows are contiguous, each handed out as soon as the next series
    starts: the same series, values and errors as split_whole, in the same order. Raises NotGrouped on
    meeting a series again after another (before handing out anything of that frame), and UploadError where
    split_whole would (possibly after handing out the series before the error)."""
    import numpy as np

    finished: set[str] = set()
    current: str | None = None
    stamps: list[Any] = []
    values: list[Any] = []
    cells: list[list[str]] = []
    count = 0
    for frame in _frames(spool):
        covariates = covariate_columns(frame)
        ids = frame["unique_id"].to_numpy(dtype=object)
        if not len(ids):
            continue
        bounds = [0, *(np.flatnonzero(ids[1:] != ids[:-1]) + 1).tolist(), len(ids)]
        runs = [ids[start] for start in bounds[:-1]]
        if len(set(runs)) != len(runs) or any(run in finished or (run == current and index) for index, run in
                                               enumerate(runs)):
            raise NotGrouped
        frame_values = _values(frame)
        frame_stamps = frame["timestamp"].to_numpy(dtype=object)
        frame_cells = [frame[name].to_numpy(dtype=object) for name in covariates]
        for index, run in enumerate(runs):
            if run != current:
                if current is not None:
                    finished.add(current)
                    yield _series(current, stamps, values, covariates, cells)
                if count >= max_series:
                    raise _too_many(max_series)
                count += 1
                current, stamps, values, cells = run, [], [], [[] for _ in covariates]
            start, end = bounds[index], bounds[index + 1]
            stamps.extend(frame_stamps[start:end].tolist())
            values.extend(frame_values[start:end])
            for column, texts in zip(cells, frame_cells, strict=True):
                column.extend(texts[start:end].tolist())
    if current is not None:
        yield _series(current, stamps, values, covariates, cells)


def _cell_value(text: str) -> Any:
    """A value cell that is not a plain number: NaN and the infinities as floats (reported as not finite), an
    empty cell as null (reported as missing), anything else as the text (reported as not a number)."""
    if not text.strip():
        return None
    try:
        return float(text)
    except ValueError:
        return text
