// What a watch `from_start` replays: the step and evaluation events of each job, the last
// kPerJob of them, kept from the job's first step in this daemon's life. A job that ends keeps
// its history until kEnded jobs have ended after it, so memory stays bounded by
// (running + kEnded) × kPerJob events however many jobs a daemon runs. Not thread-safe: the
// job manager guards it with the lock its watchers are registered under, so that a watch's
// replay and its registration see no event in between and miss none.
#pragma once
#include <cstddef>
#include <deque>
#include <map>
#include <string>

#include "megatrain/v1/trainer.pb.h"

namespace mt::server {

class EventHistory {
 public:
  static constexpr size_t kPerJob = 1024, kEnded = 8;

  void keep(const std::string& id, const megatrain::v1::JobEvent& ev) {
    auto& events = jobs_[id];
    events.push_back(ev);
    if (events.size() > kPerJob) events.pop_front();
  }
  // The job ended: its history goes once kEnded more jobs have ended.
  void ended(const std::string& id) {
    if (!jobs_.count(id)) return;
    ended_.push_back(id);
    if (ended_.size() > kEnded) {
      jobs_.erase(ended_.front());
      ended_.pop_front();
    }
  }
  template <typename Fn>
  void replay(const std::string& id, Fn&& fn) const {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return;
    for (const auto& ev : it->second) fn(ev);
  }
  size_t jobs() const { return jobs_.size(); }

 private:
  std::map<std::string, std::deque<megatrain::v1::JobEvent>> jobs_;
  std::deque<std::string> ended_;
};

}  // namespace mt::server
