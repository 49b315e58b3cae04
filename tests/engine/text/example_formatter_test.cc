// ExampleFormatter on text and prompt_completion lines: what is trained on, the EOS, the token
// that straddles prompt and completion, and every way a line or the options can be wrong.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "engine/base/json.h"
#include "engine/text/chat_template.h"
#include "engine/text/example.h"
#include "tests/engine/temp_dir.h"
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

// A tokenizer whose post_processor puts a BOS before each sequence (Llama 3, Gemma, Llama 2): the
// text and prompt_completion formats start with it, as transformers' tokenizer(text) and TRL do
// (before, a Llama or Gemma base model was trained without the BOS it is used with); a chat
// renders its own. A template that ends with the EOS gets no second one.
TEST(SftExample, TheTokenizersTemplatePutsItsBosBeforeEachText) {
  TestTokenizer tok({"<s>", "</s>", "<|im_start|>", "<|im_end|>"});
  const int32_t bos = tok.token_id("<s>"), eos = tok.token_id("</s>");
  tok.with_specials(SequenceSpecials{{bos}, {}});
  ExampleFormatOptions o;
  o.eos_token = "</s>";
  o.chat_template = "chatml";
  auto f = make(tok, o);
  auto text = f->format(R"({"text": "hi"})");
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_EQ(text->ids, (std::vector<int32_t>{bos, 'h', 'i', eos}));
  EXPECT_EQ(text->loss, (std::vector<uint8_t>{1, 1, 1, 1}));
  auto pc = f->format(R"({"prompt": "q", "completion": "a"})");
  ASSERT_TRUE(pc.ok()) << pc.status().to_string();
  EXPECT_EQ(pc->ids, (std::vector<int32_t>{bos, 'q', 'a', eos}));
  EXPECT_EQ(pc->loss, (std::vector<uint8_t>{0, 0, 1, 1}));  // the BOS is the prompt's context
  auto chat = f->format(R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})");
  ASSERT_TRUE(chat.ok()) << chat.status().to_string();
  EXPECT_NE(chat->ids.front(), bos) << "a chat template renders its own markup";
  EXPECT_NE(f->describe().find("ids " + std::to_string(bos) + " before each text"), std::string::npos) << f->describe();
  tok.with_specials(SequenceSpecials{{bos}, {eos}});  // "<s> $A </s>": the template's EOS ends the example
  auto g = make(tok, o);
  auto ended = g->format(R"({"text": "hi"})");
  ASSERT_TRUE(ended.ok()) << ended.status().to_string();
  EXPECT_EQ(ended->ids, (std::vector<int32_t>{bos, 'h', 'i', eos}));
}

// A post_processor this does not read refuses the formats that need it, not the tokenizer: chats
// (and format auto's chat lines) go on; a text line under format auto is refused naming it.
TEST(SftExample, AnUnreadPostProcessorRefusesOnlyTheTextFormats) {
  TestTokenizer tok({"<s>", "</s>", "<|im_start|>", "<|im_end|>"});
  tok.with_specials(unimplemented("post_processor type 'RobertaProcessing' is not supported"));
  ExampleFormatOptions o;
  o.eos_token = "</s>";
  o.chat_template = "chatml";
  const char* chat = R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})";
  o.format = "messages";
  EXPECT_TRUE(make(tok, o)->format(chat).ok());
  o.format = "text";
  auto text = ExampleFormatter::create(o, tok);
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("RobertaProcessing"), std::string::npos) << text.status().to_string();
  o.format = "auto";
  auto f = make(tok, o);
  EXPECT_TRUE(f->format(chat).ok());
  auto line = f->format(R"({"text": "hi"})");
  ASSERT_FALSE(line.ok());
  EXPECT_NE(line.status().message().find("the text and prompt_completion formats"), std::string::npos)
      << line.status().to_string();
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

