#include "server/job_queue.h"

#include <algorithm>
#include <cstdio>

namespace mt::server {

long job_number(const std::string& id) {
  long n = 0;
  return std::sscanf(id.c_str(), "job-%ld", &n) == 1 ? n : 0;
}

std::string job_id(long n) {
  char id[32];
  std::snprintf(id, sizeof id, "job-%06ld", n);
  return id;
}

void JobQueue::push(const std::string& id, int priority, long order) {
  erase(id);
  Key k{priority, order, id};
  order_.insert(k);
  keys_.emplace(id, k);
  next_order_ = std::max(next_order_, order + 1);
}

void JobQueue::reserve_order(long order) { next_order_ = std::max(next_order_, order + 1); }

bool JobQueue::erase(const std::string& id) {
  auto it = keys_.find(id);
  if (it == keys_.end()) return false;
  order_.erase(it->second);
  keys_.erase(it);
  return true;
}

std::string JobQueue::pop() {
  std::string id = order_.begin()->id;
  erase(id);
  return id;
}

int JobQueue::position(const std::string& id) const {
  auto it = keys_.find(id);
  if (it == keys_.end()) return 0;
  return int(std::distance(order_.begin(), order_.find(it->second))) + 1;
}

bool JobQueue::outranks(int running_priority) const {
  return !order_.empty() && order_.begin()->priority > running_priority;
}

}  // namespace mt::server
