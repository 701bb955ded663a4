# Shared by the examples: Trove's address and key, and small helpers for its JSON answers.
# Sourced, not run: `source "$(dirname "$0")/lib.sh"`.

TROVE_URL=${TROVE_URL:-http://127.0.0.1:8080}
secrets="$(dirname "${BASH_SOURCE[0]}")/../.data/secrets.env"
if [[ -z ${TROVE_KEY_ID:-} && -f $secrets ]]; then
    TROVE_KEY_ID=$(sed -n 's/^TROVE_MASTER_KEY_ID=//p' "$secrets")
    TROVE_KEY_SECRET=$(sed -n 's/^TROVE_MASTER_KEY_SECRET=//p' "$secrets")
fi
: "${TROVE_KEY_ID:?set TROVE_KEY_ID and TROVE_KEY_SECRET (or start Trove with scripts/run)}"
: "${TROVE_KEY_SECRET:?set TROVE_KEY_SECRET}"

# api METHOD PATH [curl arguments]: prints the JSON answer; an HTTP error stops the script.
api() {
    local method=$1 path=$2 answer status
    shift 2
    answer=$(curl -sS -X "$method" "$TROVE_URL$path" -w '\n%{http_code}' \
        -H "x-api-key: $TROVE_KEY_ID" -H "x-api-key-secret: $TROVE_KEY_SECRET" \
        -H 'content-type: application/json' "$@") || return 1
    status=${answer##*$'\n'}
    answer=${answer%$'\n'*}
    if ((status >= 400)); then
        echo "error: $method $path answered $status: ${answer:-(no body)}" >&2
        return 1
    fi
    printf '%s\n' "$answer"
}

# json EXPRESSION: the value of a Python expression over the JSON read from stdin (`d`).
json() {
    python3 -c 'import json, sys
text = sys.stdin.read()
if not text:
    sys.exit(1)
d = json.loads(text)
value = eval(sys.argv[1])
print(value if isinstance(value, str) else json.dumps(value))' "$1"
}

# quote TEXT: TEXT as a JSON string.
quote() { python3 -c 'import json, sys; print(json.dumps(sys.argv[1]))' "$1"; }

# show: prints the fragments of a search answer, one a line: score, metadata, text.
show() {
    python3 -c 'import json, sys
for f in json.load(sys.stdin):
    print("  %8.4f  [%s %s]  %s" % (f["score"], f["metadata"]["team"], f["metadata"]["year"], f.get("page_content", "")))'
}