// BPE by merge rank, as Hugging Face's byte-level BPE applies merges: "abc" -> a|bc (b+c outranks
// a+b), "abcd" -> ab|cd (c+d outranks both). Encoding a prefix thus diverges from the whole text
// before the prefix's end.
class RankedBpe final : public Tokenizer {
 public:
  Status encode(std::string_view text, std::vector<int32_t>& ids) const override {
    std::vector<std::string> parts;
    for (char c : text) parts.emplace_back(1, c);
    for (const auto& [a, b] : kMerges)
      for (size_t i = 0; i + 1 < parts.size();)
        if (parts[i] == a && parts[i + 1] == b) parts[i] += parts[i + 1], parts.erase(parts.begin() + long(i) + 1);
        else ++i;
    for (const auto& p : parts) ids.push_back(token_id(p));
    return Status::Ok();
  }
  Status decode(const int32_t* ids, size_t n, std::string& text) const override {
    for (size_t k = 0; k < n; ++k) text += ids[k] < 256 ? std::string(1, char(ids[k])) : kVocab[size_t(ids[k] - 256)];
    return Status::Ok();
  }
  int32_t token_id(std::string_view s) const override {
    for (size_t k = 0; k < std::size(kVocab); ++k)
      if (kVocab[k] == s) return int32_t(256 + k);
    return s.size() == 1 ? int32_t(static_cast<unsigned char>(s[0])) : -1;
  }
  int vocab_size() const override { return 256 + int(std::size(kVocab)); }
  std::string describe() const override { return "ranked BPE"; }

 private:
  static constexpr std::pair<const char*, const char*> kMerges[] = {{"c", "d"}, {"b", "c"}, {"a", "b"}};
  static constexpr const char* kVocab[] = {"cd", "bc", "ab"};
};

// The prompt "abc" encodes a|bc but the whole "abcd" ab|cd: "ab" holds only prompt bytes and is
// context; "cd" straddles and is trained. Before, every token after the prefixes' common part
// (none here) was trained, "ab" included.
TEST(SftExample, ATokenOfOnlyPromptBytesIsContextWhereBpeDivergesBeforeTheCompletion) {
  const RankedBpe tok;
  std::vector<int32_t> prefix, whole;
  ASSERT_TRUE(tok.encode("abc", prefix).ok());
  ASSERT_TRUE(tok.encode("abcd", whole).ok());
  ASSERT_EQ(prefix, (std::vector<int32_t>{'a', tok.token_id("bc")}));
  ASSERT_EQ(whole, (std::vector<int32_t>{tok.token_id("ab"), tok.token_id("cd")}));
  ExampleFormatOptions o;
  o.format = "prompt_completion";
  o.add_eos = false;
  auto f = make(tok, o);
  auto ex = f->format(R"({"prompt": "abc", "completion": "d"})");
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  EXPECT_EQ(ex->ids, whole);
  EXPECT_EQ(ex->loss, (std::vector<uint8_t>{0, 1}));
  auto later = f->format(R"({"prompt": "ab", "completion": "cd"})");  // ab|cd, the boundary between them
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(later->loss, (std::vector<uint8_t>{0, 1}));
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

// A plain-text document (a text file, a paragraph) is formatted as {"text": document} is, without
// the JSON: its limit is its own bytes. Through JSON, a document of quotes or control bytes just
// under the limit grew past it when escaped (up to 6x) and was refused as "the line is X bytes".
TEST(SftExample, ADocumentIsTheTextFormatWithoutItsJson) {
  ExampleFormatOptions o;
  o.eos_token = "</s>";
  o.max_line_bytes = 1 << 16;
  auto f = make(kTok, o);
  for (const std::string& text : {std::string("plain"), std::string("quotes \" and \\ back\\slashes"),
                                 std::string("ctrl \x01\t\n\x1f"), std::string("\xff\xfe raw bytes"),
                                 std::string("h\xc3\xa9llo\0nul", 11)}) {
    auto doc = f->format_document(text);
    auto line = f->format(Json::object({{"text", text}}).dump());
    ASSERT_TRUE(doc.ok() && line.ok()) << doc.status().to_string() << line.status().to_string();
    EXPECT_EQ(doc->ids, line->ids) << text;
    EXPECT_EQ(doc->loss, line->loss) << text;
  }
  const std::string quotes(o.max_line_bytes, '"');  // 2x escaped, 6x for control bytes
  EXPECT_TRUE(f->format_document(quotes).ok());
  EXPECT_TRUE(f->format_document(std::string(o.max_line_bytes, '\x01')).ok());
  auto over = f->format_document(quotes + "\"");
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("the document is 65537 bytes"), std::string::npos) << over.status().to_string();
  o.format = "prompt_completion";
  auto pc = make(kTok, o);
  auto refused = pc->format_document("a document");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("not of format prompt_completion"), std::string::npos)
      << refused.status().to_string();
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

