// Test support: a strict little XML reader for checking generated XML (JUnit) by parsing it
// back. It accepts the subset such files use — a declaration, elements, attributes in double or
// single quotes, text, the five named entities and numeric character references — and throws
// std::runtime_error on anything malformed: a mismatched or unclosed tag, a raw '<' or '&' in
// text, a duplicate attribute, a control character, trailing content.
#pragma once

#include <cctype>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace fl::test {

struct XmlElement {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::string text;  // character data directly inside, decoded
  std::vector<std::unique_ptr<XmlElement>> children;

  const XmlElement* child(const std::string& n) const {
    for (auto& c : children) {
      if (c->name == n) return c.get();
    }
    return nullptr;
  }
  std::vector<const XmlElement*> all(const std::string& n) const {
    std::vector<const XmlElement*> out;
    for (auto& c : children) {
      if (c->name == n) out.push_back(c.get());
    }
    return out;
  }
  std::string attr(const std::string& n) const {
    auto it = attrs.find(n);
    if (it == attrs.end()) throw std::runtime_error("<" + name + "> has no attribute " + n);
    return it->second;
  }
};

class XmlReader {
 public:
  explicit XmlReader(std::string s) : s_(std::move(s)) {}

  std::unique_ptr<XmlElement> parse() {
    skip_ws();
    if (s_.compare(i_, 5, "<?xml") == 0) {
      const auto end = s_.find("?>", i_);
      if (end == std::string::npos) fail("unterminated declaration");
      i_ = end + 2;
    }
    skip_ws();
    auto root = element();
    skip_ws();
    if (i_ != s_.size()) fail("content after the root element");
    return root;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("XML at offset " + std::to_string(i_) + ": " + what);
  }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r'))
      ++i_;
  }
  static bool name_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ||
           c == ':';
  }
  std::string name() {
    const size_t start = i_;
    while (i_ < s_.size() && name_char(s_[i_])) ++i_;
    if (start == i_) fail("expected a name");
    return s_.substr(start, i_ - start);
  }
  // Decodes text up to `stop` (exclusive); raw '<' and '&' not starting an entity are errors.
  std::string decode(char stop) {
    std::string out;
    while (i_ < s_.size() && s_[i_] != stop) {
      const char c = s_[i_];
      if (c == '<') fail("raw '<' in text or attribute");
      if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t' && c != '\r')
        fail("control character");
      if (c != '&') {
        out += c;
        ++i_;
        continue;
      }
      const auto semi = s_.find(';', i_);
      if (semi == std::string::npos || semi - i_ > 10) fail("unterminated entity");
      const std::string ent = s_.substr(i_ + 1, semi - i_ - 1);
      if (ent == "amp")
        out += '&';
      else if (ent == "lt")
        out += '<';
      else if (ent == "gt")
        out += '>';
      else if (ent == "quot")
        out += '"';
      else if (ent == "apos")
        out += '\'';
      else if (!ent.empty() && ent[0] == '#') {
        const long cp = ent.size() > 1 && ent[1] == 'x' ? std::stol(ent.substr(2), nullptr, 16)
                                                        : std::stol(ent.substr(1));
        if (cp < 0x20 && cp != 9 && cp != 10 && cp != 13) fail("reference to a control char");
        if (cp > 0x7f) fail("test reader: non-ASCII references unsupported");
        out += static_cast<char>(cp);
      } else {
        fail("unknown entity &" + ent + ";");
      }
      i_ = semi + 1;
    }
    return out;
  }
  std::unique_ptr<XmlElement> element() {
    if (i_ >= s_.size() || s_[i_] != '<') fail("expected '<'");
    ++i_;
    auto e = std::make_unique<XmlElement>();
    e->name = name();
    while (true) {
      skip_ws();
      if (i_ >= s_.size()) fail("unterminated start tag");
      if (s_.compare(i_, 2, "/>") == 0) {
        i_ += 2;
        return e;
      }
      if (s_[i_] == '>') {
        ++i_;
        break;
      }
      const std::string a = name();
      skip_ws();
      if (i_ >= s_.size() || s_[i_] != '=') fail("expected '=' after " + a);
      ++i_;
      skip_ws();
      const char q = i_ < s_.size() ? s_[i_] : '\0';
      if (q != '"' && q != '\'') fail("attribute value without quotes");
      ++i_;
      std::string v = decode(q);
      if (i_ >= s_.size()) fail("unterminated attribute");
      ++i_;
      if (!e->attrs.emplace(a, v).second) fail("duplicate attribute " + a);
    }
    while (true) {
      e->text += decode('<');
      if (i_ >= s_.size()) fail("unclosed <" + e->name + ">");
      if (s_.compare(i_, 2, "</") == 0) {
        i_ += 2;
        const std::string n = name();
        if (n != e->name) fail("</" + n + "> closes <" + e->name + ">");
        skip_ws();
        if (i_ >= s_.size() || s_[i_] != '>') fail("bad end tag");
        ++i_;
        return e;
      }
      e->children.push_back(element());
    }
  }
  std::string s_;
  size_t i_ = 0;
};

inline std::unique_ptr<XmlElement> parse_xml(const std::string& text) {
  return XmlReader(text).parse();
}

}  // namespace fl::test
