"""The official OpenAI Python SDK against Trove's chat-completions relay, unpatched.

Run by `tests/api/relay.rs` (`openai_python_sdk_through_the_relay`), which starts Trove and a
fake model server and scripts, in order: a whole answer "Hello there" (usage 5 + 2), a
streamed answer "one", "two", "three" paced 200 ms apart, and a 429 "Rate limit reached".

Environment: TROVE_URL, TROVE_KEY_ID, TROVE_KEY_SECRET, TROVE_LLM_ID, TROVE_UNKNOWN_LLM_ID.
Exits non-zero with a message on the first failed expectation.
"""

import os
import sys
import time

import openai
from openai import OpenAI


def client(llm_id: str) -> OpenAI:
    return OpenAI(
        base_url=os.environ["TROVE_URL"] + "/compat/v1",
        api_key="unused",
        default_headers={
            "x-api-key": os.environ["TROVE_KEY_ID"],
            "x-api-key-secret": os.environ["TROVE_KEY_SECRET"],
            "x-llm-id": llm_id,
        },
        max_retries=0,
        timeout=20,
    )


def expect(condition: bool, message: str) -> None:
    if not condition:
        print(f"FAILED: {message}", file=sys.stderr)
        sys.exit(1)


def main() -> None:
    relay = client(os.environ["TROVE_LLM_ID"])
    messages = [{"role": "user", "content": "Say hello."}]

    whole = relay.chat.completions.create(model="ignored", messages=messages)
    answer = whole.choices[0].message.content
    expect(answer == "Hello there", f"whole answer {answer!r}")
    expect(whole.usage is not None, "usage present")
    expect(
        (whole.usage.prompt_tokens, whole.usage.completion_tokens, whole.usage.total_tokens)
        == (5, 2, 7),
        f"usage {whole.usage}",
    )

    arrivals = []
    for chunk in relay.chat.completions.create(model="ignored", messages=messages, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            arrivals.append((time.monotonic(), chunk.choices[0].delta.content))
    contents = [content for _, content in arrivals]
    expect(contents == ["one", "two", "three"], f"streamed chunks {contents!r}")
    spread = arrivals[-1][0] - arrivals[0][0]
    expect(spread >= 0.3, f"first chunk arrived only {spread:.3f} s before the last")

    try:
        relay.chat.completions.create(model="ignored", messages=messages)
        expect(False, "a 429 raises RateLimitError")
    except openai.RateLimitError as error:
        expect(error.status_code == 429, f"status {error.status_code}")
        expect("Rate limit reached" in str(error), f"message {error}")

    unknown = client(os.environ["TROVE_UNKNOWN_LLM_ID"])
    try:
        unknown.chat.completions.create(model="ignored", messages=messages)
        expect(False, "an unknown LLM raises NotFoundError")
    except openai.NotFoundError as error:
        expect("LLM not found" in str(error), f"message {error}")

    print("ok")


if __name__ == "__main__":
    main()
