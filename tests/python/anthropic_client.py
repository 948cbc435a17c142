"""Drives a running Sluice gateway with the official Anthropic Python SDK (and the OpenAI
SDK through the reverse translation).

Called by tests/anthropic_sdk.rs with the gateway's base URL and key in the environment.
The models: `echo-messages` (the echo backend's own Messages route, passed through),
`echo-claude` (the echo backend's chat route, translated), `mock-openai` (a mock
OpenAI-compatible upstream that answers with tool calls and `reasoning_content`) and
`mock-anthropic` (a mock Anthropic upstream). Each check raises on failure; the script
prints one line per check and exits non-zero on the first failure.
"""

import json
import os
import sys

import anthropic
import openai

BASE_URL = os.environ["SLUICE_BASE_URL"]  # ends in /v1
KEY = os.environ["SLUICE_KEY"]
ROOT_URL = BASE_URL[: -len("/v1")]  # the Anthropic SDK appends /v1/messages itself


def client(key=KEY, **options):
    return anthropic.Anthropic(base_url=ROOT_URL, api_key=key, max_retries=0, **options)


def check_create():
    for model in ["echo-messages", "echo-claude"]:
        message = client().messages.create(
            model=model, max_tokens=64, messages=[{"role": "user", "content": "hello from claude"}]
        )
        assert message.type == "message", message
        assert message.content[0].type == "text", message
        assert message.content[0].text == "hello from claude", (model, message)
        assert message.stop_reason == "end_turn", message
        assert message.usage.input_tokens > 0 and message.usage.output_tokens == 3, (model, message.usage)
    print("ok check_create")


def check_stream():
    for model in ["echo-messages", "echo-claude"]:
        with client().messages.stream(
            model=model, max_tokens=64, messages=[{"role": "user", "content": "one two three"}]
        ) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
        assert text == "one two three", (model, text)
        assert final.content[0].text == "one two three", final
        assert final.stop_reason == "end_turn", final
        assert final.usage.output_tokens == 3, (model, final.usage)
    print("ok check_stream")


def check_count_tokens():
    counted = client().messages.count_tokens(
        model="echo-messages", messages=[{"role": "user", "content": "a b c d"}]
    )
    assert counted.input_tokens == 4, counted  # the echo backend's own count, passed through
    estimated = client().messages.count_tokens(
        model="echo-claude", messages=[{"role": "user", "content": "a b c d"}]
    )
    assert estimated.input_tokens > 0, estimated  # the gateway's estimate
    print("ok check_count_tokens")


def check_errors():
    try:
        client().messages.create(model="no-such-model", max_tokens=8, messages=[{"role": "user", "content": "x"}])
        raise AssertionError("an unknown model is refused")
    except anthropic.NotFoundError as error:
        assert error.status_code == 404, error
        assert error.body["type"] == "error", error.body
        assert error.body["error"]["type"] == "not_found_error", error.body
        assert error.response.headers.get("request-id"), error.response.headers
    try:
        client(key="sk-wrong").messages.create(
            model="echo-messages", max_tokens=8, messages=[{"role": "user", "content": "x"}]
        )
        raise AssertionError("a wrong key is refused")
    except anthropic.AuthenticationError as error:
        assert error.body["error"]["type"] == "authentication_error", error.body
    print("ok check_errors")


WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def check_tools_translated():
    message = client().messages.create(
        model="mock-openai",
        max_tokens=256,
        tools=[WEATHER],
        tool_choice={"type": "any"},
        messages=[{"role": "user", "content": "weather in Paris?"}],
    )
    kinds = [block.type for block in message.content]
    assert kinds == ["thinking", "text", "tool_use"], message
    assert message.content[0].thinking == "The user wants the weather.", message
    call = message.content[2]
    assert (call.id, call.name, call.input) == ("call_1", "get_weather", {"city": "Paris"}), call
    assert message.stop_reason == "tool_use", message
    assert (message.usage.input_tokens, message.usage.output_tokens) == (20, 9), message.usage
    with client().messages.stream(
        model="mock-openai",
        max_tokens=256,
        tools=[WEATHER],
        messages=[
            {"role": "user", "content": "weather in Paris?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"}]},
        ],
    ) as stream:
        events = [event.type for event in stream]
        final = stream.get_final_message()
    assert "thinking" in events and "input_json" in events, events
    kinds = [block.type for block in final.content]
    assert kinds == ["thinking", "text", "tool_use"], final
    assert final.content[0].thinking == "Check again.", final
    assert final.content[1].text == "Looking it up.", final
    assert final.content[2].input == {"city": "Lyon"}, final  # parsed from input_json_delta
    assert final.stop_reason == "tool_use", final
    assert (final.usage.input_tokens, final.usage.output_tokens) == (30, 12), final.usage
    print("ok check_tools_translated")


def check_passthrough():
    message = client().messages.create(
        model="mock-anthropic",
        max_tokens=64,
        system=[{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": "hi"}],
        extra_headers={"anthropic-beta": "prompt-caching-2024-07-31"},
    )
    assert message.content[0].text == "cached hello", message
    assert message.usage.cache_read_input_tokens == 100, message.usage
    print("ok check_passthrough")


def check_openai_reverse():
    chat = openai.OpenAI(base_url=BASE_URL, api_key=KEY, max_retries=0)
    completion = chat.chat.completions.create(
        model="echo-messages", messages=[{"role": "user", "content": "hello from openai"}]
    )
    assert completion.choices[0].message.content == "hello from openai", completion
    assert completion.choices[0].finish_reason == "stop", completion
    stream = chat.chat.completions.create(
        model="echo-messages",
        messages=[{"role": "user", "content": "one two"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "one two", text
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 2, chunks[-1]
    tools = chat.chat.completions.create(
        model="mock-anthropic",
        messages=[{"role": "user", "content": "weather in Oslo?"}],
        tools=[{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER["input_schema"]}}],
    )
    call = tools.choices[0].message.tool_calls[0]
    assert (call.id, call.function.name) == ("toolu_9", "get_weather"), call
    assert json.loads(call.function.arguments) == {"city": "Oslo"}, call
    assert tools.choices[0].finish_reason == "tool_calls", tools
    assert tools.usage.prompt_tokens == 15, tools.usage
    print("ok check_openai_reverse")


CHECKS = [check_create, check_stream, check_count_tokens, check_errors]
# Checks that need the mock upstreams' scripted answers; run only when named.
NAMED_ONLY = [check_tools_translated, check_passthrough, check_openai_reverse]

if __name__ == "__main__":
    only = sys.argv[1:]
    for check in CHECKS + NAMED_ONLY:
        if (only and check.__name__ not in only) or (not only and check in NAMED_ONLY):
            continue
        check()
