"""MCP servers for the tests, on the SDK's MCPServer (FastMCP in mcp 1.x): run as
`python tests/mcp_fixture_server.py MODE` with MODE one of:

good     `book_trip` (nested objects, enums, required fields), `echo`, `crash` (the process
         exits mid-call), `hang` (never answers), `fail` (an error result)
garbage  a hand-written JSON-RPC server whose `garbage` tool answers with a line that is not
         JSON and then a result of the wrong shape
http     the `good` tools over streamable HTTP on 127.0.0.1:PORT/mcp (PORT: the next argument)
nostart  exits before the MCP handshake
silent   never answers the handshake
"""

from __future__ import annotations

import os
import sys
import time
from typing import Literal

from pydantic import BaseModel, Field


class Traveller(BaseModel):
    name: str = Field(min_length=1, max_length=40)
    age: int = Field(ge=0, le=120)


class Trip(BaseModel):
    city: Literal["paris", "tokyo", "lima"]
    nights: int = Field(ge=1, le=30)
    travellers: list[Traveller] = Field(min_length=1, max_length=3)


def serve(port: int = 0) -> None:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("fixture")

    @server.tool()
    def book_trip(trip: Trip, seat: Literal["window", "aisle"], note: str = "") -> str:
        """Book a trip for some travellers."""
        names = ", ".join(t.name for t in trip.travellers)
        return f"booked {trip.nights} nights in {trip.city} for {names} ({seat} seats){note and ': ' + note}"

    @server.tool()
    def echo(text: str) -> str:
        """Say the text back."""
        return text

    @server.tool()
    def crash(code: int = 3) -> str:
        """Exit the server process."""
        os._exit(code)

    @server.tool()
    def hang(seconds: float = 3600) -> str:
        """Never answer."""
        time.sleep(seconds)
        return "woke"

    @server.tool()
    def fail(why: str) -> str:
        """Raise an error."""
        raise ValueError(why)

    if port:
        server.run("streamable-http", host="127.0.0.1", port=port)
    else:
        server.run("stdio")


def garbage() -> None:
    import json

    def send(obj) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    for line in sys.stdin:
        msg = json.loads(line)
        method, mid = msg.get("method"), msg.get("id")
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                "serverInfo": {"name": "garbage", "version": "0"}}})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [
                {"name": "garbage", "description": "Answer garbage.",
                 "inputSchema": {"type": "object", "properties": {}}}]}})
        elif method == "tools/call":
            sys.stdout.write("this is not json-rpc\n")
            send({"jsonrpc": "2.0", "id": mid, "result": {"content": "not a list"}})
        elif mid is not None:
            send({"jsonrpc": "2.0", "id": mid, "result": {}})


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "good"
    if mode == "nostart":
        print("cannot start: no configuration", file=sys.stderr)
        sys.exit(1)
    if mode == "garbage":
        garbage()
        sys.exit(0)
    if mode == "silent":
        time.sleep(3600)
    serve(int(sys.argv[2]) if mode == "http" else 0)
