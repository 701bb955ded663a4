"""The official OpenAI Python SDK against Trove's enriched chat completions, unpatched.

Run by `tests/api/enriched.rs` (`openai_python_sdk_against_enriched_completions`), which starts
Trove with the extension `conversations`, a pipeline holding a fragment about cats, an agent
(a similarity placeholder for its question, a history placeholder) and a fake model server
scripted, in order: a whole answer "Cats sleep." (usage 5 + 2) and a streamed answer "They",
" purr", "." paced 200 ms apart. The test checks what the fake received: the retrieved fragment
and the earlier messages as history.

Environment: TROVE_URL, TROVE_KEY_ID, TROVE_KEY_SECRET, TROVE_LLM_ID, TROVE_AGENT_ID,
TROVE_PIPELINE_ID. Exits non-zero with a message on the first failed expectation.
"""

import os
import sys
import time

from openai import OpenAI


def expect(condition: bool, message: str) -> None:
    if not condition:
        print(f"FAILED: {message}", file=sys.stderr)
        sys.exit(1)


def main() -> None:
    client = OpenAI(
        base_url=os.environ["TROVE_URL"] + "/compat/v1",
        api_key="unused",
        default_headers={
            "x-api-key": os.environ["TROVE_KEY_ID"],
            "x-api-key-secret": os.environ["TROVE_KEY_SECRET"],
            "x-llm-id": os.environ["TROVE_LLM_ID"],
            "X-Agent-Id": os.environ["TROVE_AGENT_ID"],
            "X-Pipeline-Id": os.environ["TROVE_PIPELINE_ID"],
            "X-Pipeline-Classification": "internal,public",
        },
        max_retries=0,
        timeout=20,
    )
    messages = [
        {"role": "user", "content": "Hello?"},
        {"role": "assistant", "content": "Hi! Ask me anything."},
        {"role": "user", "content": "What do cats do all afternoon?"},
    ]

    whole = client.chat.completions.create(model="ignored", messages=messages)
    expect(whole.object == "chat.completion", f"object {whole.object!r}")
    answer = whole.choices[0].message.content
    expect(answer == "Cats sleep.", f"whole answer {answer!r}")
    expect(whole.choices[0].message.role == "assistant", "role")
    expect(whole.choices[0].finish_reason == "stop", f"finish {whole.choices[0].finish_reason!r}")
    expect(whole.model == "gpt-fake", f"model {whole.model!r}")
    expect(whole.usage is not None, "usage present")
    expect(
        (whole.usage.prompt_tokens, whole.usage.completion_tokens, whole.usage.total_tokens)
        == (5, 2, 7),
        f"usage {whole.usage}",
    )

    arrivals = []
    finish = None
    for chunk in client.chat.completions.create(model="ignored", messages=messages, stream=True):
        expect(chunk.object == "chat.completion.chunk", f"object {chunk.object!r}")
        if chunk.choices and chunk.choices[0].delta.content:
            arrivals.append((time.monotonic(), chunk.choices[0].delta.content))
        if chunk.choices and chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
    contents = [content for _, content in arrivals]
    expect(contents == ["They", " purr", "."], f"streamed chunks {contents!r}")
    expect(finish == "stop", f"finish {finish!r}")
    spread = arrivals[-1][0] - arrivals[0][0]
    expect(spread >= 0.3, f"first chunk arrived only {spread:.3f} s before the last")

    print("ok")


if __name__ == "__main__":
    main()
