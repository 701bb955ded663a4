"""The official OpenAI Python SDK through Trove's chat-completions relay.

`POST /compat/v1/chat/completions` passes an OpenAI chat-completions request to a registered
LLM (header `x-llm-id`) with the LLM's own key and model, and returns the model server's
answer unchanged, streamed or whole. So any OpenAI client works once it points at
`<TROVE_URL>/compat/v1` and sends the Trove key headers; its own `api_key` is not used.

Prints one whole answer, then one streamed answer as it arrives.

    pip install openai
    TROVE_LLM_ID=<id of a registered LLM> python3 examples/openai_relay.py

Variables: TROVE_URL (default http://127.0.0.1:8080), TROVE_KEY_ID and TROVE_KEY_SECRET
(default: the master key of .data/secrets.env, written by scripts/run), TROVE_LLM_ID
(required: `POST /llms` registers one, examples/quickstart.sh too).
"""

import os
import pathlib
import sys

from openai import OpenAI


def setting(name: str, secrets_name: str) -> str:
    """A variable, else its value in .data/secrets.env."""
    if os.environ.get(name):
        return os.environ[name]
    secrets = pathlib.Path(__file__).resolve().parent.parent / ".data" / "secrets.env"
    if secrets.exists():
        for line in secrets.read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == secrets_name:
                return value.strip()
    sys.exit(f"set {name} (or start Trove with scripts/run)")


def main() -> None:
    base = os.environ.get("TROVE_URL", "http://127.0.0.1:8080").rstrip("/")
    llm_id = os.environ.get("TROVE_LLM_ID") or sys.exit("set TROVE_LLM_ID to a registered LLM's id")
    client = OpenAI(
        base_url=f"{base}/compat/v1",
        # Required by the SDK, ignored by Trove: the LLM's own key is sent to the model server.
        api_key="unused",
        default_headers={
            "x-api-key": setting("TROVE_KEY_ID", "TROVE_MASTER_KEY_ID"),
            "x-api-key-secret": setting("TROVE_KEY_SECRET", "TROVE_MASTER_KEY_SECRET"),
            "x-llm-id": llm_id,
        },
    )

    # The LLM's registered model replaces this one when it names one.
    model = os.environ.get("LLM_MODEL", "llama3.2")
    whole = client.chat.completions.create(
        model=model,
        messages=[
            {"role": "system", "content": "You answer in one short sentence."},
            {"role": "user", "content": "What is a vector database for?"},
        ],
    )
    print("whole answer:", whole.choices[0].message.content)

    print("streamed answer: ", end="", flush=True)
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Name three uses of full-text search."}],
        stream=True,
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            print(chunk.choices[0].delta.content, end="", flush=True)
    print()


if __name__ == "__main__":
    main()
