// Small pieces shared by the run and suite reports: the page frame (styles and the script that
// records script errors and marks the page ready for a headless browser) and number formatting.
#pragma once

#include <string>

namespace fl::harness::html {

// A whole page: <head> with inline styles, <body> with `body` and the inline script.
std::string page(const std::string& title, const std::string& body);
// "1.25" style numbers for SVG coordinates and labels.
std::string num(double v, int decimals = 1);

}  // namespace fl::harness::html
