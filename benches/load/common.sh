# What the side-by-side bench scripts share (sourced after `cd` to the repository root):
# a free loopback port, waiting for a listener, a process's CPU time, and the bench key
# (BENCH_KEY, read by the wrk scripts) with its SHA-256 for the gateways' configurations.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 1 600); do python3 -c "import socket; socket.create_connection(('127.0.0.1', $1), 0.1)" 2>/dev/null && return 0; sleep 0.1; done; return 1; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
key=sk-bench-ab0123456789; export BENCH_KEY=$key
hash=$(printf '%s' "$key" | sha256sum | cut -d' ' -f1)
