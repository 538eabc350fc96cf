#!/usr/bin/env bash
# The GPU benchmark, in one run on one GPU:
#   1. GEMM TFLOP/s of the training step's linear layers (fl-bench-gpu-gemm) against the card's
#      cuBLAS fp32 peak on an 8192^3 SGEMM, measured in the same process;
#   2. train-step tokens/s of fl-train --device cuda against the same model and step written in
#      PyTorch eager (bench/torch_gpt.py), same config, fp32 without TF32 in both.
# Prints a Markdown table and writes the raw numbers as JSON to $OUT_DIR (default .).
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
MASTER_PORT=$((20000 + RANDOM % 20000)) "${launch[@]}" "$BUILD/workloads/train/fl-train" \
  "${shape[@]}" --device cuda --steps $((STEPS + WARMUP)) --lr 1e-3 \
  --metrics "$OUT_DIR/fl_train.jsonl" > "$OUT_DIR/fl_train.log"

python3 "$(dirname "$0")/torch_gpt.py" --vocab "$VOCAB" --d-model "$D_MODEL" --layers "$LAYERS" \
  --heads "$HEADS" --seq-len "$SEQ" --micro-batch "$MB" --steps "$STEPS" --warmup "$WARMUP" \
  > "$OUT_DIR/torch.json"

python3 - "$OUT_DIR" "$WARMUP" <<'PY'
import json, statistics, sys
out, warmup = sys.argv[1], int(sys.argv[2])
gemm = json.load(open(f"{out}/gemm.json"))["benchmarks"]
peak = next(b["TFLOP/s"] for b in gemm if b["name"].startswith("BM_CublasSquarePeak"))
rows = [json.loads(l) for l in open(f"{out}/fl_train.jsonl")][warmup:]
ours = statistics.median(r["tokens_per_s"] for r in rows)
torch = json.load(open(f"{out}/torch.json"))
gpu = open(f"{out}/gpu.txt").read().strip()
print(f"\n{gpu}\n\n| GEMM (fwd + bwd of one linear) | TFLOP/s | of cuBLAS peak |\n|---|---|---|")
print(f"| cuBLAS SGEMM 8192^3 (peak) | {peak:.1f} | 100% |")
for b in gemm:
    if b["name"].startswith("BM_StepLinear"):
        name = b["name"].split("/")[1]
        print(f"| {name} | {b['TFLOP/s']:.1f} | {100 * b['TFLOP/s'] / peak:.0f}% |")
print(f"\n| train step | tokens/s | vs PyTorch eager |\n|---|---|---|")
print(f"| PyTorch {torch['torch']} eager | {torch['tokens_per_s']:.0f} | 1.00 |")
print(f"| fl-train --device cuda | {ours:.0f} | {ours / torch['tokens_per_s']:.2f} |")
json.dump({"gpu": gpu, "cublas_peak_tflops": peak, "fl_train_tokens_per_s": ours,
           "torch_tokens_per_s": torch["tokens_per_s"], "gemm": gemm},
          open(f"{out}/summary.json", "w"), indent=1)
PY
