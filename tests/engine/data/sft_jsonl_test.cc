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
#include "engine/data/tokenize_files.h"
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
  const LineFormatter counting{[&](std::string_view line) {
                                  ++calls;
                                  return fmt->format.line(line);
                                },
                                nullptr};
  auto set = tokenize_jsonl(task.path, counting, 2, "byte");
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

// The lines the formatter sees: empty and blank lines skipped, '\r' and NUL kept, a line longer
// than the reader's buffer whole, the last line without its '\n' read, and line numbers counted
// over every line (a failure names path:line).
TEST(TokenizeFile, LinesAreSplitAsGetlineSplitsThem) {
  testing_util::TempDir d("mt-tok");
  const std::string path = d / "lines.jsonl", long_line(200000, 'L');
  std::ofstream(path, std::ios::binary) << "x\n\n  \n" << long_line << "\ny" << '\0' << "z\r\nend";
  std::vector<std::string> seen;
  ThreadPool pool(1);
  const auto line_of = [&](std::string_view line) -> Result<TokenizedExample> {
    seen.emplace_back(line);
    if (line == "end") return invalid_argument("the last line");
    return TokenizedExample{{1}, {1}};
  };
  const LineFormatter record{line_of, nullptr};
  const Status s = tokenize_file(path, InputKind::kJsonl, record, pool, [](TokenizedChunk&) { return Status::Ok(); });
  EXPECT_EQ(seen, (std::vector<std::string>{"x", long_line, std::string("y\0z\r", 4), "end"}));
  EXPECT_NE(s.message().find(path + ":6"), std::string::npos) << s.to_string();
}

// Plain text split at blank lines reads CRLF files as LF ones (Python's splitlines, which the
// datasets "text" loader uses): the '\r's were kept in every document.
TEST(TokenizeFile, CrlfParagraphsAreTheSameDocumentsAsLfOnes) {
  testing_util::TempDir d("mt-tok");
  const std::string lf = d / "lf.txt", crlf = d / "crlf.txt";
  std::ofstream(lf, std::ios::binary) << "para one\nline two\n\npara two\n\n\npara three\n";
  std::ofstream(crlf, std::ios::binary) << "para one\r\nline two\r\n\r\npara two\r\n\r\n\r\npara three\r\n";
  ThreadPool pool(1);
  auto documents = [&](const std::string& path) {
    std::vector<std::string> seen;
    const LineFormatter record{nullptr, [&](std::string_view text) -> Result<TokenizedExample> {
                                 seen.emplace_back(text);
                                 return TokenizedExample{{1}, {1}};
                               }};
    EXPECT_TRUE(tokenize_file(path, InputKind::kTextParagraphs, record, pool, [](TokenizedChunk&) { return Status::Ok(); }).ok());
    return seen;
  };
  const auto from_lf = documents(lf);
  EXPECT_EQ(from_lf, (std::vector<std::string>{"para one\nline two", "para two", "para three"}));
  EXPECT_EQ(documents(crlf), from_lf);
}

// A line (or a paragraph) longer than any example may come from is refused where it is read,
// naming where it starts, instead of being read whole first: a 300 MB JSON array on one line
// peaked at 800 MB before the formatter refused it.
TEST(TokenizeFile, ALineOrParagraphPastTheExampleLimitIsRefusedWhereItIsRead) {
  testing_util::TempDir d("mt-tok");
  const std::string one_line = d / "array.json", paragraph = d / "para.txt";
  std::ofstream(one_line, std::ios::binary) << "{}\n" << std::string(kMaxExampleLineBytes + 1, '[');
  {
    std::ofstream f(paragraph, std::ios::binary);
    f << "short\n\n";
    for (size_t i = 0; i <= kMaxExampleLineBytes / (1 << 20); ++i) f << std::string(1 << 20, 'x') << "\n";
  }
  ThreadPool pool(1);
  const auto any = [](std::string_view) -> Result<TokenizedExample> { return TokenizedExample{{1}, {1}}; };
  const LineFormatter one{any, any};
  const auto ok = [](TokenizedChunk&) { return Status::Ok(); };
  const Status line = tokenize_file(one_line, InputKind::kJsonl, one, pool, ok);
  EXPECT_NE(line.message().find(one_line + ":2: the line is more than"), std::string::npos) << line.to_string();
  const Status para = tokenize_file(paragraph, InputKind::kTextParagraphs, one, pool, ok);
  EXPECT_NE(para.message().find(paragraph + ":3: the paragraph is more than"), std::string::npos) << para.to_string();
  const Status file = tokenize_file(paragraph, InputKind::kTextFile, one, pool, ok);
  EXPECT_NE(file.message().find("the limit for this file is " + std::to_string(kMaxExampleLineBytes)), std::string::npos)
      << "one document of it, refused before it is read: " << file.to_string();
}

