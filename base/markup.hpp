// One escaper for text that goes into markup: the HTML reports (harness/report/) and the JUnit
// XML of a suite (harness/suite/junit.cpp). The five markup characters become references (&amp;
// &lt; &gt; &quot; &#39;, which HTML and XML 1.0 both read); characters XML forbids (C0 controls
// but tab, newline and carriage return) and bytes that are not well-formed UTF-8 (base/utf8.hpp)
// become U+FFFD; a carriage return becomes &#13;, since parsers fold a raw one into a newline.
// In an XML attribute a raw tab or newline would be normalised to a space, so there they become
// &#9; and &#10;; in XML element text and anywhere in HTML they stay as written.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/utf8.hpp"

namespace fl {

enum class Markup : uint8_t { kHtml, kXmlText, kXmlAttribute };

inline std::string escape_markup(std::string_view s, Markup where) {
  constexpr const char* kReplacement = "\xEF\xBF\xBD";
  const bool attribute = where == Markup::kXmlAttribute;
  std::string o;
  o.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_length(s, i);
    if (n != 1) {  // a multi-byte character whole, or U+FFFD for a bad byte
      o += n == 0 ? std::string_view(kReplacement) : s.substr(i, n);
      i += n == 0 ? 1 : n;
      continue;
    }
    const char c = s[i++];
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      case '\'':
        o += "&#39;";
        break;
      case '\t':
        o += attribute ? "&#9;" : "\t";
        break;
      case '\n':
        o += attribute ? "&#10;" : "\n";
        break;
      case '\r':
        o += "&#13;";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          o += kReplacement;
        } else {
          o += c;
        }
    }
  }
  return o;
}

}  // namespace fl
