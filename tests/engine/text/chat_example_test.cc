// ExampleFormatter on {"messages": ...} lines: the ids are those of the rendered text, and the loss
// covers exactly each assistant turn's content and the token that ends it, for every committed
// conversation and template; what a chat line may not hold is refused by name.
#include <gtest/gtest.h>

#include <thread>

#include "engine/base/json.h"
#include "engine/text/chat_template.h"
#include "engine/text/example.h"
#include "tests/engine/text/chat_fixtures.h"
#include "tests/engine/text/test_tokenizer.h"

namespace mt {
namespace {

using testing_util::ChatFixtures;
using testing_util::TestTokenizer;

std::unique_ptr<ExampleFormatter> chat_formatter(const Tokenizer& tok, const std::string& tmpl, bool markup_as_text = false) {
  ExampleFormatOptions o;
  o.format = "messages";
  o.chat_template = tmpl;
  o.markup_as_text = markup_as_text;
  auto f = ExampleFormatter::create(o, tok);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  return f.ok() ? std::move(f).value() : nullptr;
}

std::vector<std::string> special_tokens(const std::string& tmpl) { return (*ChatTemplate::by_name(tmpl))->special_tokens(); }

std::string decode(const Tokenizer& tok, const int32_t* ids, size_t n) {
  std::string s;
  EXPECT_TRUE(tok.decode(ids, n, s).ok());
  return s;
}

// The text of each maximal run of trained tokens.
std::vector<std::string> trained_spans(const Tokenizer& tok, const TokenizedExample& ex) {
  std::vector<std::string> spans;
  for (size_t i = 0; i < ex.ids.size();) {
    if (!ex.loss[i]) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < ex.ids.size() && ex.loss[j]) ++j;
    spans.push_back(decode(tok, ex.ids.data() + i, j - i));
    i = j;
  }
  return spans;
}

// What the loss must cover: each assistant turn's content as its template prints it (llama3 and
// mistral trim it) followed by the token that ends the turn. For the templates that open an
// assistant turn with markup of their own, that is everything after it in jinja2's rendering
// through the end token: Gemma's trimmed content, Qwen3's <think> block with the answer.
std::vector<std::string> assistant_spans(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                                         const std::string& rendered) {
  switch (t.family()) {
    case ChatTemplate::Family::kQwen3: return ChatFixtures::assistant_turns(rendered, "<|im_start|>assistant\n", "<|im_end|>");
    case ChatTemplate::Family::kGemma:
    case ChatTemplate::Family::kGemma2: return ChatFixtures::assistant_turns(rendered, "<start_of_turn>model\n", "<end_of_turn>");
    case ChatTemplate::Family::kPhi4:
      return ChatFixtures::assistant_turns(rendered, "<|im_start|>assistant<|im_sep|>", "<|im_end|>");
    default: break;
  }
  std::vector<std::string> spans;
  const bool trims = t.family() == ChatTemplate::Family::kLlama3 || t.family() == ChatTemplate::Family::kMistral;
  for (const ChatMessage& m : messages)
    if (m.role == "assistant") spans.push_back(std::string(trims ? python_strip(m.content) : m.content) + t.end_of_turn());
  return spans;
}

bool holds_markup(const std::vector<ChatMessage>& messages, const std::vector<std::string>& specials) {
  for (const ChatMessage& m : messages)
    for (const std::string& s : specials)
      if (m.content.find(s) != std::string::npos || m.reasoning_content.value_or("").find(s) != std::string::npos)
        return true;
  return false;
}

struct BadChat {
  const char* line;
  const char* message;
  StatusCode code = StatusCode::kInvalidArgument;
};

TEST(SftChatExample, MaskCoversExactlyTheAssistantTurnsForEveryTemplateAndConversation) {
  const ChatFixtures fx = ChatFixtures::load();
  size_t checked = 0;
  for (const auto& t : fx.templates) {
    const TestTokenizer tok(special_tokens(t.name));
    auto f = chat_formatter(tok, t.name);
    const auto tmpl = *ChatTemplate::by_name(t.name);
    for (const auto& r : t.renders) {
      const auto messages = fx.messages(r.conversation);
      auto ex = f->format(fx.line(r.conversation));
      const std::string what = t.name + " / " + r.conversation;
      // Refused: what the official template refuses, markup in a content, and reasoning_content
      // for a template that would drop it.
      if (!r.expected || holds_markup(messages, special_tokens(t.name)) ||
          (fx.has_reasoning(r.conversation) && !tmpl->reads_reasoning())) {
        EXPECT_FALSE(ex.ok()) << what;
        continue;
      }
      ASSERT_TRUE(ex.ok()) << what << ": " << ex.status().to_string();
      ASSERT_EQ(ex->ids.size(), ex->loss.size());
      EXPECT_EQ(decode(tok, ex->ids.data(), ex->ids.size()), *r.expected) << what;
      // Encoding segment by segment gives the ids of encoding the whole rendered text.
      std::vector<int32_t> whole;
      ASSERT_TRUE(tok.encode(*r.expected, whole).ok());
      EXPECT_EQ(ex->ids, whole) << what;
      EXPECT_EQ(trained_spans(tok, *ex), assistant_spans(*tmpl, messages, *r.expected)) << what;
      ++checked;
    }
  }
  EXPECT_GE(checked, 120u);
}

// Qwen3's tokenizer has <think> and </think> as added tokens, matched before anything else as its
// special tokens are, though they are not the template's markup: a content may hold them (that is
// how it gives the reasoning). The ids stay those of the whole text, and the trained spans each
// whole assistant turn after "<|im_start|>assistant\n", <think> block included.
TEST(SftChatExample, Qwen3ThinkTagsAsAddedTokensKeepIdsWholeAndTrained) {
  const ChatFixtures fx = ChatFixtures::load();
  std::vector<std::string> added = special_tokens("qwen3");
  added.insert(added.end(), {"<think>", "</think>"});
  const TestTokenizer tok(added, {"assistant\n", "\n\n"});
  auto f = chat_formatter(tok, "qwen3");
  size_t with_think = 0;
  for (const auto& t : fx.templates) {
    if (t.name != "qwen3") continue;
    for (const auto& r : t.renders) {
      ASSERT_TRUE(r.expected) << r.conversation;
      auto ex = f->format(fx.line(r.conversation));
      if (holds_markup(fx.messages(r.conversation), special_tokens("qwen3"))) continue;
      ASSERT_TRUE(ex.ok()) << r.conversation << ": " << ex.status().to_string();
      std::vector<int32_t> whole;
      ASSERT_TRUE(tok.encode(*r.expected, whole).ok());
      EXPECT_EQ(ex->ids, whole) << r.conversation;
      const auto turns = ChatFixtures::assistant_turns(*r.expected, "<|im_start|>assistant\n", "<|im_end|>");
      EXPECT_EQ(trained_spans(tok, *ex), turns) << r.conversation;
      for (const std::string& turn : turns) with_think += turn.starts_with("<think>\n");
    }
  }
  EXPECT_GE(with_think, 20u);
}

TEST(SftChatExample, ReasoningContentOnlyWhereATemplateRendersIt) {
  const std::string ok =
      R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "reasoning_content": "r"}]})";
  const TestTokenizer qtok(special_tokens("qwen3"));
  auto qwen3 = chat_formatter(qtok, "qwen3");
  auto ex = qwen3->format(ok);
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  EXPECT_EQ(decode(qtok, ex->ids.data(), ex->ids.size()),
            "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nr\n</think>\n\na<|im_end|>\n");
  EXPECT_EQ(trained_spans(qtok, *ex), (std::vector<std::string>{"<think>\nr\n</think>\n\na<|im_end|>"}));
  const TestTokenizer ctok(special_tokens("chatml"));
  auto chatml = chat_formatter(ctok, "chatml");
  // null is no reasoning, for every template.
  const std::string null_reasoning =
      R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "reasoning_content": null}]})";
  EXPECT_TRUE(qwen3->format(null_reasoning).ok());
  EXPECT_TRUE(chatml->format(null_reasoning).ok());
  const BadChat refused[] = {
      {R"({"messages": [{"role": "user", "content": "q", "reasoning_content": "r"}, {"role": "assistant", "content": "a"}]})",
       "messages[0].reasoning_content: only an assistant message's reasoning", StatusCode::kUnimplemented},
      {R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "reasoning_content": 1}]})",
       "messages[1].reasoning_content: must be a string or null"},
      {R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "reasoning_content": "x<|im_end|>"}]})",
       "messages[1].reasoning_content: contains '<|im_end|>'"},
  };
  for (const BadChat& c : refused) {
    auto bad = qwen3->format(c.line);
    ASSERT_FALSE(bad.ok()) << c.line;
    EXPECT_EQ(bad.status().code(), c.code) << bad.status().to_string();
    EXPECT_NE(bad.status().message().find(c.message), std::string::npos) << bad.status().to_string();
  }
  auto dropped = chatml->format(ok);  // the chatml template would drop it: refused, not lost
  ASSERT_FALSE(dropped.ok());
  EXPECT_EQ(dropped.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(dropped.status().message().find("messages[1].reasoning_content: the chatml template does not render"),
            std::string::npos)
      << dropped.status().to_string();
}

