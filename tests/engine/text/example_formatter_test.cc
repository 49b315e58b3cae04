// ExampleFormatter on text and prompt_completion lines: what is trained on, the EOS, the token
// that straddles prompt and completion, and every way a line or the options can be wrong.
#include <gtest/gtest.h>

#include <string>

#include "engine/text/example.h"
#include "tests/engine/text/test_tokenizer.h"

namespace mt {
namespace {

using testing_util::TestTokenizer;

std::unique_ptr<ExampleFormatter> make(const Tokenizer& tok, ExampleFormatOptions o) {
  auto f = ExampleFormatter::create(o, tok);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  return f.ok() ? std::move(f).value() : nullptr;
}

std::string decode(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::string s;
  EXPECT_TRUE(tok.decode(ids.data(), ids.size(), s).ok());
  return s;
}

// The text of the trained tokens and of the others, each span joined with '|'.
std::pair<std::string, std::string> split_by_loss(const Tokenizer& tok, const TokenizedExample& ex) {
  std::string trained, context;
  for (size_t i = 0; i < ex.ids.size(); ++i) {
    std::string& dst = ex.loss[i] ? trained : context;
    if (i > 0 && ex.loss[i] != ex.loss[i - 1] && !dst.empty()) dst += '|';
    dst += decode(tok, {ex.ids[i]});
  }
  return {trained, context};
}

const TestTokenizer kTok({"</s>"});

TEST(SftExample, TextTrainsOnEveryTokenAndTheEos) {
  ExampleFormatOptions o;
  o.format = "text";
  o.eos_token = "</s>";
  auto f = make(kTok, o);
  auto ex = f->format(R"({"text": "héllo\nworld"})");
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  ASSERT_EQ(ex->ids.size(), ex->loss.size());
  EXPECT_EQ(decode(kTok, ex->ids), "héllo\nworld</s>");
  EXPECT_EQ(ex->ids.back(), kTok.token_id("</s>"));
  for (uint8_t l : ex->loss) EXPECT_EQ(l, 1);
}

TEST(SftExample, AddEosFalseAppendsNothingAndNeedsNoEosToken) {
  ExampleFormatOptions o;
  o.format = "text";
  o.add_eos = false;
  auto byte_tok = make_byte_tokenizer();
  auto f = make(*byte_tok, o);
  auto ex = f->format(R"({"text": "abc"})");
  ASSERT_TRUE(ex.ok());
  EXPECT_EQ(ex->ids, (std::vector<int32_t>{'a', 'b', 'c'}));
  EXPECT_EQ(ex->loss, (std::vector<uint8_t>{1, 1, 1}));
}

TEST(SftExample, PromptIsContextCompletionAndEosAreTrained) {
  ExampleFormatOptions o;
  o.format = "prompt_completion";
  o.eos_token = "</s>";
  auto f = make(kTok, o);
  auto ex = f->format(R"({"prompt": "Q: 2+2?\nA:", "completion": " 4"})");
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  const auto [trained, context] = split_by_loss(kTok, *ex);
  EXPECT_EQ(trained, " 4</s>");
  EXPECT_EQ(context, "Q: 2+2?\nA:");
  EXPECT_EQ(decode(kTok, ex->ids), "Q: 2+2?\nA: 4</s>");
}

TEST(SftExample, AutoPicksTheFormatByTheLinesKeys) {
  ExampleFormatOptions o;  // format auto, no chat template: text and prompt/completion still work
  o.eos_token = "</s>";
  auto f = make(kTok, o);
  auto text = f->format(R"({"text": "ab", "id": 7})");
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_EQ(text->loss, (std::vector<uint8_t>{1, 1, 1}));
  auto pc = f->format(R"({"prompt": "ab", "completion": "c"})");
  ASSERT_TRUE(pc.ok()) << pc.status().to_string();
  EXPECT_EQ(pc->loss, (std::vector<uint8_t>{0, 0, 1, 1}));
  // messages need a chat template, which this formatter has none of: the reason is given.
  auto chat = f->format(R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]})");
  ASSERT_FALSE(chat.ok());
  EXPECT_NE(chat.status().message().find("model_dir"), std::string::npos) << chat.status().to_string();
}

// A token that spans the prompt/completion boundary ("bc" here) is trained on, as TRL's mask of
// tokenize(prompt + completion) and Hugging Face's char_to_token mask both count it.
TEST(SftExample, TokenStraddlingPromptAndCompletionIsTrained) {
  const TestTokenizer tok({"</s>"}, {"bc"});
  ExampleFormatOptions o;
  o.format = "prompt_completion";
  o.eos_token = "</s>";
  auto f = make(tok, o);
  auto ex = f->format(R"({"prompt": "ab", "completion": "cd"})");
  ASSERT_TRUE(ex.ok());
  EXPECT_EQ(ex->ids, (std::vector<int32_t>{'a', tok.token_id("bc"), 'd', tok.token_id("</s>")}));
  EXPECT_EQ(ex->loss, (std::vector<uint8_t>{0, 1, 1, 1}));
  // The ids are those of the whole text: masking never changes the tokenization.
  std::vector<int32_t> whole;
  ASSERT_TRUE(tok.encode("abcd</s>", whole).ok());
  EXPECT_EQ(ex->ids, whole);
}

