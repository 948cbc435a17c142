"""Drives a running Sluice gateway with the official OpenAI Python SDK.

Called by tests/openai_sdk.rs with the gateway's base URL and keys in the environment.
Each check raises on failure; the script prints one line per check and exits non-zero
on the first failure.
"""

import os
import sys

import openai
from openai import OpenAI

BASE_URL = os.environ["SLUICE_BASE_URL"]
KEY = os.environ["SLUICE_KEY"]


def client(key=KEY, **options):
    return OpenAI(base_url=BASE_URL, api_key=key, **options)


def check_models():
    models = client().models.list()
    ids = [m.id for m in models.data]
    assert "echo-model" in ids, ids
    entry = client().models.retrieve("echo-model")
    assert entry.id == "echo-model", entry
    # Sluice's extensions travel in the model object.
    assert entry.model_extra["capabilities"] == {"streaming": True, "tool_calling": False}, entry.model_extra
    assert entry.model_extra["endpoint_type"] == "chat", entry.model_extra


def check_completion():
    completion = client().chat.completions.create(
        model="echo-model", messages=[{"role": "user", "content": "hello from the sdk"}]
    )
    assert completion.choices[0].message.content == "hello from the sdk", completion
    assert completion.usage.total_tokens > 0, completion


def check_stream():
    stream = client().chat.completions.create(
        model="echo-model", messages=[{"role": "user", "content": "one two three"}], stream=True
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "one two three", text


def check_model_not_found():
    try:
        client().chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    except openai.NotFoundError as error:
        assert error.status_code == 404
        assert error.code == "model_not_found", error.body
        assert error.param == "model", error.body
        return
    raise AssertionError("expected NotFoundError")


def check_authentication_error():
    try:
        client(key="sk-wrong").models.list()
    except openai.AuthenticationError as error:
        assert error.status_code == 401
        assert error.code == "invalid_api_key", error.body
        return
    raise AssertionError("expected AuthenticationError")


def check_request_id():
    raw = client().chat.completions.with_raw_response.create(
        model="echo-model", messages=[{"role": "user", "content": "id"}]
    )
    assert raw.headers.get("x-request-id"), dict(raw.headers)
    # The SDK exposes the request id of a response as _request_id.
    assert raw.parse()._request_id == raw.headers["x-request-id"]


def check_rate_limit_retry():
    """Run against a key limited to 60 requests a minute with a burst of 1."""
    import time

    body = dict(model="echo-model", messages=[{"role": "user", "content": "limited"}])
    client().chat.completions.create(**body)
    try:
        client(max_retries=0).chat.completions.create(**body)
    except openai.RateLimitError as error:
        assert error.code == "rate_limit_exceeded", error.body
        assert int(error.response.headers["retry-after-ms"]) <= 1000, dict(error.response.headers)
    else:
        raise AssertionError("expected RateLimitError without retries")
    started = time.monotonic()
    completion = client(max_retries=2).chat.completions.create(**body)
    waited = time.monotonic() - started
    assert completion.choices[0].message.content == "limited", completion
    # The SDK slept for our retry-after-ms, then was admitted.
    assert 0.5 <= waited < 5, waited


CHECKS = [
    check_models,
    check_completion,
    check_stream,
    check_model_not_found,
    check_authentication_error,
    check_request_id,
]

# Checks that need their own gateway settings; run only when named.
NAMED_ONLY = [check_rate_limit_retry]

if __name__ == "__main__":
    only = sys.argv[1:]
    for check in CHECKS + NAMED_ONLY:
        if (only and check.__name__ not in only) or (not only and check in NAMED_ONLY):
            continue
        check()
        print(f"ok {check.__name__}")
