#!/usr/bin/env bash
# ctest suite.merge_shards: a real six-case slice of the smoke suite run as --shard 1/3, 2/3 and
# 3/3 into three results directories (three "machines"), merged with `faultline merge`, and the
# merged files checked by tests/harness/merge_check.py: JUnit parsed with xml.etree (counts equal
# the cases, each case once, each naming the shard its id hashes to), metrics parsed with
# prometheus_client's text parser (no series twice, `faultline metrics` over the three shards
# too), the summary and the report. Then a shard given twice (a copy of shard 1) with shard 2
# left out: three duplicates and one missing case reported, exit 1; and the inputs merge refuses.
# Exit 77 (skipped) without python3's prometheus_client (Debian: python3-prometheus-client).
#   tests/harness/merge_test.sh FAULTLINE_BIN SOURCE_DIR [PYTHON]
set -euo pipefail
faultline=$1
src=$2
py=${3:-/usr/bin/python3}
if ! "$py" -c 'import prometheus_client.parser, xml.etree.ElementTree' 2>/dev/null; then
  echo "SKIP: $py lacks prometheus_client (Debian: python3-prometheus-client)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
check="$py $src/tests/harness/merge_check.py"

# Six cases: shard 1 of 3 gets three, shard 2 two, shard 3 one (FNV-1a of the case id).
only=(--only world-size-mismatch --only different-prompts-on-tp-ranks --only offload-disk-full)
for i in 1 2 3; do
  rc=0
  "$faultline" suite "$src/scenarios/suites/smoke.yaml" "${only[@]}" --shard "$i/3" -j 2 \
    --results "$tmp/machine$i" > "$tmp/shard$i.out" 2>&1 || rc=$?
  cat "$tmp/shard$i.out"
  [[ $rc -le 1 ]] || { echo "FAIL: shard $i/3 exited $rc"; exit 1; }
done
shard() { ls -d "$tmp/machine$1"/*-smoke; }

# The whole plan, merged.
rc=0
"$faultline" merge "$(shard 1)" "$(shard 2)" "$(shard 3)" -o "$tmp/merged" > "$tmp/merge.out" \
  2>&1 || rc=$?
cat "$tmp/merge.out"
$check complete "$tmp/merged" "$rc" "$tmp/merge.out"
# metrics over the three shard directories: one set of series, as the merged file has.
"$faultline" metrics "$(shard 1)" "$(shard 2)" "$(shard 3)" > "$tmp/shards.prom"
$check metrics "$tmp/shards.prom" 6 0
# report and diff take the merged directory; report takes the shards themselves too.
"$faultline" report "$(shard 1)" "$(shard 2)" "$(shard 3)" -o "$tmp/shards.html"
grep -q 'id="shards"' "$tmp/shards.html" || { echo "FAIL: no shards table in the report"; exit 1; }
"$faultline" diff "$tmp/merged" "$tmp/merged" --outcomes-only
# diff takes tonight's shards as they are (merged first): the same cases, no finding.
"$faultline" diff "$tmp/merged" "$(shard 1)" "$(shard 2)" "$(shard 3)" --outcomes-only \
  > "$tmp/diff-shards.out"
cat "$tmp/diff-shards.out"
grep -q "^0 regression(s), 0 other change(s)" "$tmp/diff-shards.out" \
  || { echo "FAIL: diff over the shards found changes"; exit 1; }
# ... and without shard 2 its two cases are `missing` (a note, not a regression).
"$faultline" diff "$tmp/merged" "$(shard 1)" "$(shard 3)" --outcomes-only > "$tmp/diff-two.out"
cat "$tmp/diff-two.out"
[[ $(grep -c "missing" "$tmp/diff-two.out") -eq 2 ]] \
  || { echo "FAIL: diff without shard 2 does not name its two cases missing"; exit 1; }

# Shard 1 given twice (a copy, as when two machines ran the same shard) and shard 2 not at all.
cp -r "$(shard 1)" "$tmp/copy-of-shard1"
rc=0
"$faultline" merge "$(shard 1)" "$tmp/copy-of-shard1" "$(shard 3)" -o "$tmp/partial" \
  > "$tmp/partial.out" 2>&1 || rc=$?
cat "$tmp/partial.out"
$check partial "$tmp/partial" "$rc" "$tmp/partial.out" "$(shard 1)" "$tmp/copy-of-shard1"

# What merge refuses, each with exit 2 and a line naming the directory.
expect_refusal() {  # WANT ARGS...
  local want=$1 out rc=0
  shift
  out=$("$faultline" merge "$@" 2>&1) || rc=$?
  if [[ $rc -ne 2 || $out != *"$want"* ]]; then
    echo "FAIL: merge $* exited $rc, printed: $out (wanted exit 2 and: $want)"
    exit 1
  fi
  echo "refused as expected: $out"
}
mkdir "$tmp/not-a-suite"
expect_refusal "$tmp/not-a-suite: no summary.json, so not a suite result directory" \
  "$(shard 1)" "$tmp/not-a-suite" -o "$tmp/out1"
expect_refusal "-o $tmp/merged: exists; faultline merge never overwrites results" \
  "$(shard 1)" "$(shard 2)" -o "$tmp/merged"
expect_refusal "is one of the directories to merge" "$(shard 1)" "$(shard 2)" -o "$(shard 2)"
expect_refusal "given twice" "$(shard 1)" "$(shard 1)" -o "$tmp/out2"
for d in other-suite other-split other-plan; do cp -r "$(shard 2)" "$tmp/$d"; done
$check edit "$tmp/other-suite" suite nightly
$check edit "$tmp/other-split" shard 2/4
$check edit "$tmp/other-plan" planned-drop 0
expect_refusal "$tmp/other-suite holds results of suite 'nightly'" \
  "$(shard 1)" "$tmp/other-suite" -o "$tmp/out3"
expect_refusal "$tmp/other-split is shard 2/4" "$(shard 1)" "$tmp/other-split" -o "$tmp/out4"
expect_refusal "$tmp/other-plan planned 5 cases" "$(shard 1)" "$tmp/other-plan" -o "$tmp/out5"
chmod 000 "$tmp/other-plan/summary.json"
if [[ $(id -u) -ne 0 ]]; then
  expect_refusal "$tmp/other-plan/summary.json" "$tmp/other-plan" -o "$tmp/out6"
fi
# --force replaces the merged files.
"$faultline" merge "$(shard 1)" "$(shard 2)" "$(shard 3)" -o "$tmp/merged" --force > /dev/null \
  || [[ $? -eq 1 ]]
echo "PASS"
