// Ranks on other hosts (topology.hosts, docs/cluster.md): how the harness reaches a host (the
// scenario's rsh agent, or ssh), the check that every host answers before anything is launched,
// and mpirun's arguments that place each rank on its host.
#pragma once

#include <string>
#include <vector>

namespace fl::harness {

struct Scenario;

// argv run on `host` through the rsh agent (ssh in batch mode when the scenario names none). The
// agent joins the words for a shell on the host, as ssh does: callers pass only fixed words,
// checked names and addresses.
std::vector<std::string> on_host(const Scenario& s, const std::string& host,
                                 std::vector<std::string> argv);

// Every host runs `true` through the agent within 10 s (all at once), else Error naming each
// host that did not and what the agent said. Leaves nothing running (timeout kills the agent).
void check_hosts(const Scenario& s);

// mpirun's options for the hosts (the agent, every host with its slots) and an app-file line's
// placement of `rank` (ranks fill the hosts in order); empty without hosts.
std::vector<std::string> mpirun_host_options(const Scenario& s);
std::string appfile_host_option(const Scenario& s, int rank);

}  // namespace fl::harness
