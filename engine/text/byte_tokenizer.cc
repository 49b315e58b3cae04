// The byte-level tokenizer: token = byte, as data.source text has always read its files.
#include "engine/text/tokenizer.h"

namespace mt {

namespace {

class ByteTokenizer final : public Tokenizer {
 public:
  Status encode(std::string_view text, std::vector<int32_t>& ids) const override {
    for (const char c : text) ids.push_back(int32_t(static_cast<unsigned char>(c)));
    return Status::Ok();
  }
  Status decode(const int32_t* ids, size_t n, std::string& text) const override {
    for (size_t i = 0; i < n; ++i) {
      if (ids[i] < 0 || ids[i] > 255)
        return invalid_argument("token id " + std::to_string(ids[i]) + " at index " + std::to_string(i) +
                                " is outside the byte tokenizer's [0, 256)");
      text.push_back(static_cast<char>(ids[i]));
    }
    return Status::Ok();
  }
  int32_t token_id(std::string_view content) const override {
    return content.size() == 1 ? int32_t(static_cast<unsigned char>(content[0])) : -1;
  }
  int vocab_size() const override { return 256; }
  std::string describe() const override { return "byte-level (token = byte), 256 tokens"; }
};

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

}  // namespace mt
