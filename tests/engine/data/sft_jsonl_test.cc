// data.source jsonl: prompt tokens are never counted (the counted targets are exactly the
// completions' tokens), the file is tokenized before any batch is served (next_batch never calls
// the tokenizer), and a bad line is named by file and line.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>

#include "engine/data/jsonl_examples.h"
#include "engine/job/job.h"

#include "tests/engine/temp_dir.h"

namespace mt {
namespace {

struct ReverseTask {
  std::string path;
  std::string completions;  // every completion's bytes, concatenated
  size_t lines = 0;
};

ReverseTask write_reverse_task(const testing_util::TempDir& d, size_t n) {
  ReverseTask t;
  t.path = d / "sft.jsonl";
  std::ofstream f(t.path);
  std::mt19937 rng(5);
  for (size_t i = 0; i < n; ++i) {
    std::string s;
    for (size_t k = 0, len = 1 + rng() % 8; k < len; ++k) s += char('a' + rng() % 6);
    const std::string c(s.rbegin(), s.rend());
    f << Json::object({{"prompt", "reverse: " + s + "\n"}, {"completion", c}}).dump() << "\n";
    t.completions += c;
    ++t.lines;
  }
  return t;
}

JobSpec sft_spec(const std::string& path, bool packing) {
  Json data = Json::object({{"source", "jsonl"}, {"path", path}, {"tokenizer", "byte"},
                            {"format", "prompt_completion"}, {"packing", packing}, {"seed", 7}});
  auto s = job_spec_from_json(Json::object({{"model", Json::object({{"preset", "tiny"}})}, {"data", data},
                                            {"seq_len", 48}, {"micro_batch", 2}}));
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? *s : JobSpec{};
}

void expect_only_completions_counted(bool packing) {
  testing_util::TempDir d("mt-sft");
  const ReverseTask task = write_reverse_task(d, 300);
  auto src = make_data_source(sft_spec(task.path, packing), 256);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  const uint64_t rows = (*src)->num_sequences(48);
  std::string counted;
  for (uint64_t r = 0; r < rows; ++r) {
    Batch b;
    ASSERT_TRUE((*src)->next_batch(1, 48, b).ok());
    ASSERT_TRUE(validate_batch(b, 256).ok());
    for (int32_t t : b.targets)
      if (t >= 0) counted += char(t);
  }
  EXPECT_EQ(counted.size(), task.completions.size()) << "counted targets == completion tokens, exactly";
  std::string a = counted, b = task.completions;
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  EXPECT_EQ(a, b) << "every counted target is a completion byte";
  EXPECT_EQ(counted.find_first_of(":\n "), std::string::npos) << "no prompt byte is ever a counted target";
}

TEST(SftJsonl, OnlyCompletionTokensAreCountedPacked) { expect_only_completions_counted(true); }
TEST(SftJsonl, OnlyCompletionTokensAreCountedPadded) { expect_only_completions_counted(false); }

TEST(SftJsonl, TokenizedBeforeTheStepLoopNeverDuring) {
  testing_util::TempDir d("mt-sft");
  const ReverseTask task = write_reverse_task(d, 500);
  auto tok = open_tokenizer("byte");
  ASSERT_TRUE(tok.ok());
  auto fmt = make_line_format(*tok, "byte", "prompt_completion", "auto");
  ASSERT_TRUE(fmt.ok()) << fmt.status().to_string();
  std::atomic<long> calls{0};
  LineFormatter counting = [&](std::string_view line) {
    ++calls;
    return fmt->format(line);
  };
  auto set = tokenize_jsonl(task.path, counting, 2);
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  EXPECT_EQ(calls.load(), long(task.lines));
  auto src = make_example_source(std::move(set).value(), ExampleSourceOptions{});
  Batch b;
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(src->next_batch(4, 32, b).ok());  // several epochs
  EXPECT_GT(src->cursor(), 2 * src->num_sequences(32));
  EXPECT_EQ(calls.load(), long(task.lines)) << "next_batch called the tokenizer";
}

TEST(SftJsonl, BadLineIsNamedByFileAndLine) {
  testing_util::TempDir d("mt-sft");
  const std::string path = d / "bad.jsonl";
  std::ofstream(path) << "{\"prompt\": \"a\", \"completion\": \"b\"}\n\n{\"prompt\": 3}\n";
  auto src = make_data_source(sft_spec(path, true), 256);
  ASSERT_FALSE(src.ok());
  EXPECT_NE(src.status().message().find(path + ":3"), std::string::npos) << src.status().message();
}

TEST(SftJsonl, OversizedJsonlIsRefusedBeforeReading) {
  testing_util::TempDir d("mt-sft");
  const std::string path = d / "huge.jsonl";
  std::ofstream(path) << "{}";
  std::filesystem::resize_file(path, kMaxJsonlBytes + 1);  // sparse: nothing is written or read
  auto src = make_data_source(sft_spec(path, true), 256);
  ASSERT_FALSE(src.ok());
  EXPECT_NE(src.status().message().find("megatrain tokenize"), std::string::npos) << src.status().message();
}

TEST(SftJsonl, SpecFieldsRoundTripAndChangeTheHash) {
  const JobSpec a = sft_spec("/x.jsonl", true);
  auto back = job_spec_from_json(job_spec_to_json(a));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->data.source, "jsonl");
  EXPECT_EQ(back->data.format, "prompt_completion");
  EXPECT_EQ(back->data.packing, true);
  EXPECT_EQ(job_spec_hash(*back), job_spec_hash(a));
  EXPECT_NE(job_spec_hash(sft_spec("/x.jsonl", false)), job_spec_hash(a)) << "packing changes the trajectory";
  auto bad = job_spec_from_json(Json::object({{"model", Json::object({{"preset", "tiny"}})},
                                              {"data", Json::object({{"source", "jsonl"}, {"path", "/x"}, {"long_examples", "drop"}})}}));
  EXPECT_FALSE(bad.ok());
}

}  // namespace
}  // namespace mt
