// topology.hostfile: an Open MPI-style hostfile as the list of hosts a run spreads its ranks over
// (docs/cluster.md). One host per line, `NAME [slots=N] [max_slots=N]` or `NAME=ADDRESS ...` (the
// topology.hosts item syntax); `#` starts a comment; blank lines are skipped.
#pragma once

#include <string>
#include <vector>

namespace fl::harness {

struct HostfileEntry {
  std::string name, address;  // address empty: the name is resolved
  int slots = 0;              // 0: not given
  int max_slots = 0;          // 0: not given
  int line = 0;               // 1-based, for errors
};

// Reads and checks `path`. Throws ScenarioError "PATH:LINE: problem (allowed: ...)" for the first
// problem: a file that cannot be read, an item that is not a host name or address, an unknown or
// malformed key, slots above max_slots, a host listed twice, a file without hosts.
std::vector<HostfileEntry> parse_hostfile(const std::string& path);
// The same over `text` read from `path` (named in errors).
std::vector<HostfileEntry> parse_hostfile_text(const std::string& path, const std::string& text);

// The hostfile checks shared with topology.hosts items.
bool host_name_ok(const std::string& name);
bool host_address_ok(const std::string& address);

}  // namespace fl::harness
