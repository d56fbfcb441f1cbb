"""server/stdio.py: stdin read by the event loop itself when it is a pipe or a socket of its own."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import tempfile

import pytest
from torch_preflight.server.stdio import PipeReader, readable_by_loop


def test_a_pipe_is_read_by_the_loop_a_file_or_a_shared_socket_is_not() -> None:
    (read, _), (_, write) = os.pipe(), os.pipe()  # an editor's two pipes
    with os.fdopen(read, "rb") as stdin, os.fdopen(write, "wb") as stdout:
        assert readable_by_loop(stdin, stdout)
    with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as stdout:
        assert not readable_by_loop(stdin, stdout)  # a file: asyncio's pipe transport refuses it
    one, other = socket.socketpair()
    with one, other, os.fdopen(os.dup(one.fileno()), "rb") as stdin, os.fdopen(os.dup(one.fileno()), "wb") as stdout:
        assert not readable_by_loop(stdin, stdout)  # one socket both ways: a non-blocking stdin would make stdout non-blocking


@pytest.mark.skipif(sys.platform == "win32", reason="asyncio's pipe transport on Windows is not what the server uses there")
def test_the_reader_gives_pygls_headers_and_bodies_and_nothing_at_the_end() -> None:
    async def scenario() -> list[bytes]:
        read, write = os.pipe()
        stream = asyncio.StreamReader()
        stdin = os.fdopen(read, "rb")
        transport, _ = await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stream), stdin)
        body = b'{"jsonrpc": "2.0", "method": "exit"}'
        os.write(write, b"Content-Length: %d\r\n\r\n%s" % (len(body), body) + b"Content-Length: 99\r\n\r\n{")
        os.close(write)  # the client goes away in the middle of its second message
        reader = PipeReader(stream)
        got = [await reader.readline(), await reader.readline(), await reader.readexactly(len(body))]
        got += [await reader.readline(), await reader.readline(), await reader.readexactly(99), await reader.readline()]
        transport.close()
        return got

    assert asyncio.run(scenario()) == [b"Content-Length: 36\r\n", b"\r\n", b'{"jsonrpc": "2.0", "method": "exit"}', b"Content-Length: 99\r\n", b"\r\n", b"", b""]


def test_a_write_that_fails_is_logged_not_reported_back_through_the_same_pipe(caplog: pytest.LogCaptureFixture) -> None:
    """A publication scheduled when the client exits finds stdout closed: pygls reports the
    failed write with a message to the client, which fails in turn, without end. The server
    logs it once."""
    from lsprotocol import types
    from torch_preflight.server.server import PreflightServer

    class Closed:
        writes = 0

        def write(self, data: bytes) -> None:
            Closed.writes += 1
            raise ValueError("I/O operation on closed file")

        def close(self) -> None:
            pass

    server = PreflightServer()
    server.protocol.set_writer(Closed())
    server.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri="file:///tmp/x.py", diagnostics=[], version=1))
    assert Closed.writes == 1
    assert any("could not send to the client" in r.getMessage() for r in caplog.records)
    server.executor.shutdown()
