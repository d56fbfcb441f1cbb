"""Serving over stdio with the client's messages read by the event loop itself.

pygls reads stdin on a thread pool, one blocking read per header line and per body: three
round trips between that thread and the event loop for each message. While the analysis
thread computes, each round trip waits for the interpreter's lock, up to a switch interval
(5 ms by default) each way, so a keystroke reached the server 30-40 ms late whenever it came
during an analysis (measured on d2l's torch.py: the next change was read only after the
analysis of the last one ended). Here the event loop watches stdin itself (asyncio's pipe
transport): a message wakes it once. The server also asks the interpreter to switch threads
every `SWITCH_INTERVAL_S`, so that wake-up and the analysis thread's interim publications do
not wait 5 ms for the lock either. Anything that is not a pipe or a socket of its own (a
file, a terminal, one socket for both directions, where a non-blocking stdin would make
stdout non-blocking too) is read as pygls reads it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import sys
import threading
from typing import BinaryIO

from pygls.io_ import StdinAsyncReader, StdoutWriter, run_async
from pygls.lsp.server import LanguageServer

log = logging.getLogger(__name__)

SWITCH_INTERVAL_S = 0.001


class PipeReader:
    """pygls' asynchronous reader over a stream the event loop fills (`connect_read_pipe`)."""

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self.stream = stream

    async def readline(self) -> bytes:
        return await self.stream.readline()

    async def readexactly(self, n: int) -> bytes:
        try:
            return await self.stream.readexactly(n)
        except asyncio.IncompleteReadError:
            return b""  # the client went away mid-message: as pygls' reader at the end of the input


def readable_by_loop(stdin: BinaryIO, stdout: BinaryIO) -> bool:
    """Whether the event loop can watch `stdin` without touching `stdout`: a pipe or socket
    that is not the very file `stdout` writes to (they would share the non-blocking flag)."""
    try:
        inp, out = os.fstat(stdin.fileno()), os.fstat(stdout.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    if not (stat.S_ISFIFO(inp.st_mode) or stat.S_ISSOCK(inp.st_mode)):
        return False
    return (inp.st_dev, inp.st_ino) != (out.st_dev, out.st_ino)


async def _reader(server: LanguageServer, stdin: BinaryIO, stdout: BinaryIO) -> PipeReader | StdinAsyncReader:
    if sys.platform != "win32" and readable_by_loop(stdin, stdout):
        stream = asyncio.StreamReader()
        try:
            await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stream), stdin)
        except (OSError, ValueError, NotImplementedError):
            log.info("stdin cannot be watched by the event loop; reading it on a thread")
        else:
            return PipeReader(stream)
    return StdinAsyncReader(stdin, server.thread_pool)


def serve(server: LanguageServer, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
    """What pygls' `start_io` does, with `_reader`'s reader."""
    stdin, stdout = stdin or sys.stdin.buffer, stdout or sys.stdout.buffer
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    server._stop_event = stop = threading.Event()
    server.protocol.set_writer(StdoutWriter(stdout))

    async def main() -> None:
        reader = await _reader(server, stdin, stdout)
        await run_async(stop_event=stop, reader=reader, protocol=server.protocol, logger=log, error_handler=server.report_server_error)

    try:
        asyncio.run(main())
    except BrokenPipeError:
        log.error("Connection to the client is lost! Shutting down the server.")
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.shutdown()