// A tokenizer whose ordinary tokens span the markup/content boundary ("\n\n" after
// "assistant\n" when the content starts with "\n"; "\n\nH" after <|end_header_id|>): the ids still
// equal the whole text's, and the straddling token is trained on.
TEST(SftChatExample, TokensSpanningMarkupAndContentAreTrainedAndIdsStayWhole) {
  const std::string line =
      R"({"messages": [{"role": "user", "content": "Hey"}, {"role": "assistant", "content": "\nHi you"}]})";
  {
    const TestTokenizer tok(special_tokens("chatml"), {"\n\n", "assistant", "you\n"});
    auto f = chat_formatter(tok, "chatml");
    auto ex = f->format(line);
    ASSERT_TRUE(ex.ok()) << ex.status().to_string();
    std::vector<int32_t> whole;
    ASSERT_TRUE(tok.encode("<|im_start|>user\nHey<|im_end|>\n<|im_start|>assistant\n\nHi you<|im_end|>\n", whole).ok());
    EXPECT_EQ(ex->ids, whole);
    EXPECT_EQ(trained_spans(tok, *ex), (std::vector<std::string>{"\n\nHi you<|im_end|>"}));
  }
  {
    const TestTokenizer tok(special_tokens("llama3"), {"\n\nH", "\n\n"});
    auto f = chat_formatter(tok, "llama3");
    auto ex = f->format(line);
    ASSERT_TRUE(ex.ok()) << ex.status().to_string();
    EXPECT_EQ(trained_spans(tok, *ex), (std::vector<std::string>{"\n\nHi you<|eot_id|>"}));
  }
  {
    // " Hi" is one token in mistral's " " + content: trained, as sentencepiece's "▁Hi" would be.
    const TestTokenizer tok(special_tokens("mistral"), {" Hi"});
    auto f = chat_formatter(tok, "mistral");
    auto ex = f->format(line);
    ASSERT_TRUE(ex.ok()) << ex.status().to_string();
    EXPECT_EQ(trained_spans(tok, *ex), (std::vector<std::string>{" Hi you</s>"}));
  }
}

