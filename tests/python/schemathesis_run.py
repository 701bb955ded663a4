"""schemathesis against the OpenAPI document of a running Trove.

Run by `tests/api/schemathesis.rs` (`schemathesis_finds_no_server_error_nor_schema_violation`),
which starts Trove with a master key and a fake model server and creates the objects that path
parameters and headers name.

Environment:
  TROVE_URL, TROVE_KEY_ID, TROVE_KEY_SECRET   the server and its master key
  TROVE_FIXTURES   JSON `{"kept": {<parameter>: <id>}, "changed": {...}, "deleted": {...}}`:
                   `kept` objects serve the operations that read or run them, `changed` ones
                   those that change them or delete what they hold, `deleted` ones those that
                   delete them (a deleted agent would turn every later request on it into a 404)
  TROVE_FUZZ_MAX_EXAMPLES   examples per operation and phase (default 25)
  TROVE_FUZZ_SEED   unset (default): derandomized generation, the same requests on every run;
                    set: random generation from that seed, to explore further

First checks that every 2xx response of the document has a typed schema (the relay's `default`
response is the model server's body, whatever it is, and not counted). Then runs the coverage,
fuzzing and stateful phases of `schemathesis run`, one request at a time, without an example
database or a cache of earlier runs, with two checks:

- `no_undocumented_server_error` instead of schemathesis' `not_a_server_error`: no 5xx but the
  ones the interface documents for the request (its 501s, and the 500 of a `max-inner-product`
  search). The fixtures leave no room for its other documented 500s: the embedding models are
  `hash` (no embedding server to fail), the LLMs answer from the fake model server, NATS and
  Postgres are up, and the fixtures' metadata values have their declared types. (A generated
  submission storing `5.0` in the integer field `year` would make later filters on `year`
  answer 500, as filter rule 6 says; the derandomized runs make none.)
- `response_schema_conformance`: a body matches the document's schema for its status.

Prints the statuses received, the operations that never answered 2xx and, as its last line,
`ok: <cases> cases ...`; exits 1 with schemathesis' report on a failure.
"""

import collections
import json
import os
import sys
import tempfile
import time
import urllib.request

import schemathesis
from schemathesis.cli import schemathesis as schemathesis_cli

URL = os.environ["TROVE_URL"]
HEADERS = {
    "x-api-key": os.environ["TROVE_KEY_ID"],
    "x-api-key-secret": os.environ["TROVE_KEY_SECRET"],
}
FIXTURES = json.loads(os.environ["TROVE_FIXTURES"])
MAX_EXAMPLES = int(os.environ.get("TROVE_FUZZ_MAX_EXAMPLES", "25"))
SEED = os.environ.get("TROVE_FUZZ_SEED")

# Operations that change the objects their path names, or delete what these objects hold.
CHANGING_POSTS = (
    "POST /pipelines/{pipeline_id}/classifications",
    "POST /api-keys/{api_key_id}/permissions",
)


def role(method: str, path: str) -> str:
    """Which fixture set an operation's path parameters name."""
    if method == "DELETE" and path.endswith("_id}") and path.count("{") == 1:
        return "deleted"
    if method in ("PATCH", "DELETE") or f"{method} {path}" in CHANGING_POSTS:
        return "changed"
    return "kept"


def typed(schema) -> bool:
    """Whether a schema says what a value is: a type, a reference, or only typed branches."""
    if not isinstance(schema, dict):
        return False
    if "type" in schema or "$ref" in schema:
        return True
    branches = [b for keyword in ("allOf", "anyOf", "oneOf") for b in schema.get(keyword, [])]
    return bool(branches) and all(typed(branch) for branch in branches)


def untyped_success_responses(document: dict) -> list[str]:
    """The 2xx responses whose content has no schema or one without a type (`{}` accepts
    anything)."""
    untyped = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            for status, response in operation.get("responses", {}).items():
                if not status.startswith("2"):
                    continue
                for media_type, content in (response.get("content") or {}).items():
                    if not typed(content.get("schema")):
                        untyped.append(f"{method.upper()} {path} {status} {media_type}")
    return untyped


