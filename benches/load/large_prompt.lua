-- wrk script: a chat completion whose body is about 512 KiB of JSON (a long system
-- message, then a short user turn the echo backend answers), authenticated with BENCH_KEY.
local filler = string.rep("lorem ipsum dolor sit amet ", 19418) -- 27 bytes each: 524,286
wrk.method = "POST"
wrk.body = '{"model":"bench","messages":[{"role":"system","content":"' .. filler ..
    '"},{"role":"user","content":"hello from the load test"}]}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("BENCH_KEY")