TEST(SftChatExample, ByteTokenizerSpellsMarkupOnlyWhenAllowed) {
  auto bytes = make_byte_tokenizer();
  ExampleFormatOptions o;
  o.format = "messages";
  o.chat_template = "chatml";
  auto refused = ExampleFormatter::create(o, *bytes);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("'<|im_start|>'"), std::string::npos) << refused.status().to_string();
  auto f = chat_formatter(*bytes, "chatml", /*markup_as_text=*/true);
  auto ex = f->format(R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})");
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  EXPECT_EQ(decode(*bytes, ex->ids.data(), ex->ids.size()), "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nb<|im_end|>\n");
  EXPECT_EQ(trained_spans(*bytes, *ex), (std::vector<std::string>{"b<|im_end|>"}));
}

TEST(SftChatExample, AutoFormatHandlesAllThreeKindsOfLine) {
  const TestTokenizer tok(special_tokens("qwen2"));
  ExampleFormatOptions o;
  o.chat_template = "qwen2";
  o.eos_token = "<|im_end|>";
  auto f = ExampleFormatter::create(o, tok);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_TRUE((*f)->format(R"({"text": "x"})").ok());
  EXPECT_TRUE((*f)->format(R"({"prompt": "x", "completion": "y"})").ok());
  auto chat = (*f)->format(R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})");
  ASSERT_TRUE(chat.ok()) << chat.status().to_string();
  EXPECT_EQ(trained_spans(tok, *chat), (std::vector<std::string>{"a<|im_end|>"}));
  EXPECT_NE((*f)->describe().find("qwen2"), std::string::npos) << (*f)->describe();
}

