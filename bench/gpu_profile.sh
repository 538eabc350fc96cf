#!/usr/bin/env bash
# Where a GPU training step's time goes, in one run on one GPU (after ci/device-kit.sh build):
#   1. fl-train tokens/s at micro-batch 8 and 32 in fp32 and bf16: a step whose time grows less
#      than its work is bound by the host (launches, syncs), not by the kernels; with the median
#      of each phase of the step by the host's clock (a phase that reads a result back waits
#      for the kernels queued before it);
#   2. Nsight Compute's per-kernel summary (gpu__time_duration.sum, clocks left alone) of 1 step
#      at micro-batch 8 in each precision: the kernels' total time against the step's wall time
#      (NCU_S seconds per precision, default 120; NCU_S=0 leaves it out).
#   OUT_DIR=dir bench/gpu_profile.sh [build-dir]
# Config (environment): as bench/gpu_vs_pytorch.sh (GPT-2-small shapes, 8192-token vocabulary,
# one reduce bucket of the whole model unless BUCKET_BYTES says otherwise).
set -uo pipefail
BUILD="${1:-build-gpu}"
OUT_DIR="${OUT_DIR:-.}"
VOCAB="${VOCAB:-8192}" D_MODEL="${D_MODEL:-768}" LAYERS="${LAYERS:-12}" HEADS="${HEADS:-12}"
SEQ="${SEQ:-256}"
mkdir -p "$OUT_DIR"
export RANK=0 WORLD_SIZE=1 LOCAL_RANK=0
C=$D_MODEL  # the model's fp32 bytes, as in bench/gpu_vs_pytorch.sh
BUCKET_BYTES="${BUCKET_BYTES:-$((4 * (2 * VOCAB * C + SEQ * C + LAYERS * (12 * C * C + 13 * C) + 2 * C)))}"
train() {
  MASTER_PORT=$((20000 + RANDOM % 20000)) "$BUILD/workloads/train/fl-train" --model small \
    --vocab "$VOCAB" --d-model "$D_MODEL" --layers "$LAYERS" --heads "$HEADS" --seq-len "$SEQ" \
    --device cuda --lr 1e-3 --reduce-bucket-size "$BUCKET_BYTES" "$@"
}
for p in $([ "${SCALE:-1}" = 1 ] && echo fp32 bf16); do  # SCALE=0 leaves part 1 out
  for mb in 8 32; do
    train --precision "$p" --micro-batch "$mb" --steps 8 --metrics "$OUT_DIR/scale_${p}_mb$mb.jsonl" \
      > /dev/null 2>&1
    echo "$p mb $mb: median tokens/s of steps 3-7: $(python3 -c "
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][3:]
print(round(statistics.median(r['tokens_per_s'] for r in rows)),
      'step ms', round(1000 * statistics.median(r['step_time_s'] for r in rows), 1), '| phases ms:',
      ', '.join(f'{n} {1000 * statistics.median(r[\"phases\"][i][2] for r in rows):.1f}'
                for i, (n, _, _) in enumerate(rows[0].get('phases', []))))
" "$OUT_DIR/scale_${p}_mb$mb.jsonl")"
  done
done
# 3. Per-op GPU time without a profiler binary (OPS=1, the default): fl-train under
#    FAULTLINE_CUDA_OP_TIMES (CUDA events around each fl::ops call, steps 2-7 of 8) beside
#    PyTorch's own profiler on the reference (bench/torch_gpt.py --profile, 3 steps after warm-up),
#    each side's heaviest entries in ms a step.
if [ "${OPS:-1}" = 1 ]; then
  for p in fp32 bf16; do
    rm -f "$OUT_DIR/ops_fl_$p.jsonl" "$OUT_DIR/ops_torch_$p.jsonl"
    FAULTLINE_CUDA_OP_TIMES="$OUT_DIR/ops_fl_$p.jsonl" train --precision "$p" --micro-batch 8 \
      --steps 8 > /dev/null 2>&1
    python3 "$(dirname "$0")/torch_gpt.py" --vocab "$VOCAB" --d-model "$D_MODEL" --layers "$LAYERS" \
      --heads "$HEADS" --seq-len "$SEQ" --micro-batch 8 --steps 3 --warmup 3 --precision "$p" \
      --profile "$OUT_DIR/ops_torch_$p.jsonl" > /dev/null 2>&1
    python3 - "$OUT_DIR" "$p" <<'PY'
