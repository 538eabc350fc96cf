#!/usr/bin/env bash
# The GPU benchmark, in one run on one GPU:
#   1. GEMM TFLOP/s of the training step's linear layers (fl-bench-gpu-gemm) against the card's
#      cuBLAS fp32 peak on an 8192^3 SGEMM, measured in the same process;
#   2. train-step tokens/s of fl-train --device cuda against the same model and step written in
#      PyTorch (bench/torch_gpt.py), same config, in two precisions:
#        fp32: fl-train fp32 (cuBLAS SGEMM) vs PyTorch eager fp32, TF32 off in both;
#        bf16: fl-train --precision bf16 (bf16 tensor-core GEMMs, fp32 accumulation) vs PyTorch
#              eager under torch.autocast(device_type="cuda", dtype=torch.bfloat16).
# Prints a Markdown table and writes the raw numbers and the ratios as JSON to $OUT_DIR/summary.json
# (default .). Goals (docs/gpu.md): fp32 >= 1.0x eager, bf16 >= 0.9x autocast.
#   bench/gpu_vs_pytorch.sh [build-dir]
# Config (environment): VOCAB D_MODEL LAYERS HEADS SEQ MB STEPS; default GPT-2-small shapes with
# an 8192-token vocabulary, micro-batch 8, 30 timed steps after 5 warm-up steps.
set -euo pipefail
BUILD="${1:-build}"
OUT_DIR="${OUT_DIR:-.}"
VOCAB="${VOCAB:-8192}" D_MODEL="${D_MODEL:-768}" LAYERS="${LAYERS:-12}" HEADS="${HEADS:-12}"
SEQ="${SEQ:-256}" MB="${MB:-8}" STEPS="${STEPS:-30}" WARMUP=5
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$OUT_DIR"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT_DIR/gpu.txt"

"$BUILD/bench/fl-bench-gpu-gemm" --benchmark_format=json --benchmark_min_time=0.3 \
  > "$OUT_DIR/gemm.json"

shape=(--model small --vocab "$VOCAB" --d-model "$D_MODEL" --layers "$LAYERS" --heads "$HEADS"
  --seq-len "$SEQ" --micro-batch "$MB")
launch=()
if command -v mpirun > /dev/null; then launch=(mpirun -np 1); else export RANK=0 WORLD_SIZE=1; fi
# One reduce bucket of the whole model unless BUCKET_BYTES says otherwise, as DeepSpeed's default
# reduce_bucket_size (5e8 elements) is for this model; fl-train takes at most the model's fp32
# bytes (2VC + TC + L(12C^2 + 13C) + 2C parameters: untied head, biases, two norms a block and a
# final one). Under fp16/bf16 the optimizer reads an fp32 copy of the gradients one reduce bucket
# at a time: with faultline's own default (1 MiB, for its small CPU models) a GPT-2-small step
# pays ~350 buckets' launches and host syncs. The bf16 step also runs with that default, in a row
# beside the goal's.
C=$D_MODEL
BUCKET_BYTES="${BUCKET_BYTES:-$((4 * (2 * VOCAB * C + SEQ * C + LAYERS * (12 * C * C + 13 * C) + 2 * C)))}"
train() {
  MASTER_PORT=$((20000 + RANDOM % 20000)) "${launch[@]}" "$BUILD/workloads/train/fl-train" \
    "${shape[@]}" --device cuda --steps $((STEPS + WARMUP)) --lr 1e-3 "$@"
}
# ROUNDS rounds (default 2), each running fl-train then PyTorch in each precision back to back:
# every ratio compares two runs minutes apart on the same card, and a second round shows how much
# a run's number moves (the H200's PyTorch bf16 step read 27 ms in one session and 43 ms in the
# next).
ROUNDS="${ROUNDS:-2}"
for r in $(seq 1 "$ROUNDS"); do
  for p in fp32 bf16; do
    train --precision "$p" --reduce-bucket-size "$BUCKET_BYTES" \
      --metrics "$OUT_DIR/fl_train_${p}_r$r.jsonl" > "$OUT_DIR/fl_train_${p}_r$r.log"
    python3 "$(dirname "$0")/torch_gpt.py" --vocab "$VOCAB" --d-model "$D_MODEL" \
      --layers "$LAYERS" --heads "$HEADS" --seq-len "$SEQ" --micro-batch "$MB" --steps "$STEPS" \
      --warmup "$WARMUP" --precision "$p" > "$OUT_DIR/torch_${p}_r$r.json"
  done
