// tokenizer.json that this does not implement is refused by name; malformed or hostile files
// (truncated, huge declared sizes and ids, merges naming unknown tokens, bad or catastrophic
// regexes) are errors, never a crash, a hang or an unbounded allocation. Also run under ASan.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "engine/base/json.h"
#include "engine/text/tokenizer.h"
#include "tests/engine/temp_dir.h"
#include "tests/test_paths.h"

namespace mt {
namespace {

const std::string kFixture = std::string(mt::testing_util::source_dir()) + "/tests/fixtures/tokenizers/gpt2/tokenizer.json";

class TokenizerJson : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef MEGATRAIN_HAVE_PCRE2
    GTEST_SKIP() << "the GPT-2 fixture these edit needs PCRE2, which this build lacks";
#endif
    auto text = read_file(kFixture);
    ASSERT_TRUE(text.ok()) << text.status().to_string();
    original_ = *text;
    ASSERT_TRUE(Json::parse(original_).ok());
  }
  Status load_text(const std::string& text) {
    const std::string path = dir_ / "tokenizer.json";
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
    return load_tokenizer(dir_.path).status();
  }
  // Loads the GPT-2 fixture after `edit` changed it.
  Status load_edited(const std::function<void(Json&)>& edit) {
    Json j = *Json::parse(original_);  // a fresh tree: copies of a Json share its arrays and objects
    edit(j);
    return load_text(j.dump());
  }
  static Json object(const std::string& text) { return *Json::parse(text); }
  static Json model_with(const Json& base, const std::string& key, Json value) {
    Json m = object(base.find("model")->dump());
    m.set(key, std::move(value));
    return m;
  }

  testing_util::TempDir dir_{"mt-tokjson"};
  std::string original_;
};

void expect_refused(const Status& s, const std::string& needle) {
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("tokenizer.json: "), std::string::npos) << "names the file: " << s.to_string();
}

TEST_F(TokenizerJson, RefusesUnsupportedComponentsByName) {
  for (const char* model : {"WordPiece", "Unigram", "WordLevel"}) {
    const Status s = load_edited([&](Json& j) { j.set("model", model_with(j, "type", model)); });
    expect_refused(s, std::string("model type '") + model + "' is not supported (supported: BPE)");
  }
  expect_refused(load_edited([](Json& j) { j.set("pre_tokenizer", object(R"({"type": "Whitespace"})")); }),
                 "pre_tokenizer type 'Whitespace' is not supported (supported: Split, ByteLevel, Metaspace, Sequence)");
  expect_refused(load_edited([](Json& j) { j.set("normalizer", object(R"({"type": "Lowercase"})")); }),
                 "normalizer type 'Lowercase' is not supported");
  expect_refused(load_edited([](Json& j) {
                   j.set("normalizer", object(R"({"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "BertNormalizer"}]})"));
                 }),
                 "normalizer type 'BertNormalizer' is not supported");
  expect_refused(load_edited([](Json& j) { j.set("decoder", object(R"({"type": "WordPiece"})")); }),
                 "decoder type 'WordPiece' is not supported");
  expect_refused(load_edited([](Json& j) {
                   j.set("pre_tokenizer", object(R"({"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Removed", "invert": false})"));
                 }),
                 "Split with behavior 'Removed' is not supported");
  expect_refused(load_edited([](Json& j) {
                   j.set("pre_tokenizer", object(R"({"type": "Sequence", "pretokenizers": [{"type": "ByteLevel"}, {"type": "Digits"}]})"));
                 }),
                 "after ByteLevel is not supported");
  expect_refused(load_edited([](Json& j) { j.set("model", model_with(j, "continuing_subword_prefix", "##")); }),
                 "continuing_subword_prefix is not supported");
  expect_refused(load_edited([](Json& j) { j.set("model", model_with(j, "end_of_word_suffix", "</w>")); }),
                 "end_of_word_suffix is not supported");
  expect_refused(load_edited([](Json& j) { j.set("model", model_with(j, "dropout", 0.1)); }), "dropout");
  expect_refused(load_edited([](Json& j) {
                   j.set("added_tokens", object(R"([{"id": 5, "content": "<w>", "single_word": true}])"));
                 }),
                 "single_word is not supported");
}

