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
    chunks = list(stream)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks)
    assert text == "one two three", text
    # The gateway asked the backend for usage; a client that did not ask sees none of it.
    assert all(chunk.usage is None and chunk.choices for chunk in chunks), chunks


def check_stream_usage():
    stream = client().chat.completions.create(
        model="echo-model",
        messages=[{"role": "user", "content": "one two three"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None, last
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (3, 3), last.usage
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
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


def check_embeddings():
    # Unless told otherwise the SDK asks for base64 and decodes it to floats itself.
    default = client().embeddings.create(model="echo-embeddings", input=["alpha", "beta", "alpha"])
    vectors = [item.embedding for item in default.data]
    assert [item.index for item in default.data] == [0, 1, 2], default
    assert len(vectors[0]) == 8 and all(isinstance(x, float) for x in vectors[0]), vectors
    assert vectors[0] == vectors[2] and vectors[0] != vectors[1], vectors
    assert abs(sum(x * x for x in vectors[1]) - 1) < 1e-5, "unit vectors"
    assert default.usage.prompt_tokens == 3, default.usage
    floats = client().embeddings.create(model="echo-embeddings", input="alpha", encoding_format="float")
    assert all(abs(a - b) < 1e-6 for a, b in zip(floats.data[0].embedding, vectors[0])), floats
    sized = client().embeddings.create(model="echo-embeddings", input="alpha", dimensions=32)
    assert len(sized.data[0].embedding) == 32, sized


def check_legacy_completion():
    completion = client().completions.create(model="echo-completions", prompt="hello legacy completions")
    assert completion.object == "text_completion", completion
    assert completion.choices[0].text == "hello legacy completions", completion
    assert completion.choices[0].finish_reason == "stop", completion
    assert completion.usage.completion_tokens == 3, completion.usage


def check_legacy_completion_stream():
    stream = client().completions.create(model="echo-completions", prompt="one two three", stream=True)
    chunks = list(stream)
    text = "".join(chunk.choices[0].text for chunk in chunks if chunk.choices)
    assert text == "one two three", text
    assert chunks[-1].choices[0].finish_reason == "stop", chunks[-1]


def check_responses():
    created = client().responses.create(model="echo-responses", input="hello responses")
    assert created.status == "completed", created
    assert created.output_text == "hello responses", created
    assert created.usage.input_tokens == 2 and created.usage.output_tokens == 2, created.usage
    # The gateway gave this ID; it finds the upstream that stored the response.
    retrieved = client().responses.retrieve(created.id)
    assert retrieved.id == created.id, (retrieved.id, created.id)
    assert retrieved.output_text == "hello responses", retrieved
    follow_up = client().responses.create(
        model="echo-responses", input="and then", previous_response_id=created.id
    )
    assert follow_up.previous_response_id == created.id, follow_up
    assert follow_up.output_text == "and then", follow_up
    items = client().responses.input_items.list(follow_up.id)
    assert [item.content[0].text for item in items.data] == ["and then"], items
    client().responses.delete(follow_up.id)
    try:
        client().responses.retrieve(follow_up.id)
    except openai.NotFoundError:
        pass
    else:
        raise AssertionError("a deleted response is gone")


def check_responses_stream():
    stream = client().responses.create(model="echo-responses", input="streamed through sluice", stream=True)
    events = list(stream)
    kinds = [event.type for event in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
    text = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert text == "streamed through sluice", text
    completed = events[-1].response
    assert completed.id == events[0].response.id, "one ID across the stream"
    assert completed.usage.output_tokens == 3, completed.usage
    retrieved = client().responses.retrieve(completed.id)
    assert retrieved.output_text == "streamed through sluice", retrieved


def wav(seconds=0.1, rate=8000):
    """A WAV file of silence."""
    import io
    import wave

    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(b"\0\0" * int(seconds * rate))
    return buffer.getvalue()


def check_transcription():
    """Needs the gateway to forward multipart/form-data (audio routes)."""
    audio = wav()
    expected = f"received {len(audio)} bytes of audio"
    transcript = client().audio.transcriptions.create(model="echo-transcription", file=("a.wav", audio))
    assert transcript.text == expected, transcript
    text = client().audio.transcriptions.create(
        model="echo-transcription", file=("a.wav", audio), response_format="text"
    )
    assert text.strip() == expected, text
    import warnings

    with warnings.catch_warnings():
        # The SDK marks translations deprecated; the route still exists and we serve it.
        warnings.simplefilter("ignore", DeprecationWarning)
        translation = client().audio.translations.create(model="echo-transcription", file=("a.wav", audio))
    assert translation.text == expected, translation
    stream = client().audio.transcriptions.create(
        model="echo-transcription", file=("a.wav", audio), stream=True
    )
    events = list(stream)
    deltas = "".join(event.delta for event in events if event.type == "transcript.text.delta")
    assert deltas == expected, deltas
    assert events[-1].type == "transcript.text.done" and events[-1].text == expected, events[-1]


CHAT_CHECKS = [
    check_models,
    check_completion,
    check_stream,
    check_model_not_found,
    check_authentication_error,
    check_request_id,
    check_stream_usage,
]

ROUTE_CHECKS = [
    check_embeddings,
    check_legacy_completion,
    check_legacy_completion_stream,
    check_responses,
    check_responses_stream,
]

CHECKS = CHAT_CHECKS + ROUTE_CHECKS

# Checks that need their own gateway settings, or a feature not every build has; run only
# when named.
NAMED_ONLY = [check_rate_limit_retry, check_transcription]

if __name__ == "__main__":
    only = sys.argv[1:]
    for check in CHECKS + NAMED_ONLY:
        if (only and check.__name__ not in only) or (not only and check in NAMED_ONLY):
            continue
        check()
        print(f"ok {check.__name__}")
