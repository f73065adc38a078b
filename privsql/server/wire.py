"""The PostgreSQL wire protocol, through buenavista's protocol core.

buenavista (``buenavista.postgres``) parses and writes the protocol's messages: simple
and extended queries, row descriptions and data rows. privsql's handler keeps those and
replaces what a server facing untrusted clients must do differently:

- authentication is SCRAM-SHA-256 against the analysts' verifiers in the ledger
  (``privsql.server.auth``), before which any other message ends the connection;
- every message's length is checked before it is read (``MAX_MESSAGE``), the start-up
  exchange has a deadline (``STARTUP_TIMEOUT``), and connections are capped;
- errors carry severity, SQLSTATE and a one-line message (buenavista sends only a
  message); notices report the ε each answer cost;
- booleans are written as PostgreSQL writes them in text, ``t`` and ``f`` (buenavista
  writes ``true``, which psql's ``\\du`` and other libpq clients read as false);
- TLS and GSS encryption requests are declined (use a TLS-terminating proxy:
  docs/serving.md);
- each client gets a process id and a secret key from the system's random source
  (BackendKeyData); a cancel request bearing them, the time limit, or the client hanging
  up interrupts the client's statement over public data only, never a private one: a
  release cannot be half-run (``privsql.server.watchdog``).
"""

from __future__ import annotations

import contextlib
import io
import logging
import socket
import struct
import threading
import time
from collections import Counter

from buenavista.core import BVType
from buenavista.postgres import (
    BVTYPE_TO_PGTYPE,
    BuenaVistaHandler,
    BuenaVistaServer,
    BVBuffer,
    BVContext,
    ClientCommand,
    ServerResponse,
)

from privsql.cli import statements
from privsql.interrupt import PUBLIC_TIMEOUT
from privsql.server import parameters, sqlstate
from privsql.server.auth import MECHANISM, Exchange, Failed
from privsql.server.backend import PARAMETERS, Answer, Backend, Refusal
from privsql.server.watchdog import Watchdog

log = logging.getLogger(__name__)

_BOOL_OID, _, _bool_binary = BVTYPE_TO_PGTYPE[BVType.BOOL]
BVTYPE_TO_PGTYPE[BVType.BOOL] = (_BOOL_OID, lambda v: "t" if v else "f", _bool_binary)

MAX_MESSAGE = 1 << 20
"""The largest message a client may send (1 MiB: far more than any SQL statement)."""
MAX_STARTUP = 10_000
"""The largest start-up message (user, database and options)."""
STARTUP_TIMEOUT = 10.0
"""Seconds a client has to finish the start-up and authentication exchange."""
MAX_CONNECTIONS = 256
"""Signed-in clients at once; more are refused with SQLSTATE 53300."""
MAX_PER_ANALYST = 32
"""Signed-in clients of one analyst at once: 256 idle connections of one analyst held every
other analyst out, free (red team 32)."""
MAX_STARTING = 128
"""Clients still in their start-up exchange (not signed in) at once; past it, the one
waiting longest is ended."""
MAX_STARTING_PER_ADDRESS = 16
"""Clients of one network address in their start-up exchange at once: a client with no
password that reopened each connection the start-up deadline ended kept all 256 slots
full (red team 32); now it holds its address's 16, and clients elsewhere sign in."""
PROTOCOL_3 = 196608
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102
SASL, SASL_CONTINUE, SASL_FINAL, OK = 10, 11, 12, 0