// A paragraph of exactly the example limit, of bytes JSON escapes 6x, is one example of the real
// formatter: it was wrapped as {"text": ...} and refused as "the line is X bytes" (the escaped size).
TEST(TokenizeFile, AParagraphAtTheLimitIsAnExampleHoweverItWouldEscape) {
  testing_util::TempDir d("mt-tok");
  const std::string path = d / "control.txt";
  std::ofstream(path, std::ios::binary) << "first\n\n" << std::string(kMaxExampleLineBytes, '\x01') << "\n";
  auto tok = open_tokenizer("byte");
  ASSERT_TRUE(tok.ok());
  auto f = make_line_format(*tok, "byte", "auto", "auto");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  ThreadPool pool(2);
  std::vector<size_t> lengths;
  const Status s = tokenize_file(path, InputKind::kTextParagraphs, f->format, pool, [&](TokenizedChunk& c) {
    for (const auto& e : c.examples) lengths.push_back(e.ids.size());
    return Status::Ok();
  });
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(lengths, (std::vector<size_t>{5, kMaxExampleLineBytes}));
}

// A limit holds however the file changes: refused by its size before reading, and refused at the
// limit when it grows while read (here the sink appends to it), holding no more than the limit.
TEST(TokenizeFile, AFileOverTheLimitOrGrowingPastItIsRefused) {
  testing_util::TempDir d("mt-tok");
  const std::string path = d / "grows.jsonl";
  std::string lines;
  for (int i = 0; i < 100; ++i) lines += "{\"text\": \"line " + std::to_string(i) + "\"}\n";
  std::ofstream(path, std::ios::binary) << lines;
  ThreadPool pool(1);
  const auto any = [](std::string_view) -> Result<TokenizedExample> { return TokenizedExample{{1}, {1}}; };
  const LineFormatter one{any, any};
  uint64_t delivered = 0;
  const auto count = [&](TokenizedChunk& c) { return delivered += c.bytes, Status::Ok(); };
  const Status small = tokenize_file(path, InputKind::kJsonl, one, pool, count, 100, lines.size() - 1);
  EXPECT_EQ(small.code(), StatusCode::kInvalidArgument) << small.to_string();
  EXPECT_NE(small.message().find("has " + std::to_string(lines.size()) + " bytes"), std::string::npos) << small.to_string();
  EXPECT_EQ(delivered, 0u) << "refused before reading";
  const auto grow = [&](TokenizedChunk& c) {
    if (delivered == 0) std::ofstream(path, std::ios::binary | std::ios::app) << std::string(1 << 20, '\n');
    return delivered += c.bytes, Status::Ok();
  };
  const Status grown = tokenize_file(path, InputKind::kJsonl, one, pool, grow, 100, 4 * lines.size());
  EXPECT_EQ(grown.code(), StatusCode::kInvalidArgument) << grown.to_string();
  EXPECT_NE(grown.message().find("more than " + std::to_string(4 * lines.size())), std::string::npos) << grown.to_string();
  EXPECT_LE(delivered, 4 * lines.size());
  EXPECT_TRUE(tokenize_file(path, InputKind::kJsonl, one, pool, count).ok()) << "no limit: the grown file reads";
}

