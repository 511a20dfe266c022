#!/usr/bin/env bash
# The GPU-only paths, run once on a machine with an NVIDIA GPU: nccl and hierarchical
# cross_ops, multi_worker_mirrored with communication=nccl, mixed_float16 (loss scaling),
# mixed_bfloat16, XLA, a cnn benchmark row against the hand-written script, the advisor
# on a ResNet50, and the equivalence matrix's nccl cells (scripts/equivalence.py --gpu). Prints a table of what passed, with figures. At most about 8 minutes on one
# GPU, and up to 15 more for the advisor (budget_s=600).
#
#   bash scripts/gpu_check.sh            # from the repository root; python -m xpdist must work
#
# Without a GPU it says so in one line and exits 0.
set -u
cd "$(dirname "$0")/.."

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then
  echo "gpu_check: no NVIDIA GPU on this machine (nvidia-smi lists none); nothing to check."
  exit 0
fi

WORK="$(mktemp -d -t xpdist-gpu-check-XXXX)"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
unset MLFLOW_TRACKING_URI TF_CONFIG
# A cnn with steps long enough to time, short enough for the whole script to fit in 8 minutes.
CNN=(model=cnn "model.filters=[32,64]" dataset=synthetic_images "dataset.image_shape=[32,32,3]"
     dataset.num_examples=8192 dataset.per_replica_batch_size=128 trainer.epochs=3 trainer.progress=false)
RESULTS="$WORK/results.tsv"
: > "$RESULTS"

# case NAME TIMEOUT_S OVERRIDES...: one xpdist run in its own job directory; one line of results.
case_() {
  local name="$1" limit="$2"; shift 2
  local job="$WORK/jobs/$name" start end code
  start=$(date +%s.%N)
  timeout "$limit" python -m xpdist "${CNN[@]}" "$@" "hydra.run.dir=$job" \
      "tracking.uri=sqlite:///$WORK/mlflow.db" > "$WORK/$name.log" 2>&1
  code=$?
  end=$(date +%s.%N)
  python - "$name" "$code" "$start" "$end" "$job" "$WORK/$name.log" >> "$RESULTS" <<'PY'
import json, sys
from pathlib import Path
name, code, start, end, job, log = sys.argv[1:]
metrics = {}
path = Path(job) / "metrics.jsonl"
if path.exists():
    for line in path.read_text().splitlines():
        try:
            metrics.update(json.loads(line)["metrics"])
        except ValueError:
            pass
status = "PASS" if code == "0" else ("TIMEOUT" if code == "124" else f"FAIL (exit {code})")
why = ""
if code != "0":
    lines = [l for l in Path(log).read_text(errors="replace").splitlines() if l.strip()]
    why = next((l for l in reversed(lines) if "error" in l.lower()), lines[-1] if lines else "")[:150]
print("\t".join([name, status, f"{float(end) - float(start):.1f}",
                 f"{metrics.get('steady_examples_per_sec', float('nan')):,.0f}",
                 f"{metrics.get('loss', float('nan')):.4f}", why]))
PY
  tail -n 1 "$RESULTS" | cut -f1-5
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
case_ float32-default           120 strategy=default
case_ mirrored-nccl             120 strategy=mirrored cross_ops=nccl
case_ mirrored-hierarchical     120 strategy=mirrored cross_ops=hierarchical
case_ mwms-nccl-one-worker      120 strategy=multi_worker_mirrored communication=nccl
case_ mixed_float16-fit         120 trainer.precision=mixed_float16
case_ mixed_float16-ctl         120 trainer.precision=mixed_float16 trainer=ctl
case_ mixed_bfloat16-fit        120 trainer.precision=mixed_bfloat16
case_ xla-fit                   120 trainer.jit_compile=true
case_ xla-ctl                   120 trainer.jit_compile=true trainer=ctl
case_ mixed_float16-mirrored-ctl   120 trainer.precision=mixed_float16 strategy=mirrored trainer=ctl

# One benchmark row: xpdist against the hand-written script on the same cnn (one repetition).
timeout 240 python scripts/bench.py --workloads cnn --strategies one_device --reps 1 --no-warmup \
    --log-cost-cases --out "$WORK/bench" > "$WORK/bench.log" 2>&1
bench_code=$?

# The advisor on the GPUs: which strategy, cross_ops and batch for a ResNet50 (docs/advisor.md).
timeout 900 python -m xpdist advise budget_s=600 model=keras_app model.architecture=ResNet50 \
    dataset=synthetic_images "dataset.image_shape=[224,224,3]" dataset.num_examples=2048 \
    "tracking.uri=sqlite:///$WORK/mlflow.db" > "$WORK/advise.log" 2>&1
advise_code=$?

# The equivalence matrix's GPU-only cells (nccl), merged into a copy of docs/equivalence.md's
# results: `python -m xpdist verify` for each (docs/verify.md).
cp docs/figures/equivalence.json "$WORK/equivalence.json"
timeout 900 python scripts/equivalence.py --gpu --only nccl --results "$WORK/equivalence.json" \
    --page "$WORK/equivalence.md" > "$WORK/equivalence.log" 2>&1
equivalence_code=$?

echo
echo "| case | status | wall s | steady ex/s | final loss | why it failed |"
echo "|---|---|---:|---:|---:|---|"
awk -F'\t' '{printf "| %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6}' "$RESULTS"
echo
if [ -f "$WORK/bench/bench.md" ]; then
  echo "cnn benchmark (scripts/bench.py, exit $bench_code):"
  cat "$WORK/bench/bench.md"
else
  echo "cnn benchmark FAILED (exit $bench_code): see $WORK/bench.log"
fi
echo "advisor (exit $advise_code), its answer:"
tail -n 25 "$WORK/advise.log"
echo "equivalence matrix, nccl cells (exit $equivalence_code; page $WORK/equivalence.md, copy"
echo "$WORK/equivalence.json to docs/figures/ and run scripts/equivalence.py --render to publish):"
grep -E "^(linear|cnn|batchnorm)\|" "$WORK/equivalence.log"
failed=$(awk -F'\t' '$2 != "PASS"' "$RESULTS" | wc -l)
echo "gpu_check: $(wc -l < "$RESULTS") cases, $failed failed; logs in $WORK"
[ "$failed" -eq 0 ] && [ "$bench_code" -eq 0 ] && [ "$advise_code" -eq 0 ] && [ "$equivalence_code" -eq 0 ]
