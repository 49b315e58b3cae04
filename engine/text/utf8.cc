#include "engine/text/utf8.h"

#include <array>

namespace mt::utf8 {

namespace {

// Length of the valid sequence at s[i], or 0 when it is not one (Unicode Table 3-7).
size_t valid_seq(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  const size_t left = s.size() - i;
  auto cont = [&](size_t k) { return k < left && (b(i + k) & 0xC0) == 0x80; };
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (left < 2) return 0;
    const unsigned char c1 = b(i + 1);
    const bool ok1 = c == 0xE0 ? (c1 >= 0xA0 && c1 <= 0xBF) : c == 0xED ? (c1 >= 0x80 && c1 <= 0x9F) : (c1 & 0xC0) == 0x80;
    return ok1 && cont(2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (left < 2) return 0;
    const unsigned char c1 = b(i + 1);
    const bool ok1 = c == 0xF0 ? (c1 >= 0x90 && c1 <= 0xBF) : c == 0xF4 ? (c1 >= 0x80 && c1 <= 0x8F) : (c1 & 0xC0) == 0x80;
    return ok1 && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

// How many bytes of the invalid sequence at s[i] form one maximal subpart (at least 1).
size_t invalid_subpart(std::string_view s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  const size_t want = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 1;
  size_t n = 1;
  while (n < want && i + n < s.size()) {
    const unsigned char cn = static_cast<unsigned char>(s[i + n]);
    bool ok = (cn & 0xC0) == 0x80;
    if (n == 1 && ok) {
      if (c == 0xE0) ok = cn >= 0xA0;
      else if (c == 0xED) ok = cn <= 0x9F;
      else if (c == 0xF0) ok = cn >= 0x90;
      else if (c == 0xF4) ok = cn <= 0x8F;
    }
    if (!ok) break;
    ++n;
  }
  return n;
}

struct ByteTable {
  std::array<std::string, 256> chars;
  std::array<int16_t, 324> bytes;  // code points below 324 cover the whole table
  ByteTable() {
    bytes.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const uint32_t cp = printable ? uint32_t(b) : uint32_t(256 + extra++);
      append(chars[size_t(b)], cp);
      bytes[cp] = int16_t(b);
    }
  }
};

const ByteTable& byte_table() {
  static const ByteTable table;
  return table;
}

}  // namespace

size_t valid_prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = valid_seq(s, i);
    if (n == 0) return i;
    i += n;
  }
  return s.size();
}

uint32_t decode_at(std::string_view s, size_t i, int* len) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  const int n = seq_len(c);
  *len = n;
  if (n == 1) return c;
  uint32_t cp = c & (0x7F >> n);
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + size_t(k)]) & 0x3F);
  return cp;
}

void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

bool is_whitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

void append_replaced(std::string& out, std::string_view in, std::string_view from, std::string_view to) {
  for (size_t at = 0;;) {
    const size_t hit = in.find(from, at);
    out.append(in.substr(at, hit == std::string_view::npos ? std::string_view::npos : hit - at));
    if (hit == std::string_view::npos) return;
    out.append(to);
    at = hit + from.size();
  }
}

void append_lossy(std::string& out, std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    const size_t n = valid_seq(bytes, i);
    if (n) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      out.append("\xEF\xBF\xBD");
      i += invalid_subpart(bytes, i);
    }
  }
}

const std::string& byte_to_char(uint8_t b) { return byte_table().chars[b]; }

int char_to_byte(uint32_t cp) { return cp < 324 ? byte_table().bytes[cp] : -1; }

bool append_byte_level_bytes(std::string& out, std::string_view token) {
  const size_t mark = out.size();
  for (size_t i = 0; i < token.size();) {
    int len = 0;
    const int b = char_to_byte(decode_at(token, i, &len));
    if (b < 0) {
      out.resize(mark);
      return false;
    }
    out.push_back(char(b));
    i += size_t(len);
  }
  return true;
}

}  // namespace mt::utf8