class ProtocolError(Exception):
    """The client broke the protocol: answered with an error, then disconnected."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Handler(BuenaVistaHandler):
    """One client connection."""

    server: Server

    def handle(self) -> None:
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
        self.request.settimeout(STARTUP_TIMEOUT)
        self.r = BVBuffer(self.rfile)
        ctx, analyst, signed_in = None, "", False
        address = self.client_address[0] if self.client_address else ""
        if not self.server.admit(self.request, address):
            self._error(sqlstate.TOO_MANY_CONNECTIONS, "too many clients already")
            return
        # The timeout bounds each read; the deadline the whole exchange: a client sending a
        # byte every few seconds held its connection for hours, and 256 such held every
        # analyst out (red team 24).
        deadline = threading.Timer(STARTUP_TIMEOUT, self._expire)
        deadline.start()
        try:
            params = self._startup()
            if params is None:
                return
            analyst = params.get("user", "")
            self._authenticate(analyst)
            if not deadline.is_alive():
                return  # expired while authenticating: the socket is shut
            deadline.cancel()
            signed_in = self.server.sign_in(self.request, address, analyst)
            if not signed_in:
                raise ProtocolError(sqlstate.TOO_MANY_CONNECTIONS, "too many clients already")
            session = self.server.backend.open(analyst)
            ctx = BVContext(session, None, params)
            ctx.process_id, ctx.secret_key = self.server.watchdog.add(session, self.request)
            ctx.authenticated = True
            self.request.settimeout(None)
            self.handle_post_auth(ctx)
            self._serve(ctx)
        except ProtocolError as error:
            self._error(error.code, str(error))
        except Failed:
            self._error(
                sqlstate.INVALID_PASSWORD, f'password authentication failed for user "{analyst}"'
            )
        except (OSError, EOFError, struct.error):
            pass  # the client went away (or timed out); nothing to answer
        except Exception:
            log.exception("a client connection failed")
        finally:
            deadline.cancel()
            if ctx is not None:
                self.server.watchdog.remove(ctx.process_id)  # before its session is given back
                ctx.session.close()
            self.server.leave(self.request, address, analyst if signed_in else None)

    def _expire(self) -> None:
        """End a connection whose start-up and authentication outlived STARTUP_TIMEOUT."""
        with contextlib.suppress(OSError):
            self.request.shutdown(socket.SHUT_RDWR)

    # -- start-up and authentication --------------------------------------------------------

    def _startup(self) -> dict[str, str] | None:
        """The client's start-up parameters, after declining encryption requests; None for
        a cancel request (passed to the watchdog; the connection is then closed, unanswered,
        as PostgreSQL does)."""
        for _ in range(3):
            length = self._uint32()
            if not 8 <= length <= MAX_STARTUP:
                raise ProtocolError(sqlstate.PROTOCOL_VIOLATION, "invalid start-up packet")
            body = self._exactly(length - 4)
            code = struct.unpack("!I", body[:4])[0]
            if code in (SSL_REQUEST, GSSENC_REQUEST):
                self.wfile.write(b"N")
                continue
            if code == CANCEL_REQUEST:
                if length == 16:
                    self.server.watchdog.cancel(*struct.unpack("!II", body[4:12]))
                return None
            if code != PROTOCOL_3:
                raise ProtocolError(sqlstate.PROTOCOL_VIOLATION, "unsupported frontend protocol")
            fields = body[4:].split(b"\x00")
            try:
                words = [f.decode() for f in fields]
            except UnicodeDecodeError:
                raise ProtocolError(
                    sqlstate.PROTOCOL_VIOLATION, "invalid start-up packet"
                ) from None
            return dict(zip(words[0::2], words[1::2], strict=False))
        raise ProtocolError(sqlstate.PROTOCOL_VIOLATION, "invalid start-up packet")

    def _authenticate(self, analyst: str) -> None:
        """SCRAM-SHA-256 (RFC 7677) with the analyst's verifier; raises ``Failed``."""
        exchange = Exchange(self.server.backend.verifier(analyst) if analyst else None, analyst)
        self._auth(SASL, MECHANISM.encode() + b"\x00\x00")
        kind, payload = self._message()
        if kind != ClientCommand.PASSWORD_MESSAGE:
            raise ProtocolError(sqlstate.PROTOCOL_VIOLATION, "authentication is required first")
        mechanism, _, rest = payload.partition(b"\x00")
        if mechanism.decode(errors="replace") != MECHANISM or len(rest) < 4:
            raise Failed()
        size = struct.unpack("!i", rest[:4])[0]
        server_first = exchange.first(rest[4 : 4 + max(size, 0)].decode(errors="replace"))
        self._auth(SASL_CONTINUE, server_first.encode())
        kind, payload = self._message()
        if kind != ClientCommand.PASSWORD_MESSAGE:
            raise ProtocolError(sqlstate.PROTOCOL_VIOLATION, "authentication is required first")
        server_final = exchange.final(payload.decode(errors="replace"))
        self._auth(SASL_FINAL, server_final.encode())
        self._auth(OK, b"")

    def handle_post_auth(self, ctx: BVContext) -> None:
        self.send_parameter_status(PARAMETERS)
        self.send_backend_key_data(ctx)
        self.send_ready_for_query(ctx)

    def _auth(self, code: int, data: bytes) -> None:
        self.wfile.write(
            struct.pack("!cii", ServerResponse.AUTHENTICATION_REQUEST, 8 + len(data), code) + data
        )

    # -- messages -----------------------------------------------------------------------------

    def _serve(self, ctx: BVContext) -> None:
        handlers = {
            ClientCommand.QUERY: self.handle_query,
            ClientCommand.PARSE: self.handle_parse,
            ClientCommand.BIND: self.handle_bind,
            ClientCommand.DESCRIBE: self.handle_describe,
            ClientCommand.EXECUTE: self.handle_execute,
            ClientCommand.CLOSE: self.handle_close,
        }
        while True:
            kind, payload = self._message()
            if kind == ClientCommand.TERMINATE:
                return
            if kind == ClientCommand.SYNC:
                ctx.sync()
                self.send_ready_for_query(ctx)
            elif kind == ClientCommand.FLUSH:
                self.wfile.flush()
            elif kind in handlers:
                try:
                    handlers[kind](ctx, payload)
                except (ValueError, IndexError, KeyError, UnicodeDecodeError, struct.error):
                    # a malformed message, or one naming an unknown statement or portal
                    self.send_error(
                        ProtocolError(sqlstate.PROTOCOL_VIOLATION, "malformed message"), ctx
                    )
            else:
                raise ProtocolError(sqlstate.PROTOCOL_VIOLATION, "unexpected message type")

    def _message(self) -> tuple[bytes, bytes]:
        kind = self._exactly(1)
        length = self._uint32()
        if length < 4:
            raise ProtocolError(sqlstate.PROTOCOL_VIOLATION, "invalid message length")
        if length > MAX_MESSAGE:
            raise ProtocolError(
                sqlstate.PROGRAM_LIMIT, f"message too large (the limit is {MAX_MESSAGE} bytes)"
            )
        return kind, self._exactly(length - 4)

    def _uint32(self) -> int:
        return struct.unpack("!I", self._exactly(4))[0]

    def _exactly(self, size: int) -> bytes:
        data = self.rfile.read(size)
        if len(data) != size:
            raise EOFError
        return data

    def handle_query(self, ctx: BVContext, payload: bytes) -> None:
        """A simple query: one or more statements, each answered (or refused) in turn."""
        text = payload.decode("utf-8").rstrip("\x00")
        pieces = statements(text)
        if not pieces:
            self.wfile.write(struct.pack("!ci", ServerResponse.EMPTY_QUERY_RESPONSE, 4))
        for piece in pieces:
            try:
                answer = ctx.execute_sql(piece)
            except Exception as error:  # send_error hides all but refusals' own messages
                if not isinstance(error, Refusal):
                    log.exception("a statement failed")
                self.send_error(error)
                break
            if answer.has_results():
                self.send_row_description(answer)
                count = self.send_data_rows(answer)
                self.send_command_complete(f"SELECT {count}\x00")
            else:
                self.send_command_complete(f"{answer.status()}\x00")
        self.send_ready_for_query(ctx)

    def handle_bind(self, ctx: BVContext, payload: bytes) -> None:
        """Bind: buenavista's parsing, but parameters decoded by type (buenavista reads a
        text parameter of unknown type as a date)."""
        buffer = BVBuffer(io.BytesIO(payload))
        portal, statement = self._cstring(buffer), self._cstring(buffer)
        formats = [buffer.read_int16() for _ in range(buffer.read_int16())]
        count = buffer.read_int16()
        oids = ctx.stmts[statement][1]
        values = []
        for i in range(count):
            size = buffer.read_int32()
            value = None if size < 0 else buffer.read_bytes(size)
            binary = (formats[i] if len(formats) > 1 else (formats or [0])[0]) == 1
            oid = oids[i] if i < len(oids) else 0
            values.append(parameters.decode(value, oid, binary))
        results = [buffer.read_int16() for _ in range(buffer.read_int16())]
        ctx.add_portal(portal, statement, values, results)
        self.send_bind_complete()

    def handle_describe(self, ctx: BVContext, payload: bytes) -> None:
        """Describe: a portal's description comes from running it (once: Execute returns
        that result); a statement's would need running it with made-up parameter values,
        which could be charged, so it is described without columns (NoData)."""
        if payload[:1] != b"S":
            super().handle_describe(ctx, payload)
            return
        self.send_paramter_description(ctx.stmts[payload[1:-1].decode()][1])
        self.wfile.write(struct.pack("!ci", ServerResponse.NO_DATA, 4))

    @staticmethod
    def _cstring(buffer: BVBuffer) -> str:
        data = bytearray()
        while (byte := buffer.read_byte()) not in (b"\x00", b""):
            data += byte
        return data.decode()

    def send_data_rows(self, query_result: Answer, limit: int = 0) -> int:  # type: ignore[override]
        count = super().send_data_rows(query_result, limit)
        notices, query_result.notices = query_result.notices, ()
        for notice in notices:
            self._notice(notice)
        return count

    def send_error(self, exception: BaseException, ctx: BVContext | None = None) -> None:  # type: ignore[override]
        code = getattr(exception, "code", sqlstate.INTERNAL)
        if not isinstance(exception, Refusal | ProtocolError):
            exception = Refusal(sqlstate.INTERNAL, "internal error; nothing was released")
        self._error(code, str(exception))
        if ctx is not None:
            ctx.mark_error()

    def _error(self, code: str, message: str) -> None:
        self._response(ServerResponse.ERROR_RESPONSE, "ERROR", code, message)

    def _notice(self, message: str) -> None:
        self._response(ServerResponse.NOTICE_RESPONSE, "NOTICE", "00000", message)

    def _response(self, kind: bytes, severity: str, code: str, message: str) -> None:
        fields = b"".join(
            tag + value.encode() + b"\x00"
            for tag, value in ((b"S", severity), (b"V", severity), (b"C", code), (b"M", message))
        )
        try:
            self.wfile.write(kind + struct.pack("!i", len(fields) + 5) + fields + b"\x00")
        except OSError:
            pass  # the client is gone


