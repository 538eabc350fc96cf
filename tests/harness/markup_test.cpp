// The one markup escaper (base/markup.hpp) that the HTML reports and the JUnit XML share: the
// five markup characters, control characters, carriage returns and bytes that are not UTF-8, in
// each place, and a JUnit file with all of them that an XML reader takes back to the text.
#include <gtest/gtest.h>

#include "base/markup.hpp"
#include "harness/report/report.hpp"
#include "harness/suite/suite.hpp"
#include "tests/support/xml.hpp"

namespace fl::harness {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Markup, TheFiveMarkupCharactersBecomeReferencesInEveryPlace) {
  for (Markup m : {Markup::kHtml, Markup::kXmlText, Markup::kXmlAttribute}) {
    EXPECT_EQ(escape_markup("a&b<c>d\"e'f", m), "a&amp;b&lt;c&gt;d&quot;e&#39;f");
    EXPECT_EQ(escape_markup("&amp;", m), "&amp;amp;");  // already escaped text is text
  }
  EXPECT_EQ(html_escape("<a href=\"x\">Tom's & Jerry's</a>"),
            "&lt;a href=&quot;x&quot;&gt;Tom&#39;s &amp; Jerry&#39;s&lt;/a&gt;");
}

TEST(Markup, ControlCharactersAndBadBytesBecomeReplacementsTabsAndNewlinesFollowThePlace) {
  const char raw[] = "nul\x00 bell\x07 esc\x1b del\x7f cr\r tab\t nl\n";
  const std::string s(raw, sizeof(raw) - 1);
  EXPECT_EQ(escape_markup(s, Markup::kXmlText),
            "nul" + kFffd + " bell" + kFffd + " esc" + kFffd + " del\x7f cr&#13; tab\t nl\n");
  EXPECT_EQ(escape_markup(s, Markup::kXmlAttribute),
            "nul" + kFffd + " bell" + kFffd + " esc" + kFffd + " del\x7f cr&#13; tab&#9; nl&#10;");
  EXPECT_EQ(escape_markup(s, Markup::kHtml), escape_markup(s, Markup::kXmlText));
  // Well-formed UTF-8 passes whole; a stray, truncated or overlong byte is one U+FFFD each.
  EXPECT_EQ(escape_markup("caf\xC3\xA9 \xE2\x9C\x93 \xF0\x9F\x94\xA5", Markup::kXmlText),
            "caf\xC3\xA9 \xE2\x9C\x93 \xF0\x9F\x94\xA5");
  EXPECT_EQ(escape_markup("a\xFF"
                          "b\xC3",
                          Markup::kXmlAttribute),
            "a" + kFffd + "b" + kFffd);
  EXPECT_EQ(escape_markup("\xC0\xAF", Markup::kXmlText), kFffd + kFffd);
}

TEST(Markup, AJUnitFileWithEveryKindOfCharacterReadsBackAsTheText) {
  SuiteResult r;
  r.name = "q<&>\"'";
  SuiteCase c;
  c.name = "case";
  c.seed = 7;
  c.outcome = "fail";
  c.explanation = std::string("<tag attr=\"v\"> & 'q'\x01\x1f tab\t nl\n cr\r \xFF end");
  r.cases.push_back(c);
  const std::string xml = suite_junit(r);
  std::unique_ptr<test::XmlElement> root;
  ASSERT_NO_THROW(root = test::parse_xml(xml)) << xml;
  EXPECT_EQ(root->attr("name"), "q<&>\"'");
  const auto* failure = root->child("testsuite")->child("testcase")->child("failure");
  ASSERT_NE(failure, nullptr);
  const std::string readable =
      "<tag attr=\"v\"> & 'q'" + kFffd + kFffd + " tab\t nl\n cr\r " + kFffd + " end";
  EXPECT_EQ(failure->attr("message"), "fail: " + readable);  // tab and newline kept as refs
  EXPECT_EQ(failure->text, readable);
}

}  // namespace
}  // namespace fl::harness