done
train --precision bf16 --reduce-bucket-size 1048576 --metrics "$OUT_DIR/fl_train_bf16_1mib.jsonl" \
  > "$OUT_DIR/fl_train_bf16_1mib.log"

python3 - "$OUT_DIR" "$WARMUP" "$ROUNDS" <<'PY'
import json, statistics, sys
out, warmup, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
goals = {"fp32": 1.0, "bf16": 0.9}
reference = {"fp32": "PyTorch eager fp32 (TF32 off)", "bf16": "PyTorch autocast bf16"}
gemm = json.load(open(f"{out}/gemm.json"))["benchmarks"]
peak = next(b["TFLOP/s"] for b in gemm if b["name"].startswith("BM_CublasSquarePeak"))
gpu = open(f"{out}/gpu.txt").read().strip()
print(f"\n{gpu}\n\n| GEMM (fwd + bwd of one linear) | TFLOP/s | of cuBLAS fp32 peak |\n|---|---|---|")
print(f"| cuBLAS SGEMM 8192^3 (peak) | {peak:.1f} | 100% |")
for b in gemm:
    if b["name"].startswith("BM_StepLinear"):
        name = b["name"].split("/")[1]
        print(f"| {name} | {b['TFLOP/s']:.1f} | {100 * b['TFLOP/s'] / peak:.0f}% |")
summary = {"gpu": gpu, "cublas_peak_tflops": peak, "gemm": gemm, "precisions": {}}
def ours_in(path):
    rows = [json.loads(l) for l in open(path)][warmup:]
    return statistics.median(r["tokens_per_s"] for r in rows), (rows[-1]["loss"] if rows else None)
print("\n| precision | round | fl-train tokens/s | reference | reference tokens/s | ratio | goal |")
print("|---|---|---|---|---|---|---|")
for p in ("fp32", "bf16"):
    per_round = []
    for r in range(1, rounds + 1):
        ours, last_loss = ours_in(f"{out}/fl_train_{p}_r{r}.jsonl")
        torch = json.load(open(f"{out}/torch_{p}_r{r}.json"))
        per_round.append({"fl_train_tokens_per_s": ours, "reference_tokens_per_s":
                          torch["tokens_per_s"], "ratio": ours / torch["tokens_per_s"],
                          "fl_train_last_loss": last_loss, "reference_last_loss": torch["last_loss"]})
        print(f"| {p} | {r} | {ours:.0f} | {reference[p]} ({torch['torch']}) | "
              f"{torch['tokens_per_s']:.0f} | {ours / torch['tokens_per_s']:.2f}x | |")
    # The headline: the median of the rounds' ratios (each from runs side by side).
    ratio = statistics.median(x["ratio"] for x in per_round)
    met = "met" if ratio >= goals[p] else "not met"
    print(f"| {p} | median of {rounds} | {statistics.median(x['fl_train_tokens_per_s'] for x in per_round):.0f}"
          f" | | {statistics.median(x['reference_tokens_per_s'] for x in per_round):.0f} | "
          f"**{ratio:.2f}x** | >= {goals[p]}x: {met} |")
    summary["precisions"][p] = {"reference": reference[p], "rounds": per_round, "ratio": ratio,
                                "goal": goals[p], "goal_met": ratio >= goals[p]}
rows = [json.loads(l) for l in open(f"{out}/fl_train_bf16_1mib.jsonl")][warmup:]
ours = statistics.median(r["tokens_per_s"] for r in rows)
torch = json.load(open(f"{out}/torch_bf16_r{rounds}.json"))
print(f"| bf16, 1 MiB reduce buckets | after round {rounds} | {ours:.0f} | {reference['bf16']} | "
      f"{torch['tokens_per_s']:.0f} | {ours / torch['tokens_per_s']:.2f}x | (faultline's default bucket) |")
summary["bf16_1mib_buckets"] = {"fl_train_tokens_per_s": ours,
                                "ratio": ours / torch["tokens_per_s"]}
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
PY
