// The plan suite: host and device bytes of a preset under a layout, from the planner alone.
#include <cstdio>

#include "bench/bench.h"
#include "engine/exec/planner.h"

namespace mt::bench {

int run_plan(const Flags& f) {
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "plan: %s\n", s.message().c_str());
    return 2;
  };
  const std::string preset = f.str("preset", "tiny");
  auto layout = parse_memory_layout(f.str("layout", "exact"));
  auto T = f.num("seq-len", 1024), mb = f.num("micro-batch", 1), gb = f.num("global-batch", 64);
  auto slots = f.num("slots", 2);
  if (!layout.ok()) return fail(layout.status());
  for (auto* r : {&T, &mb, &gb, &slots})
    if (!r->ok()) return fail(r->status());
  if (Status s = f.check_all_used(); !s.ok()) return fail(s);
  auto cfg = preset_config(preset);
  if (!cfg.ok()) return fail(cfg.status());
  TrainOptions opt;
  opt.layout = *layout;
  opt.seq_len = int(*T);
  opt.micro_batch = int(*mb);
  opt.global_batch = int(*gb);
  PlanOptions po;
  po.slots = int(*slots);
  auto plan = plan_memory(*cfg, opt, po);
  if (!plan.ok()) return fail(plan.status());
  Json out = memory_plan_to_json(*plan);
  out.set("suite", "plan");
  out.set("preset", preset);
  out.set("layout", memory_layout_name(*layout));
  emit(out, f.json());
  return 0;
}

}  // namespace mt::bench
