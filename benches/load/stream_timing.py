"""Times SSE streams: for each of N sequential streaming chat requests, the time to the
first content event and to `[DONE]`. Prints one JSON line with medians and p99s (ms).

usage: stream_timing.py HOST PORT KEY COUNT
"""

import http.client
import json
import statistics
import sys
import time

host, port, key, count = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
body = json.dumps({"model": "bench-stream", "stream": True,
                   "messages": [{"role": "user", "content": "one two three four five six seven eight nine ten"}]})
firsts, lasts = [], []
connection = http.client.HTTPConnection(host, port, timeout=30)
for _ in range(count):
    started = time.perf_counter()
    connection.request("POST", "/v1/chat/completions", body=body,
                       headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    response = connection.getresponse()
    assert response.status == 200, response.status
    first = None
    for line in response:
        if first is None and line.startswith(b"data: {") and b'"content":"' in line and b'"content":""' not in line:
            first = time.perf_counter() - started
        if line.startswith(b"data: [DONE]"):
            break
    response.read()
    lasts.append(time.perf_counter() - started)
    firsts.append(first)


def p99(values):
    return sorted(values)[max(0, int(len(values) * 0.99) - 1)]


print(json.dumps({
    "first_event_ms_p50": round(statistics.median(firsts) * 1000, 3),
    "first_event_ms_p99": round(p99(firsts) * 1000, 3),
    "last_event_ms_p50": round(statistics.median(lasts) * 1000, 3),
    "last_event_ms_p99": round(p99(lasts) * 1000, 3),
}))
