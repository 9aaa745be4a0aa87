#!/usr/bin/python3
"""Drives the flexssd dashboard in headless Chromium (Debian's chromium and
chromium-driver, python3-selenium) and prints what the page shows as JSON.

Used by flexssd/tests/dashboard.rs (which compares it with the API's JSON),
scripts/dashboard-screenshots.sh and scripts/bench-dashboard.sh.

  dashboard_browser.py --url http://127.0.0.1:8740/dashboard [--token-file F]
      [--vssd NAME] [--wear] [--updates N] [--screenshot out.png] [--timeout S]

Output: {"rows": {row kind: {key: {field: visible text}}} (a row with a
progress bar adds _progress_value, _progress_max and _progress_text), "text": the
page's visible text, "html": the fragment, "updates", "timings": [...],
"first_ms", "sla": {...}, "flash": {...}, "login_shown": bool}.
The token is typed into the page's login form, as a person would; it is
read from a file so that it never appears in a process listing.
"""
import argparse
import json
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

EXTRACT = r"""
const out = {rows: {}, sla: null, flash: {}};
for (const tr of document.querySelectorAll('#main tr[data-row]')) {
  const kind = tr.dataset.row, key = tr.dataset.key;
  const cells = {};
  if (tr.dataset.at !== undefined) { cells._at = tr.dataset.at; }
  for (const td of tr.querySelectorAll('[data-f]')) { cells[td.dataset.f] = td.textContent.trim(); }
  const bar = tr.querySelector('progress');
  if (bar) {
    cells._progress_value = bar.getAttribute('value');
    cells._progress_max = bar.getAttribute('max');
    cells._progress_text = bar.parentElement.textContent.trim();
  }
  (out.rows[kind] = out.rows[kind] || {})[key] = cells;
}
for (const el of document.querySelectorAll('#main [data-f]')) {
  if (!el.closest('tr[data-row]')) { out[el.dataset.f] = el.textContent.trim(); }
}
const svg = document.querySelector('#detail svg.sla');
if (svg) {
  const t = svg.querySelector('polyline.tenant-curve');
  out.sla = {
    vssd: document.querySelector('#detail').dataset.vssd,
    tenant_curve: t ? t.dataset.points : null,
    points: svg.querySelectorAll('circle.op').length,
    outside: svg.querySelectorAll('circle.op.outside').length,
    first_at: document.querySelector('#detail [data-f="operating_points"]').dataset.firstAt,
    last_at: document.querySelector('#detail [data-f="operating_points"]').dataset.lastAt,
  };
}
for (const m of document.querySelectorAll('#main svg.flashmap')) {
  const wear = m.querySelector('.wear');
  out.flash[m.dataset.device] = {
    owner_rects: m.querySelectorAll('g.owners rect').length,
    max_erase: wear ? wear.dataset.maxErase : null,
    wear_visible: wear ? getComputedStyle(wear).display !== 'none' : false,
  };
}
out.text = document.getElementById('main').innerText;
out.html = document.getElementById('main').innerHTML;
out.status = document.getElementById('status').textContent;
out.updates = parseInt(document.body.dataset.updates || '0', 10);
out.first_ms = parseFloat(document.body.dataset.firstMs || 'NaN');
out.fetch_ms = parseFloat(document.body.dataset.fetchMs || 'NaN');
out.render_ms = parseFloat(document.body.dataset.renderMs || 'NaN');
out.bytes = parseInt(document.body.dataset.bytes || '0', 10);
return out;
"""


def updates(d):
    return int(d.execute_script("return document.body.dataset.updates || '0'"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--token-file")
    ap.add_argument("--vssd")
    ap.add_argument("--wear", action="store_true")
    ap.add_argument("--updates", type=int, default=0,
                    help="wait for this many more live updates before reading")
    ap.add_argument("--watch",
                    help="ROW:KEY:FIELD: after the first read, print READY to stderr and "
                         "wait until that cell changes (the caller changes the host meanwhile)")
    ap.add_argument("--screenshot")
    ap.add_argument("--width", type=int, default=1500)
    ap.add_argument("--timeout", type=float, default=60)
    a = ap.parse_args()

    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--disable-gpu", f"--window-size={a.width},1200", "--hide-scrollbars"):
        opts.add_argument(arg)
    d = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    try:
        wait = WebDriverWait(d, a.timeout)
        d.get(a.url)
        login_shown = False
        if a.token_file:
            token = open(a.token_file).read().strip()
            wait.until(lambda d: d.find_element(By.ID, "login").is_displayed())
            login_shown = True
            d.find_element(By.ID, "token").send_keys(token)
            d.find_element(By.CSS_SELECTOR, "#login button[type=submit]").click()
        wait.until(lambda d: updates(d) >= 1)
        if a.vssd:
            sel = f'tr[data-row="vssd"][data-key="{a.vssd}"]'
            wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, sel))
            d.find_element(By.CSS_SELECTOR, sel).click()
            wait.until(lambda d: d.execute_script(
                "const e = document.getElementById('detail');"
                "return e && e.dataset.vssd === arguments[0];", a.vssd))
        if a.wear:
            d.find_element(By.ID, "wear-toggle").click()
        timings = []
        if a.updates:
            start = updates(d)
            seen = start
            deadline = time.time() + a.timeout
            while seen < start + a.updates:
                if time.time() > deadline:
                    raise SystemExit(f"only {seen - start} of {a.updates} live updates in {a.timeout} s")
                time.sleep(0.05)
                n = updates(d)
                if n != seen:
                    seen = n
                    timings.append({
                        "fetch_ms": float(d.execute_script("return document.body.dataset.fetchMs")),
                        "render_ms": float(d.execute_script("return document.body.dataset.renderMs")),
                    })
        watch_before = None
        if a.watch:
            row, key, field = a.watch.split(":", 2)
            cell = (f'#main tr[data-row="{row}"][data-key="{key}"] [data-f="{field}"]')
            text = lambda d: d.execute_script(
                "const e = document.querySelector(arguments[0]); return e ? e.textContent.trim() : null;",
                cell)
            watch_before = text(d)
            print("READY", file=sys.stderr, flush=True)
            wait.until(lambda d: text(d) not in (None, watch_before))
            # One more update, so that every section shows the same moment.
            n = updates(d)
            wait.until(lambda d: updates(d) > n)
        out = d.execute_script(EXTRACT)
        out["watch_before"] = watch_before
        out["timings"] = timings
        out["login_shown"] = login_shown
        if a.screenshot:
            if a.wear:
                # The wear layer covers the owners: keep a picture of each.
                maps = d.find_elements(By.CSS_SELECTOR, "#main .mapwrap")
                if maps:
                    maps[0].screenshot(a.screenshot.replace(".png", "-wear.png"))
                d.find_element(By.ID, "wear-toggle").click()
            h = d.execute_script("return document.body.scrollHeight")
            d.set_window_size(a.width, min(max(h + 160, 600), 4000))
            time.sleep(0.3)
            d.save_screenshot(a.screenshot)
        json.dump(out, sys.stdout)
    finally:
        d.quit()


if __name__ == "__main__":
    main()
