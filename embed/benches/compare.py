#!/usr/bin/env python3
"""Side-by-side throughput of trove-embed and sentence-transformers, in one run.

Runs sentence-transformers (PyTorch CPU, torch threads = 2, `encode(batch_size=32)`),
then the criterion bench `local_embedding` of trove-embed (2 threads), then
sentence-transformers again, all on the same sentences (benches/sentences.txt: 256
sentences of 42-46 tokens), and prints sentences/s at batch 32 and 1, the short-query
latency, the ratio, the largest cosine deviation between the two, and the load average
before and after. Needs torch and sentence-transformers (not project dependencies):

    /tmp/probe-venv/bin/python embed/benches/compare.py

Options: --rounds N (sentence-transformers repetitions per pass, default 5),
--skip-build, --wait-quiet SECONDS (wait for an idle CPU first). The model folder is $TROVE_MODELS_DIR/all-MiniLM-L6-v2 (default: the
workspace's .data/models). Run it on a quiet machine (check `uptime`).
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SENTENCES = HERE / "sentences.txt"
QUERY = "how do I reset my password"
THREADS = 2


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def cpu_idle(seconds=5.0) -> float:
    """Share of CPU time idle over the next `seconds` (from /proc/stat)."""

    def sample():
        v = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        return sum(v[:8]), v[3] + v[4]

    t1, i1 = sample()
    time.sleep(seconds)
    t2, i2 = sample()
    return (i2 - i1) / max(1, t2 - t1)


def wait_quiet(limit: float) -> None:
    """Waits (at most `limit` seconds) until the machine is >= 90% idle for 5 s."""
    start = time.monotonic()
    while True:
        idle = cpu_idle()
        if idle >= 0.9 or time.monotonic() - start >= limit:
            print(f"CPU idle {idle:.0%} over 5 s, load average {load_average()}", flush=True)
            return


def st_pass(model, sentences, rounds):
    import torch

    torch.set_num_threads(THREADS)
    model.encode(sentences[:64], batch_size=32)
    b32 = []
    for _ in range(rounds):
        t = time.perf_counter()
        model.encode(sentences, batch_size=32)
        b32.append(len(sentences) / (time.perf_counter() - t))
    few = sentences[:32]
    b1 = []
    for _ in range(rounds):
        t = time.perf_counter()
        for s in few:
            model.encode([s], batch_size=1)
        b1.append(len(few) / (time.perf_counter() - t))
    lat = []
    for _ in range(50):
        t = time.perf_counter()
        model.encode([QUERY])
        lat.append(time.perf_counter() - t)
    return statistics.median(b32), statistics.median(b1), statistics.median(lat) * 1000


UNITS = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9}
TIME_UNITS = {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1.0, "s": 1e3}


def parse_criterion(text):
    """{bench id: [throughput elem/s or None, median time ms]} from criterion's output."""

    def middle(bracket):
        v = bracket.split()
        return float(v[2]), v[3]

    out = {}
    current = None
    in_change = False
    for line in text.splitlines():
        m = re.match(r"^(\S+/\S+)(?:\s+time:\s+\[(.*)\])?\s*$", line)
        if m:
            current, in_change = m.group(1), False
            if m.group(2):
                value, unit = middle(m.group(2))
                out[current] = [None, value * TIME_UNITS[unit]]
            continue
        if re.match(r"^\s+change:", line):
            in_change = True
        if in_change or current is None:
            continue
        m = re.match(r"^\s+time:\s+\[(.*)\]", line)
        if m:
            value, unit = middle(m.group(1))
            out[current] = [None, value * TIME_UNITS[unit]]
        m = re.match(r"^\s+thrpt:\s+\[(.*)\]", line)
        if m and current in out:
            value, unit = middle(m.group(1))
            out[current][0] = value * UNITS[unit[: -len("elem/s")]]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--skip-build", action="store_true")
    ap.add_argument("--wait-quiet", type=float, default=0, metavar="SECONDS",
                    help="first wait up to SECONDS for a >= 90%% idle CPU")
    args = ap.parse_args()

    models = Path(os.environ.get("TROVE_MODELS_DIR") or REPO / ".data" / "models")
    model_dir = models / "all-MiniLM-L6-v2"
    sentences = SENTENCES.read_text(encoding="utf-8").splitlines()
    env = dict(os.environ, TROVE_MODELS_DIR=str(models), TROVE_EMBED_THREADS=str(THREADS))

    if not args.skip_build:
        print("building the bench and the embed_lines example (release)...", flush=True)
        for cmd in (
            ["cargo", "bench", "-p", "trove-embed", "--bench", "local_embedding", "--no-run"],
            ["cargo", "build", "--release", "-p", "trove-embed", "--example", "embed_lines"],
        ):
            subprocess.run(["nice", "-n", "10", *cmd], cwd=REPO, check=True, env=env)

    import numpy as np
    import sentence_transformers
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(THREADS)
    model = SentenceTransformer(str(model_dir), device="cpu")
    if args.wait_quiet > 0:
        wait_quiet(args.wait_quiet)
    load_before = load_average()
    print(f"load average before: {load_before}", flush=True)

    print("sentence-transformers, pass 1...", flush=True)
    st1 = st_pass(model, sentences, args.rounds)

    print("trove-embed criterion bench...", flush=True)
    bench = subprocess.run(
        ["cargo", "bench", "-p", "trove-embed", "--bench", "local_embedding"],
        cwd=REPO, env=env, check=True, capture_output=True, text=True,
    )
    print(bench.stdout, flush=True)
    results = parse_criterion(bench.stdout)
    try:
        rs_b32 = results["local_embedding/batch32"][0]
        rs_b1 = results["local_embedding/batch1"][0]
        rs_query = results["local_embedding_latency/query"][1]
    except (KeyError, TypeError):
        sys.exit(f"could not parse the criterion output:\n{bench.stdout}\n{bench.stderr}")

    print("sentence-transformers, pass 2...", flush=True)
    st2 = st_pass(model, sentences, args.rounds)
    load_after = load_average()

    # Deviation on the same sentences.
    reference = model.encode(sentences, batch_size=32, convert_to_numpy=True).astype(np.float64)
    exe = REPO / "target" / "release" / "examples" / "embed_lines"
    with tempfile.NamedTemporaryFile(suffix=".f32") as out:
        subprocess.run([str(exe), str(models), "all-MiniLM-L6-v2", str(THREADS)],
                       input=SENTENCES.read_bytes(), stdout=out, check=True)
        ours = np.fromfile(out.name, dtype="<f4").reshape(len(sentences), -1).astype(np.float64)
    cos = (ours * reference).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(reference, axis=1)

    st_b32 = (st1[0] + st2[0]) / 2
    st_b1 = (st1[1] + st2[1]) / 2
    st_q = (st1[2] + st2[2]) / 2
    print()
    print(f"sentence-transformers {sentence_transformers.__version__}, torch {torch.__version__}, "
          f"{THREADS} threads; trove-embed {THREADS} threads; {len(sentences)} sentences of 42-46 tokens")
    print(f"load average: before {load_before}, after {load_after}")
    print(f"{'':24}{'sentence-transformers':>26}{'trove-embed':>14}{'ratio':>8}")
    print(f"{'batch 32 (sentences/s)':24}{f'{st_b32:.1f} ({st1[0]:.1f}, {st2[0]:.1f})':>26}{rs_b32:>14.1f}{rs_b32 / st_b32:>8.2f}")
    print(f"{'batch 1 (sentences/s)':24}{f'{st_b1:.1f} ({st1[1]:.1f}, {st2[1]:.1f})':>26}{rs_b1:>14.1f}{rs_b1 / st_b1:>8.2f}")
    print(f"{'short query p50 (ms)':24}{f'{st_q:.2f} ({st1[2]:.2f}, {st2[2]:.2f})':>26}{rs_query:>14.2f}{st_q / rs_query:>8.2f}")
    print(f"cosine to sentence-transformers: min {cos.min():.12f} (max 1 - cos = {1 - cos.min():.1e})")


if __name__ == "__main__":
    main()
