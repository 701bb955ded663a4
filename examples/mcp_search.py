"""Searching Trove from the official MCP Python SDK (PyPI `mcp`).

Trove serves the Model Context Protocol at `/mcp` over streamable HTTP, with the same key
headers as its REST interface. This connects, lists the three tools, lists the pipelines
(`get_pipelines`), reads the classifications of one (`get_pipeline_classifications`) and
searches it (`search_knowledge`) as a reader of all of them, printing what each call returns.

    pip install mcp
    python3 examples/mcp_search.py

MCP requests must name `localhost`, `127.0.0.1` or `::1` in their Host header, so TROVE_URL
must use one of them (run this on Trove's machine, or through a tunnel to it).

Variables: TROVE_URL (default http://127.0.0.1:8080), TROVE_KEY_ID and TROVE_KEY_SECRET
(default: the master key of .data/secrets.env, written by scripts/run), TROVE_PIPELINE_ID
(default: the newest pipeline of examples/quickstart.sh), QUERY (default: a question about the
documents of examples/quickstart.sh), SEARCH_TYPE (`similarity` (default), `mmr` or `search`).
"""

import asyncio
import json
import os
import pathlib
import sys

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


def setting(name: str, secrets_name: str) -> str:
    """A variable, else its value in .data/secrets.env."""
    if os.environ.get(name):
        return os.environ[name]
    secrets = pathlib.Path(__file__).resolve().parent.parent / ".data" / "secrets.env"
    if secrets.exists():
        for line in secrets.read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == secrets_name:
                return value.strip()
    sys.exit(f"set {name} (or start Trove with scripts/run)")


async def call(session: ClientSession, tool: str, arguments: dict) -> dict:
    """Calls a tool and returns its structured output; a failed call stops the script."""
    result = await session.call_tool(tool, arguments)
    if result.is_error:
        sys.exit(f"error: {tool}: {result.content[0].text}")
    return result.structured_content


async def main() -> None:
    base = os.environ.get("TROVE_URL", "http://127.0.0.1:8080").rstrip("/")
    headers = {
        "x-api-key": setting("TROVE_KEY_ID", "TROVE_MASTER_KEY_ID"),
        "x-api-key-secret": setting("TROVE_KEY_SECRET", "TROVE_MASTER_KEY_SECRET"),
    }
    query = os.environ.get("QUERY", "How many days can I work from home?")
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(f"{base}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        hello = await session.initialize()
        print(f"connected: protocol {hello.protocol_version}, server {hello.server_info.name}")

        tools = await session.list_tools()
        print("tools:", ", ".join(tool.name for tool in tools.tools))

        # Every pipeline whose name holds `quickstart-`, a page of 100 at a time.
        pipelines = []
        while True:
            page = await call(
                session,
                "get_pipelines",
                {"query": "quickstart-", "limit": 100, "offset": len(pipelines)},
            )
            pipelines += page["results"]
            if len(page["results"]) < 100:
                break
        print(f"quickstart pipelines: {len(pipelines)}")
        for pipeline in pipelines:
            print(f"  {pipeline['pipeline_id']}  {pipeline['name']}")
        pipeline_id = os.environ.get("TROVE_PIPELINE_ID")
        if not pipeline_id:
            if not pipelines:
                sys.exit(
                    "no quickstart pipeline: run examples/quickstart.sh first, or set TROVE_PIPELINE_ID"
                )
            # The names end with the time they were made: the last one is the newest.
            pipeline_id = max(pipelines, key=lambda p: p["name"])["pipeline_id"]

        scheme = await call(session, "get_pipeline_classifications", {"pipeline_id": pipeline_id})
        print(f"classifications of {pipeline_id}: {', '.join(scheme['classifications'])}")

        found = await call(
            session,
            "search_knowledge",
            {
                "pipeline_id": pipeline_id,
                "query": query,
                "classifications": scheme["classifications"],
                "type": os.environ.get("SEARCH_TYPE", "similarity"),
                "params": {"k": 3, "fetch_k": 6},
            },
        )
        print(f"search_knowledge {json.dumps(query)}: {len(found['results'])} fragments")
        for fragment in found["results"]:
            print(f"  {fragment['score']:8.4f}  {fragment.get('page_content', '')}")


if __name__ == "__main__":
    asyncio.run(main())
