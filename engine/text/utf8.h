// UTF-8 helpers for the tokenizers: validation, code points, Unicode White_Space, the lossy
// conversion Rust's String::from_utf8_lossy does (Hugging Face decoders end with it) and the
// GPT-2 byte <-> character table of the byte-level pre-tokenizer and decoder.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mt::utf8 {

// The offset of the first byte that does not start a valid UTF-8 sequence (overlong forms,
// surrogates and code points above U+10FFFF are invalid); s.size() when all of s is valid.
size_t valid_prefix(std::string_view s);

// Length of the sequence a valid lead byte starts (1..4).
inline int seq_len(unsigned char lead) { return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4; }

// The code point at s[i] of valid UTF-8; *len receives its byte length.
uint32_t decode_at(std::string_view s, size_t i, int* len);
void append(std::string& out, uint32_t cp);

// Rust's char::is_whitespace: the Unicode White_Space property.
bool is_whitespace(uint32_t cp);

// Appends `bytes` with every maximal invalid subsequence replaced by U+FFFD (Rust from_utf8_lossy).
void append_lossy(std::string& out, std::string_view bytes);

// Appends `in` with every occurrence of `from` (not empty) replaced by `to`, left to right
// (the Replace normalizer and decoder with a string pattern).
void append_replaced(std::string& out, std::string_view in, std::string_view from, std::string_view to);

// GPT-2's bytes_to_unicode: the character (as UTF-8) that stands for byte b in byte-level vocabularies.
const std::string& byte_to_char(uint8_t b);
// The byte a byte-level character stands for; -1 when cp is not one of the 256.
int char_to_byte(uint32_t cp);
// Appends the bytes a byte-level token (valid UTF-8) stands for; false, with `out` as it was, when
// one of its characters is outside the byte table.
bool append_byte_level_bytes(std::string& out, std::string_view token);

}  // namespace mt::utf8
