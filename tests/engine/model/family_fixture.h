// The model-family fixtures (tests/fixtures/families/FAMILY/, scripts/make_family_fixtures.py):
// each family's tiny random model as transformers saved it, a batch with packed documents, and
// transformers' loss and gradients on it.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/base/json.h"
#include "engine/model/model_config.h"
#include "tests/test_paths.h"

namespace mt::testing_util {

inline const std::vector<std::string>& family_fixtures() {
  static const std::vector<std::string> names = {"qwen3", "olmo2", "gemma3", "gemma2", "phi3", "mistral"};
  return names;
}

inline std::string family_fixture_dir(const std::string& family) {
  return fixture_source_dir() + "/tests/fixtures/families/" + family;
}

inline ModelConfig family_config(const std::string& family) {
  auto c = load_model_config(family_fixture_dir(family));
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? c.value() : ModelConfig{};
}

struct FamilyBatch {
  int B = 0, T = 0;
  std::vector<int32_t> tokens, targets, pos;  // [B*T]
  double loss = 0;                            // transformers' mean over counted targets
  long count = 0;
};

// A fixture's batch.json.
inline FamilyBatch read_family_batch(const std::string& path) {
  FamilyBatch b;
  auto text = read_file(path);
  EXPECT_TRUE(text.ok()) << text.status().to_string();
  auto j = Json::parse(text.ok() ? text.value() : "{}");
  EXPECT_TRUE(j.ok());
  if (!text.ok() || !j.ok()) return b;
  auto flat = [&](const char* key, std::vector<int32_t>& out) {
    const auto& rows = j->find(key)->items();
    b.B = int(rows.size());
    b.T = int(rows[0].items().size());
    for (const Json& row : rows)
      for (const Json& v : row.items()) out.push_back(int32_t(v.as_int()));
  };
  flat("tokens", b.tokens);
  flat("targets", b.targets);
  flat("pos", b.pos);
  b.loss = j->find("loss")->as_double();
  b.count = long(j->find("count")->as_int());
  return b;
}

inline FamilyBatch family_batch(const std::string& family) {
  return read_family_batch(family_fixture_dir(family) + "/batch.json");
}

}  // namespace mt::testing_util