// tokenizer.json before tokenizers 0.20 (most published Llama 2 / Mistral files) spells merges
// "a b"; the same merges in that form give the same ids.
TEST_F(TokenizerJson, MergesAsSpaceSeparatedStringsGiveTheSameIds) {
  const Status s = load_edited([](Json& j) {
    Json model = object(j.find("model")->dump());
    Json merges = Json::array();
    for (const Json& m : model.find("merges")->items())
      merges.items().push_back(Json(m.items()[0].as_string() + " " + m.items()[1].as_string()));
    model.set("merges", merges);
    j.set("model", model);
  });
  ASSERT_TRUE(s.ok()) << s.to_string();
  auto strings = load_tokenizer(dir_.path);
  auto pairs = load_tokenizer(kFixture);
  ASSERT_TRUE(strings.ok() && pairs.ok());
  const std::string text = "It's what they're saying: 1234567 Zürich 日本語 <|im_end|> MegaTrain  \n\t end";
  std::vector<int32_t> a, b;
  ASSERT_TRUE((*strings)->encode(text, a).ok());
  ASSERT_TRUE((*pairs)->encode(text, b).ok());
  EXPECT_EQ(a, b);
  EXPECT_GT(a.size(), 10u);
}

// Split with a {"String": ...} pattern (a literal, not a regex) was refused by every build:
// PCRE2 allows no UCP with LITERAL. It now isolates the string, as Hugging Face does: "hello",
// whose tokens merge across its "l"s without the split, becomes pieces around each "l".
TEST_F(TokenizerJson, SplitWithAStringPatternSplitsAtTheString) {
  const Status s = load_edited([](Json& j) {
    j.set("pre_tokenizer", object(R"({"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"String": "l"}, "behavior": "Isolated", "invert": false},
        {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})"));
  });
  ASSERT_TRUE(s.ok()) << s.to_string();
  auto split = load_tokenizer(dir_.path);
  auto plain = load_tokenizer(kFixture);
  ASSERT_TRUE(split.ok() && plain.ok()) << split.status().to_string();
  std::vector<int32_t> whole, he, l, o, unsplit;
  ASSERT_TRUE((*plain)->encode("hello", unsplit).ok());
  ASSERT_TRUE((*split)->encode("hello", whole).ok());
  ASSERT_TRUE((*split)->encode("he", he).ok());
  ASSERT_TRUE((*split)->encode("l", l).ok());
  ASSERT_TRUE((*split)->encode("o", o).ok());
  std::vector<int32_t> pieces = he;
  for (const auto* p : {&l, &l, &o}) pieces.insert(pieces.end(), p->begin(), p->end());
  EXPECT_EQ(whole, pieces) << "no token crosses an 'l', which is a piece of its own";
  EXPECT_NE(whole, unsplit) << "the fixture merges across an 'l' in 'hello' without the split";
}

// A flag spelt as a string or a number ("true", 1) was read as false, silently changing the
// tokenizer; Hugging Face refuses such a file. Refused naming the field.
TEST_F(TokenizerJson, AFlagThatIsNotABooleanIsRefusedNamingIt) {
  expect_refused(load_edited([](Json& j) { j.set("model", model_with(j, "fuse_unk", "yes")); }), "model.fuse_unk");
  expect_refused(load_edited([](Json& j) {
                   j.set("added_tokens", object(R"([{"id": 5, "content": "<w>", "special": "true"}])"));
                 }),
                 "added_tokens[0].special");
  expect_refused(load_edited([](Json& j) {
                   j.set("pre_tokenizer", object(R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": 1})"));
                 }),
                 "pre_tokenizer ByteLevel.use_regex");
  EXPECT_TRUE(load_edited([](Json& j) { j.set("model", model_with(j, "fuse_unk", Json())); }).ok()) << "null is unset";
}

TEST_F(TokenizerJson, TruncatedFilesAreErrors) {
  ASSERT_TRUE(load_text(original_).ok());
  for (size_t k = 0; k < 64; ++k) {
    const size_t n = original_.size() * k / 64 + (k % 7);
    EXPECT_FALSE(load_text(original_.substr(0, n)).ok()) << "truncated at " << n;
  }
}

