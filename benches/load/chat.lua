-- wrk script: one small chat completion per request, authenticated with BENCH_KEY.
wrk.method = "POST"
wrk.body = '{"model":"bench","messages":[{"role":"user","content":"hello from the load test"}]}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("BENCH_KEY")
