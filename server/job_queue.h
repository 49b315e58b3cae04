// megatraind's run queue: jobs in priority order (higher first), then in the order they joined
// (submission order; a preempted or resumed job keeps its place), each job's position, and the
// one preemption rule. Plain data under the job manager's lock; it knows only ids.
#pragma once
#include <map>
#include <set>
#include <string>

namespace mt::server {

// Job ids in submission order: "job-000009" < "job-000010" < "job-1000000" (shorter first,
// then by character), the order of ListJobs and of its page tokens.
struct IdOrder {
  bool operator()(const std::string& a, const std::string& b) const {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  }
};

// The number in a job id ("job-000012" -> 12); 0 for an id not of that form.
long job_number(const std::string& id);
// The id of job number n (12 -> "job-000012"); job_number's inverse.
std::string job_id(long n);

class JobQueue {
 public:
  // Adds (or moves) `id`. `order` breaks ties between equal priorities, lower first: a job's
  // submission number, kept when it is preempted or resumed; next_order() puts it last.
  void push(const std::string& id, int priority, long order);
  long next_order() { return next_order_++; }
  void reserve_order(long order);  // orders up to `order` are taken (jobs loaded at startup)
  bool erase(const std::string& id);  // false when it was not queued
  bool contains(const std::string& id) const { return keys_.count(id) > 0; }
  bool empty() const { return keys_.empty(); }
  size_t size() const { return keys_.size(); }
  std::string pop();  // the next job to run; the queue must not be empty
  // 1 for the next job to run, 2 after it, ...; 0 when `id` is not queued.
  int position(const std::string& id) const;
  // The running job (of `running_priority`) should yield: a queued job outranks it.
  bool outranks(int running_priority) const;
  const std::string& front() const { return order_.begin()->id; }

 private:
  struct Key {
    int priority;
    long order;
    std::string id;
    bool operator<(const Key& o) const {
      if (priority != o.priority) return priority > o.priority;
      if (order != o.order) return order < o.order;
      return IdOrder()(id, o.id);
    }
  };
  std::set<Key> order_;
  std::map<std::string, Key> keys_;
  long next_order_ = 1;
};

}  // namespace mt::server
