#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/data/data_source.h"
#include "engine/model/init.h"

namespace mt {

namespace {

class SyntheticSource final : public DataSource {
 public:
  explicit SyntheticSource(const SyntheticOptions& o) : opt_(o), S_(std::min(o.vocab, o.active_vocab)) {
    build_chain();
    stationary_ = stationary();
    floor_ = entropy_rate();
  }

  Status next_batch(int G, int T, Batch& out) override {
    out.num_seqs = G;
    out.seq_len = T;
    out.inputs.resize(size_t(G) * T);
    out.targets.resize(size_t(G) * T);
    std::vector<int32_t> seq(size_t(T) + 1);
    for (int g = 0; g < G; ++g) {
      generate(cursor_++, seq);
      std::copy(seq.begin(), seq.end() - 1, out.inputs.begin() + long(g) * T);
      std::copy(seq.begin() + 1, seq.end(), out.targets.begin() + long(g) * T);
    }
    return Status::Ok();
  }
  uint64_t cursor() const override { return cursor_; }
  Status seek(uint64_t c) override {
    cursor_ = c;
    return Status::Ok();
  }
  std::string describe() const override {
    return "synthetic Markov chain (" + std::to_string(S_) + " states, branching " +
           std::to_string(opt_.branching) + ", entropy " + std::to_string(floor_) + " nats/token)";
  }
  double entropy_floor() const override { return floor_; }

 private:
  double uniform(uint64_t key, uint64_t i) const { return double(mix64(key ^ mix64(i)) >> 11) * 0x1.0p-53; }

  void build_chain() {
    const int K = std::min(opt_.branching, S_);
    next_.assign(size_t(S_) * K, 0);
    cdf_.assign(size_t(S_) * K, 0);
    const uint64_t key = mix64(opt_.seed * 0x51ed2701ull + 7);
    for (int s = 0; s < S_; ++s) {
      std::vector<int> perm(static_cast<size_t>(S_));
      std::iota(perm.begin(), perm.end(), 0);
      for (int i = 0; i < K; ++i) {  // K distinct successors by a partial Fisher-Yates shuffle
        int j = i + int(uniform(key, uint64_t(s) * 1000003 + i) * (S_ - i));
        std::swap(perm[size_t(i)], perm[size_t(j)]);
      }
      double total = 0;
      std::vector<double> w(static_cast<size_t>(K));
      for (int i = 0; i < K; ++i) total += w[size_t(i)] = 0.2 + uniform(key ^ 0xabcdefull, uint64_t(s) * 7919 + i);
      double acc = 0;
      for (int i = 0; i < K; ++i) {
        next_[size_t(s) * K + i] = perm[size_t(i)];
        cdf_[size_t(s) * K + i] = (acc += w[size_t(i)] / total);
      }
      cdf_[size_t(s) * K + K - 1] = 1.0;
    }
    K_ = K;
  }

  double prob(int s, int i) const {
    const double* c = &cdf_[size_t(s) * K_];
    return c[i] - (i ? c[i - 1] : 0.0);
  }

  std::vector<double> stationary() const {  // power iteration; the chain is ergodic in practice
    std::vector<double> pi(size_t(S_), 1.0 / S_), nxt(static_cast<size_t>(S_));
    for (int it = 0; it < 5000; ++it) {
      std::fill(nxt.begin(), nxt.end(), 0.0);
      for (int s = 0; s < S_; ++s)
        for (int i = 0; i < K_; ++i) nxt[size_t(next_[size_t(s) * K_ + i])] += pi[size_t(s)] * prob(s, i);
      // Lazy step (average with the previous iterate) so periodic chains converge too.
      for (int s = 0; s < S_; ++s) nxt[size_t(s)] = 0.5 * (nxt[size_t(s)] + pi[size_t(s)]);
      pi.swap(nxt);
    }
    return pi;
  }

  double entropy_rate() const {
    double h = 0;
    for (int s = 0; s < S_; ++s)
      for (int i = 0; i < K_; ++i) {
        double p = prob(s, i);
        if (p > 0) h -= stationary_[size_t(s)] * p * std::log(p);
      }
    return h;
  }

  int sample(const double* cdf, int K, double u) const {
    int i = 0;
    while (i < K - 1 && u >= cdf[i]) ++i;
    return i;
  }

  void generate(uint64_t index, std::vector<int32_t>& seq) const {
    const uint64_t key = mix64(opt_.seed ^ 0x5eedull) ^ mix64(index);
    std::vector<double> pi_cdf(static_cast<size_t>(S_));
    std::partial_sum(stationary_.begin(), stationary_.end(), pi_cdf.begin());
    pi_cdf.back() = 1.0;
    int s = sample(pi_cdf.data(), S_, uniform(key, 0));
    seq[0] = s;
    for (size_t t = 1; t < seq.size(); ++t) {
      int i = sample(&cdf_[size_t(s) * K_], K_, uniform(key, t));
      seq[t] = s = next_[size_t(s) * K_ + i];
    }
  }

  SyntheticOptions opt_;
  int S_, K_ = 1;
  std::vector<int> next_;
  std::vector<double> cdf_, stationary_;
  double floor_ = 0;
  uint64_t cursor_ = 0;
};

}  // namespace

Status check_synthetic_options(int active_vocab, int branching) {
  auto bad = [](const char* f, int v, const std::string& why) {
    return invalid_argument(std::string("data.") + f + " = " + std::to_string(v) + " " + why);
  };
  if (active_vocab < 2) return bad("active_vocab", active_vocab, "must be >= 2");
  if (active_vocab > SyntheticOptions::kMaxActiveVocab)
    return bad("active_vocab", active_vocab, "exceeds the limit of " + std::to_string(SyntheticOptions::kMaxActiveVocab));
  if (branching < 1) return bad("branching", branching, "must be >= 1");
  if (branching > SyntheticOptions::kMaxBranching)
    return bad("branching", branching, "exceeds the limit of " + std::to_string(SyntheticOptions::kMaxBranching));
  return Status::Ok();
}

Result<std::unique_ptr<DataSource>> make_synthetic_source(const SyntheticOptions& opt) {
  if (opt.vocab < 2) return invalid_argument("synthetic data needs a vocabulary of at least 2, got " + std::to_string(opt.vocab));
  MT_RETURN_IF_ERROR(check_synthetic_options(opt.active_vocab, opt.branching));
  return std::unique_ptr<DataSource>(new SyntheticSource(opt));
}

}  // namespace mt