namespace mt {
namespace {

TEST(SftExample, EosComesFromTokenizerConfigInModelDir) {
  const TestTokenizer tok({"<|im_end|>", "</s>"});
  for (const char* config : {R"({"eos_token": "<|im_end|>"})", R"({"eos_token": {"content": "<|im_end|>", "lstrip": false}})"}) {
    testing_util::TempDir d("mt-eos");
    std::ofstream(d / "tokenizer_config.json") << config;
    ExampleFormatOptions o;
    o.format = "text";
    o.model_dir = d.path;
    auto f = ExampleFormatter::create(o, tok);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    auto ex = (*f)->format(R"({"text": "a"})");
    ASSERT_TRUE(ex.ok());
    EXPECT_EQ(ex->ids.back(), tok.token_id("<|im_end|>")) << config;
    // eos_token, when given, wins over the file.
    o.eos_token = "</s>";
    auto g = ExampleFormatter::create(o, tok);
    ASSERT_TRUE(g.ok());
    EXPECT_EQ((*(*g)->format(R"({"text": "a"})")).ids.back(), tok.token_id("</s>"));
  }
  testing_util::TempDir d("mt-eos");
  std::ofstream(d / "tokenizer_config.json") << R"({"bos_token": "<s>"})";
  ExampleFormatOptions o;
  o.format = "prompt_completion";
  o.model_dir = d.path;
  auto f = ExampleFormatter::create(o, tok);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("no eos_token"), std::string::npos) << f.status().to_string();
}

// Lines mutated at random (bytes flipped, cut, repeated) are refused or formatted, never a crash;
// what is formatted is well formed. Run under ASan by the asan preset.
TEST(SftExample, MutatedLinesNeverCrash) {
  const std::string seeds[] = {
      R"({"text": "héllo wörld 🙂"})",
      R"({"prompt": "Q: x?\nA:", "completion": " y"})",
      R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u\u00e9"}, {"role": "assistant", "content": " a "}]})",
      R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "<think>\nr</think>\n\na", "reasoning_content": null}, {"role": "assistant", "content": "b", "reasoning_content": "\nc"}]})",
  };
  for (const char* name : {"llama3", "qwen2", "chatml", "mistral", "qwen3", "gemma", "gemma2", "phi4"}) {
    const TestTokenizer tok((*ChatTemplate::by_name(name))->special_tokens(), {"he", "\n\n", " a"});
    ExampleFormatOptions o;
    o.chat_template = name;
    o.eos_token = (*ChatTemplate::by_name(name))->end_of_turn();
    auto f = ExampleFormatter::create(o, tok);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    uint64_t state = 0x9e3779b97f4a7c15ull;
    const auto next = [&state] { return state = state * 6364136223846793005ull + 1442695040888963407ull, state >> 33; };
    size_t ok = 0;
    for (int i = 0; i < 3000; ++i) {
      std::string line = seeds[next() % std::size(seeds)];
      for (int m = 0, n = int(next() % 4) + 1; m < n && !line.empty(); ++m) {
        const size_t at = next() % line.size();
        switch (next() % 4) {
          case 0: line[at] = char(next()); break;
          case 1: line.resize(at); break;
          case 2: line.insert(at, line.substr(at, next() % 16)); break;
          default: line.insert(at, 1, "{}[]\",:\\u0"[next() % 11]); break;
        }
      }
      auto ex = (*f)->format(line);
      if (!ex.ok()) continue;
      ++ok;
      ASSERT_EQ(ex->ids.size(), ex->loss.size()) << line;
      for (int32_t id : ex->ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size()) << line;
    }
    EXPECT_GT(ok, 0u) << name;  // some mutations keep the line valid: the formatter still runs on them
  }
}

}  // namespace
}  // namespace mt
