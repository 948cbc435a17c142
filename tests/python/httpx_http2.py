"""httpx with http2=True as a real HTTP/2 client of the gateway: over cleartext with prior
knowledge (http1=False, tests/http2.rs), or over HTTPS by ALPN when a CA file is given
(tests/tls_clients.rs). It lists the models, sends a chat completion and reads a streamed
one, and prints one JSON line of what it saw. Prints `SKIP <why>` and exits 0 when httpx
or its HTTP/2 support (the `h2` package) is not installed.

    python httpx_http2.py BASE_URL KEY [CA_FILE]"""

import json
import sys

try:
    import h2  # noqa: F401  (httpx's HTTP/2 support)
    import httpx2 as httpx
except ImportError as missing:
    print(f"SKIP {missing}")
    sys.exit(0)

base_url, key = sys.argv[1], sys.argv[2]
ca_file = sys.argv[3] if len(sys.argv) > 3 else None
headers = {"authorization": f"Bearer {key}"}
body = {"model": "chat-model", "messages": [{"role": "user", "content": "hi"}]}

# Cleartext: HTTP/2 only, by prior knowledge. HTTPS: both offered, the server chooses.
options = {"http1": ca_file is not None, "http2": True}
if ca_file:
    options["verify"] = ca_file
with httpx.Client(base_url=base_url, headers=headers, **options) as client:
    models = client.get("/v1/models")
    chat = client.post("/v1/chat/completions", json=body)
    events = []
    with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as streamed:
        for line in streamed.iter_lines():
            if line.startswith("data: "):
                events.append(line[len("data: "):])
    print(
        json.dumps(
            {
                "versions": [models.http_version, chat.http_version, streamed.http_version],
                "models": [m["id"] for m in models.json()["data"]],
                "content": chat.json()["choices"][0]["message"]["content"],
                "events": events,
            }
        )
    )
