#!/usr/bin/env bash
# Peak device memory per rank against ZeRO's model-state formula plus activations, for ZeRO
# stages 0-3 in fp32 and bf16 on dp 4 (fl-train --memory-report). For each run: the model states
# measured and by the formula (AdamW; fp32 (4+4+8)Ψ, 8Ψ + 8Ψ/Nd, 4Ψ + 12Ψ/Nd, 16Ψ/Nd; bf16 16Ψ,
# 4Ψ + 12Ψ/Nd, 2Ψ + 14Ψ/Nd, 16Ψ/Nd), the activations' peak, the configured transients DeepSpeed's
# memory estimates count (stages 2-3: one gradient bucket; stage 3: the largest layer gathered,
# deepspeed.readthedocs.io/en/latest/memory.html's largest_layer_memory), the highest peak of any
# rank, its ratio to formula + activations with and without them, and each stage's peak over the
# previous stage's next to the formula's ratio. Ψ is the padded parameter count (ZeRO-0's
# parameters / bytes per element).
#
# The buckets are sized for the model as Hugging Face's DeepSpeed integration sizes them for
# "auto": reduce_bucket_size hidden² (16384 elements: --reduce-bucket-size 65536, in fp32 bytes),
# stage3_prefetch_bucket_size 0.9·hidden² elements; allgather_bucket_size is set to hidden² too.
# Memory is counted by the accountant, not timed: one run per cell is exact.
#   bench/memory_table.sh [build-dir] [fl-train args...]
set -euo pipefail
BUILD="${1:-build}"
EXTRA=("${@:2}")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
HIDDEN=128
ARGS=(--model small --dp 4 --micro-batch 1 --seq-len 16 --steps 2 --memory-report
      --reduce-bucket-size $((HIDDEN * HIDDEN * 4)) --allgather-bucket-size $((HIDDEN * HIDDEN * 4)))
for prec in fp32 bf16; do
  bytes=4
  [ "$prec" = bf16 ] && bytes=2
  for zero in 0 1 2 3; do
    Z3=()
    [ "$zero" = 3 ] && Z3=(--zero3-prefetch-bytes $((HIDDEN * HIDDEN * 9 / 10 * bytes)))
    MASTER_PORT=$((20000 + RANDOM % 20000)) mpirun --oversubscribe --bind-to none -np 4 \
      "$BUILD/workloads/train/fl-train" "${ARGS[@]}" "${Z3[@]}" "${EXTRA[@]}" \
      --precision "$prec" --zero "$zero" > "$TMP/$prec.z$zero.out"
  done
done
python3 - "$TMP" <<'PY'
import re, sys
tmp, nd, mib = sys.argv[1], 4, 2**20
def ranks(path):
    out = []
    for line in re.findall(r"memory rank \d+:(.*)", open(path).read()):
        out.append({k: int(v) for k, v in re.findall(r"([a-z_]+) (\d+)", line)})
    return out
def formula(prec, z, psi):
    if prec == "fp32":
        return [16 * psi, 8 * psi + 8 * psi / nd, 4 * psi + 12 * psi / nd, 16 * psi / nd][z]
    return [16 * psi, 4 * psi + 12 * psi / nd, 2 * psi + 14 * psi / nd, 16 * psi / nd][z]
print("| precision | stage | model states | formula | activations | bucket + layer | peak "
      "| formula + act. | peak / (formula + act.) | formula + act. + bucket + layer "
      "| peak / (formula + act. + bucket + layer) | peak / previous stage's | formula's |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for prec in ("fp32", "bf16"):
    runs = [ranks(f"{tmp}/{prec}.z{z}.out") for z in range(4)]
    psi = runs[0][0]["params"] // (4 if prec == "fp32" else 2)
    prev = None
    for z in range(4):
        top = max(runs[z], key=lambda r: r["peak"])
        f = formula(prec, z, psi)
        want = f + top["activations"]
        extra = top.get("bucket", 0) + top.get("layer", 0)
        ratio = "" if prev is None else f"{top['peak'] / prev[0]:.2f}"
        fratio = "" if prev is None else f"{f / prev[1]:.2f}"
        print(f"| {prec} | ZeRO-{z} | {top['model_states'] / mib:.2f} | {f / mib:.2f} "
              f"| {top['activations'] / mib:.2f} | {extra / mib:.2f} | {top['peak'] / mib:.2f} "
              f"| {want / mib:.2f} | {top['peak'] / want:.2f} | {(want + extra) / mib:.2f} "
              f"| {top['peak'] / (want + extra):.2f} | {ratio} | {fratio} |")
        prev = (top["peak"], f)
PY
