"""Many SSE streams at once: opens COUNT connections, then sends one streaming chat request
on each at the same moment; the backend answers each with WORDS content events
(`sluice echo --word-delay 20ms`, model `bench-stream20` in the harness's gateway). For every stream: the time to its first content event, the
longest gap between two events, and whether it reached `[DONE]`. Prints one JSON line.

A stream is "stalled" when it did not finish, or when one gap between its events was longer
than STALL_MS (default 250 ms: more than ten times the backend's 20 ms between words).

usage: concurrent_streams.py HOST PORT KEY COUNT WORDS [STALL_MS]
"""

import asyncio
import json
import sys
import time

host, port, key = sys.argv[1], int(sys.argv[2]), sys.argv[3]
count, words = int(sys.argv[4]), int(sys.argv[5])
stall_s = (float(sys.argv[6]) if len(sys.argv) > 6 else 250.0) / 1000
prompt = " ".join(f"w{i}" for i in range(words))
body = json.dumps({"model": "bench-stream20", "stream": True,
                   "messages": [{"role": "user", "content": prompt}]}).encode()
request = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
           f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
           ).encode() + body


async def one(reader, writer, go):
    await go.wait()
    started = time.perf_counter()
    writer.write(request)
    await writer.drain()
    first, last, longest, done = None, None, 0.0, False
    try:
        async with asyncio.timeout(words * 0.02 * 10 + 30):
            while True:
                line = await reader.readline()
                if not line:
                    break
                if line.startswith(b"data: [DONE]"):
                    done = True
                    break
                if line.startswith(b"data: {") and b'"content":"' in line and b'"content":""' not in line:
                    now = time.perf_counter()
                    if first is None:
                        first = now - started
                    else:
                        longest = max(longest, now - last)
                    last = now
    except TimeoutError:
        pass
    writer.close()
    return first, longest, done


async def main():
    opened = await asyncio.gather(*(asyncio.open_connection(host, port) for _ in range(count)))
    go = asyncio.Event()
    tasks = [asyncio.create_task(one(r, w, go)) for r, w in opened]
    await asyncio.sleep(0)
    go.set()
    results = await asyncio.gather(*tasks)
    firsts = sorted(r[0] for r in results if r[0] is not None)
    gaps = sorted(r[1] for r in results)
    unfinished = sum(1 for first, gap, done in results if first is None or not done)
    stalled = unfinished + sum(1 for first, gap, done in results if first is not None and done and gap > stall_s)

    def q(values, p):
        return round(values[min(len(values) - 1, int(len(values) * p))] * 1000, 3) if values else None

    print(json.dumps({"streams": count, "unfinished": unfinished, "stalled": stalled, "first_event_ms_p50": q(firsts, 0.5),
                      "first_event_ms_p99": q(firsts, 0.99), "longest_gap_ms_p99": q(gaps, 0.99),
                      "longest_gap_ms_max": q(gaps, 1.0)}))


asyncio.run(main())
