"""`torch-preflight server [--tcp HOST:PORT] [--log-file PATH]`: stdio by default."""

from __future__ import annotations

import argparse
import gc
import logging
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="torch-preflight server", description="Run the torch-preflight language server.")
    parser.add_argument("--tcp", metavar="HOST:PORT", help="listen on TCP instead of stdio")
    parser.add_argument("--stdio", action="store_true", help="speak over stdin/stdout (the default)")
    parser.add_argument("--log-file", metavar="PATH", help="write the server log to PATH")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    args = parser.parse_args(argv)
    if args.log_file:
        logging.basicConfig(filename=args.log_file, level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from .server import create_server

    server = create_server()
    # What the imports built (lsprotocol's thousand classes, the rule tables) lives as long as the
    # process: keep the collector from scanning it again during the first analyses.
    gc.freeze()
    from .stdio import SWITCH_INTERVAL_S, serve

    if args.tcp:
        host, _, port = args.tcp.rpartition(":")
        if not port.isdigit():
            parser.error("--tcp needs HOST:PORT, e.g. 127.0.0.1:2087")
        sys.setswitchinterval(SWITCH_INTERVAL_S)  # the event loop reads the socket itself; see server/stdio.py
        server.start_tcp(host or "127.0.0.1", int(port))
    else:
        serve(server)
    return 0
