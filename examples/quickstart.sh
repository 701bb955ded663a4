#!/usr/bin/env bash
# Trove quickstart: from an empty server to search results and a streamed agent answer, with
# the seeded local embedding model and text splitter (nothing external but the LLM).
#
#   1. finds the seeded embedding model `default` and text splitter `recursive-character`;
#   2. creates a pipeline: classifications `public` and `internal` (a reader of `internal`
#      also sees `public`), a metadata schema (`team` string, `year` integer), full-text
#      search on;
#   3. submits four short documents with metadata and waits until each one is processed;
#   4. searches by similarity, by full text and with a metadata filter;
#   5. registers an LLM, creates an agent whose system message is filled by a similarity
#      search, and runs it, printing the answer as it streams;
#   6. tells how to connect an MCP client.
# Names end with a timestamp, so the script can run again against the same server.
#
# Start Trove with scripts/run, then: examples/quickstart.sh
#
# Variables:
#   TROVE_URL         Trove's address (default http://127.0.0.1:8080)
#   TROVE_KEY_ID      API key id (default: TROVE_MASTER_KEY_ID of .data/secrets.env, written
#                     by scripts/run)
#   TROVE_KEY_SECRET  its secret (default: TROVE_MASTER_KEY_SECRET of .data/secrets.env)
#   LLM_PROVIDER      `ollama` (default) or `openai` (any OpenAI-compatible server)
#   LLM_ENDPOINT      the model server (default http://127.0.0.1:11434, a local Ollama;
#                     for `openai` the URL includes /v1)
#   LLM_MODEL         the model (default llama3.2)
#   LLM_API_KEY       the model server's key (`openai` needs one; default none)
#   WAIT_SECONDS      how long to wait for the documents to be processed (default 60)
#
# Needs bash, curl and python3 (for JSON); examples/lib.sh holds the helpers.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # TROVE_URL, the key; api, json, quote, show

