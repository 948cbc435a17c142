"""Holds COUNT streaming requests open at once through the gateway and reports the
gateway's resident memory while they are all open.

Each request goes to a model whose backend (the echo backend with a very long word delay)
sends its first event and then stays silent, so every stream is open and idle. The script
waits until every stream has delivered its first event, reads VmRSS of PID, then closes
all connections.

usage: hold_streams.py HOST PORT KEY COUNT PID
"""

import asyncio
import json
import sys
import time

host, port, key, count, pid = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
body = json.dumps({"model": "bench-hold", "stream": True, "messages": [{"role": "user", "content": "wait"}]}).encode()
request = (
    f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
    f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
).encode() + body


def rss_kib():
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def open_stream(opened, limit):
    async with limit:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(request)
        await writer.drain()
        data = b""
        while b"data: " not in data:
            chunk = await asyncio.wait_for(reader.read(4096), 60)
            if not chunk:
                raise RuntimeError("stream closed before its first event: " + data.decode(errors="replace"))
            data += chunk
        assert data.startswith(b"HTTP/1.1 200"), data[:200]
        opened.append(writer)


async def main():
    opened = []
    limit = asyncio.Semaphore(500)  # connection attempts in progress at once
    started = time.monotonic()
    results = await asyncio.gather(*(open_stream(opened, limit) for _ in range(count)), return_exceptions=True)
    failures = [r for r in results if isinstance(r, Exception)]
    held_rss = rss_kib()
    print(json.dumps({"streams": len(opened), "failed": len(failures), "seconds_to_open": round(time.monotonic() - started, 1),
                      "rss_mib": round(held_rss / 1024, 1),
                      "first_failure": repr(failures[0]) if failures else None}))
    for writer in opened:
        writer.close()


asyncio.run(main())
