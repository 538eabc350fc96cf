#include "harness/report/html.hpp"

#include <fmt/format.h>

#include "harness/report/report.hpp"

namespace fl::harness {

namespace html {

namespace {

const char* kStyle = R"(
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1d2330;background:#fafbfc}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 8px}
.badge{display:inline-block;padding:2px 10px;border-radius:10px;color:#fff;font-weight:600}
.pass{background:#2e7d32}.fail{background:#c62828}.unknown{background:#757575}
.meta{color:#555}.evidence{font-family:ui-monospace,monospace;font-size:12px;background:#fff;
border:1px solid #ddd;padding:8px;white-space:pre-wrap;max-height:240px;overflow:auto}
svg{background:#fff;border:1px solid #ddd}svg text{font-size:11px;fill:#333}
.lane{fill:#f3f5f8}.lane.alt{fill:#e9edf2}.step{stroke:#4a78c2;stroke-width:1}
.stall{fill:#f0a040;opacity:.75}.stall.timed-out,.stall.failed{fill:#d84315}
.fault-window{fill:#e53935;opacity:.14}.fault-fired{fill:#b71c1c}
.diagnosis{fill:#6a1b9a}.action{stroke:#00838f;stroke-width:2;stroke-dasharray:5 3}
.exit{stroke:#000;stroke-width:2}.exit.ok{stroke:#2e7d32}
.series{fill:none;stroke-width:1.5}.axis{stroke:#999}.grid{stroke:#eee}
table{border-collapse:collapse;background:#fff}td,th{border:1px solid #ddd;padding:4px 8px;
text-align:left;font-size:13px}th{background:#f0f2f5}
.cell{width:118px;height:58px;vertical-align:top;font-size:12px}
.cell.ok{background:#c8e6c9}.cell.fixfail{background:#ffe0b2}.cell.norepro{background:#ffcdd2}
.cell.none{background:#eceff1;color:#888}.legend .cell{display:inline-block;width:auto;height:auto}.legend span{display:inline-block;padding:2px 8px;margin-right:6px}
#detail{font-family:ui-monospace,monospace;font-size:12px;min-height:1.4em;margin-top:6px}
.hl{stroke:#000;stroke-width:2}
)";

// Records script errors in the page (a headless browser reads them from the DOM), shows a
// marker's details on click and marks the page ready.
const char* kScript = R"(
(function(){
  var errors=[];
  window.addEventListener('error',function(e){errors.push(String(e.message));
    document.body.dataset.scriptErrors=String(errors.length);
    document.body.dataset.errorText=errors.join(' | ');});
  document.body.dataset.scriptErrors='0';
  var detail=document.getElementById('detail');
  document.querySelectorAll('svg [data-info]').forEach(function(el){
    el.style.cursor='pointer';
    el.addEventListener('click',function(){
      document.querySelectorAll('.hl').forEach(function(h){h.classList.remove('hl');});
      el.classList.add('hl'); if(detail){detail.textContent=el.getAttribute('data-info');}
    });
  });
  var lanes=document.querySelectorAll('g.lane-row').length;
  var marks=document.querySelectorAll('svg [data-info]').length;
  var s=document.getElementById('status');
  if(s){s.textContent=lanes+' lanes, '+marks+' markers';}
  document.body.dataset.ready='1';
})();
)";

}  // namespace

std::string page(const std::string& title, const std::string& body) {
  return fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<title>{}</title><style>{}</style></head>\n<body>\n{}\n<script>{}</script>\n</body></"
      "html>\n",
      html_escape(title), kStyle, body, kScript);
}

std::string num(double v, int decimals) {
  return fmt::format("{:.{}f}", v, decimals);
}

}  // namespace html
}  // namespace fl::harness