LLM_PROVIDER=${LLM_PROVIDER:-ollama}
LLM_ENDPOINT=${LLM_ENDPOINT:-http://127.0.0.1:11434}
LLM_MODEL=${LLM_MODEL:-llama3.2}
suffix=$(date +%Y%m%d-%H%M%S)-$RANDOM

echo "==> Finding the seeded embedding model and text splitter"
model=$(api GET '/embedding-models?name=default' | json 'd["data"][0]["id"]')
splitter=$(api GET '/text-splitters?name=recursive-character' | json 'd["data"][0]["id"]')
echo "    embedding model $model, text splitter $splitter"

echo "==> Creating a pipeline with two classifications, a metadata schema and full-text search"
pipeline=$(api POST /pipelines -d @- <<EOF | json 'd["id"]'
{
  "name": "quickstart-$suffix",
  "description": "Company notes of the Trove quickstart",
  "embedding_model_id": "$model",
  "default_text_splitter_id": "$splitter",
  "has_full_text_search": true,
  "classifications": ["public", "internal"],
  "hierarchy": [["internal", "public"]],
  "metadata_schema": {
    "type": "object",
    "properties": {"team": {"type": "string"}, "year": {"type": "integer"}}
  }
}
EOF
)
echo "    pipeline $pipeline"

echo "==> Submitting four documents"
submit() { # submit EXTERNAL_ID CLASSIFICATION TEAM YEAR TEXT
    api POST "/pipelines/$pipeline/documents" -d @- >/dev/null <<EOF
{
  "external_identifier": "$1",
  "classification": "$2",
  "metadata": {"team": "$3", "year": $4},
  "text": $(quote "$5")
}
EOF
}
submit remote-work public people 2023 \
    "Employees may work remotely up to three days a week. Core hours are 10:00 to 15:00 in the employee's local time zone."
submit release-4.2 public platform 2024 \
    "Release 4.2 adds single sign-on with SAML and OpenID Connect and cuts the cold start of the search service by forty percent."
submit postmortem-march internal platform 2024 \
    "Postmortem: on 12 March the ingestion queue stalled for 47 minutes after a certificate expired on the message broker. Certificates now renew 30 days before they expire."
submit travel-policy public finance 2025 \
    "Travel expenses are reimbursed within 14 days. Take the train for journeys under four hours, and fly economy on flights under six hours."

echo "==> Waiting until every document is processed"
deadline=$((SECONDS + ${WAIT_SECONDS:-60}))
while true; do
    statuses=$(api GET "/pipelines/$pipeline/documents?limit=100" | json '" ".join(sorted(v["status"] for v in d["data"]))')
    if [[ $statuses == *failed* ]]; then
        echo "error: a document failed to process ($statuses)" >&2
        exit 1
    fi
    [[ $statuses == "success success success success" ]] && break
    if ((SECONDS >= deadline)); then
        echo "error: documents not processed after ${WAIT_SECONDS:-60} s ($statuses): is a worker running? (TROVE_WORKER, logs in .data/logs/)" >&2
        exit 1
    fi
    sleep 0.5
done
echo "    4 documents processed"

echo "==> Similarity search as a reader of 'internal' (who also sees 'public'): how many days can I work from home?"
api POST "/pipelines/$pipeline/search" -d @- <<EOF | show
{"query": "How many days can I work from home?", "type": "similarity", "classification": ["internal"], "params": {"k": 2}}
EOF

echo "==> Full-text search for 'certificate expired'"
api POST "/pipelines/$pipeline/search" -d @- <<EOF | show
{"query": "certificate expired", "type": "search", "classification": ["internal"], "params": {"k": 3}}
EOF

echo "==> Similarity search of public documents from 2024 on: {\"year\": {\"\$ge\": 2024}}"
api POST "/pipelines/$pipeline/search" -d @- <<EOF | show
{"query": "What changed recently?", "type": "similarity", "classification": "public", "params": {"k": 3}, "filters": {"year": {"\$ge": 2024}}}
EOF

echo "==> Registering the LLM $LLM_MODEL ($LLM_PROVIDER at $LLM_ENDPOINT)"
llm_key=null
if [[ -n ${LLM_API_KEY:-} ]]; then llm_key=$(quote "$LLM_API_KEY"); fi
llm=$(api POST /llms -d @- <<EOF | json 'd["id"]'
{
  "name": "quickstart-$suffix",
  "provider": $(quote "$LLM_PROVIDER"),
  "endpoint": $(quote "$LLM_ENDPOINT"),
  "model": $(quote "$LLM_MODEL"),
  "api_key": $llm_key
}
EOF
)
echo "    LLM $llm"

echo "==> Creating an agent that answers from the two closest fragments"
agent=$(api POST /agents -d @- <<EOF | json 'd["id"]'
{
  "name": "quickstart-$suffix",
  "prompt": [
    {"role": "system", "template": "Answer in one sentence, only from these notes:\n{notes}"},
    {"role": "user", "template": "{question}"}
  ],
  "placeholders": [
    {"name": "question", "type": "query"},
    {"name": "notes", "type": "similarity", "target": "question", "params": {"k": 2, "fetch_k": 4}}
  ]
}
EOF
)
echo "    agent $agent"

echo "==> Running the agent (the answer streams as NDJSON lines)"
curl -sS -N -X POST "$TROVE_URL/agents/$agent/execute" \
    -H "x-api-key: $TROVE_KEY_ID" -H "x-api-key-secret: $TROVE_KEY_SECRET" \
    -H "x-pipeline-id: $pipeline" -H "x-llm-id: $llm" -H 'content-type: application/json' \
    -d '{"variables": {"question": "How many days a week can I work remotely?"}, "classification": ["public"], "stream": true}' |
    python3 -c 'import json, sys
done = False
for line in sys.stdin:
    try:
        event = json.loads(line)
    except ValueError:
        event = {}
    if event.get("type") == "delta":
        print(event["content"], end="", flush=True)
    elif event.get("type") == "done":
        done = True
    else:
        sys.exit("error: " + line.strip())
print()
if not done:
    sys.exit("error: the answer ended early (is the model server running?)")'

echo "==> MCP: point a client at $TROVE_URL/mcp with the same two key headers; see docs/mcp.md and examples/mcp_search.py"
