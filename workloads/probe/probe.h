/* faultline probe: events from a job faultline did not build, with no gRPC inside the job.
 *
 * The harness gives each rank FAULTLINE_PROBE_FILE (ranks/rankN/probe.jsonl in the run
 * directory). Every call appends one JSON line to it with one write(2) on an O_APPEND descriptor,
 * so lines from threads (and forked processes) of one rank never interleave; the harness reads
 * the file as it grows and puts each line into the run's history as an event of that rank, in
 * the schema of docs/harness.md. Without FAULTLINE_PROBE_FILE every call does nothing and returns
 * 0, so a job carries the probe outside the harness at no cost.
 *
 * Every function is safe to call from any thread. Strings are UTF-8; `data_json` must be one
 * JSON object. Return values: 0 written (or probe off), -1 an error (errno set; the job goes on).
 */
#ifndef FAULTLINE_PROBE_H
#define FAULTLINE_PROBE_H

#include <stdint.h>

#if defined(__GNUC__)
#define FL_PROBE_API __attribute__((visibility("default")))
#else
#define FL_PROBE_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when FAULTLINE_PROBE_FILE is set and could be opened, else 0. Opens it on the first call. */
FL_PROBE_API int fl_probe_enabled(void);

/* A finished training step: its number (0-based), its loss (NaN: not finite), the seconds it
 * took and the part of them spent inside collectives (negative: unknown). */
FL_PROBE_API int fl_probe_step(int64_t step, double loss, double step_time_s, double comm_s);

/* The rank is alive. fl_probe_start_heartbeat sends one every `interval_ms` from a thread of its
 * own until fl_probe_close (0: the harness's FAULTLINE_HEARTBEAT_MS, default 1000). */
FL_PROBE_API int fl_probe_heartbeat(void);
FL_PROBE_API int fl_probe_start_heartbeat(int interval_ms);

/* A section begins (begin != 0) or ends: NVRx's names are setup, step, checkpoint, eval; any
 * word is allowed. */
FL_PROBE_API int fl_probe_section(const char* name, int begin);

/* A collective changed state: op (all_reduce, broadcast, barrier, ...), state (started,
 * completed, failed, timed-out), its sequence number in `group`, elements, dtype. */
FL_PROBE_API int fl_probe_collective(const char* op, const char* state, const char* group,
                                     int64_t seq, int64_t count, const char* dtype);

/* The rank failed: a class (comm, oom, rendezvous, data, checkpoint, ...), the message, and the
 * exit code it is about to end with (-1: unknown). */
FL_PROBE_API int fl_probe_error(const char* klass, const char* message, int exit_code);

/* Any rank event of docs/harness.md: kind, step (-1: none) and its data as one JSON object. */
FL_PROBE_API int fl_probe_event(const char* kind, int64_t step, const char* data_json);

/* Stops the heartbeat thread and closes the file. */
FL_PROBE_API void fl_probe_close(void);

#ifdef __cplusplus
}
#endif

#endif /* FAULTLINE_PROBE_H */
