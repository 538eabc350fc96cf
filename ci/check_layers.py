#!/usr/bin/env python3
"""The include layering of the source tree: a folder includes only from the layers below it.

  base  <  injector  <  kernels  <  workloads  <  harness

harness/proto (the control-plane contract, generated from faultline.proto) sits below the
workloads, which stream telemetry through it. The harness reaches the kernels only for the device
count (kernels/device.hpp). Prints every include that breaks a rule as FILE:LINE and exits 1.
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


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    bad = []
    for layer in ORDER:
        for path in sorted((root / layer).rglob("*")):
            if path.suffix not in {".cpp", ".hpp", ".cu", ".cuh", ".h"}:
                continue
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                m = INCLUDE.match(line)
                if m and not allowed(layer, m.group(1)):
                    bad.append(f"{path.relative_to(root)}:{n}: {layer}/ includes {m.group(1)}")
    for b in bad:
        print(b)
    if bad:
        print(f"check_layers: {len(bad)} include(s) against the layering "
              f"({' < '.join(ORDER)}; see docs/architecture.md)")
        return 1
    print("check_layers: every include follows the layering")
    return 0


if __name__ == "__main__":
    sys.exit(main())
