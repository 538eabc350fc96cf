#!/usr/bin/env python3
"""No project header reaches Boost.Asio, gRPC or protobuf (issue 33: a build nobody waits for), nor
prometheus-cpp and its civetweb (issue 36: only the live endpoint's .cpp links them).

A header is parsed by every file that includes it, directly or through another header; these
third-party headers cost seconds each (parsing and their templates' code), so they belong in the
.cpp files that use them, behind a pimpl or a forward declaration (harness/run/event_loop.hpp,
harness/agent/hub.hpp, harness/run/controller.hpp). A header whose job is the conversion to a
generated message is allowed (ALLOWED). Prints each header that reaches one as
HEADER: HEAVY (through A -> B) and exits 1.
Usage: ci/check_heavy_headers.py [SOURCE_ROOT]
"""
import pathlib
import re
import sys

HEAVY = re.compile(r"^(boost/asio|grpcpp/|grpc\+\+/|google/protobuf/|prometheus/|civetweb\.h|CivetServer\.h)"
                   r"|\.pb\.h$")
# Headers that exist to carry a generated message type (their includers want it).
ALLOWED = {"harness/proto/event_proto.hpp"}
FOLDERS = ["base", "injector", "kernels", "workloads", "harness"]
INCLUDE = re.compile(r'^\s*#\s*include\s+[<"]([^">]+)[">]', re.M)


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    headers = {}
    for folder in FOLDERS:
        for p in sorted((root / folder).rglob("*.hpp")):
            rel = p.relative_to(root).as_posix()
            headers[rel] = INCLUDE.findall(p.read_text(errors="replace"))

    def path_to_heavy(start):
        # Depth-first over project headers; returns the chain to the first heavy include.
        seen, stack = {start}, [(start, [start])]
        while stack:
            h, chain = stack.pop()
            for inc in headers.get(h, []):
                if HEAVY.search(inc):
                    return chain + [inc]
                if inc in headers and inc not in seen:
                    seen.add(inc)
                    stack.append((inc, chain + [inc]))
        return None

    bad = 0
    for h in sorted(headers):
        if h in ALLOWED:
            continue
        chain = path_to_heavy(h)
        if chain:
            via = f" (through {' -> '.join(chain[1:-1])})" if len(chain) > 2 else ""
            print(f"{h}: {chain[-1]}{via}")
            bad += 1
    if bad:
        print(f"check_heavy_headers: {bad} header(s) reach Boost.Asio, gRPC or protobuf")
        return 1
    print(f"check_heavy_headers: none of {len(headers)} headers reaches Boost.Asio, gRPC "
          "or protobuf")
    return 0


if __name__ == "__main__":
    sys.exit(main())
