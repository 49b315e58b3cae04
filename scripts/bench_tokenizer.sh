#!/usr/bin/env bash
# Tokenizer throughput: megatrain-bench tokenize against Hugging Face `tokenizers` (Rust, through
# the .venv Python: encode_batch and encode_batch_fast with RAYON_NUM_THREADS=N) on the same corpus,
# at 1 and 2 threads, for each fixture in tests/fixtures/tokenizers (or the directories given).
#   scripts/bench_tokenizer.sh [--mb 4] [--bin build/bin] [TOKENIZER_DIR ...]
# The corpus is generated reproducibly (seed 0) from the committed training and test corpora:
# lines drawn at random, their words shuffled and random numbers mixed in, one document per line.
# Needs `tokenizers` in .venv (.venv/bin/python -m pip install tokenizers); prints JSON lines.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mb=4
bin="$root/build/bin"
dirs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --mb) mb="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    *) dirs+=("$1"); shift ;;
  esac
done
fixtures="$root/tests/fixtures/tokenizers"
[ ${#dirs[@]} -gt 0 ] || dirs=("$fixtures"/{gpt2,llama3,qwen2,llama2,mistral})
python="$root/.venv/bin/python"
corpus="$(mktemp /tmp/mt-tokbench-XXXXXX.txt)"
trap 'rm -f "$corpus"' EXIT

"$python" - "$fixtures" "$corpus" "$mb" <<'PY'
import json, random, sys
fixtures, out, mb = sys.argv[1], sys.argv[2], float(sys.argv[3])
lines = [l for l in open(f"{fixtures}/train.txt", encoding="utf-8", newline="").read().splitlines() if l.strip()]
lines += [json.loads(l) for l in open(f"{fixtures}/test_corpus.jsonl", encoding="utf-8")]
lines = [l.replace("\n", " ") for l in lines if l]
rng = random.Random(0)
target, size, docs = int(mb * 1e6), 0, []
while size < target:
    doc = []
    for _ in range(rng.randint(1, 8)):
        words = rng.choice(lines).split(" ")
        rng.shuffle(words)
        if rng.random() < 0.5:
            words.insert(rng.randrange(len(words) + 1), str(rng.randrange(10 ** rng.randint(1, 9))))
        doc.append(" ".join(words))
    text = "  ".join(doc)
    docs.append(text)
    size += len(text.encode()) + 1
open(out, "w", encoding="utf-8", newline="").write("\n".join(docs) + "\n")
PY

for dir in "${dirs[@]}"; do
  for threads in 1 2; do
    "$bin/megatrain-bench" tokenize --tokenizer "$dir" --corpus "$corpus" --threads "$threads" --json |
      "$python" -c "import json,sys; r=json.loads(sys.stdin.read()); print(json.dumps({'impl':'megatrain','tokenizer':'$(basename "$dir")','threads':r['threads'],'tokens':r['tokens'],'tokens_per_s':round(r['tokens_per_s']),'mb_per_s':round(r['mb_per_s'],2),'cpu':r['cpu']['model']}))"
    RAYON_NUM_THREADS=$threads TOKENIZERS_PARALLELISM=true "$python" - "$dir" "$corpus" "$threads" <<'PY'
import json, statistics, sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1] + "/tokenizer.json")
docs = open(sys.argv[2], encoding="utf-8", newline="").read().split("\n")[:-1]
nbytes = sum(len(d.encode()) + 1 for d in docs)
for name in ("encode_batch", "encode_batch_fast"):
    fn = getattr(tok, name, None)
    if fn is None:
        continue
    fn(docs, add_special_tokens=False)  # warm-up, as megatrain-bench does
    times, tokens = [], 0
    for _ in range(3):
        t0 = time.perf_counter()
        enc = fn(docs, add_special_tokens=False)
        times.append(time.perf_counter() - t0)
    tokens = sum(len(e.ids) for e in enc)
    sec = statistics.median(times)
    print(json.dumps({"impl": f"hf {name}", "tokenizer": sys.argv[1].rstrip("/").split("/")[-1],
                      "threads": int(sys.argv[3]), "tokens": tokens, "tokens_per_s": round(tokens / sec),
                      "mb_per_s": round(nbytes / sec / 1e6, 2)}))
PY
  done
done