TEST(SftChatExample, RefusesWhatATemplateCannotSayByName) {
  const TestTokenizer tok(special_tokens("chatml"));
  ExampleFormatOptions o;
  o.format = "messages";
  o.chat_template = "chatml";
  o.max_messages = 8;
  auto f = ExampleFormatter::create(o, tok);
  ASSERT_TRUE(f.ok());
  const BadChat cases[] = {
      {R"({"messages": {}})", "messages: must be an array"},
      {R"({"messages": []})", "messages: is empty"},
      {R"({"messages": "hi"})", "messages: must be an array"},
      {R"({"text": "hi"})", "messages: missing"},
      {R"({"messages": [1]})", "messages[0]: must be an object"},
      {R"({"messages": [{"content": "a"}]})", "messages[0].role: missing"},
      {R"({"messages": [{"role": 3, "content": "a"}]})", "messages[0].role: must be a string"},
      {R"({"messages": [{"role": "user"}]})", "messages[0].content: missing"},
      {R"({"messages": [{"role": "user", "content": null}]})", "messages[0].content: must be a string"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image"}]}]})", "messages[0].content: a list",
       StatusCode::kUnimplemented},
      {R"({"messages": [{"role": "user", "content": "a"}, {"role": "tool", "content": "42"}]})",
       "messages[1].role: 'tool' is not supported", StatusCode::kUnimplemented},
      {R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "", "tool_calls": []}]})",
       "messages[1].tool_calls: is not supported", StatusCode::kUnimplemented},
      {R"({"messages": [{"role": "user", "content": "a", "name": "bob"}]})", "messages[0].name: is not supported",
       StatusCode::kUnimplemented},
      {R"({"messages": [{"role": "user", "content": "a"}]})", "no assistant turn"},
      {R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], "tools": []})",
       "tools: is not supported", StatusCode::kUnimplemented},
      {R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], "add_generation_prompt": true})",
       "add_generation_prompt: is not supported", StatusCode::kUnimplemented},
      {R"({"messages": [{"role": "user", "content": "a<|im_end|>"}, {"role": "assistant", "content": "b"}]})",
       "messages[0].content: contains '<|im_end|>'"},
  };
  for (const BadChat& c : cases) {
    auto ex = (*f)->format(c.line);
    ASSERT_FALSE(ex.ok()) << c.line;
    EXPECT_EQ(ex.status().code(), c.code) << c.line << ": " << ex.status().to_string();
    EXPECT_NE(ex.status().message().find(c.message), std::string::npos) << c.line << ": " << ex.status().to_string();
  }
  // Over max_messages: refused before anything is rendered.
  Json many = Json::array();
  for (int i = 0; i < 9; ++i) many.items().push_back(Json::object({{"role", "user"}, {"content", "x"}}));
  auto ex = (*f)->format(Json::object({{"messages", many}}).dump());
  ASSERT_FALSE(ex.ok());
  EXPECT_NE(ex.status().message().find("max_messages"), std::string::npos) << ex.status().to_string();
}

TEST(SftChatExample, MistralRefusesRolesOutOfOrderByIndex) {
  const TestTokenizer tok(special_tokens("mistral"));
  auto f = chat_formatter(tok, "mistral");
  auto ex = f->format(
      R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "system", "content": "c"}]})");
  ASSERT_FALSE(ex.ok());
  EXPECT_NE(ex.status().message().find("messages[2].role: 'system'"), std::string::npos) << ex.status().to_string();
  auto twice = f->format(
      R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}, {"role": "assistant", "content": "c"}]})");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("messages[1].role"), std::string::npos) << twice.status().to_string();
}

TEST(SftChatExample, FormatIsThreadSafe) {
  const ChatFixtures fx = ChatFixtures::load();
  const TestTokenizer tok(special_tokens("llama3"));
  auto f = chat_formatter(tok, "llama3");
  const std::string line = fx.line("multi_turn");
  auto want = f->format(line);
  ASSERT_TRUE(want.ok());
  std::vector<std::thread> threads;
  std::vector<int> same(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        auto got = f->format(line);
        same[size_t(t)] += got.ok() && got->ids == want->ids && got->loss == want->loss;
      }
    });
  for (auto& th : threads) th.join();
  for (int s : same) EXPECT_EQ(s, 200);
}

}  // namespace
}  // namespace mt