def toml_value(value) -> str:
    """A TOML value (inline table for a dict) of the scalars and tables the config uses."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        pairs = (f"{json.dumps(key)} = {toml_value(item)}" for key, item in value.items())
        return "{ " + ", ".join(pairs) + " }"
    raise TypeError(value)


def path_parameters(fixtures: dict) -> dict:
    """Fixed values of the path parameters that name objects."""
    values = {f"path.{name}": value for name, value in fixtures.items()}
    values["path.object_type"] = "pipelines"
    values["path.object_id"] = fixtures["pipeline_id"]
    return values


def words(fixtures: dict) -> list:
    """Strings that mean something to the fixtures (classifications, metadata fields, the
    agent's placeholders, durations, identifiers): a generated string is one of them now and
    then, so that requests get past validation and reach deeper."""
    return [
        "public", "internal", "year", "team", "score", "draft", "reef", "question", "context",
        "kelp", "1h", "15m", "0", "similarity", "mmr", "search", "character", "hash",
        *fixtures.values(),
    ]  # fmt: skip


def operation(names, **settings) -> list:
    lines = ["", "[[operations]]", f"include-name = {json.dumps(sorted(names))}"]
    lines += [f"{key} = {toml_value(value)}" for key, value in settings.items()]
    return lines


def configuration(document: dict) -> str:
    kept = FIXTURES["kept"]
    roles = collections.defaultdict(list)
    for path, item in document["paths"].items():
        for method in item:
            roles[role(method.upper(), path)].append(f"{method.upper()} {path}")
    # The headers that name the pipeline and the LLM are read by the handlers, not declared
    # as parameters in the document; the variables object has no declared keys.
    variables = {"body.variables": {"question": "kelp"}}
    lines = [
        *([f"seed = {SEED}"] if SEED else []),
        "workers = 1",
        f"headers = {toml_value(HEADERS)}",
        f"parameters = {toml_value(path_parameters(kept))}",
        # No state from earlier runs (replayed failures): each run is the same.
        "cache.enabled = false",
        "",
        "[dictionaries.trove]",
        f"values = {json.dumps(words(kept))}",
        "",
        "[generation]",
        f"max-examples = {MAX_EXAMPLES}",
        f"deterministic = {toml_value(SEED is None)}",
        'database = "none"',
        'dictionaries.string = { dictionary = "trove", probability = 0.2 }',
        "",
        "[checks]",
        "enabled = false",
        "no_undocumented_server_error.enabled = true",
        "response_schema_conformance.enabled = true",
        "tally.enabled = true",
    ]
    for name in ("changed", "deleted"):
        lines += operation(roles[name], parameters=path_parameters(FIXTURES[name]))
    lines += operation(
        ["POST /agents/{agent_id}/execute"],
        headers={"x-pipeline-id": kept["pipeline_id"], "x-llm-id": kept["llm_id"]},
        parameters=variables,
    )
    lines += operation(
        ["POST /agents/{agent_id}/search"],
        headers={"x-pipeline-id": kept["pipeline_id"]},
        parameters=variables,
    )
    lines += operation(
        ["POST /compat/v1/chat/completions"], headers={"x-llm-id": kept["llm_id"]}
    )
    return "\n".join(lines) + "\n"


@schemathesis.check
class tally:
    """Counts the statuses received, and the successes of each operation."""

    statuses: collections.Counter = collections.Counter()
    successes: collections.Counter = collections.Counter()
    by_operation: dict = collections.defaultdict(collections.Counter)

    def after_response(self, ctx, response, case):
        tally.statuses[response.status_code] += 1
        tally.by_operation[case.operation.label][response.status_code] += 1
        if 200 <= response.status_code < 300:
            tally.successes[case.operation.label] += 1


# The interface's 501 texts (§Errors HTTP 501): features it lists as not implemented, which a
# generated request may ask for (`hybrid` and `history` are in the enumerations of search and
# placeholder types; the relay's three optional headers may all be sent).
NOT_IMPLEMENTED = {
    "Full text search is not enabled for this pipeline",
    "Hybrid placeholder is not implemented yet",
    "History placeholder is not implemented yet",
    "Not implemented",
}
RELAY_NOT_IMPLEMENTED = "enriched completions not implemented yet"


def error_message(response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except Exception:
        return ""


def documented(response, case) -> bool:
    """Whether a 5xx answer is one the interface documents for this request."""
    message = error_message(response)
    if response.status_code == 501:
        if case.operation.label == "POST /compat/v1/chat/completions":
            return RELAY_NOT_IMPLEMENTED in message
        return message in NOT_IMPLEMENTED
    # "`max-inner-product` is defined but a search with it fails with 500" (§Search): the
    # database's own error message.
    body = case.body if isinstance(case.body, dict) else {}
    return (
        response.status_code == 500
        and case.operation.label == "POST /pipelines/{pipeline_id}/search"
        and body.get("distance_strategy") == "max-inner-product"
        and body.get("type") in ("similarity", "mmr")
    )


@schemathesis.check
def no_undocumented_server_error(ctx, response, case):
    """No 5xx except those the interface documents for the request (`not_a_server_error`
    otherwise)."""
    if response.status_code >= 500 and not documented(response, case):
        raise AssertionError(
            f"undocumented {response.status_code} for {case.operation.label}: {response.text[:500]}"
        )
    return None


def main() -> None:
    with urllib.request.urlopen(URL + "/openapi.json", timeout=30) as answer:
        document = json.load(answer)
    untyped = untyped_success_responses(document)
    if untyped:
        print("FAILED: 2xx responses without a typed schema:", *untyped, sep="\n  ",
              file=sys.stderr)
        sys.exit(1)

    with tempfile.TemporaryDirectory() as folder:
        config = os.path.join(folder, "schemathesis.toml")
        with open(config, "w", encoding="utf-8") as file:
            file.write(configuration(document))
        started = time.monotonic()
        try:
            schemathesis_cli.main(
                ["--config-file", config, "run", "--no-color", URL + "/openapi.json"],
                standalone_mode=False,
            )
            code = 0
        except SystemExit as stop:
            code = stop.code or 0
        elapsed = time.monotonic() - started

    cases = sum(tally.statuses.values())
    print("statuses:", dict(sorted(tally.statuses.items())))
    for label, statuses in sorted(tally.by_operation.items()):
        if label not in tally.successes:
            print(f"no 2xx answer: {label} {dict(sorted(statuses.items()))}")
    if code != 0:
        print(f"FAILED: schemathesis exited with {code} after {elapsed:.0f} s", file=sys.stderr)
        sys.exit(1)
    generation = f"seed {SEED}" if SEED else "derandomized"
    print(f"ok: {cases} cases in {elapsed:.0f} s, 0 untyped 2xx responses, {generation}")


if __name__ == "__main__":
    main()
