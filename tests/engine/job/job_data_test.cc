// How a run tells whether its data is what a checkpoint was trained on (job_data.h): the epoch
// bound is not part of it (the data position counts rows from epoch 0 whatever the bound, and
// raising it is why a run is continued), the shuffle and the file are.
#include <gtest/gtest.h>

#include <fstream>

#include "engine/job/job.h"
#include "engine/job/job_data.h"
#include "tests/engine/temp_dir.h"

namespace mt {
namespace {

std::string describe(const DataSpec& d) {
  auto src = make_data_source(d, 256);
  EXPECT_TRUE(src.ok()) << src.status().to_string();
  return src.ok() ? (*src)->describe() : "";
}

TEST(SameDataDescription, TheEpochBoundIsNotPartOfTheDataTheShuffleAndTheFileAre) {
  testing_util::TempDir dir("mt-data-desc");
  const std::string path = dir / "sft.jsonl";
  {
    std::ofstream f(path);
    for (int i = 0; i < 8; ++i) f << R"({"prompt": "p", "completion": "c)" << i << "\"}\n";
  }
  DataSpec d;
  d.source = "jsonl";
  d.path = path;
  d.tokenizer = "byte";
  d.epochs = 2;
  const std::string two = describe(d);
  ASSERT_NE(two.find("2 epochs"), std::string::npos) << two;
  d.epochs = 4;
  EXPECT_TRUE(same_data_description(two, describe(d))) << two << " | " << describe(d);
  d.epochs = 0;
  EXPECT_TRUE(same_data_description(two, describe(d))) << two << " | " << describe(d);
  d.seed = 9;
  EXPECT_FALSE(same_data_description(two, describe(d))) << "another shuffle";
  d.seed = 1;
  std::ofstream(path, std::ios::app) << R"({"prompt": "p", "completion": "more"})" << "\n";
  EXPECT_FALSE(same_data_description(two, describe(d))) << "another file: " << describe(d);
}

// A text or token file rewritten in place at the same size is other data (its description samples
// the contents); a checkpoint written before the sample was described compares by path and size.
TEST(SameDataDescription, AFileRewrittenAtTheSameSizeIsOtherData) {
  testing_util::TempDir dir("mt-data-sample");
  const std::string path = dir / "t.txt";
  std::ofstream(path) << std::string(4096, 'a');
  DataSpec d;
  d.source = "text";
  d.path = path;
  const std::string was = describe(d);
  ASSERT_NE(was.find(", sample "), std::string::npos) << was;
  EXPECT_TRUE(same_data_description(was, describe(d)));
  std::ofstream(path, std::ios::trunc) << std::string(4096, 'b');
  EXPECT_FALSE(same_data_description(was, describe(d))) << was << " | " << describe(d);
  const size_t at = was.find(", sample ");
  const std::string older = was.substr(0, at) + was.substr(was.find(')', at));
  EXPECT_TRUE(same_data_description(older, describe(d))) << older;
}

}  // namespace
}  // namespace mt
