// megatrain eval --model DIR --data FILE: mean loss per token of a model over a token or text
// file (every window of seq_len + 1 tokens once, or --max-seqs of them), printed with 6 decimals.
// --eod-id N packs documents as the spec's data.eod_id does (attention masked per document).
#include <cmath>
#include <cstdio>
#include <string>

#include "client/cli.h"
#include "engine/io/model_files.h"
#include "engine/exec/resident_executor.h"

namespace mt::cli {

int cmd_eval(const Args& a) {
  const std::string model = a.get("model"), data = a.get("data");
  if (model.empty() || data.empty())
    return usage_error("eval");
  auto T = a.integer("seq-len", 256, 1, TrainLimits::kSeqLen), max_seqs = a.integer("max-seqs", 0, 0, INT64_MAX),
       eod = a.integer("eod-id", -1, -1, ModelLimits::kVocabSize);
  for (const auto* r : {&T, &max_seqs, &eod})
    if (!r->ok()) return fail(kUsage, r->status().message());
  const std::string format = a.get("format", data.size() > 4 && data.substr(data.size() - 4) == ".bin" ? "uint16" : "text");
  if (format != "text" && format != "uint16" && format != "uint32" && format != "llmc")
    return fail(kUsage, "--format = '" + format + "' is not one of text, uint16, uint32, llmc");
  auto files = find_model_files(model);
  if (!files.ok()) return fail(kJobFailed, files.status().message());
  auto cfg = load_model_config(files->dir);
  if (!cfg.ok()) return fail(kJobFailed, cfg.status().message());
  auto src = format == "text" ? make_text_source(data, cfg->vocab_size)
                              : make_token_file_source(data, format, cfg->vocab_size);
  if (*eod >= cfg->vocab_size)
    return fail(kUsage, "--eod-id must be a token id below the vocabulary size " + std::to_string(cfg->vocab_size));
  if (src.ok() && *eod >= 0) src = with_documents(std::move(src).value(), int32_t(*eod), cfg->vocab_size);
  if (!src.ok()) return fail(kJobFailed, src.status().message());
  uint64_t n = (*src)->num_sequences(int(*T));
  if (*max_seqs > 0 && (n == 0 || uint64_t(*max_seqs) < n)) n = uint64_t(*max_seqs);
  if (n == 0) return fail(kUsage, "the data holds fewer than seq_len + 1 tokens; pass a smaller --seq-len");

  TrainOptions opt;
  opt.seq_len = int(*T);
  opt.micro_batch = opt.global_batch = 1;
  auto ex = ResidentExecutor::create(*cfg, opt);
  if (!ex.ok()) return fail(kJobFailed, ex.status().message());
  if (Status s = load_model_weights(*files, *cfg, (*ex)->store()); !s.ok()) return fail(kJobFailed, s.message());
  Batch b;
  double loss_sum = 0;
  for (uint64_t i = 0; i < n; i += 16) {
    const int g = int(std::min<uint64_t>(16, n - i));
    if (Status s = (*src)->next_batch(g, opt.seq_len, b); !s.ok()) return fail(kJobFailed, s.message());
    auto loss = (*ex)->mean_loss(b);
    if (!loss.ok()) return fail(kJobFailed, loss.status().message());
    loss_sum += *loss * double(b.counted_targets());
  }
  const double mean = loss_sum / (double(n) * opt.seq_len);
  if (a.json()) print_json(Json::object({{"loss", mean}, {"sequences", int64_t(n)}, {"tokens", int64_t(n) * opt.seq_len}}));
  else std::printf("%.6f\n", mean);
  return kOk;
}

}  // namespace mt::cli
