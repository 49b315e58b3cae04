// The built-in chat templates against jinja2's rendering of the official templates
// (tests/fixtures/chat_templates/rendered.json, made by scripts/make_chat_fixtures.py), their
// recognition from tokenizer_config.json, and Jinja's trim.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "engine/base/json.h"
#include "engine/text/chat_template.h"
#include "tests/engine/temp_dir.h"
#include "tests/engine/text/chat_fixtures.h"

namespace mt {
namespace {

using testing_util::ChatFixtures;
using testing_util::TempDir;

std::string joined(const std::vector<TextPiece>& pieces) {
  std::string s;
  for (const TextPiece& p : pieces) s += p.text;
  return s;
}

TEST(SftChatTemplate, RendersEveryConversationAsJinja2Does) {
  const ChatFixtures fx = ChatFixtures::load();
  size_t rendered = 0, refused = 0;
  for (const auto& t : fx.templates) {
    auto tmpl = ChatTemplate::by_name(t.name);
    ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string();
    for (const auto& r : t.renders) {
      std::vector<TextPiece> pieces;
      const Status st = (*tmpl)->render(fx.messages(r.conversation), pieces);
      if (!r.expected) {  // the official template raises: so must the built-in one
        EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << t.name << " / " << r.conversation;
        EXPECT_NE(st.message().find("messages["), std::string::npos) << st.to_string();
        ++refused;
        continue;
      }
      ASSERT_TRUE(st.ok()) << t.name << " / " << r.conversation << ": " << st.to_string();
      EXPECT_EQ(joined(pieces), *r.expected) << t.name << " / " << r.conversation;
      for (const TextPiece& p : pieces) {
        EXPECT_FALSE(p.text.empty());
        const auto& specials = (*tmpl)->special_tokens();
        if (p.special) {
          EXPECT_NE(std::find(specials.begin(), specials.end(), p.text), specials.end()) << p.text;
        }
      }
      ++rendered;
    }
  }
  EXPECT_EQ(fx.templates.size(), 9u);  // qwen3 twice: its current and its first published text
  EXPECT_EQ(rendered, 150u);
  // mistral 6, gemma 5 (roles not alternating), gemma2 10 (also: any system message first)
  EXPECT_EQ(refused, 21u);
}

TEST(SftChatTemplate, RecognisesTheOfficialTextsByteForByte) {
  const ChatFixtures fx = ChatFixtures::load();
  for (const auto& t : fx.templates) {
    const std::string text = ChatFixtures::read(t.file);
    auto r = ChatTemplate::recognise(text);
    ASSERT_TRUE(r.ok()) << t.file << ": " << r.status().to_string();
    EXPECT_EQ((*r)->name(), t.name);
    // One byte more, or less, is another template: refused, never guessed at.
    for (const std::string& other : {text + " ", text.substr(0, text.size() - 1), text + "\n"}) {
      auto bad = ChatTemplate::recognise(other);
      ASSERT_FALSE(bad.ok()) << t.file;
      EXPECT_EQ(bad.status().code(), StatusCode::kUnimplemented);
      EXPECT_NE(bad.status().message().find("by name"), std::string::npos) << bad.status().to_string();
    }
  }
  // llama3 and chatml circulate with newlines written either way inside their string literals.
  const auto swap_newlines = [](std::string s, bool to_escape) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (to_escape && s[i] == '\n') out += "\\n";
      else if (!to_escape && s.compare(i, 2, "\\n") == 0) out += '\n', ++i;
      else out += s[i];
    }
    return out;
  };
  auto llama = ChatTemplate::recognise(swap_newlines(ChatFixtures::read("llama3-instruct.jinja"), true));
  ASSERT_TRUE(llama.ok()) << llama.status().to_string();
  EXPECT_EQ((*llama)->name(), "llama3");
  auto chatml = ChatTemplate::recognise(swap_newlines(ChatFixtures::read("chatml.jinja"), false));
  ASSERT_TRUE(chatml.ok()) << chatml.status().to_string();
  EXPECT_EQ((*chatml)->name(), "chatml");
  EXPECT_FALSE(ChatTemplate::recognise("").ok());
}

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

TEST(SftChatTemplate, FromModelDirReadsTokenizerConfig) {
  const std::string qwen = ChatFixtures::read("qwen2.5-instruct.jinja");
  const std::string mistral = ChatFixtures::read("mistral-v3.jinja");
  {
    TempDir d("mt-chat");
    Json config = Json::object({{"eos_token", "<|im_end|>"}, {"chat_template", qwen}});
    write(d / "tokenizer_config.json", config.dump(2));
    auto t = ChatTemplate::from_model_dir(d.path);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ((*t)->name(), "qwen2");
    // chat_template.jinja, where present, is the template (as transformers reads it).
    write(d / "chat_template.jinja", mistral);
    auto j = ChatTemplate::from_model_dir(d.path);
    ASSERT_TRUE(j.ok()) << j.status().to_string();
    EXPECT_EQ((*j)->name(), "mistral");
    write(d / "chat_template.jinja", "{{ messages }}");
    auto odd = ChatTemplate::from_model_dir(d.path);
    ASSERT_FALSE(odd.ok());
    EXPECT_NE(odd.status().message().find("chat_template.jinja"), std::string::npos) << odd.status().to_string();
  }
  {
    TempDir d("mt-chat");  // the list form: the entry named "default"
    Json list = Json::array({Json::object({{"name", "tool_use"}, {"template", "{{ tools }}"}}),
                             Json::object({{"name", "default"}, {"template", mistral}})});
    write(d / "tokenizer_config.json", Json::object({{"chat_template", list}}).dump());
    auto t = ChatTemplate::from_model_dir(d.path);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ((*t)->name(), "mistral");
  }
  {
    TempDir d("mt-chat");  // a base model: no chat_template
    write(d / "tokenizer_config.json", R"({"eos_token": "</s>"})");
    EXPECT_EQ(ChatTemplate::from_model_dir(d.path).status().code(), StatusCode::kNotFound);
    write(d / "tokenizer_config.json", "{not json");
    EXPECT_FALSE(ChatTemplate::from_model_dir(d.path).ok());
    write(d / "tokenizer_config.json", R"({"chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"})");
    auto unknown = ChatTemplate::from_model_dir(d.path);
    ASSERT_FALSE(unknown.ok());
    EXPECT_EQ(unknown.status().code(), StatusCode::kUnimplemented);
    EXPECT_NE(unknown.status().message().find("tokenizer_config.json"), std::string::npos);
  }
  EXPECT_FALSE(ChatTemplate::from_model_dir("/nonexistent-mt-dir").ok());
}

TEST(SftChatTemplate, TrimIsPythonsStrip) {
  EXPECT_EQ(python_strip(""), "");
  EXPECT_EQ(python_strip(" \t\n\r\v\f"), "");
  EXPECT_EQ(python_strip("\x1c\x1d\x1e\x1fx\x1f"), "x");
  EXPECT_EQ(python_strip("\u00a0\u3000x y\u2003\u2028\u2029\u205f\u0085"), "x y");
  EXPECT_EQ(python_strip("\u200bx\u200b"), "\u200bx\u200b");  // zero width space is not whitespace
  EXPECT_EQ(python_strip("\ufeffx"), "\ufeffx");              // nor is the BOM
  EXPECT_EQ(python_strip(" \xff\xfe "), "\xff\xfe");           // invalid UTF-8 stays as it is
  EXPECT_EQ(python_strip("\xe3\x80"), "\xe3\x80");             // a truncated U+3000 is not a space
  EXPECT_EQ(python_strip("é "), "é");
}

}  // namespace
}  // namespace mt