TEST_F(TokenizerJson, HostileSizesAndIdsAreErrors) {
  auto with_vocab_entry = [&](const char* token, Json id) {
    return load_edited([&](Json& j) {
      Json m = object(j.find("model")->dump());
      Json vocab = object(m.find("vocab")->dump());
      vocab.set(token, std::move(id));
      m.set("vocab", vocab);
      j.set("model", m);
    });
  };
  expect_refused(with_vocab_entry("huge", Json(int64_t(2147483647))), "is not an id in [0, 1048576)");
  expect_refused(with_vocab_entry("huger", Json(int64_t(1) << 40)), "is not an id in");
  expect_refused(with_vocab_entry("negative", Json(-1)), "is not an id in");
  expect_refused(with_vocab_entry("text", Json("7")), "is not an id in");
  expect_refused(with_vocab_entry("dup", Json(7)), "used twice");
  expect_refused(load_edited([](Json& j) { j.set("model", model_with(j, "merges", object(R"([["zzz-unknown", "a"]])"))); }),
                 "merges[0] names a token that is not in the vocabulary: 'zzz-unknown'");
  expect_refused(load_edited([](Json& j) { j.set("model", model_with(j, "merges", object(R"([["<|im_end|>", "}"]])"))); }),
                 "'<|im_end|>}'");
  for (const char* bad : {R"(["a"])", R"([["a"]])", R"([[1, 2]])", R"(["a b c"])", R"({"a": 1})"})
    EXPECT_FALSE(load_edited([&](Json& j) { j.set("model", model_with(j, "merges", object(bad))); }).ok()) << bad;
  expect_refused(load_edited([](Json& j) { j.set("model", model_with(j, "unk_token", "<nope>")); }),
                 "unk_token '<nope>' is not in the vocabulary");
  expect_refused(load_edited([](Json& j) { j.set("added_tokens", object(R"([{"id": 99999999, "content": "x"}])")); }),
                 "has no id in");
  expect_refused(load_edited([](Json& j) { j.set("added_tokens", object(R"([{"id": 3, "content": ""}])")); }),
                 "has no content");
  expect_refused(load_edited([](Json& j) { j.set("model", model_with(j, "vocab", Json::array())); }),
                 "model.vocab is not an object");
  expect_refused(load_edited([](Json& j) { j.set("model", Json()); }), "no model");
  // Text the file would insert into what PCRE2 matches must be valid UTF-8.
  expect_refused(load_edited([](Json& j) { j.set("added_tokens", object("[{\"id\": 3, \"content\": \"a\xff\"}]")); }),
                 "not valid UTF-8");
  expect_refused(load_edited([](Json& j) { j.set("normalizer", object("{\"type\": \"Prepend\", \"prepend\": \"\xc3\"}")); }),
                 "valid UTF-8");
  expect_refused(load_edited([](Json& j) {
                   j.set("pre_tokenizer", object("{\"type\": \"Metaspace\", \"replacement\": \"ab\"}"));
                 }),
                 "one character");
  for (const char* text : {"", "[]", "null", "{}", "{\"model\": 5}", "\xff\xfe{}"})
    EXPECT_FALSE(load_text(text).ok()) << text;
  EXPECT_FALSE(load_text(std::string(200000, '[') + std::string(200000, ']')).ok());
}