// No tokenizer named: byte ids, which is right only for a model of 256 tokens. For any other the
// job used to train on bytes without a word (the adversarial data campaign's worst find); now it
// is refused naming the field, and the set's description names the tokenizer that was used.
TEST(SftJsonl, AnUnsetTokenizerIsByteOnlyForAModelOf256Tokens) {
  testing_util::TempDir d("mt-sft");
  const ReverseTask task = write_reverse_task(d, 20);
  JobSpec spec = sft_spec(task.path, true);
  const std::string explicit_hash = job_spec_hash(spec);
  spec.data.tokenizer.clear();
  EXPECT_EQ(job_spec_hash(spec), explicit_hash) << "an unset tokenizer hashes as byte, as the old default did";
  auto tiny = make_data_source(spec, 256);
  ASSERT_TRUE(tiny.ok()) << tiny.status().to_string();
  EXPECT_NE((*tiny)->describe().find("tokenizer byte"), std::string::npos) << (*tiny)->describe();
  auto big = make_data_source(spec, 3003);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("tokenizer is not set"), std::string::npos) << big.status().to_string();
  EXPECT_NE(big.status().message().find("3003"), std::string::npos) << big.status().to_string();
  spec.data.tokenizer = "byte";  // said outright: the user's choice
  EXPECT_TRUE(make_data_source(spec, 3003).ok());
}

// Every completion empty: every step would be loss 0 and gradient 0, a run that trains nothing
// and says it succeeded. Refused when the data is opened.
TEST(SftJsonl, ADatasetWithNoTokenTheLossCountsIsRefused) {
  testing_util::TempDir d("mt-sft");
  const std::string path = d / "empty_completions.jsonl";
  {
    std::ofstream f(path);
    for (int i = 0; i < 10; ++i) f << "{\"prompt\": \"hello there\", \"completion\": \"\"}\n";
  }
  JobSpec spec = sft_spec(path, true);
  spec.data.tokenizer = "byte";
  auto src = make_data_source(spec, 256);
  ASSERT_FALSE(src.ok());
  EXPECT_NE(src.status().message().find("has no token the loss counts"), std::string::npos) << src.status().to_string();
  // Examples of one token each: trained, but no token of them is ever a target (nothing precedes it).
  const std::string single = d / "single.jsonl";
  {
    std::ofstream f(single);
    for (int i = 0; i < 10; ++i) f << "{\"text\": \"x\"}\n";
  }
  JobSpec text = sft_spec(single, true);
  text.data.format = "text";
  text.data.tokenizer = "byte";
  auto one_token = make_data_source(text, 256);
  ASSERT_FALSE(one_token.ok());
  EXPECT_NE(one_token.status().message().find("has no token the loss counts"), std::string::npos)
      << one_token.status().to_string();
}

// long_examples: truncate keeps an example's first seq_len tokens. When every prompt is longer,
// every completion is cut off: each step would train nothing. The first batch says so; split
// trains the same file. A prompt of exactly seq_len tokens keeps its completion's first token as
// the last input's target, so it trains.
TEST(SftJsonl, TruncationThatCutsOffEveryCompletionIsRefusedAtTheFirstBatch) {
  testing_util::TempDir d("mt-sft");
  auto write = [&](const std::string& name, size_t prompt_bytes) {
    const std::string path = d / name;
    std::ofstream f(path);
    for (int i = 0; i < 6; ++i)
      f << Json::object({{"prompt", std::string(prompt_bytes, char('a' + i))}, {"completion", "xyz"}}).dump() << "\n";
    return path;
  };
  JobSpec spec = sft_spec(write("long_prompts.jsonl", 60), true);  // seq_len 48
  spec.data.long_examples = "truncate";
  auto src = make_data_source(spec, 256);
  ASSERT_TRUE(src.ok()) << src.status().to_string();  // the set trains; the cut is seq_len's
  Batch b;
  const Status s = (*src)->next_batch(2, 48, b);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("its tokens 1..48, seq_len = 48"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("long_examples: split"), std::string::npos) << s.to_string();
  EXPECT_TRUE((*src)->next_batch(2, 64, b).ok());  // seq_len 64 keeps the completions
  EXPECT_GT(b.counted_targets(), 0);

  spec.data.long_examples = "split";
  auto split = make_data_source(spec, 256);
  ASSERT_TRUE(split.ok());
  ASSERT_TRUE((*split)->next_batch(2, 48, b).ok());

  JobSpec edge = sft_spec(write("edge.jsonl", 48), true);
  edge.data.long_examples = "truncate";
  auto at_edge = make_data_source(edge, 256);
  ASSERT_TRUE(at_edge.ok());
  ASSERT_TRUE((*at_edge)->next_batch(6, 48, b).ok()) << "a prompt of exactly seq_len tokens";
  EXPECT_EQ(b.counted_targets(), 6);  // each example's first completion token, as the last input's target
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
