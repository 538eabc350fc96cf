#!/usr/bin/env python3
"""The include layering of the source tree: a folder includes only from the layers below it.

  base  <  injector  <  kernels  <  workloads  <  harness

harness/proto (the control-plane contract, generated from faultline.proto) sits below the
workloads, which stream telemetry through it. The harness reaches the kernels only for the device
count (kernels/device.hpp).

Inside harness/ the sub-folders have an order of their own (HARNESS_ORDER, bottom first): a
folder includes only from itself and the folders before it, and a folder missing from the order
is an error until it gets its place. Each folder is one static library linked only to the ones
below it (harness/CMakeLists.txt), so the linker refuses what this check would let through.

Prints every include that breaks a rule as FILE:LINE and exits 1.
Usage: ci/check_layers.py [SOURCE_ROOT]
"""
import pathlib
import re
import sys

ORDER = ["base", "injector", "kernels", "workloads", "harness"]
# What each layer may include beyond the layers below it (path prefixes).
EXTRA = {
    "workloads": ["harness/proto/"],
    "harness": ["kernels/device.hpp"],
}
# What no layer may include even though it is below (the harness does not link the workloads).
DENY = {
    "harness": ["workloads/", "kernels/"],
}
# The sub-folders of harness/, bottom first (docs/architecture.md draws them).
HARNESS_ORDER = [
    "proto",      # the control-plane contract (generated from faultline.proto)
    "model",      # the Scenario types, KeySpec, the checks key parsers share
    "history",    # the run's event log, its schema, the probe's lines
    "oracles",    # judges over the history summary
    "process",    # supervision: fork/exec, process groups, exits; hosts
    "control",    # the control plane's gRPC server
    "faults",     # out-of-process fault kinds, the namespaces and cgroups they use, their driver
    "agent",      # the per-host agents and the hub that reaches them
    "launch",     # launchers, worker arguments, tools, fl-launch
    "scenario",   # the loader: schema, validation, launcher choice
    "run",        # one run, start to verdict (side runs load scenarios)
    "suite",
    "score",
    "campaign",  # seeded fault campaigns and shrinking (above the suite and the scores)
    "report",
    "catalog",
    "triage",
    "cli",
]
# Folders outside the order, with the only folders they may include.
HARNESS_APART = {"detectors": ["proto"]}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+/[^"]+)"')


def allowed(layer: str, target: str) -> bool:
    if any(target.startswith(p) for p in EXTRA.get(layer, [])):
        return True
    if any(target.startswith(p) for p in DENY.get(layer, [])):
        return False
    top = target.split("/", 1)[0]
    if top not in ORDER:
        return True  # generated headers, third-party paths
    return ORDER.index(top) <= ORDER.index(layer)


def harness_allowed(src: str, target: str) -> str:
    """'' when harness/<src>/ may include `target`, else why not."""
    if not target.startswith("harness/") or target.count("/") < 2:
        return ""
    dst = target.split("/")[1]
    if dst == src:
        return ""
    if src in HARNESS_APART:
        return "" if dst in HARNESS_APART[src] else f"harness/{src} includes only {HARNESS_APART[src]}"
    for name in (src, dst):
        if name not in HARNESS_ORDER:
            return f"harness/{name} has no place in HARNESS_ORDER (ci/check_layers.py)"
    if HARNESS_ORDER.index(dst) > HARNESS_ORDER.index(src):
        return f"harness/{dst} sits above harness/{src}"
    return ""


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    bad = []
    for layer in ORDER:
        for path in sorted((root / layer).rglob("*")):
            if path.suffix not in {".cpp", ".hpp", ".cu", ".cuh", ".h"}:
                continue
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                rel = path.relative_to(root)
                if not allowed(layer, m.group(1)):
                    bad.append(f"{rel}:{n}: {layer}/ includes {m.group(1)}")
                elif layer == "harness" and len(rel.parts) > 2:
                    why = harness_allowed(rel.parts[1], m.group(1))
                    if why:
                        bad.append(f"{rel}:{n}: harness/{rel.parts[1]}/ includes {m.group(1)} ({why})")
    for b in bad:
        print(b)
    if bad:
        print(f"check_layers: {len(bad)} include(s) against the layering "
              f"({' < '.join(ORDER)}; inside harness/: {' < '.join(HARNESS_ORDER)}; "
              "see docs/architecture.md)")
        return 1
    print("check_layers: every include follows the layering")
    return 0


if __name__ == "__main__":
    sys.exit(main())