// The post_processor's single template, as Llama 3 writes it (a Sequence of ByteLevel and a
// TemplateProcessing) and as Llama 2 / Gemma write it (one TemplateProcessing, with an EOS after
// in a variant); anything else is refused by name, a malformed template named.
TEST_F(TokenizerJson, ThePostProcessorsTemplateIsReadAndTheRestRefusedByName) {
  auto specials_of = [&](const std::string& pp) -> Result<SequenceSpecials> {
    MT_RETURN_IF_ERROR(load_edited([&](Json& j) { j.set("post_processor", object(pp)); }));
    MT_ASSIGN_OR_RETURN(auto tok, load_tokenizer(dir_.path));
    MT_ASSIGN_OR_RETURN(SequenceSpecials s, tok->sequence_specials());
    return s;
  };
  const std::string table = R"("special_tokens": {"<s>": {"id": "<s>", "ids": [7], "tokens": ["<s>"]},
                                                  "</s>": {"id": "</s>", "ids": [9], "tokens": ["</s>"]}})";
  const std::string bos = R"({"SpecialToken": {"id": "<s>", "type_id": 0}})", eos = R"({"SpecialToken": {"id": "</s>", "type_id": 0}})";
  const std::string a = R"({"Sequence": {"id": "A", "type_id": 0}})";
  auto tp = [&](const std::string& single) {
    return R"({"type": "TemplateProcessing", "single": [)" + single + R"(], "pair": [], )" + table + "}";
  };
  auto llama3 = specials_of(R"({"type": "Sequence", "processors": [{"type": "ByteLevel", "add_prefix_space": true,
      "trim_offsets": false, "use_regex": true}, )" + tp(bos + ", " + a) + "]}");
  ASSERT_TRUE(llama3.ok()) << llama3.status().to_string();
  EXPECT_EQ(llama3->before, std::vector<int32_t>{7});
  EXPECT_TRUE(llama3->after.empty());
  auto wrapped = specials_of(tp(bos + ", " + a + ", " + eos));
  ASSERT_TRUE(wrapped.ok()) << wrapped.status().to_string();
  EXPECT_EQ(wrapped->before, std::vector<int32_t>{7});
  EXPECT_EQ(wrapped->after, std::vector<int32_t>{9});
  auto qwen = specials_of(R"({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false})");
  ASSERT_TRUE(qwen.ok()) << qwen.status().to_string();
  EXPECT_TRUE(qwen->empty());
  EXPECT_TRUE(specials_of("null")->empty());
  // Refused when asked for (the text formats), not when loaded: the tokenizer still encodes, and
  // a chat, which renders its own markup, needs no template.
  auto refused = [&](const Result<SequenceSpecials>& r, const std::string& needle) {
    EXPECT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().to_string();
    EXPECT_TRUE(load_tokenizer(dir_.path).ok()) << "the tokenizer itself loads";
  };
  refused(specials_of(R"({"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0]})"),
          "post_processor type 'RobertaProcessing' is not supported");
  refused(specials_of(tp(bos)), "holds the sequence 0 times");
  refused(specials_of(tp(a + ", " + a)), "holds the sequence 2 times");
  refused(specials_of(tp(R"({"SpecialToken": {"id": "<x>", "type_id": 0}}, )" + a)), "special token '<x>' has no ids");
  refused(specials_of(tp(R"({"Sequence": {"id": "B", "type_id": 0}})")), "names sequence 'B'");
  refused(specials_of(R"({"type": "TemplateProcessing", "single": [)" + bos + ", " + a +
                      R"(], "special_tokens": {"<s>": {"ids": [99999999]}}})"),
          "has an id outside");
}

TEST_F(TokenizerJson, BadAndHostileRegexes) {
  auto with_split = [&](const std::string& pattern) {
    return load_edited([&](Json& j) {
      Json split = Json::object({{"type", "Split"}, {"pattern", Json::object({{"Regex", pattern}})},
                                 {"behavior", "Isolated"}, {"invert", false}});
      j.set("pre_tokenizer", Json::object({{"type", "Sequence"},
                                           {"pretokenizers", Json::array({split, object(R"({"type": "ByteLevel", "use_regex": false})")})}}));
    });
  };
  expect_refused(with_split("(unclosed"), "does not compile");
  expect_refused(with_split(std::string(5000, 'a')), "exceeds the limit");
  // Catastrophic backtracking is stopped by PCRE2's match limit: an error, not a hang.
  ASSERT_TRUE(with_split("(a+)+$").ok());
  auto tok = load_tokenizer(dir_.path);
  ASSERT_TRUE(tok.ok());
  std::vector<int32_t> ids;
  const Status s = (*tok)->encode(std::string(40, 'a') + "!", ids);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.to_string();
}

TEST_F(TokenizerJson, OversizedAndMissingFilesAreRefusedBeforeReading) {
  const std::string path = dir_ / "tokenizer.json";
  { std::ofstream(path) << ""; }
  ASSERT_EQ(truncate(path.c_str(), off_t(65) << 20), 0);  // sparse: 65 MiB declared, nothing written
  EXPECT_FALSE(load_tokenizer(path).ok());
  EXPECT_FALSE(load_tokenizer(dir_ / "no-such-dir").ok());
  EXPECT_FALSE(load_tokenizer("").ok());
}

}  // namespace
}  // namespace mt
