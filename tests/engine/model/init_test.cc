// Weight initialisation: on a pool's threads the same bits as on one thread (each value depends
// only on seed, tensor name and index), norms at their identity scale, matrices N(0, std).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "engine/model/init.h"
#include "engine/model/model_config.h"

namespace mt {
namespace {

TEST(Init, ThreadsGiveTheSameBitsAsOne) {
  auto cfg = preset_config("small");  // tensors of many pieces: the embedding is 8.4 M values
  ASSERT_TRUE(cfg.ok());
  const auto units = build_param_schemas(*cfg);
  ThreadPool pool(3);
  for (size_t u : {size_t(0), size_t(1), units.size() - 1}) {  // embedding, a decoder, the head
    std::vector<float> one(units[u].numel, NAN), many(units[u].numel, NAN);
    init_unit_weights(*cfg, units[u], one.data(), 5);
    init_unit_weights(*cfg, units[u], many.data(), 5, &pool);
    ASSERT_EQ(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)), 0) << "unit " << u;
    for (const auto& t : units[u].tensors) {
      const float* p = one.data() + t.offset;
      if (t.name.find("norm.weight") != std::string::npos) {
        for (size_t i = 0; i < t.numel; ++i) ASSERT_EQ(p[i], 1.0f - cfg->norm_offset) << t.name;
      } else if (t.numel > 1000) {  // a matrix: mean ~0, std ~ initializer_range
        double s = 0, s2 = 0;
        for (size_t i = 0; i < t.numel; ++i) s += p[i], s2 += double(p[i]) * p[i];
        const double mean = s / double(t.numel), sd = std::sqrt(s2 / double(t.numel) - mean * mean);
        EXPECT_NEAR(sd, cfg->initializer_range, 0.1 * cfg->initializer_range) << t.name;
        EXPECT_LT(std::abs(mean), 5 * cfg->initializer_range / std::sqrt(double(t.numel))) << t.name;
      }
    }
  }
}

}  // namespace
}  // namespace mt
