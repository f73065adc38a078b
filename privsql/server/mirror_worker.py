"""The schema mirror's process: an in-memory DuckDB database holding the served database's
tables without their rows, answering catalog queries sent on standard input.

It runs as a script of its own (``python mirror_worker.py``), importing only DuckDB and
Arrow, never privsql, and is started by ``privsql.server.catalog.SchemaMirror``. Catalog
queries run as the client wrote them (translated to DuckDB's dialect), outside privsql's
analysis, so they run in a process that never holds private data: a DuckDB memory bug a
query reaches (red team 30: ``strftime``'s ``%n`` returned uninitialised heap memory,
which in the server's own process once held another analyst's per-unit rows; a JSON to
VARIANT cast overflowed the stack and killed the server) reads or kills this process
only. Its memory holds schemas and catalog queries, which are public.

Messages are frames: a 4-byte big-endian length, then the bytes. The first frame is the
set-up, a JSON list of statements; each later frame is one query, answered by a status
byte (0: an Arrow IPC stream follows, 1: the first line of DuckDB's message) and a frame.
"""

from __future__ import annotations

import json
import os
import resource
import struct
import sys
from typing import BinaryIO

import duckdb
import pyarrow as pa

_LENGTH = struct.Struct(">I")

LIMITS = {"threads": 1, "memory_limit": "'256MB'"}
"""DuckDB settings of the mirror: a catalog query needs little (red team 31 took one to
3.75 GB in its time limit)."""

ADDRESS_SPACE = 2 * 2**30
"""The process's address-space limit: DuckDB's memory limit leaves out the strings an
expression builds (``repeat(repeat('x', 1e8), 40)`` took a mirror to 3 GB, red team 32)."""

ANSWER_LIMIT = 16 * 2**20
"""The most bytes of Arrow an answer may hold: catalogs are small, and a large answer
costs the server's memory as it is sent."""

ANSWER_ROWS = 100_000
"""The most rows an answer may have (a column of NULLs takes no bytes: red team 33 sent
ten million rows of them)."""


def read_frame(stream: BinaryIO) -> bytes | None:
    """The next frame's bytes, or None at the end of the stream."""
    header = stream.read(_LENGTH.size)
    if len(header) < _LENGTH.size:
        return None
    (length,) = _LENGTH.unpack(header)
    body = stream.read(length)
    return body if len(body) == length else None


def frame(payload: bytes) -> bytes:
    return _LENGTH.pack(len(payload)) + payload


def _answer(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[int, bytes]:
    sink = pa.BufferOutputStream()
    try:
        batches = con.sql(sql).to_arrow_reader(batch_size=2048)
        rows = 0
        with pa.ipc.new_stream(sink, batches.schema) as writer:
            for batch in batches:
                writer.write_batch(batch)
                rows += batch.num_rows
                if sink.tell() > ANSWER_LIMIT or rows > ANSWER_ROWS:
                    return 1, b"the catalog answer is too large"
    except (duckdb.Error, pa.ArrowException) as error:
        return 1, (str(error).strip().splitlines() or [type(error).__name__])[0].encode()
    return 0, sink.getvalue().to_pybytes()


def main() -> None:
    requests, replies = sys.stdin.buffer, os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # nothing DuckDB might print reaches the replies
    set_up = read_frame(requests)
    if set_up is None:
        return
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    con = duckdb.connect(":memory:")
    for statement in json.loads(set_up):
        con.execute(statement)
    while (request := read_frame(requests)) is not None:
        status, payload = _answer(con, request.decode())
        replies.write(bytes([status]) + frame(payload))
        replies.flush()


if __name__ == "__main__":
    main()
