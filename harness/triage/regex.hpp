// The regex type of triage's tables: std::basic_regex with character traits that answer from
// tables made once. libstdc++'s std::regex_traits<char> asks the locale for its ctype facet (a
// dynamic_cast) on every call, and its executor looks the class name "w" up again (string
// compares) for each side of every `\b` it tests: on a 16 MiB training log those two were 33% of
// triage's time, more than the matching itself (perf, 2026-12-01). These traits keep the word
// class's and the case-folding tables from the last imbue(); everything else is the base's.
// With them a 50 MiB training log took 3.0 s instead of 4.9 s end to end (the scan reads its last
// 16 MiB); compiling triage at -O2 instead of the harness's -O1 saved another 0.2 s, not kept.
#pragma once

#include <array>
#include <iterator>
#include <regex>
#include <string>

namespace fl::triage {

class RegexTraits : public std::regex_traits<char> {
 public:
  using Base = std::regex_traits<char>;

  RegexTraits() { refresh(); }

  locale_type imbue(locale_type loc) {
    const locale_type old = Base::imbue(loc);
    refresh();
    return old;
  }

  // The executor asks for "w" at each `\b`: the class found once.
  template <typename It>
  char_class_type lookup_classname(It first, It last, bool icase = false) const {
    if (!icase && first != last && *first == 'w' && std::next(first) == last) return word_;
    return Base::lookup_classname(first, last, icase);
  }

  bool isctype(char c, char_class_type f) const {
    if (f == word_) return is_word_[static_cast<unsigned char>(c)];
    return Base::isctype(c, f);
  }

  char translate_nocase(char c) const { return lower_[static_cast<unsigned char>(c)]; }

 private:
  void refresh() {
    const char w = 'w';
    word_ = Base::lookup_classname(&w, &w + 1);
    for (int i = 0; i < 256; ++i) {
      const char c = static_cast<char>(i);
      is_word_[i] = Base::isctype(c, word_);
      lower_[i] = Base::translate_nocase(c);
    }
  }

  char_class_type word_{};
  std::array<bool, 256> is_word_{};
  std::array<char, 256> lower_{};
};

using Regex = std::basic_regex<char, RegexTraits>;

// Compiling and searching with a Regex, compiled once, in regex.cpp. A caller compiled at -O0 (a
// test) that used the templates directly would emit its own copy of the regex compiler and
// executor, and the linker keeps one copy for the whole program: a triage test binary then ran
// every table regex at -O0 (its 50 MiB log took 13.5 s instead of 3). Triage's code and its tests
// call these instead. Throws std::regex_error as the constructor does.
Regex make_regex(const std::string& pattern, std::regex_constants::syntax_option_type flags);
bool regex_find(const std::string& text, const Regex& re);
bool regex_find(const std::string& text, std::smatch& m, const Regex& re);

}  // namespace fl::triage
