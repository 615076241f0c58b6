"""Sweep results on disk: Parquet shards in one folder, one row per point, written atomically.

A shard is written to a hidden temporary file and renamed into place, so a sweep killed at any moment
leaves only whole shards (a half-written temporary file is removed on the next run). The keys in the
shards are the points done: a resumed sweep skips them, so nothing is lost and nothing is duplicated.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from madmax.errors import ConfigError
from madmax.sweep.evaluate import BREAKDOWN_PREFIXES, COLUMNS

SHARD_GLOB = "part-*.parquet"
TMP_GLOB = ".part-*.tmp"
META = "sweep.json"
FAILURES = "failures.jsonl"


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
        tmp = self.directory / f".{name}.tmp"
        pq.write_table(to_table(self.rows), tmp)
        os.replace(tmp, self.directory / name)
        self.written += len(self.rows)
        self.rows = []


def shard_paths(directory: str | Path) -> list[Path]:
    return sorted(Path(directory).glob(SHARD_GLOB))


def remove_partial(directory: Path) -> int:
    """Delete temporary files of shards whose write was interrupted; returns how many."""
    paths = list(directory.glob(TMP_GLOB))
    for path in paths:
        path.unlink()
    return len(paths)


def completed_keys(directory: Path) -> set[str]:
    """Keys of the points stored in the shards of `directory`."""
    import pyarrow.parquet as pq

    keys: set[str] = set()
    for path in shard_paths(directory):
        keys.update(pq.read_table(path, columns=["key"]).column("key").to_pylist())
    return keys


def write_meta(directory: Path, meta: dict[str, Any]) -> None:
    tmp = directory / f".{META}.tmp"
    tmp.write_text(json.dumps(meta, indent=2, default=str), encoding="utf-8")
    os.replace(tmp, directory / META)


def read_meta(directory: str | Path) -> dict[str, Any]:
    path = Path(directory) / META
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _check_dir(directory: str | Path) -> list[Path]:
    path = Path(directory)
    if not path.is_dir():
        raise ConfigError(f"results folder {str(path)!r} does not exist; allowed: a folder written by `madmax sweep`")
    shards = shard_paths(path)
    if not shards:
        raise ConfigError(f"results folder {str(path)!r} has no result shards ({SHARD_GLOB}); run `madmax sweep` first")
    return shards


def load(directory: str | Path):
    """Every row of a results folder as a pandas DataFrame, in the order of the sweep file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = [pq.read_table(p) for p in _check_dir(directory)]
    frame = pa.concat_tables(tables, promote_options="default").to_pandas()
    frame = frame.drop_duplicates("key").sort_values(["index", "key"], kind="stable")
    return frame.reset_index(drop=True)


def _connect(directory: str | Path):
    import duckdb

    files = ", ".join("'" + str(p).replace("'", "''") + "'" for p in _check_dir(directory))
    con = duckdb.connect()
    con.execute(f"CREATE VIEW results AS SELECT * FROM read_parquet([{files}], union_by_name = true)")
    return con


def query_rows(directory: str | Path, sql: str) -> tuple[list[str], list[tuple]]:
    """(column names, rows) of `sql` over the table `results` (every shard of `directory`), by DuckDB."""
    import duckdb

    con = _connect(directory)
    try:
        cur = con.execute(sql)
        if cur.description is None:
            return [], []
        return [d[0] for d in cur.description], cur.fetchall()
    except duckdb.Error as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"query failed: {first}") from None
    finally:
        con.close()


def query(directory: str | Path, sql: str):
    """The result of `sql` over the table `results` as a pandas DataFrame."""
    import pandas as pd

    columns, rows = query_rows(directory, sql)
    return pd.DataFrame.from_records(rows, columns=columns)
