// Loading a checkpoint (checkpoint.h's load_checkpoint): its files checked against the model
// before the store is touched, then read in parallel (the NVMe tier's units through its window).
#include "engine/io/checkpoint.h"

#include <filesystem>
#include <thread>

#include "engine/io/direct_io.h"
#include "engine/io/hf_io.h"
#include "engine/io/safetensors.h"
#include "engine/io/safetensors_parallel.h"

namespace mt {

namespace {

// Where a load puts unit u's masters and moments (moments nullptr: another process's shard).
struct UnitDst {
  float* master = nullptr;
  void* m = nullptr;
  void* v = nullptr;
};

// The reads of unit `unit`'s tensors into d.
void unit_reads(const ParamSchema& unit, const SafetensorsSet& model, const SafetensorsSet* opt, MemoryLayout layout,
                const UnitDst& d, std::vector<ReadTensor>& out) {
  const DType state_dtype = layout == MemoryLayout::kExact ? DType::kF32 : DType::kBF16;
  for (const auto& t : unit.tensors) {
    const auto* w = model.find(t.name);
    out.push_back({w->file, w->info, d.master + t.offset, DType::kF32});
    if (!d.m || !opt) continue;  // no moments here, or the weights alone
    for (auto [suffix, dst] : {std::pair{".exp_avg", d.m}, std::pair{".exp_avg_sq", d.v}}) {
      const auto* e = opt->find(t.name + suffix);
      out.push_back({e->file, e->info, static_cast<char*>(dst) + t.offset * state_elem_bytes(layout), state_dtype});
    }
  }
}

// Unit u of the NVMe tier, acquired: its masters and moments in the tier's window.
Result<UnitDst> acquire_unit(HostStore& store, size_t u) {
  if (store.layout() == MemoryLayout::kExact) {
    MT_ASSIGN_OR_RETURN(UnitState<float> st, store.acquire<float>(u));
    return UnitDst{st.master, st.m, st.v};
  }
  MT_ASSIGN_OR_RETURN(UnitState<bf16> st, store.acquire<bf16>(u));
  return UnitDst{st.master, st.m, st.v};
}

// The units on the NVMe tier, one at a time through its window: read, the shadow rounded from
// the masters while they are at hand, written back to the drives. opt null: the weights alone,
// the moments the zeros the tier reads after zero_all.
Status load_tiered_units(const std::vector<ParamSchema>& units, const SafetensorsSet& model, const SafetensorsSet* opt,
                         HostStore& store) {
  store.tier()->zero_all();  // every tiered unit is written below: nothing is read from the drives
  for (size_t i = 0; i < units.size(); ++i) {
    const HostUnit& u = store.unit(i);
    if (!u.tiered) continue;
    MT_ASSIGN_OR_RETURN(UnitDst d, acquire_unit(store, i));
    std::vector<ReadTensor> reads;
    unit_reads(units[i], model, opt, store.layout(), d, reads);
    const Status s = read_tensors_parallel(reads, checkpoint_io_options());
    if (s.ok() && u.shadow) round_to_bf16(u.shadow, d.master, u.numel);
    store.release(i, s.ok());
    MT_RETURN_IF_ERROR(s);
  }
  return store.tier()->flush();
}

// The files against the model, before the store is touched: the weights, and (opt: not the
// weights alone) the moments and the experts' update counts.
Status check_files(const std::string& dir, const ModelConfig& cfg, const std::vector<ParamSchema>& units,
                   const TrainerState& state, const SafetensorsSet& model, const SafetensorsSet* opt,
                   const HostStore& store) {
  std::vector<ExpectedTensor> weights, moments;
  for (const auto& u : units)
    for (const auto& t : u.tensors) {
      weights.push_back({t.name, t.shape});
      if (!opt) continue;
      moments.push_back({t.name + ".exp_avg", t.shape});
      moments.push_back({t.name + ".exp_avg_sq", t.shape});
    }
  if (opt && cfg.has_experts() && state.expert_updates.size() != store.expert_updates().size())
    return data_loss("checkpoint '" + dir + "' holds " + std::to_string(state.expert_updates.size()) +
                     " experts' update counts (trainer_state.json expert_updates) for a model of " +
                     std::to_string(store.expert_updates().size()) + " experts");
  const std::string where = "loading checkpoint '" + dir + "'";
  MT_RETURN_IF_ERROR(check_tensor_set(model, weights, nullptr).with_context(where));
  return opt ? check_tensor_set(*opt, moments, nullptr).with_context(where) : Status::Ok();
}

}  // namespace

Result<TrainerState> load_checkpoint(const std::string& dir, const ModelConfig& cfg, HostStore& store,
                                     CheckpointParts parts) {
  const auto units = build_param_schemas(cfg);
  MT_RETURN_IF_ERROR(check_store_matches(cfg, units, store));
  MT_ASSIGN_OR_RETURN(TrainerState state, read_trainer_state(dir));
  MT_ASSIGN_OR_RETURN(auto model, SafetensorsSet::open((std::filesystem::path(dir) / "model.safetensors").string()));
  std::unique_ptr<SafetensorsSet> opt;  // null: the weights alone
  if (parts == CheckpointParts::kAll) {
    MT_ASSIGN_OR_RETURN(opt, SafetensorsSet::open(dir, "optimizer"));  // one file, or shards and their index
  }
  MT_RETURN_IF_ERROR(check_files(dir, cfg, units, state, *model, opt.get(), store));
  ThreadPool pool(0);
  if (!opt) store.zero_optimizer_state(/*masters_follow=*/true, &pool);  // every master is read below
  std::vector<ReadTensor> reads;  // of the units in host memory
  for (size_t i = 0; i < units.size(); ++i) {
    const HostUnit& u = store.unit(i);
    if (!u.tiered) unit_reads(units[i], *model, opt.get(), store.layout(), {u.master, u.m, u.v}, reads);
  }
  // The gradients (other memory) are zeroed while the files are read: the CPU waits on the disk then.
  std::thread zero([&store] { store.zero_grads(); });
  Status read = read_tensors_parallel(reads, checkpoint_io_options());
  zero.join();
  if (read.ok() && store.tier()) read = load_tiered_units(units, *model, opt.get(), store);
  MT_RETURN_IF_ERROR(read.with_context("loading checkpoint '" + dir + "'"));
  if (opt && cfg.has_experts()) MT_RETURN_IF_ERROR(store.set_expert_updates(state.expert_updates));
  if (store.num_units() > 0 && store.unit(0).shadow)  // every unit has one, or none does
    for (size_t i = 0; i < units.size(); ++i)  // the tiered units' shadows were made as they were read
      if (const HostUnit& u = store.unit(i); !u.tiered) round_to_bf16_on(pool, u.shadow, u.master, u.numel);
  return state;
}

}  // namespace mt
