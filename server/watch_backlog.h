// The events one watch has yet to write to its client, bounded: a slow client loses events,
// never a change of state. When the backlog is full the oldest event followed by one of the same
// state goes (a step of a running job, say): the states the client reads, and the order they came
// in, are those of every event. Only a backlog that is all changes (a client that stopped reading
// while others paused and resumed the job a thousand times) loses its oldest change; the newest
// event, and so the state the job is in, is always kept. Not thread-safe (WatchReactor's lock).
#pragma once
#include <cstddef>
#include <deque>

#include "megatrain/v1/trainer.pb.h"

namespace mt::server {

class WatchBacklog {
 public:
  explicit WatchBacklog(size_t capacity) : capacity_(capacity < 2 ? 2 : capacity) {}

  void push(const megatrain::v1::JobEvent& ev) {
    if (events_.size() >= capacity_) drop_one();
    events_.push_back(ev);
  }
  bool empty() const { return events_.empty(); }
  size_t size() const { return events_.size(); }
  megatrain::v1::JobEvent pop() {
    megatrain::v1::JobEvent ev = std::move(events_.front());
    events_.pop_front();
    return ev;
  }

 private:
  void drop_one() {
    for (size_t i = 0; i + 1 < events_.size(); ++i)
      if (events_[i].state() == events_[i + 1].state()) {
        events_.erase(events_.begin() + long(i));
        return;
      }
    events_.pop_front();  // every event a change (a terminal one is last: nothing follows it)
  }

  size_t capacity_;
  std::deque<megatrain::v1::JobEvent> events_;
};

}  // namespace mt::server
