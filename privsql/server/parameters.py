"""Query parameters of the extended protocol (``$1``), written into the SQL as literals.

privsql analyses SQL text, so a client's bound parameters (psycopg's server-side binding,
psycopg's own catalog look-ups, JDBC's prepared statements) are spelt into the statement
as SQL literals before it is analysed: numbers as numbers, everything else as quoted
strings (which DuckDB casts where a number, date or timestamp is compared with them).
"""

from __future__ import annotations

import itertools
import struct

from sqlglot.tokens import TokenType

from privsql.dbapi import literal_text
from rewriter.dialect import PrivSQL

_BINARY = {
    16: lambda b: b == b"\x01",  # bool
    20: lambda b: struct.unpack("!q", b)[0],  # int8
    21: lambda b: struct.unpack("!h", b)[0],  # int2
    23: lambda b: struct.unpack("!i", b)[0],  # int4
    700: lambda b: struct.unpack("!f", b)[0],  # float4
    701: lambda b: struct.unpack("!d", b)[0],  # float8
    25: lambda b: b.decode(),  # text
    1043: lambda b: b.decode(),  # varchar
    0: lambda b: b.decode(),  # unknown
}
"""Binary parameter formats understood, by type OID."""
_NUMERIC = {20, 21, 23, 700, 701, 1700}


def decode(value: bytes | None, oid: int, binary: bool) -> object:
    """One bound parameter's value; raises ``ValueError`` for a binary format not known."""
    if value is None:
        return None
    if binary:
        if oid not in _BINARY:
            raise ValueError(f"binary parameters of type {oid} are not supported")
        return _BINARY[oid](value)
    text = value.decode()
    if oid in _NUMERIC:
        return float(text) if any(c in text for c in ".eEn") else int(text)
    if oid == 16:
        return text.lower() in {"t", "true", "1", "on", "yes"}
    return text


def bind(sql: str, values: list[object]) -> str:
    """``sql`` with each ``$n`` (outside strings and comments) replaced by ``values[n-1]``;
    raises ``ValueError`` for a ``$n`` with no value."""
    tokens = PrivSQL().tokenize(sql)
    pieces, position = [], 0
    for token, following in itertools.pairwise(tokens):
        if token.token_type != TokenType.PARAMETER or following.token_type != TokenType.NUMBER:
            continue
        if following.start != token.end + 1:
            continue
        index = int(following.text) - 1
        if not 0 <= index < len(values):
            raise ValueError(f"there is no value for parameter ${index + 1}")
        pieces += [sql[position : token.start], literal_text(values[index])]
        position = following.end + 1
    return "".join([*pieces, sql[position:]])
