"""Sweep results on disk: Parquet shards in one folder, one row per point.

What a results folder survives (docs/sweeps.md, "What a sweep survives"):

- A crash at any moment (kill -9, power loss): a shard is written to a hidden temporary file in the
  folder, flushed to disk (fsync), renamed into place (os.replace, atomic) and the folder entry synced,
  so the folder holds whole shards and at most a temporary file, which the next run removes.
- A shard that cannot be read anyway (a disk fault, a copy cut short, a shard written in place by an
  older version): the next run moves it to `quarantine/` with a one-line warning and computes its points
  again; `load` and `query` skip it with a warning.
- Two runs into one folder: a run holds an exclusive lock on a file of the folder (flock, which the OS
  releases when the process dies, even by kill -9); a second run is refused with one sentence.
- Duplicates: a run skips the keys already stored, and `load` and `query` keep one row per key.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any, BinaryIO

from madmax.errors import ConfigError
from madmax.sweep.evaluate import BREAKDOWN_PREFIXES, COLUMNS

SHARD_GLOB = "part-*.parquet"
TMP_GLOBS = (".part-*.tmp", ".sweep.json.*.tmp")
META = "sweep.json"
FAILURES = "failures.jsonl"
LOCK = ".sweep.lock"
QUARANTINE = "quarantine"


class SweepWarning(UserWarning):
    """Something wrong in a results folder that was worked around (one sentence)."""


def _warn(message: str) -> None:
    warnings.warn(message, SweepWarning, stacklevel=3)


def _arrow_type(name: str):
    import pyarrow as pa

    return {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_()}[name]


def to_table(rows: list[dict[str, Any]]):
    """Rows as an Arrow table: the declared columns with their types, then breakdown columns as float64."""
    import pyarrow as pa

    extra = sorted({k for r in rows for k in r if k not in COLUMNS})
    unknown = [k for k in extra if not k.startswith(BREAKDOWN_PREFIXES)]
    assert not unknown, f"undeclared columns {unknown}"
    schema = pa.schema([(k, _arrow_type(t)) for k, t in COLUMNS.items()] + [(k, pa.float64()) for k in extra])
    return pa.Table.from_pylist(rows, schema=schema)


class ShardWriter:
    """Buffers rows and writes a shard every `flush_rows` rows or `flush_s` seconds (and on `flush`)."""

    def __init__(self, directory: Path, flush_rows: int = 1000, flush_s: float = 30.0) -> None:
        self.directory, self.flush_rows, self.flush_s = Path(directory), flush_rows, flush_s
        self.rows: list[dict[str, Any]] = []
        self.written = 0
        self._last = time.monotonic()
        self._count = 0

    def add(self, rows: list[dict[str, Any]]) -> None:
        self.rows.extend(rows)
        if len(self.rows) >= self.flush_rows or time.monotonic() - self._last >= self.flush_s:
            self.flush()

    def flush(self) -> None:
        import pyarrow.parquet as pq

        self._last = time.monotonic()
        if not self.rows:
            return
        self._count += 1
        name = f"part-{time.time_ns():020d}-{os.getpid()}-{self._count:05d}.parquet"
        table = to_table(self.rows)
        try:
            write_atomically(self.directory / name, lambda f: pq.write_table(table, f))
        except OSError as exc:
            raise ConfigError(f"results folder {str(self.directory)!r}: a shard cannot be written "
                              f"({exc.strerror or type(exc).__name__}); its {len(self.rows)} rows are computed "
                              "again when the sweep is resumed") from None
        self.written += len(self.rows)
        self.rows = []


def write_atomically(path: Path, write: Callable[[BinaryIO], None], tmp: Path | None = None) -> None:
    """Write a file so that `path` is either absent, its old content or the whole new content, even if the
    process dies or the machine stops: a temporary file in the same folder, fsync, os.replace, and a sync
    of the folder entry. The temporary file is removed if writing fails."""
    tmp = tmp or path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _sync_folder(path.parent)


def _sync_folder(directory: Path) -> None:
    """Make a rename in `directory` durable (POSIX; Windows cannot open a folder for fsync)."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some file systems cannot sync a folder; the rename itself is still atomic
        pass
    finally:
        os.close(fd)


def shard_paths(directory: str | Path) -> list[Path]:
    return sorted(Path(directory).glob(SHARD_GLOB))


def remove_partial(directory: Path) -> int:
    """Delete temporary files of writes that were interrupted; returns how many. Call it holding `locked`."""
    paths = [p for pattern in TMP_GLOBS for p in directory.glob(pattern)]
    for path in paths:
        path.unlink(missing_ok=True)
    return len(paths)


def _unreadable():
    """The exceptions a damaged Parquet file raises when read."""
    import pyarrow as pa

    return (OSError, ValueError, pa.ArrowException)