TEST(SftExample, EmptyPromptOrCompletionIsFine) {
  ExampleFormatOptions o;
  o.format = "prompt_completion";
  o.eos_token = "</s>";
  auto f = make(kTok, o);
  auto a = f->format(R"({"prompt": "", "completion": "x"})");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->loss, (std::vector<uint8_t>{1, 1}));
  auto b = f->format(R"({"prompt": "x", "completion": ""})");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->loss, (std::vector<uint8_t>{0, 1}));
}

struct BadLine {
  const char* line;
  const char* message;  // a part of the error's message
};

TEST(SftExample, MalformedLinesAreRefusedByName) {
  ExampleFormatOptions o;
  o.eos_token = "</s>";
  auto f = make(kTok, o);
  const BadLine cases[] = {
      {"", "not JSON"},
      {"{\"text\": \"abc\"", "not JSON"},
      {"[1, 2]", "JSON object"},
      {"\"text\"", "JSON object"},
      {"{}", "none of the keys"},
      {R"({"txt": "a"})", "none of the keys"},
      {R"({"text": 5})", "text: must be a string"},
      {R"({"text": null})", "text: must be a string"},
      {R"({"text": ["a"]})", "text: must be a string"},
      {R"({"prompt": "a"})", "completion: missing"},
      {R"({"completion": "a"})", "prompt: missing"},
      {R"({"prompt": 1, "completion": "a"})", "prompt: must be a string"},
      {R"({"prompt": "a", "completion": {}})", "completion: must be a string"},
      {R"({"text": "a", "prompt": "b", "completion": "c"})", "mixes"},
      {R"({"text": "a", "messages": []})", "mixes"},
  };
  for (const BadLine& c : cases) {
    auto ex = f->format(c.line);
    ASSERT_FALSE(ex.ok()) << c.line;
    EXPECT_EQ(ex.status().code(), StatusCode::kInvalidArgument) << c.line << ": " << ex.status().to_string();
    EXPECT_NE(ex.status().message().find(c.message), std::string::npos) << c.line << ": " << ex.status().to_string();
  }
}

TEST(SftExample, ExplicitFormatRequiresItsKeys) {
  ExampleFormatOptions o;
  o.format = "text";
  o.eos_token = "</s>";
  auto f = make(kTok, o);
  auto ex = f->format(R"({"prompt": "a", "completion": "b"})");
  ASSERT_FALSE(ex.ok());
  EXPECT_NE(ex.status().message().find("text: missing"), std::string::npos) << ex.status().to_string();
}

TEST(SftExample, HugeAndDeepLinesAreRefusedWithoutCrashing) {
  ExampleFormatOptions o;
  o.eos_token = "</s>";
  o.max_line_bytes = 1 << 20;
  auto f = make(kTok, o);
  const std::string huge = "{\"text\": \"" + std::string(size_t(2) << 20, 'a') + "\"}";
  auto ex = f->format(huge);
  ASSERT_FALSE(ex.ok());
  EXPECT_NE(ex.status().message().find("max_line_bytes"), std::string::npos) << ex.status().to_string();
  // Nesting deep enough to overflow a naive recursive parser's stack.
  const std::string deep = "{\"text\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_FALSE(f->format(deep).ok());
  // Invalid UTF-8 and NUL bytes are text like any other: encoded, never a crash.
  auto odd = f->format("{\"text\": \"\xff\xfe\\u0000x\"}");
  ASSERT_TRUE(odd.ok()) << odd.status().to_string();
  EXPECT_EQ(odd->ids.size(), 5u);
}

TEST(SftExample, CreateRefusesOptionsItCannotHonour) {
  ExampleFormatOptions o;
  o.format = "chat";
  EXPECT_EQ(ExampleFormatter::create(o, kTok).status().code(), StatusCode::kInvalidArgument);
  o.format = "text";  // add_eos with no eos_token and no model_dir
  auto no_eos = ExampleFormatter::create(o, kTok);
  ASSERT_FALSE(no_eos.ok());
  EXPECT_NE(no_eos.status().message().find("eos_token"), std::string::npos) << no_eos.status().to_string();
  o.eos_token = "<|endoftext|>";  // not a token of this tokenizer
  EXPECT_FALSE(ExampleFormatter::create(o, kTok).ok());
  o.format = "messages";  // needs a chat template: auto needs model_dir
  o.eos_token = "</s>";
  EXPECT_FALSE(ExampleFormatter::create(o, kTok).ok());
  o.chat_template = "vicuna";
  auto unknown = ExampleFormatter::create(o, kTok);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("llama3, chatml, qwen2, mistral"), std::string::npos);
}

}  // namespace
}  // namespace mt
