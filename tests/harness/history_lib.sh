# Sourced by the shell tests that look into a run: questions about its history (history.jsonl, a
# rank's events.jsonl) answered from the parsed events, never from the text of the lines (a grep
# for '"kind":"launch"' also matches a launch object nested in another event's data, and misses
# one written with a space after the colon).

# count_events FILE KIND [KEY=VALUE ...]: how many events of KIND (any kind: '*') are in the
# JSON-lines FILE whose field KEY (a top-level field such as source or rank, else a field of the
# event's data) is VALUE; 0 when FILE does not exist (yet). A torn last line (the file is being
# written) is skipped; a broken line elsewhere is an error.
count_events() {
  python3 - "$@" <<'PY'
import json, os, sys
path, kind, *pairs = sys.argv[1:]
want = [p.split("=", 1) for p in pairs]
for p in want:
    if len(p) != 2:
        sys.exit(f"count_events: '{p[0]}' is not KEY=VALUE")
lines = open(path).read().split("\n") if os.path.exists(path) else []
n = 0
for i, line in enumerate(lines):
    if not line.strip():
        continue
    try:
        e = json.loads(line)
    except json.JSONDecodeError:
        if i == len(lines) - 1:
            continue  # the last line, still being written
        sys.exit(f"count_events: {path}:{i + 1}: not JSON: {line[:120]}")
    if kind != "*" and e.get("kind") != kind:
        continue
    data = e.get("data") if isinstance(e.get("data"), dict) else {}
    def value(k):
        v = e[k] if k in e else data.get(k)
        return v if isinstance(v, str) else json.dumps(v)
    if all(value(k) == v for k, v in want):
        n += 1
print(n)
PY
}

# has_event FILE KIND [KEY=VALUE ...]: whether count_events finds at least one.
has_event() {
  local n
  n=$(count_events "$@") || return 2
  [[ $n -gt 0 ]]
}

# junit_attr FILE ATTR: attribute ATTR of the root element of the JUnit file FILE, parsed as XML.
junit_attr() {
  python3 -c 'import sys, xml.etree.ElementTree as ET
print(ET.parse(sys.argv[1]).getroot().get(sys.argv[2], ""))' "$1" "$2"
}