import json, sys
out, p = sys.argv[1], sys.argv[2]
for side, name in (("fl", "fl-train ops (CUDA events)"), ("torch", "PyTorch kernels (profiler)")):
    try:
        rows = [json.loads(l) for l in open(f"{out}/ops_{side}_{p}.jsonl")]
    except OSError:
        print(f"{p} {name}: nothing written"); continue
    per = lambda r: r["ms"] / max(1, r.get("steps", 1))
    rows.sort(key=per, reverse=True)
    print(f"{p} {name}: {sum(per(r) for r in rows):.1f} ms a step")
    for r in rows[:12]:
        print(f"  {per(r):6.2f} ms  {r['calls'] / max(1, r.get('steps', 1)):6.0f}/step  {r['op'][:100]}")
PY
  done
fi
# Nsight Systems, where the machine has it (NSYS=1): the kernels' summed GPU time over 6 steps at
# micro-batch 8, by kernel, the top 15 of each precision printed with their share.
NSYS_BIN=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys \
  2> /dev/null | head -1)
if [ "${NSYS:-0}" = 1 ] && [ -n "$NSYS_BIN" ]; then
  for p in fp32 bf16; do
    timeout "${NSYS_S:-90}" "$NSYS_BIN" profile --trace=cuda --force-overwrite true \
      -o "$OUT_DIR/nsys_$p" "$BUILD/workloads/train/fl-train" --model small --vocab "$VOCAB" \
      --d-model "$D_MODEL" --layers "$LAYERS" --heads "$HEADS" --seq-len "$SEQ" --device cuda \
      --lr 1e-3 --reduce-bucket-size "$BUCKET_BYTES" --precision "$p" --micro-batch 8 --steps 6 \
      > "$OUT_DIR/nsys_$p.log" 2>&1
    "$NSYS_BIN" stats --report cuda_gpu_kern_sum --format csv --output "$OUT_DIR/nsys_$p" \
      "$OUT_DIR/nsys_$p.nsys-rep" >> "$OUT_DIR/nsys_$p.log" 2>&1
    rm -f "$OUT_DIR/nsys_$p.nsys-rep" "$OUT_DIR/nsys_$p.sqlite"
    python3 - "$OUT_DIR" "$p" <<'PY'
import csv, glob, sys
out, p = sys.argv[1], sys.argv[2]
files = glob.glob(f"{out}/nsys_{p}*kern_sum*.csv")
if not files:
    sys.exit(print(f"{p}: no nsys kernel summary (see nsys_{p}.log)"))
rows = list(csv.DictReader(open(files[0])))
col = lambda prefix: next(k for k in rows[0] if k.startswith(prefix))  # names vary by version
tot, pct, inst, name = col("Total Time"), col("Time"), col("Instances"), col("Name")
total = sum(float(r[tot]) for r in rows)
print(f"{p}: kernels' GPU time over 6 steps {total / 1e6:.1f} ms ({total / 6e6:.1f} ms a step)")
for r in rows[:15]:
    print(f"  {float(r[pct]):5.1f}%  {int(float(r[inst])):6d}x  {r[name][:110]}")
PY
  done
elif [ "${NSYS:-0}" = 1 ]; then
  echo "no nsys on this machine"
fi
[ "${NCU_S:-120}" = 0 ] && exit 0
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for p in fp32 bf16; do
  timeout "${NCU_S:-120}" "$NCU" --clock-control none --metrics gpu__time_duration.sum \
    --print-summary per-kernel --csv --launch-count 4000 \
    "$BUILD/workloads/train/fl-train" --model small --vocab "$VOCAB" --d-model "$D_MODEL" \
    --layers "$LAYERS" --heads "$HEADS" --seq-len "$SEQ" --device cuda --lr 1e-3 \
    --precision "$p" --micro-batch 8 --steps 1 > "$OUT_DIR/ncu_$p.csv" 2> "$OUT_DIR/ncu_$p.err"
done
