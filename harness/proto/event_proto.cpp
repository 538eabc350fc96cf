#include "harness/proto/event_proto.hpp"

namespace fl {

void to_proto(const Event& e, faultline::v1::Event* p) {
  p->set_rank(e.rank);
  p->set_seq(e.seq);
  p->set_time_unix_ns(e.time_unix_ns);
  p->set_harness_ns(e.t_ns);
  p->set_kind(e.kind);
  p->set_step(e.step);
  p->set_data_json(e.data_json);
  p->set_source(e.source);
}

faultline::v1::Event to_proto(const Event& e) {
  faultline::v1::Event p;
  to_proto(e, &p);
  return p;
}

Event from_proto(const faultline::v1::Event& p) {
  Event e;
  e.rank = p.rank();
  e.seq = p.seq();
  e.time_unix_ns = p.time_unix_ns();
  e.t_ns = p.harness_ns();
  e.kind = p.kind();
  e.step = p.step();
  e.data_json = p.data_json();
  e.source = p.source();
  return e;
}

}  // namespace fl
