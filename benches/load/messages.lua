-- wrk script: one small Anthropic Messages request per request, translated by the gateway
-- to a chat completion for the echo backend (an `openai` upstream) and back.
wrk.method = "POST"
wrk.body = '{"model":"bench-messages","max_tokens":64,"messages":[{"role":"user","content":"hello from the load test"}]}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["anthropic-version"] = "2023-06-01"
wrk.headers["x-api-key"] = os.getenv("BENCH_KEY")