class Server(BuenaVistaServer):
    """A threaded TCP server of one database; one thread per client."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 128
    """The listen backlog: clients connecting at once wait in it (socketserver's is 5)."""

    def __init__(
        self,
        address: tuple[str, int],
        backend: Backend,
        public_timeout: float | None = PUBLIC_TIMEOUT,
    ) -> None:
        super().__init__(address, None)  # type: ignore[arg-type]
        self.RequestHandlerClass = Handler
        self.backend = backend
        self.watchdog = Watchdog(public_timeout)
        self._connected: set[socket.socket] = set()
        self._connected_lock = threading.Lock()
        self._starting: Counter[str] = Counter()
        self._waiting: dict[socket.socket, None] = {}
        """Clients in their start-up exchange, the longest waiting first."""
        self._signed_in: Counter[str] = Counter()

    def verify_request(self, request: socket.socket, client_address: tuple) -> bool:
        return True  # who may connect is decided by the address served on and by passwords

    def admit(self, client: socket.socket, address: str) -> bool:
        """Count a client in to its start-up exchange, unless ``MAX_STARTING_PER_ADDRESS``
        clients of its address are in theirs. When ``MAX_STARTING`` clients are, the one
        waiting longest is ended to make room: silent clients from many addresses held
        every slot (red team 33), and a client signing in takes milliseconds, so to keep
        it out they would now have to open the whole pool again within them."""
        with self._connected_lock:
            if self._starting[address] >= MAX_STARTING_PER_ADDRESS:
                return False
            if self._starting.total() >= MAX_STARTING and self._waiting:
                oldest = next(iter(self._waiting))
                del self._waiting[oldest]
                with contextlib.suppress(OSError):
                    oldest.shutdown(socket.SHUT_RDWR)  # its handler leaves, counting it out
            self._starting[address] += 1
            self._waiting[client] = None
            self._connected.add(client)
        return True

    def sign_in(self, client: socket.socket, address: str, analyst: str) -> bool:
        """Move a client from its start-up to signed in as ``analyst``, unless
        ``MAX_CONNECTIONS`` clients, or ``MAX_PER_ANALYST`` of the analyst's, are; a client
        refused leaves its start-up slot too (``leave``)."""
        with self._connected_lock:
            self._starting[address] -= 1
            self._waiting.pop(client, None)
            full = self._signed_in.total() >= MAX_CONNECTIONS
            if full or self._signed_in[analyst] >= MAX_PER_ANALYST:
                self._starting[address] += 1  # given back by leave
                return False
            self._signed_in[analyst] += 1
        return True

    def leave(self, client: socket.socket, address: str, analyst: str | None) -> None:
        """Count a client out: signed in as ``analyst``, or (None) in its start-up."""
        with self._connected_lock:
            self._connected.discard(client)
            self._waiting.pop(client, None)
            counter, key = (
                (self._starting, address) if analyst is None else (self._signed_in, analyst)
            )
            counter[key] -= 1
            if counter[key] <= 0:
                del counter[key]

    def disconnect_all(self, timeout: float = 10.0) -> None:
        """End every client's connection, and wait up to ``timeout`` for their handlers to
        finish (a private query running finishes first: its answer is charged; a public one
        is interrupted, its client gone)."""
        with self._connected_lock:
            clients = list(self._connected)
        for client in clients:
            try:
                client.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already gone
        deadline = time.monotonic() + timeout
        while self._connected and time.monotonic() < deadline:
            time.sleep(0.01)