def _reason(exc: BaseException) -> str:
    """The gist of a read error: its first sentence, without the file name."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    text = re.sub(r"^.*(input source|file) '[^']*'[:,]?\s*", "", text) or text
    return text.split(". ")[0].rstrip(".")


def completed_keys(directory: Path) -> set[str]:
    """Keys of the points stored in the shards of `directory`. Each shard is read whole; one that cannot be
    read is moved to `quarantine/` (with a warning), so its points count as not done. Call it holding
    `locked`."""
    import pyarrow.parquet as pq

    keys: set[str] = set()
    for path in shard_paths(directory):
        try:
            keys.update(pq.read_table(path).column("key").to_pylist())
        except _unreadable() as exc:
            quarantine(path, _reason(exc))
    return keys


def quarantine(path: Path, reason: str) -> Path:
    """Move a damaged shard to `quarantine/` beside it, with a one-line warning; returns its new path."""
    folder = path.parent / QUARANTINE
    folder.mkdir(exist_ok=True)
    target = folder / path.name
    os.replace(path, target)
    _warn(f"shard {path.name} in {str(path.parent)!r} cannot be read ({reason}); moved to {QUARANTINE}/, "
          "its points are computed again")
    return target


def _skip(path: Path, reason: str) -> None:
    _warn(f"skipping shard {path.name} in {str(path.parent)!r}: it cannot be read ({reason}); a resumed sweep "
          "computes its points again")


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Hold the exclusive lock of a results folder while one run writes it; ConfigError (one sentence) when
    another process holds it. The OS drops the lock when the holder exits or is killed."""
    path = directory / LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ConfigError(f"results folder {str(directory)!r} cannot be locked ({exc.strerror}); "
                          "allowed: a folder this user can write") from None
    try:
        if not _try_lock(fd, directory):
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() if hasattr(os, "pread") else ""
            by = f" (process {holder})" if holder.isdigit() else ""
            raise ConfigError(f"results folder {str(directory)!r} is being written by another sweep{by}; "
                              "wait for it to finish, or give another --out")
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        yield
    finally:
        os.close(fd)  # closing the file releases the lock


def _try_lock(fd: int, directory: Path) -> bool:
    """Take the lock without waiting: False if another process holds it; True (with a warning) where the
    file system cannot lock."""
    try:
        import fcntl
    except ImportError:  # Windows: lock the first byte
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as exc:  # e.g. ENOLCK on a network file system without locks
        _warn(f"results folder {str(directory)!r} cannot be locked ({exc.strerror}); do not run two sweeps "
              "into it at once")
    return True


def write_meta(directory: Path, meta: dict[str, Any]) -> None:
    text = json.dumps(meta, indent=2, default=str).encode()
    write_atomically(directory / META, lambda f: f.write(text), directory / f".{META}.{os.getpid()}.tmp")


def read_meta(directory: str | Path) -> dict[str, Any]:
    path = Path(directory) / META
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):  # damaged by hand or by a disk fault: the shards still hold every row
        return {}


def _check_dir(directory: str | Path) -> list[Path]:
    path = Path(directory)
    if not path.is_dir():
        raise ConfigError(f"results folder {str(path)!r} does not exist; allowed: a folder written by `madmax sweep`")
    shards = shard_paths(path)
    if not shards:
        raise ConfigError(f"results folder {str(path)!r} has no result shards ({SHARD_GLOB}); run `madmax sweep` first")
    return shards


def _none_readable(directory: str | Path) -> ConfigError:
    return ConfigError(f"results folder {str(directory)!r} has no readable result shards; run `madmax sweep` "
                       "again to compute their points")


def load(directory: str | Path):
    """Every row of a results folder as a pandas DataFrame, one per key, in the order of the sweep file.
    A shard that cannot be read is skipped with a warning."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = []
    for path in _check_dir(directory):
        try:
            tables.append(pq.read_table(path))
        except _unreadable() as exc:
            _skip(path, _reason(exc))
    if not tables:
        raise _none_readable(directory)
    frame = pa.concat_tables(tables, promote_options="default").to_pandas()
    frame = frame.drop_duplicates("key").sort_values(["index", "key"], kind="stable")
    return frame.reset_index(drop=True)


def _footer_readable(path: Path) -> bool:
    import pyarrow.parquet as pq

    try:
        pq.read_metadata(path)
    except _unreadable() as exc:
        _skip(path, _reason(exc))
        return False
    return True


def query_rows(directory: str | Path, sql: str) -> tuple[list[str], list[tuple]]:
    """(column names, rows) of `sql` over the table `results`, by DuckDB: the rows of every readable shard of
    `directory`, one per key. A shard whose footer cannot be read, or that DuckDB fails to decode, is skipped
    with a warning."""
    import duckdb

    shards = [p for p in _check_dir(directory) if _footer_readable(p)]
    while shards:
        files = ", ".join("'" + str(p).replace("'", "''") + "'" for p in shards)
        con = duckdb.connect()
        try:
            con.execute(f"CREATE VIEW results AS SELECT DISTINCT ON (key) * FROM read_parquet([{files}], "
                        "union_by_name = true)")
            cur = con.execute(sql)
            if cur.description is None:
                return [], []
            return [d[0] for d in cur.description], cur.fetchall()
        except duckdb.Error as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            damaged = [p for p in shards if str(p) in str(exc)]
            if not damaged:
                raise ConfigError(f"query failed: {first}") from None
            for path in damaged:
                _skip(path, _reason(exc))
            shards = [p for p in shards if p not in damaged]
        finally:
            con.close()
    raise _none_readable(directory)


def query(directory: str | Path, sql: str):
    """The result of `sql` over the table `results` as a pandas DataFrame."""
    import pandas as pd

    columns, rows = query_rows(directory, sql)
    return pd.DataFrame.from_records(rows, columns=columns)


def display_value(value: Any) -> str:
    """A query cell for people: whole numbers as integers with thousands separators (4,023,470), other
    numbers to 6 significant digits without an exponent where that stays short (0.0123457, 1,234.57),
    missing as empty."""
    if value is None:
        return ""
    if isinstance(value, Decimal):  # DuckDB's exact decimals (0.5 * x)
        value = int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if value.is_integer() and abs(value) < _EXACT_INTEGERS:
        return f"{int(value):,}"
    if not _PLAIN_LOW <= abs(value) < _EXACT_INTEGERS:
        return f"{value:.{_SIGNIFICANT}g}"
    decimals = max(0, _SIGNIFICANT - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


_SIGNIFICANT = 6  # digits shown of a fractional number
_PLAIN_LOW = 1e-4  # smaller magnitudes are shown with an exponent (1.23457e-05)
_EXACT_INTEGERS = 2.0**53  # every whole float below this is an exact integer
