// Job specs that must be refused naming a field: each JSON fragment, completed with a tiny model,
// fails job_spec_from_json with a message that contains the given name.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "engine/job/job_spec.h"

namespace mt::testing_util {

inline void expect_spec_refusals(const std::vector<std::pair<const char*, const char*>>& cases) {
  for (const auto& [field, name] : cases) {
    auto j = Json::parse(R"({"model": {"preset": "tiny"}, )" + std::string(field) + "}");
    ASSERT_TRUE(j.ok()) << field;
    auto s = job_spec_from_json(*j);
    ASSERT_FALSE(s.ok()) << field << " was accepted";
    EXPECT_NE(s.status().message().find(name), std::string::npos) << s.status().message();
  }
}

}  // namespace mt::testing_util
