// ExampleFormatter with real Hugging Face tokenizers (tests/fixtures/tokenizers, loaded by
// load_tokenizer): the ids of every chat are those of encoding the whole rendered text, and the
// trained tokens are each assistant content with its end token. The fixture tokenizers carry
// ChatML's special tokens only (<|im_start|>, <|im_end|>), so the chatml, qwen2 and qwen3 templates
// (qwen3 with its <think> blocks, here ordinary text) are exercised here with the byte-level BPE of
// both families (qwen2 and llama3 regexes); the other templates' markup tokens are absent from
// them, which the formatter must refuse by name.
#include <gtest/gtest.h>

#include <string>

#include "engine/text/chat_template.h"
#include "engine/text/example.h"
#include "engine/text/tokenizer.h"
#include "tests/engine/text/chat_fixtures.h"
#include "tests/test_paths.h"

namespace mt {
namespace {

using testing_util::ChatFixtures;

std::unique_ptr<Tokenizer> fixture_tokenizer(const std::string& name) {
  auto tok = load_tokenizer(std::string(mt::testing_util::source_dir()) + "/tests/fixtures/tokenizers/" + name);
  EXPECT_TRUE(tok.ok()) << tok.status().to_string();
  return tok.ok() ? std::move(tok).value() : nullptr;
}

std::string decode(const Tokenizer& tok, const int32_t* ids, size_t n) {
  std::string s;
  EXPECT_TRUE(tok.decode(ids, n, s).ok());
  return s;
}

class SftRealTokenizer : public ::testing::TestWithParam<const char*> {};

TEST_P(SftRealTokenizer, ChatIdsAreTheWholeTextsAndTheMaskIsTheAssistantTurns) {
  auto tok = fixture_tokenizer(GetParam());
  ASSERT_TRUE(tok);
  const ChatFixtures fx = ChatFixtures::load();
  size_t checked = 0;
  for (const auto& t : fx.templates) {
    if (t.name != "chatml" && t.name != "qwen2" && t.name != "qwen3") continue;
    ExampleFormatOptions o;
    o.format = "messages";
    o.chat_template = t.name;
    auto f = ExampleFormatter::create(o, *tok);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    for (const auto& r : t.renders) {
      auto ex = (*f)->format(fx.line(r.conversation));
      ASSERT_TRUE(r.expected);
      if (fx.has_reasoning(r.conversation) && !(*ChatTemplate::by_name(t.name))->reads_reasoning()) {
        EXPECT_FALSE(ex.ok()) << t.name << " / " << r.conversation;  // reasoning_content the template would drop
        continue;
      }
      ASSERT_TRUE(ex.ok()) << r.conversation << ": " << ex.status().to_string();
      std::vector<int32_t> whole;
      ASSERT_TRUE(tok->encode(*r.expected, whole).ok());
      EXPECT_EQ(ex->ids, whole) << t.name << " / " << r.conversation;
      EXPECT_EQ(decode(*tok, ex->ids.data(), ex->ids.size()), *r.expected);
      // Each run of trained tokens decodes to an assistant turn as rendered (the content, Qwen3's
      // <think> block before it) + <|im_end|>, preceded at most by the end of its markup ("\n" of
      // "assistant\n") where a token joins the two (these small fixtures have no such token;
      // chat_example_test.cc tests that case with merges that do).
      const std::vector<std::string> want =
          ChatFixtures::assistant_turns(*r.expected, "<|im_start|>assistant\n", "<|im_end|>");
      std::vector<std::string> got;
      for (size_t i = 0; i < ex->ids.size();) {
        size_t j = i;
        while (j < ex->ids.size() && ex->loss[j]) ++j;
        if (j > i) got.push_back(decode(*tok, ex->ids.data() + i, j - i));
        i = j == i ? i + 1 : j;
      }
      ASSERT_EQ(got.size(), want.size()) << t.name << " / " << r.conversation;
      for (size_t k = 0; k < got.size(); ++k) {
        EXPECT_TRUE(got[k].ends_with(want[k])) << r.conversation << ": '" << got[k] << "' vs '" << want[k] << "'";
        const std::string extra = got[k].substr(0, got[k].size() - std::min(got[k].size(), want[k].size()));
        EXPECT_TRUE(std::string("assistant\n").ends_with(extra)) << r.conversation << ": extra '" << extra << "'";
      }
      ++checked;
    }
  }
  EXPECT_GE(checked, 60u);
}

TEST_P(SftRealTokenizer, TextAndPromptCompletionAreTheWholeTextsIds) {
  auto tok = fixture_tokenizer(GetParam());
  ASSERT_TRUE(tok);
  ExampleFormatOptions o;
  o.eos_token = "<|im_end|>";
  auto f = ExampleFormatter::create(o, *tok);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  const int32_t eos = tok->token_id("<|im_end|>");
  auto text = (*f)->format(R"({"text": "Hello world, héllo 123 🙂"})");
  ASSERT_TRUE(text.ok());
  std::vector<int32_t> want;
  ASSERT_TRUE(tok->encode("Hello world, héllo 123 🙂", want).ok());
  want.push_back(eos);
  EXPECT_EQ(text->ids, want);
  auto pc = (*f)->format(R"({"prompt": "Question: what is MegaTrain?\nAnswer:", "completion": " a trainer."})");
  ASSERT_TRUE(pc.ok());
  std::vector<int32_t> prompt, whole;
  ASSERT_TRUE(tok->encode("Question: what is MegaTrain?\nAnswer:", prompt).ok());
  ASSERT_TRUE(tok->encode("Question: what is MegaTrain?\nAnswer: a trainer.", whole).ok());
  whole.push_back(eos);
  EXPECT_EQ(pc->ids, whole);
  size_t first_trained = 0;
  while (first_trained < pc->loss.size() && !pc->loss[first_trained]) ++first_trained;
  EXPECT_EQ(first_trained, prompt.size());  // the prompt's tokens are a prefix here
  for (size_t i = first_trained; i < pc->loss.size(); ++i) EXPECT_EQ(pc->loss[i], 1);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SftRealTokenizer, ::testing::Values("qwen2", "llama3"));

TEST(SftRealTokenizer, TemplatesWhoseMarkupTheTokenizerLacksAreRefused) {
  for (const auto& [fixture, tmpl, missing] : {std::tuple{"mistral", "mistral", "'[INST]'"},
                                               std::tuple{"qwen2", "llama3", "'<|begin_of_text|>'"},
                                               std::tuple{"mistral", "chatml", "'<|im_start|>'"},
                                               std::tuple{"qwen2", "gemma", "'<bos>'"},
                                               std::tuple{"llama3", "phi4", "'<|im_sep|>'"}}) {
    auto tok = fixture_tokenizer(fixture);
    ASSERT_TRUE(tok);
    ExampleFormatOptions o;
    o.format = "messages";
    o.chat_template = tmpl;
    auto f = ExampleFormatter::create(o, *tok);
    ASSERT_FALSE(f.ok()) << fixture << " + " << tmpl;
    EXPECT_NE(f.status().message().find(missing), std::string::npos) << f.status().to_string();
  }
}

}  // namespace
}  // namespace mt
