"""A Python client generated from Trove's OpenAPI document, searching a pipeline.

Every deployment serves its OpenAPI document at `GET /openapi.json`. This generates a typed
client package from it with openapi-python-client into a temporary folder, imports it, reads
the pipeline and runs a similarity search, a full-text search and a filtered one through the
generated functions, printing the fragments found.

    pip install openapi-python-client==0.29.1
    TROVE_PIPELINE_ID=<a pipeline id> python3 examples/generated_client.py

The key goes in the two headers Trove reads: the generated `AuthenticatedClient` sends the key
id as its token (header `x-api-key`, no prefix), and the secret as an extra header.

Variables: TROVE_URL (default http://127.0.0.1:8080), TROVE_KEY_ID and TROVE_KEY_SECRET
(default: the master key of .data/secrets.env, written by scripts/run), TROVE_PIPELINE_ID
(required: examples/quickstart.sh prints the id of the pipeline it makes), QUERY (default: a
question about the documents of examples/quickstart.sh), CLASSIFICATION (default `internal`).
"""

import importlib
import os
import pathlib
import subprocess
import sys
import tempfile
from uuid import UUID

PACKAGE = "trove_client"


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


def generate(base: str, folder: pathlib.Path) -> None:
    """Generates the client package `trove_client` into `folder`."""
    config = folder / "config.yaml"
    # No formatting pass after generation (it would need ruff on PATH).
    config.write_text(f"package_name_override: {PACKAGE}\npost_hooks: []\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "openapi_python_client",
            "generate",
            "--url",
            f"{base}/openapi.json",
            "--meta",
            "none",
            "--config",
            str(config),
            "--output-path",
            str(folder / PACKAGE),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    said = (done.stdout + done.stderr).strip()
    if done.returncode != 0:
        sys.exit(f"openapi-python-client failed:\n{said}")
    # It reports what it could not generate (an operation, a schema) and goes on.
    if "warning" in said.lower():
        print(said, file=sys.stderr)


def show(title: str, fragments: list) -> None:
    print(f"{title}: {len(fragments)} fragments")
    for fragment in fragments:
        print(f"  {fragment.score:8.4f}  {fragment.metadata}  {fragment.page_content}")


def main() -> None:
    base = os.environ.get("TROVE_URL", "http://127.0.0.1:8080").rstrip("/")
    pipeline_id = UUID(os.environ.get("TROVE_PIPELINE_ID") or sys.exit("set TROVE_PIPELINE_ID"))
    query = os.environ.get("QUERY", "How many days can I work from home?")
    classification = os.environ.get("CLASSIFICATION", "internal")

    with tempfile.TemporaryDirectory() as folder:
        generate(base, pathlib.Path(folder))
        sys.path.insert(0, folder)
        client_module = importlib.import_module(PACKAGE)
        get_pipeline = importlib.import_module(f"{PACKAGE}.api.pipelines.get_pipelines_pipeline_id")
        try:
            search = importlib.import_module(
                f"{PACKAGE}.api.search.post_pipelines_pipeline_id_search"
            )
        except ModuleNotFoundError:
            sys.exit("error: the generator left out the search operation (its warnings are above)")
        SearchBody = importlib.import_module(f"{PACKAGE}.models.search_body").SearchBody

        client = client_module.AuthenticatedClient(
            base_url=base,
            token=setting("TROVE_KEY_ID", "TROVE_MASTER_KEY_ID"),
            prefix="",
            auth_header_name="x-api-key",
            headers={"x-api-key-secret": setting("TROVE_KEY_SECRET", "TROVE_MASTER_KEY_SECRET")},
            raise_on_unexpected_status=True,
        )
        with client:
            pipeline = get_pipeline.sync(pipeline_id, client=client)
            print(
                f"pipeline {pipeline.name} ({pipeline.id}), full-text search: {pipeline.has_full_text_search}"
            )

            def run(body: dict) -> list:
                answer = search.sync_detailed(
                    pipeline_id, client=client, body=SearchBody.from_dict(body)
                )
                if answer.status_code != 200:
                    sys.exit(
                        f"error: search answered {answer.status_code}: {answer.content.decode()}"
                    )
                return answer.parsed

            common = {"classification": [classification], "params": {"k": 3, "fetch_k": 6}}
            show(f"similarity {query!r}", run({"query": query, "type": "similarity", **common}))
            show(
                "full text 'certificate expired'",
                run({"query": "certificate expired", "type": "search", **common}),
            )
            show(
                "similarity, year >= 2024",
                run(
                    {
                        "query": query,
                        "type": "similarity",
                        "filters": {"year": {"$ge": 2024}},
                        **common,
                    }
                ),
            )


if __name__ == "__main__":
    main()
