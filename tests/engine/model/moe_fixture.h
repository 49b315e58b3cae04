// The mixture-of-experts fixtures (tests/fixtures/moe/FAMILY/, scripts/make_moe_fixtures.py):
// each family's tiny random model as transformers saved it, a batch run as one forward, and
// transformers' cross-entropy loss, load-balancing loss and gradients of their sum.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "tests/engine/model/family_fixture.h"
#include "tests/test_paths.h"

namespace mt::testing_util {

inline const std::vector<std::string>& moe_fixtures() {
  static const std::vector<std::string> names = {"mixtral", "qwen2_moe", "qwen3_moe", "gpt_oss"};
  return names;
}

inline std::string moe_fixture_dir(const std::string& family) {
  return fixture_source_dir() + "/tests/fixtures/moe/" + family;
}

struct MoeBatch : FamilyBatch {
  double aux_loss = 0, aux_coef = 0;
  std::vector<std::pair<int, int>> unrouted;  // (layer, expert) pairs no token reached
};

inline MoeBatch moe_batch(const std::string& family) {
  MoeBatch b;
  static_cast<FamilyBatch&>(b) = read_family_batch(moe_fixture_dir(family) + "/batch.json");
  auto text = read_file(moe_fixture_dir(family) + "/batch.json");
  auto j = Json::parse(text.ok() ? text.value() : "{}");
  EXPECT_TRUE(j.ok());
  if (!j.ok()) return b;
  b.aux_loss = j->find("aux_loss")->as_double();
  b.aux_coef = j->find("aux_coef")->as_double();
  for (const Json& p : j->find("unrouted")->items())
    b.unrouted.emplace_back(int(p.items()[0].as_int()), int(p.items()[1].as_int()));
  return b;
}

}  // namespace mt::testing_util
