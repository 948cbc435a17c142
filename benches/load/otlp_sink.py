"""A stand-in trace collector for the load harness: accepts OTLP/HTTP exports
(`POST /v1/traces`) and answers 200 with an empty body, as a collector does, without
decoding them. Counts exports and bytes, written to STATS_FILE when stopped.

usage: otlp_sink.py PORT STATS_FILE
"""

import json
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port, stats_file = int(sys.argv[1]), sys.argv[2]
stats = {"exports": 0, "bytes": 0}


class Sink(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        self.rfile.read(length)
        stats["exports"] += 1
        stats["bytes"] += length
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def stop(*_):
    with open(stats_file, "w") as out:
        json.dump(stats, out)
    sys.exit(0)


signal.signal(signal.SIGTERM, stop)
ThreadingHTTPServer(("127.0.0.1", port), Sink).serve_forever()
