// tests/fixtures/chat_templates: the committed conversations and jinja2's rendering of each with
// each official template (scripts/make_chat_fixtures.py), read for the C++ tests.
#pragma once
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/base/json.h"
#include "engine/text/chat_template.h"
#include "tests/test_paths.h"

namespace mt::testing_util {

struct ChatFixtures {
  struct Render {
    std::string conversation;
    std::optional<std::string> expected;  // nullopt: the official template refuses it
  };
  struct Template {
    std::string file, name;
    std::vector<Render> renders;
  };
  std::map<std::string, Json> conversations;  // name -> messages (a JSON array)
  std::vector<Template> templates;

  static std::string dir() { return std::string(mt::testing_util::source_dir()) + "/tests/fixtures/chat_templates/"; }
  static std::string read(const std::string& file) {
    auto text = read_file(dir() + file);
    EXPECT_TRUE(text.ok()) << text.status().to_string();
    return text.ok() ? *text : std::string();
  }
  static Json parse(const std::string& file) {
    auto json = Json::parse(read(file));
    EXPECT_TRUE(json.ok()) << file << ": " << json.status().to_string();
    return json.ok() ? *json : Json();
  }

  static ChatFixtures load() {
    ChatFixtures fx;
    const Json convs = parse("conversations.json");
    for (const Json& c : convs.find("conversations")->items())
      fx.conversations[c.find("name")->as_string()] = *c.find("messages");
    const Json rendered = parse("rendered.json");
    for (const Json& t : rendered.find("templates")->items()) {
      Template tmpl{t.find("file")->as_string(), t.find("name")->as_string(), {}};
      for (const Json& r : t.find("renders")->items()) {
        const Json* text = r.find("text");
        tmpl.renders.push_back({r.find("name")->as_string(),
                                text->is_string() ? std::optional<std::string>(text->as_string()) : std::nullopt});
      }
      fx.templates.push_back(std::move(tmpl));
    }
    return fx;
  }

  std::vector<ChatMessage> messages(const std::string& conversation) const {
    std::vector<ChatMessage> out;
    for (const Json& m : conversations.at(conversation).items()) {
      out.push_back({m.find("role")->as_string(), m.find("content")->as_string()});
      const Json* reasoning = m.find("reasoning_content");
      if (reasoning != nullptr && reasoning->is_string()) out.back().reasoning_content = reasoning->as_string();
    }
    return out;
  }
  // Whether a message of the conversation gives reasoning_content (which only qwen3 renders).
  bool has_reasoning(const std::string& conversation) const {
    for (const ChatMessage& m : messages(conversation))
      if (m.reasoning_content) return true;
    return false;
  }
  // Each assistant turn of a rendered text as the loss must cover it: from the end of `header` (the
  // markup that opens an assistant turn) through the end-of-turn token.
  static std::vector<std::string> assistant_turns(const std::string& rendered, const std::string& header,
                                                  const std::string& end) {
    std::vector<std::string> turns;
    for (size_t at = rendered.find(header); at != std::string::npos; at = rendered.find(header, at)) {
      at += header.size();
      const size_t stop = rendered.find(end, at);
      EXPECT_NE(stop, std::string::npos) << rendered;
      if (stop == std::string::npos) break;
      turns.push_back(rendered.substr(at, stop + end.size() - at));
      at = stop;
    }
    return turns;
  }
  // One jsonl line holding the conversation.
  std::string line(const std::string& conversation) const {
    return Json::object({{"messages", conversations.at(conversation)}}).dump();
  }
};

}  // namespace mt::testing_util
