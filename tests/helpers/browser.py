"""Headless Chromium for the HTML reports' tests: the browser, and a probe that lays
a page out and writes every way a table could hide a column into the page."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path


def chromium() -> str:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        from tests.conftest import missing_service

        missing_service("chromium is not installed (apt-get install chromium)")
    return browser


# Run in the page once it is laid out: every way a table could hide a column. The
# result is written into the page, which --dump-dom prints.
LAYOUT_PROBE = """<script>
(() => {
  const page = document.documentElement, width = page.clientWidth, problems = [];
  if (page.scrollWidth > page.clientWidth) problems.push(`the page scrolls sideways: ${page.scrollWidth} > ${width}`);
  const tables = [...document.querySelectorAll('table')];
  for (const table of tables) {
    const box = table.parentElement, right = box.getBoundingClientRect().right + 0.5;
    if (box.scrollWidth > box.clientWidth)
      problems.push(`${table.id}: its container scrolls (${box.scrollWidth} > ${box.clientWidth})`);
    for (const el of table.querySelectorAll('*')) {
      const name = `${table.id}: <${el.tagName}> ${el.textContent.slice(0, 30)}`;
      if (el.getBoundingClientRect().right > right) problems.push(`${name} ends past its container`);
      if (el.scrollWidth > el.clientWidth && el.clientWidth > 0) problems.push(`${name} overflows itself`);
    }
    for (const th of table.querySelectorAll('th')) {
      const r = th.getBoundingClientRect();
      if (r.left < 0 || r.right > width)
        problems.push(`${table.id}: header ${th.textContent} at ${r.left}..${r.right}, outside 0..${width}`);
    }
  }
  const out = document.createElement('pre');
  out.id = 'layout-probe';
  out.textContent = JSON.stringify({width, tables: tables.length, problems});
  document.body.appendChild(out);
})();
</script>"""




def layout_problems(page: Path, width: int, tmp: Path) -> dict:
    """The probe's findings for `page` laid out `width` pixels wide: {width, tables,
    problems}."""
    probed = tmp / f"probed-{page.stem}-{width}.html"
    probed.write_text(page.read_text().replace("</body>", LAYOUT_PROBE + "</body>"))
    proc = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", f"--window-size={width},1000",
                           "--dump-dom", probed.as_uri()], capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="layout-probe">(.*?)</pre>', proc.stdout, re.S)
    assert found, proc.stderr[-2000:]
    return json.loads(html.unescape(found.group(1)))
