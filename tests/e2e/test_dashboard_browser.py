"""The dashboard as a person uses it: real headless Chromium against a real gunicorn.

Sign in, create a key and see it once, use it from an HTTP client, see its usage appear, rotate it,
revoke it and see it refused, run a forecast in the playground and find the chart drawn, sign out and
be refused. Screenshots (1280 px wide; one check runs at 390 px) land in a temporary folder, so a test run
leaves the checkout as it found it; `make screenshots` writes them to docs/screenshots/ instead.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
from selenium.common.exceptions import WebDriverException

from tests.support import ROOT, JobWorker, Server, bearer, cli_in_process, free_port, missing_service, wait_for

pytestmark = pytest.mark.slow



def screenshot_dir() -> Path:
    """SCREENSHOTS_DIR (relative to the repository root when not absolute), as `make screenshots` sets it to
    refresh docs/screenshots/; otherwise a temporary folder."""
    configured = os.environ.get("SCREENSHOTS_DIR")
    if configured:
        return ROOT / configured if not Path(configured).is_absolute() else Path(configured)
    return Path(tempfile.gettempdir()) / "forecast-dashboard-screenshots"


SCREENSHOTS = screenshot_dir()
PLAIN_KEY = re.compile(r"ak_[0-9a-f]{64}")
WIDE, NARROW = 1280, 390


def chromium_paths() -> tuple[str, str]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        missing_service("Chromium is not installed (apt-get install -y chromium chromium-driver)")
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing_service("selenium is not installed (pip install selenium)")
    return str(browser), str(driver)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    environment = {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'dashboard.sqlite3'}",
        "DATA_DIR": str(tmp_path),
        "FORECAST_WORKERS": "1",
        "USAGE_FLUSH_SECONDS": "1",
        "KEY_CACHE_SECONDS": "1",
        "LOG_LEVEL": "INFO",
    }
    cli_in_process("db", "upgrade", env=environment)
    return environment


@pytest.fixture
def server(env: dict[str, str], tmp_path: Path) -> Iterator[Server]:
    running = Server(env, log_path=tmp_path / "gunicorn.log")
    running.wait_ready()
    yield running
    running.stop()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    binary, driver_path = chromium_paths()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'chromium-profile'}",
                 f"--window-size={WIDE},900"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path, log_output=str(tmp_path / "chromedriver.log")),
                              options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def make_key(env: dict[str, str], permissions: str, *args: str) -> dict:
    return json.loads(cli_in_process("keys", "create", "--permissions", permissions, *args, "--json", env=env).stdout)


class Page:
    """The handful of actions a person takes, over selenium."""

    def __init__(self, driver: Any, base: str) -> None:
        from selenium.webdriver.common.by import By

        self.driver = driver
        self.base = base
        self.by = By

    def open(self, path: str) -> None:
        self.driver.get(self.base + path)

    def find(self, css: str) -> Any:
        return self.driver.find_element(self.by.CSS_SELECTOR, css)

    def all(self, css: str) -> list[Any]:
        return self.driver.find_elements(self.by.CSS_SELECTOR, css)

    def fill(self, css: str, text: str) -> None:
        element = self.find(css)
        element.clear()
        element.send_keys(text)

    def click(self, css: str) -> None:
        self.find(css).click()

    def submit(self, css: str) -> None:
        """Clicks something that loads a new page, and waits until the new page has loaded."""
        from selenium.webdriver.support import expected_conditions
        from selenium.webdriver.support.ui import WebDriverWait

        old = self.find("html")
        self.find(css).click()
        still_current = expected_conditions.staleness_of(old)

        def replaced(driver: Any) -> bool:
            try:
                return bool(still_current(driver))
            except WebDriverException as exc:
                # Chromium answers this, not a stale-element error, when asked about a node of the page
                # being replaced while the new one loads: the old page is gone either way.
                if "does not belong to the document" in str(exc):
                    return True
                raise

        WebDriverWait(self.driver, 30).until(replaced)
        WebDriverWait(self.driver, 30).until(lambda d: d.execute_script("return document.readyState") == "complete")

    def text(self) -> str:
        return self.find("body").text

    def path(self) -> str:
        return self.driver.current_url[len(self.base):]

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def screenshot(self, name: str, width: int = WIDE) -> None:
        """The whole page at ``width`` px, as <SCREENSHOTS>/<name>.png."""
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        self.driver.set_window_size(width, 900)
        height = min(int(self.js("return document.documentElement.scrollHeight")), 4000)
        self.driver.set_window_size(width, max(height, 600))
        time.sleep(0.3)  # charts follow the resize
        self.driver.save_screenshot(str(SCREENSHOTS / f"{name}.png"))
        self.driver.set_window_size(width, 900)

    def console_errors(self) -> list[str]:
        return [entry["message"] for entry in self.driver.get_log("browser") if entry["level"] == "SEVERE"]


def sign_in(page: Page, key: str) -> None:
    page.open("/dashboard/sign-in")
    page.fill("#api_key", key)
    page.submit("form button[type=submit]")


# What a reader would otherwise scroll sideways for: the page wider than the window, or <main>, or any table's
# container (a .table-wrap scrolls, a card clips) narrower than its table.
OVERFLOW = """
var doc = document.documentElement, main = document.querySelector('main');
var clipped = Array.from(main.querySelectorAll('table')).map(function (table) {
  var box = table.parentElement;
  return box.scrollWidth > box.clientWidth ? table.className + ': ' + box.scrollWidth + ' > ' + box.clientWidth : null;
}).filter(Boolean);
return {page: doc.scrollWidth, window: window.innerWidth, client: doc.clientWidth, main: main.scrollWidth,
        main_client: main.clientWidth, clipped: clipped};
"""


def assert_fits(page: Page, path: str | None, width: int, shot: str | None = None, *, reload: bool = True) -> None:
    """The page at ``path`` (None: the page already open, reloaded at the width unless ``reload`` is false),
    ``width`` px wide, has nothing to scroll sideways; ``shot`` names its screenshot."""
    page.driver.set_window_size(width, 900)
    if path is None:
        if reload:
            page.driver.refresh()
    else:
        page.open(path)
    time.sleep(0.3)  # charts follow the resize
    measured = page.js(OVERFLOW)
    where = f"{path or page.path()} at {width} px"
    assert measured["page"] <= min(measured["window"], measured["client"]), (where, measured)
    assert measured["main"] <= measured["main_client"] and not measured["clipped"], (where, measured)
    if shot:
        page.screenshot(shot, width=width)
    page.driver.set_window_size(WIDE, 900)


def test_a_person_manages_keys_and_forecasts_in_the_dashboard(
    server: Server, env: dict[str, str], browser: Any
) -> None:
    page = Page(browser, server.url)
    admin = make_key(env, "read,write,admin", "--name", "operations")
    reader = make_key(env, "read", "--name", "reporting")

    # A key without admin cannot sign in, and is told why.
    page.open("/dashboard/")
    assert page.path().startswith("/dashboard/sign-in")
    page.screenshot("sign-in")
    sign_in(page, reader["key"])
    assert "needs the admin permission" in page.find("#api_key-error").text
    assert page.find("#api_key").get_attribute("aria-invalid") == "true"

    sign_in(page, admin["key"])
    assert page.path() == "/dashboard/keys"
    cookie = browser.get_cookie("dashboard_session")
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict" and cookie["secure"] is False
    assert admin["key"] not in json.dumps(browser.get_cookies())  # the key was exchanged, never stored
    rows = {row.get_attribute("data-key-id") for row in page.all("tr[data-key-id]")}
    assert {admin["id"], reader["id"]} <= rows

    # A form that asks for too much is answered next to the field.
    page.fill("#create-per_minute", "100000")
    page.submit("#create-key-form button[type=submit]")
    assert "than its creator (200)" in page.find("#create-per_minute-error").text

    # Create a key: shown once, with a copy button and a warning.
    page.fill("#name", "e2e client")
    page.fill("#create-per_minute", "30")
    page.submit("#create-key-form button[type=submit]")
    shown = page.find("#new-key-value").get_attribute("value")
    assert PLAIN_KEY.fullmatch(shown)
    new_id = page.find("#new-key-value").get_attribute("data-new-key-id")
    assert "shown only this once" in page.text()
    page.click("button.copy")
    wait_for(lambda: page.find(".copy-status").text, message="the copy button's answer")
    page.js("document.getElementById('new-key-value').value = 'ak_' + '•'.repeat(20);")  # no key in the docs
    page.screenshot("key-created")
    page.open("/dashboard/keys")
    assert shown not in browser.page_source
    page.screenshot("keys")

    # Use it from an HTTP client; its usage appears on its page.
    for _ in range(3):
        assert requests.get(server.url + "/verify", headers=bearer(shown), timeout=10).status_code == 200
    assert requests.get(server.url + "/nowhere", headers=bearer(shown), timeout=10).status_code == 404

    def usage_shown() -> bool:
        page.open(f"/dashboard/keys/{new_id}")
        return page.find("#usage-count").text == "4"

    wait_for(usage_shown, timeout=20, message="the usage count to reach 4")
    caption = page.find("#usage-day figcaption").text
    assert "3 2xx, 1 4xx, 0 429, 0 5xx" in caption
    assert len(page.all("#usage-day canvas")) == 1 and len(page.all("#usage-week canvas")) == 1
    assert page.js("return document.querySelector('#usage-day .chart-area').uplot.data[0].length") == 24
    assert page.js("return document.querySelector('#usage-week .chart-area').uplot.data[0].length") == 168
    minute = page.find("#window-minute")
    assert minute.get_attribute("max") == "30" and minute.get_attribute("value") == "1"  # /verify is not counted
    page.screenshot("key-usage")

    # Rotate with no grace: the old key is refused at once, the replacement works.
    page.click("#rotate-key-form input[value='0']")
    page.submit("#rotate-key-form button[type=submit]")
    rotated = page.find("#new-key-value").get_attribute("value")
    rotated_id = page.find("#new-key-value").get_attribute("data-new-key-id")
    assert PLAIN_KEY.fullmatch(rotated) and rotated != shown
    assert "no longer works" in page.text()
    refused = wait_for(
        lambda: requests.get(server.url + "/verify", headers=bearer(shown), timeout=10).status_code == 401,
        timeout=10, message="the rotated-out key to be refused",
    )
    assert refused
    assert requests.get(server.url + "/verify", headers=bearer(rotated), timeout=10).status_code == 200
    # In the list, the rotated-out key is marked as such, and the table fits a 1,280-pixel window.
    page.open("/dashboard/keys")
    assert page.find(f"tr[data-key-id='{new_id}'] .badge.rotated").text == "rotated"
    assert page.all(f"tr[data-key-id='{rotated_id}'] .badge.rotated") == []
    assert page.js("var w = document.querySelector('.table-wrap'); return w.scrollWidth <= w.clientWidth"), \
        "the keys table scrolls sideways at 1,280 px"

    # Revoke, with a confirmation step; then the key is refused.
    page.open(f"/dashboard/keys/{rotated_id}")
    page.submit(".danger-zone a.button")
    assert page.path() == f"/dashboard/keys/{rotated_id}/revoke"
    assert "cannot be undone" in page.text()
    page.submit("#confirm-revoke")
    assert "is revoked" in page.find(".notice").text
    wait_for(
        lambda: requests.get(server.url + "/verify", headers=bearer(rotated), timeout=10).json()["error"]["message"]
        == "This API key has been revoked.",
        timeout=10, message="the revoked key to be refused",
    )

    # A forged CSRF token is refused with 400 and changes nothing.
    keys_before = len(page.all("tr[data-key-id]"))
    page.js("document.querySelector('#create-key-form input[name=csrf_token]').value = 'forged';")
    page.fill("#name", "forged")
    page.submit("#create-key-form button[type=submit]")
    assert "security token" in page.text()
    page.open("/dashboard/keys")
    assert len(page.all("tr[data-key-id]")) == keys_before

    # The playground: a bundled sample, a real /forecast with the session, the chart drawn.
    page.open("/dashboard/playground")
    from selenium.webdriver.support.ui import Select

    Select(page.find("#sample")).select_by_value("daily-weekly-cycle")
    wait_for(lambda: page.find("#csv").get_attribute("value").count("\n") == 120, message="the sample to load")
    page.fill("#horizon", "14")
    page.click("#run-forecast")
    wait_for(lambda: page.find("#result").is_displayed() or page.find("#api-error").is_displayed(),
             timeout=90, message="the forecast")
    assert page.find("#result").is_displayed(), page.find("#api-error").text
    chart = page.find("#forecast-chart .chart-area")
    assert len(page.all("#forecast-chart canvas")) == 1
    assert chart.get_attribute("data-history-points") == "120"
    assert chart.get_attribute("data-forecast-points") == "14"
    data = page.js("return document.querySelector('#forecast-chart .chart-area').uplot.data")
    assert len(data[0]) == 134
    assert sum(v is not None for v in data[2]) == 14  # the median
    assert all(lo <= mid <= hi for lo, mid, hi in zip(data[3][120:], data[2][120:], data[4][120:], strict=True))
    assert page.find("#download-csv").get_attribute("href").startswith("blob:")
    page.screenshot("playground")

    # An error from the API is shown as the API words it.
    short = "timestamp,value\n" + "\n".join(f"2026-01-{d:02d}T00:00:00,{d}" for d in range(1, 6))
    Select(page.find("#sample")).select_by_value("")
    page.fill("#csv", short)
    page.click("#run-forecast")
    wait_for(lambda: page.find("#api-error").is_displayed(), timeout=30, message="the API error")
    direct = requests.post(
        server.url + "/forecast",
        json={"series": [{"timestamps": [f"2026-01-{d:02d}T00:00:00" for d in range(1, 6)],
                          "values": list(range(1, 6))}],
              "forecast_horizon": 14, "data_frequency": "Daily", "forecast_frequency": "Daily", "confidence": 0.95},
        headers=bearer(admin["key"]), timeout=30,
    ).json()["error"]
    assert page.find("#api-error-message").text == f"{direct['code']}: {direct['message']}"
    shown_details = page.find("#api-error-details").text
    for name, value in direct["details"].items():
        assert name in shown_details and str(value) in shown_details

    # The API reference renders offline from the vendored ReDoc.
    page.open("/dashboard/reference")
    wait_for(lambda: "Forecast one series" in page.text(), timeout=30, message="ReDoc to render")
    assert "Replace a key; the old one keeps working" in page.text()
    page.screenshot("api-reference")

    if page.all("nav a[href='/dashboard/monitors']"):
        # A monitor fed through the API, with two spikes, charted with its anomalies marked.
        monitor = requests.post(server.url + "/monitors", json={"name": "checkout latency", "data_frequency": "Hours"},
                                headers=bearer(admin["key"]), timeout=30)
        assert monitor.status_code == 201, monitor.text
        hours = [f"2026-11-{1 + h // 24:02d}T{h % 24:02d}:00:00" for h in range(168)]
        values = [100 + 20 * ((h % 24) in range(9, 18)) + (h * 7 % 5) for h in range(168)]
        values[120], values[150] = 400, 5
        fed = requests.post(server.url + f"/monitors/{monitor.json()['id']}/points",
                            json={"timestamps": hours, "values": values}, headers=bearer(admin["key"]), timeout=120)
        assert fed.status_code == 200, fed.text
        page.open("/dashboard/monitors")
        assert page.find("h1").text == "Monitors"
        area = f"figure[data-monitor-id='{monitor.json()['id']}'] .chart-area"
        assert len(page.all(area + " canvas")) == 1
        drawn = page.js(f"return document.querySelector(\"{area}\").uplot.data")
        assert len(drawn[0]) == 168 and drawn[1] == values
        marked = sum(v is not None for v in drawn[5])
        assert marked >= 1 and f"{marked} anomal" in page.text()
        # The expected range after the spike at hour 120 is back near its width before it within a few points.
        width = [upper - lower for lower, upper in zip(drawn[3], drawn[4], strict=True)]
        assert width[124] <= 1.5 * width[119], (width[115:130])
        # Each anomaly says why, beside its value.
        reasons = [cell.text for cell in page.all(
            f"section[aria-labelledby='monitor-{monitor.json()['id']}-title'] table.anomalies td.reason")]
        assert reasons and all("expected range" in text or "points" in text for text in reasons), reasons
        page.screenshot("monitors")
        # "Not an anomaly" on the latest anomaly: stored, shown, and learnt from.
        page.find(f"section[aria-labelledby='monitor-{monitor.json()['id']}-title'] table.anomalies button").click()
        def noticed() -> bool:
            from selenium.common.exceptions import WebDriverException

            try:
                return "is marked as not an anomaly" in page.text()
            except WebDriverException:  # the page is being replaced by the form's answer
                return False

        wait_for(noticed, timeout=30, message="the feedback notice")
        assert "Marked normal" in page.text()
        stored = requests.get(server.url + f"/monitors/{monitor.json()['id']}?points=168",
                              headers=bearer(admin["key"]), timeout=30).json()["points"]
        assert [p["timestamp"] for p in stored if p["feedback"] == "not_anomaly"] == [hours[150] + "Z"]

        # A monitor of several series: its page lists them with their latest verdicts and charts one.
        fleet = requests.post(server.url + "/monitors", json={"name": "fleet latency", "data_frequency": "Hours"},
                              headers=bearer(admin["key"]), timeout=30).json()["id"]
        calm = [100 + 20 * ((h % 24) in range(9, 18)) + (h * 7 % 5) for h in range(168)]
        rows = [{"monitor_id": fleet, "timestamp": hours[h], "labels": {"instance": f"web-{i}"},
                 "value": calm[h] + 3 * i + (300 if i == 1 and h == 160 else 0)}
                for h in range(161) for i in range(3)]
        bulk = requests.post(server.url + "/monitors/points", json={"points": rows}, headers=bearer(admin["key"]),
                             timeout=120)
        assert bulk.status_code == 200, bulk.text
        page.open(f"/dashboard/monitors?monitor={fleet}")
        table = f"table.series-table[data-monitor-id='{fleet}']"
        listed = page.all(table + " tbody tr")
        assert len(listed) == 3 and "in 3 series" in page.text()
        spiked = page.find(table + " tbody tr.anomalous")
        assert 'instance="web-1"' in spiked.text and "charted" in spiked.get_attribute("class")
        assert f"1 anomalous, peak {calm[160] + 3 + 300:.4g}" in spiked.text  # its open incident
        assert len(page.all(table + " tr.anomalous")) == 1
        assert len(page.all(table + " tbody tr:first-child span.verdict")) == 30
        area = f"figure[data-monitor-id='{fleet}'] .chart-area"
        drawn = page.js(f"return document.querySelector(\"{area}\").uplot.data")
        assert drawn[1][-1] == calm[160] + 3 + 300
        page.screenshot("monitor-series")
        page.find(table + " tbody tr:first-child a").click()
        wait_for(lambda: "web-0" in page.find(table + " tr.charted").text, timeout=30, message="the other series")
        drawn = page.js(f"return document.querySelector(\"{area}\").uplot.data")
        assert drawn[1][-1] == calm[160]

    # Usable at 390 px: nothing wider than the screen, the create form reachable.
    browser.set_window_size(NARROW, 800)
    page.open("/dashboard/keys")
    viewport = page.js("return document.documentElement.clientWidth")
    assert page.js("return document.documentElement.scrollWidth") <= viewport + 1
    submit = page.find("#create-key-form button[type=submit]")
    assert submit.size["width"] <= viewport and submit.location["x"] >= 0
    page.screenshot("keys-390px", width=NARROW)
    for path, shot in ((f"/dashboard/keys/{admin['id']}", "key-usage-390px"), ("/dashboard/playground", None)):
        page.open(path)
        assert page.js("return document.documentElement.scrollWidth") <= viewport + 1, path
        for canvas in page.all("canvas"):
            assert canvas.location["x"] + canvas.size["width"] <= viewport + 1, path
        if shot:
            page.screenshot(shot, width=NARROW)
    browser.set_window_size(WIDE, 900)

    # The pages load nothing from elsewhere, and try nothing the policy would have to stop (ReDoc's footer logo
    # from its CDN is blanked as the bundle is served).
    blocked = [m for m in page.console_errors() if "Content Security Policy" in m or "Refused" in m]
    assert not blocked, blocked

    # Sign out: the session is gone server-side, so its cookie and token no longer work anywhere.
    page.open("/dashboard/keys")
    old_cookie = browser.get_cookie("dashboard_session")["value"]
    csrf = page.find("input[name=csrf_token]").get_attribute("value")
    with_session = {"cookies": {"dashboard_session": old_cookie}, "headers": {"X-CSRF-Token": csrf}}
    assert requests.get(server.url + "/verify", timeout=10, **with_session).status_code == 200
    page.submit("form.sign-out button")
    assert page.path().startswith("/dashboard/sign-in")
    assert "signed out" in page.text()
    page.open("/dashboard/keys")
    assert page.path().startswith("/dashboard/sign-in")
    assert requests.get(server.url + "/verify", timeout=10, **with_session).status_code == 401
    replay = requests.get(server.url + "/dashboard/keys", cookies=with_session["cookies"], timeout=10,
                          allow_redirects=False)
    assert replay.status_code == 302 and "expired=1" in replay.headers["Location"]

    # No plain key reached the server's log.
    assert not PLAIN_KEY.search(server.log())


@pytest.fixture
def signed_in(server: Server, env: dict[str, str], browser: Any) -> tuple[Page, dict]:
    page = Page(browser, server.url)
    admin = make_key(env, "read,write,admin", "--name", "operations")
    sign_in(page, admin["key"])
    return page, admin


def test_the_create_form_keeps_the_choice_of_no_permission_and_dates_stay_on_one_line(
    signed_in: tuple[Page, dict]
) -> None:
    page, _ = signed_in
    # Nothing ticked is what the person chose: the form says what is missing and keeps it unticked.
    assert [box.get_attribute("value") for box in page.all("input[name=permissions]:checked")] == ["read"]
    page.click("input[name=permissions][value=read]")
    page.fill("#name", "no permission")
    page.submit("#create-key-form button[type=submit]")
    assert page.find("#permissions-error").text == "Choose at least one permission."
    assert page.all("input[name=permissions]:checked") == []
    assert page.find("#name").get_attribute("value") == "no permission"

    # Dates keep to one line each in the keys table.
    lines = page.js("""return Array.from(document.querySelectorAll('tr[data-key-id] .when')).map(function (td) {
        var range = document.createRange(); range.selectNodeContents(td);
        return new Set(Array.from(range.getClientRects()).map(function (r) { return Math.round(r.top); })).size;
    });""")
    assert lines and set(lines) == {1}, lines


DATES = "timestamp,value\n" + "\n".join(f"2026-01-{day:02d},{10 + day % 7}" for day in range(1, 31))


def run_playground(page: Page, csv: str) -> None:
    page.fill("#csv", csv)
    page.fill("#horizon", "7")
    page.click("#run-forecast")
    wait_for(lambda: page.find("#result").is_displayed() or page.find("#api-error").is_displayed(),
             timeout=90, message="the forecast")


def test_the_playground_takes_a_daily_series_of_dates(signed_in: tuple[Page, dict]) -> None:
    page, _ = signed_in
    page.open("/dashboard/playground")
    assert "YYYY-MM-DDTHH:MM:SS" in page.find("#csv-hint").text
    run_playground(page, DATES)
    assert page.find("#result").is_displayed(), page.find("#api-error").text
    chart = page.find("#forecast-chart .chart-area")
    assert chart.get_attribute("data-history-points") == "30" and chart.get_attribute("data-forecast-points") == "7"


def test_the_playground_lists_every_problem_in_words(signed_in: tuple[Page, dict]) -> None:
    page, _ = signed_in
    page.open("/dashboard/playground")
    stamped = DATES.replace(",", "T00:00:00,").replace("timestampT00:00:00,", "timestamp,")
    broken = stamped.replace("2026-01-04T00:00:00,", "yesterday,").replace(",12\n", ",twelve\n", 1)
    run_playground(page, broken)
    assert page.find("#api-error").is_displayed()
    problems = [item.text for item in page.all("#api-error-list li")]
    assert len(problems) >= 2, problems
    assert any(p.startswith("series[0].timestamps [3]: invalid timestamp format (sent: yesterday)") for p in problems)
    assert any(p.startswith("series[0].values [") and "value must be a number (sent: twelve)" in p
               for p in problems), problems
    assert all("{" not in p for p in problems), problems
    assert "errors" not in [term.text for term in page.all("#api-error-details dt")]
    listed = page.find("#api-error-list")
    assert listed.size["width"] >= 0.6 * page.find("#api-error").size["width"]


def test_usage_axes_name_each_date_once_and_the_reference_tries_nothing_refused(
    signed_in: tuple[Page, dict], browser: Any
) -> None:
    page, admin = signed_in
    page.open(f"/dashboard/keys/{admin['id']}")
    labels = page.js("return document.querySelector('#usage-week .chart-area').uplot.axes[0]._values")
    assert labels and len(labels) == len(set(labels)), labels
    hours = page.js("return document.querySelector('#usage-day .chart-area').uplot.axes[0]._values")
    assert hours and len(hours) == len(set(hours)), hours

    browser.get_log("browser")  # what came before
    page.open("/dashboard/reference")
    wait_for(lambda: "Forecast one series" in page.text(), timeout=30, message="ReDoc to render")
    time.sleep(1)  # the footer's logo is added after the first render
    refused = [m for m in page.console_errors() if "Content Security Policy" in m or "Refused" in m]
    assert not refused, refused
    assert "API docs by Redocly" in page.text()



def daily_series(identifier: str, days: int, seed: int) -> dict[str, Any]:
    start = datetime(2026, 1, 1)
    return {"id": identifier,
            "timestamps": [(start + timedelta(days=d)).strftime("%Y-%m-%dT%H:%M:%S") for d in range(days)],
            "values": [20 + seed + (d % 7) * 1.5 + 0.1 * d for d in range(days)]}


def test_the_batches_page_follows_progress_and_downloads_the_results(
    signed_in: tuple[Page, dict], server: Server, env: dict[str, str], tmp_path: Path
) -> None:
    page, admin = signed_in
    page.open("/dashboard/batches")
    assert "No batches in this account yet" in page.text()
    fields = {"forecast_horizon": 3, "data_frequency": "Daily", "forecast_frequency": "Daily"}
    body = {**fields, "series": [daily_series(f"store-{i}", 60, i) for i in range(6)]
            + [daily_series("too-short", 5, 0)]}
    # No job worker yet: the batch waits, queued, while the page shows it.
    submitted = requests.post(server.url + "/batches", json=body, headers=bearer(admin["key"]), timeout=30)
    assert submitted.status_code == 202, submitted.text
    batch_id = submitted.json()["id"]
    page.open("/dashboard/batches")
    row = f"tr[data-batch-id='{batch_id}']"
    assert page.find(row + " .status").text == "queued"
    assert page.find(row + " .count").text == "0 / 7"
    assert page.find(row + " .results").text == "\u2014"

    # A worker starts: the open page follows the batch to the end by itself and offers the results.
    worker = JobWorker(env, log_path=tmp_path / "worker.log")
    try:
        wait_for(lambda: page.find(row + " .status").text == "done", timeout=120,
                 message="the page to show the batch done")
    finally:
        worker.stop()
    assert page.find(row + " .count").text == "7 / 7, 1 failed"
    bar = page.find(row + " .bar")
    assert bar.get_attribute("aria-valuenow") == "7" and bar.get_attribute("aria-valuemax") == "7"
    # The failed share of the bar is red, the done share blue, each as wide as its share of the series.
    shares = page.js(f"""var bar = document.querySelector("{row} .bar"), width = bar.getBoundingClientRect().width;
        return ['.bar-done', '.bar-failed'].map(function (part) {{ var el = bar.querySelector(part);
          return [el.getBoundingClientRect().width / width, getComputedStyle(el).backgroundColor]; }});""")
    (done, done_color), (failed, failed_color) = shares
    assert abs(done - 6 / 7) < 0.02 and abs(failed - 1 / 7) < 0.02, shares
    assert failed_color == "rgb(207, 34, 46)" and done_color == "rgb(9, 105, 218)", shares
    assert page.find(row + " .failed-count").value_of_css_property("color") == "rgba(207, 34, 46, 1)"
    # The batch id keeps to one line, and nothing on the page scrolls sideways, at 1,280 px or on a phone.
    lines = page.js(f"""var range = document.createRange();
        range.selectNodeContents(document.querySelector("{row} td:first-child code"));
        return range.getClientRects().length;""")
    assert lines == 1
    assert_fits(page, None, WIDE)
    assert_fits(page, None, NARROW)
    link = page.find(row + " .results a")
    assert link.text == "CSV"

    # The link downloads what GET /batches/{id}/results gives as CSV, to the signed-in session only.
    cookies = {"dashboard_session": page.driver.get_cookie("dashboard_session")["value"]}
    downloaded = requests.get(link.get_attribute("href"), cookies=cookies, timeout=30)
    assert downloaded.status_code == 200
    assert downloaded.headers["Content-Disposition"] == f'attachment; filename="{batch_id}.csv"'
    from_api = requests.get(server.url + f"/batches/{batch_id}/results?format=csv", headers=bearer(admin["key"]),
                            timeout=30)
    assert downloaded.text == from_api.text
    assert downloaded.text.count("\n") == 1 + 6 * 3 + 1 and "too-short" in downloaded.text
    stranger = requests.get(link.get_attribute("href"), timeout=30, allow_redirects=False)
    assert stranger.status_code == 302 and "/dashboard/sign-in" in stranger.headers["Location"]

    blocked = [m for m in page.console_errors() if "Content Security Policy" in m or "Refused" in m]
    assert not blocked, blocked


def monthly_series(name: str, count: int, seed: int) -> dict[str, Any]:
    import math

    return {"id": name,
            "timestamps": [f"{2018 + i // 12}-{1 + i % 12:02d}-01T00:00:00" for i in range(count)],
            "values": [round(200 + 20 * seed + 2 * i + 25 * math.sin(2 * math.pi * i / 12) + (i * (seed + 3) % 7), 1)
                       for i in range(count)]}


def test_a_backtest_shows_its_scores_and_one_series_windows(
    signed_in: tuple[Page, dict], server: Server, env: dict[str, str], tmp_path: Path
) -> None:
    page, admin = signed_in
    models = ["forecast-model-1", "forecast-model-2", "forecast-model-4"]
    body = {"kind": "backtest", "forecast_horizon": 6, "data_frequency": "Monthly", "forecast_frequency": "Monthly",
            "n_windows": 4, "step_size": 6, "models": models,
            "series": [monthly_series(f"sku-{i}", 72, i) for i in range(3)]}
    submitted = requests.post(server.url + "/batches", json=body, headers=bearer(admin["key"]), timeout=30)
    assert submitted.status_code == 202, submitted.text
    batch_id = submitted.json()["id"]
    # Beside it, a forecast batch of five series, three of them too short: done, with failures.
    mixed = {"forecast_horizon": 3, "data_frequency": "Daily", "forecast_frequency": "Daily",
             "series": [daily_series(f"store-{i}", 60, i) for i in range(2)]
             + [daily_series(f"too-short-{i}", 5, i) for i in range(3)]}
    failing = requests.post(server.url + "/batches", json=mixed, headers=bearer(admin["key"]), timeout=30)
    assert failing.status_code == 202, failing.text
    worker = JobWorker(env, log_path=tmp_path / "worker.log")
    try:
        page.open("/dashboard/batches")
        row = f"tr[data-batch-id='{batch_id}']"
        wait_for(lambda: all(s.text == "done" for s in page.all("tr[data-batch-id] .status")), timeout=180,
                 message="the page to show both batches done")
    finally:
        worker.stop()
    # Nothing scrolls sideways at 1,280 px or on a phone, whatever the rows hold.
    assert_fits(page, None, WIDE, shot="batches")
    assert_fits(page, None, NARROW, shot="batches-390px")
    assert "backtest" in page.find(row).text
    # The row names every model the backtest compares, not only the first.
    assert [m.text for m in page.all(row + " .models .model")] == models
    failed_row = f"tr[data-batch-id='{failing.json()['id']}']"
    assert page.find(failed_row + " .count").text == "5 / 5, 3 failed"
    failed = page.js(f"""var bar = document.querySelector("{failed_row} .bar");
        return bar.querySelector('.bar-failed').getBoundingClientRect().width / bar.getBoundingClientRect().width;""")
    assert abs(failed - 3 / 5) < 0.02, failed
    page.submit(row + " a.backtest-link")
    assert page.path() == f"/dashboard/batches/{batch_id}/backtest"

    summary = requests.get(server.url + f"/batches/{batch_id}/summary", headers=bearer(admin["key"]),
                           timeout=30).json()
    shown = {r.get_attribute("data-model"): r.text for r in page.all("table.backtest-summary tbody tr")}
    assert list(shown) == models
    for scores in summary["models"]:
        assert f"{scores['mase']:.3f}" in shown[scores["model"]]
        assert f"{100 * scores['coverage']:.1f}%" in shown[scores["model"]]

    # The first series is drawn; choosing another redraws with its windows.
    chart = "#backtest-chart"
    wait_for(lambda: page.all(chart + " canvas"), timeout=10, message="the chart")
    assert page.find(chart).get_attribute("data-windows") == "4"
    assert page.find(chart).get_attribute("data-models") == "3"
    plan = page.find("#backtest-plan").text
    assert "3 series, 4 windows of 6 months with cut-offs 6 months apart" in plan and "(s)" not in plan, plan
    from selenium.webdriver.support.ui import Select

    Select(page.find("select#series")).select_by_value("sku-2")
    page.submit("form.inline button")
    assert page.path().endswith("?series=sku-2")
    wait_for(lambda: page.all(chart + " canvas"), timeout=10, message="the chart of sku-2")
    drawn = page.js("return JSON.parse(document.getElementById('backtest-data').textContent)")
    assert drawn["actual"] == body["series"][2]["values"][-24:]
    assert len(drawn["cutoffs"]) == 4 and set(drawn["models"]) == set(models)
    page.screenshot("backtest")
    assert_fits(page, None, WIDE)
    assert_fits(page, None, NARROW)

    blocked = [m for m in page.console_errors() if "Content Security Policy" in m or "Refused" in m]
    assert not blocked, blocked
    missing = requests.get(server.url + "/dashboard/batches/bat_nope/backtest", timeout=30,
                           cookies={"dashboard_session": page.driver.get_cookie("dashboard_session")["value"]})
    assert missing.status_code == 404


def test_the_pages_fit_a_phone_and_the_playground_takes_dates_at_any_frequency(
    signed_in: tuple[Page, dict]
) -> None:
    page, admin = signed_in
    for path in ("/dashboard/keys", f"/dashboard/keys/{admin['id']}", "/dashboard/playground", "/dashboard/batches",
                 f"/dashboard/keys/{admin['id']}/revoke", "/dashboard/no-such-page"):
        assert_fits(page, path, WIDE)
        assert_fits(page, path, NARROW)
    for width in (WIDE, NARROW):
        page.driver.set_window_size(width, 900)
        page.open("/dashboard/reference")
        wait_for(lambda: "Forecast one series" in page.text(), timeout=30, message="ReDoc to render")
        assert_fits(page, None, width, reload=False)

    # A date alone is that day's midnight at any frequency (docs/contract.md), as the hint says.
    page.open("/dashboard/playground")
    hint = page.find("#csv-hint").text
    assert "at any frequency" in hint and "Daily and coarser" not in hint, hint
    from selenium.webdriver.support.ui import Select

    Select(page.find("#data_frequency")).select_by_value("Hours")
    hourly = "timestamp,value\n2026-01-01,10\n" + "\n".join(
        f"2026-01-{1 + h // 24:02d}T{h % 24:02d}:00:00,{10 + h % 24}" for h in range(1, 72))
    run_playground(page, hourly)
    assert page.find("#result").is_displayed(), page.find("#api-error").text
    stamps = page.js("return document.querySelector('#forecast-chart .chart-area').uplot.data[0]")
    assert len(stamps) == 79 and all(isinstance(x, int | float) for x in stamps), stamps[:3]
    assert stamps[0] == datetime(2026, 1, 1).replace(tzinfo=UTC).timestamp() and stamps[1] - stamps[0] == 3600

    # A constant series gets a value axis around its value, not the same label on every tick.
    Select(page.find("#data_frequency")).select_by_value("Daily")
    run_playground(page, "timestamp,value\n" + "\n".join(f"2026-01-{day:02d},1" for day in range(1, 31)))
    assert page.find("#result").is_displayed(), page.find("#api-error").text
    labels = page.js("return document.querySelector('#forecast-chart .chart-area').uplot.axes[1]._values")
    assert len(labels) >= 2 and len(set(labels)) == len(labels), labels
    scale = page.js("return document.querySelector('#forecast-chart .chart-area').uplot.scales.y")
    assert scale["min"] < 1 < scale["max"] and scale["max"] - scale["min"] >= 0.1, scale


def test_monitors_say_where_their_points_come_from_and_fit_a_phone(
    env: dict[str, str], browser: Any, tmp_path: Path
) -> None:
    # Private addresses allowed: the Prometheus-backed monitor names one nothing answers on.
    running = Server({**env, "ALLOW_PRIVATE_WEBHOOKS": "1"}, log_path=tmp_path / "gunicorn-monitors.log")
    try:
        running.wait_ready()
        page = Page(browser, running.url)
        admin = make_key(env, "read,write,admin", "--name", "operations")
        sign_in(page, admin["key"])
        if not page.all("nav a[href='/dashboard/monitors']"):
            pytest.skip("this server has no monitors")
        headers = bearer(admin["key"])

        def monitor(**body: Any) -> str:
            made = requests.post(running.url + "/monitors", json={"data_frequency": "Hours", **body},
                                 headers=headers, timeout=30)
            assert made.status_code == 201, made.text
            return str(made.json()["id"])

        selector = 'http_server_request_duration_seconds_bucket{job="checkout-service-production", le="0.25"}'
        query = 'sum by (instance) (rate(http_server_request_duration_seconds_count{job="checkout"}[5m]))'
        pushed = monitor(name="constant queue depth")
        written = monitor(name="request latency by remote write", remote_write_selector=selector)
        read = monitor(name="request rate from Prometheus", prometheus_url=f"http://127.0.0.1:{free_port()}",
                       prometheus_query=query)
        fleet = monitor(name="fleet latency, one series per instance of a long-named service")
        hours = [f"2026-11-{1 + h // 24:02d}T{h % 24:02d}:00:00" for h in range(48)]
        fed = requests.post(running.url + f"/monitors/{pushed}/points",
                            json={"timestamps": hours, "values": [1] * 48}, headers=headers, timeout=60)
        assert fed.status_code == 200, fed.text
        rows = [{"monitor_id": fleet, "timestamp": hours[h],
                 "labels": {"instance": f"checkout-web-{i}.eu-west-1.internal.example.com:9100",
                            "job": "checkout-service-production"},
                 "value": 100 + h % 24 + 3 * i + (300 if i == 1 and h == 47 else 0)}
                for h in range(48) for i in range(3)]
        bulk = requests.post(running.url + "/monitors/points", json={"points": rows}, headers=headers, timeout=60)
        assert bulk.status_code == 200, bulk.text

        page.open("/dashboard/monitors")
        assert_fits(page, None, WIDE, shot="monitors-sources")
        assert_fits(page, None, NARROW, shot="monitors-390px")
        assert_fits(page, f"/dashboard/monitors?monitor={fleet}", WIDE)
        # A label set keeps a readable column, not one squeezed to a few letters a line.
        labels_width = page.js("return document.querySelector('table.series-table td').getBoundingClientRect().width")
        assert labels_width >= 250, labels_width
        assert_fits(page, None, NARROW)

        page.open("/dashboard/monitors")

        def source(monitor_id: str) -> str:
            return str(page.find(f"section[aria-labelledby='monitor-{monitor_id}-title'] .source").text)

        assert f"POST /monitors/{pushed}/points" in source(pushed)
        assert "remote write" in source(written) and selector in source(written)
        assert f"POST /monitors/{written}/points" not in source(written).split("remote write")[0]
        assert query in source(read) and "POST /monitors" not in source(read)
        # A constant series is charted around its value, its axis labels all different.
        area = f"figure[data-monitor-id='{pushed}'] .chart-area"
        labels = page.js(f"return document.querySelector(\"{area}\").uplot.axes[1]._values")
        assert len(labels) >= 2 and len(set(labels)) == len(labels), labels
        scale = page.js(f"return document.querySelector(\"{area}\").uplot.scales.y")
        assert scale["min"] < 1 < scale["max"] and scale["max"] - scale["min"] >= 0.1, scale
    finally:
        running.stop()


def test_the_usage_page_says_the_limiter_started_afresh_after_a_restart(
    env: dict[str, str], browser: Any, tmp_path: Path
) -> None:
    admin = make_key(env, "read,write,admin", "--name", "operations")
    before = Server(env, log_path=tmp_path / "gunicorn-before.log")
    try:
        before.wait_ready()
        for _ in range(6):
            assert requests.get(before.url + "/keys", headers=bearer(admin["key"]), timeout=10).status_code == 200
    finally:
        before.stop()  # a graceful stop writes the usage counts it still holds
    after = Server(env, log_path=tmp_path / "gunicorn-after.log")
    try:
        after.wait_ready()
        page = Page(browser, after.url)
        assert_fits(page, "/dashboard/sign-in", WIDE)
        assert_fits(page, "/dashboard/sign-in", NARROW)
        sign_in(page, admin["key"])
        page.open(f"/dashboard/keys/{admin['id']}")
        charted = int(page.find("#usage-day figcaption").text.split(":")[1].split()[0])
        used = int(page.find("#window-hour").get_attribute("value"))
        assert charted >= 6 and used < charted  # the database kept the hour; the in-memory limiter did not
        note = page.find("#windows-note").text
        assert "start again from zero when the server restarts" in note and "database" in note, note
        assert "since the server started" in page.find("label[for=window-hour]").text
    finally:
        after.stop()


def test_the_playground_takes_covariate_columns_and_a_country_of_holidays(signed_in: tuple[Page, dict]) -> None:
    from selenium.webdriver.support.ui import Select

    page, _ = signed_in
    page.open("/dashboard/playground")
    start = datetime(2025, 11, 1)
    days = [(start + timedelta(days=i)).strftime("%Y-%m-%d") for i in range(57)]
    price = [10 + (i * 7) % 5 for i in range(57)]
    rows = [f"{day},{60 - 3 * p + i % 7},{p}" for i, (day, p) in enumerate(zip(days[:50], price, strict=False))]
    rows += [f"{day},,{p}" for day, p in zip(days[50:], price[50:], strict=True)]
    Select(page.find("#holiday-country")).select_by_value("US")
    Select(page.find("#holiday-subdivision")).select_by_value("CA")
    page.click('input[name="calendar_features"][value="day_of_week"]')
    run_playground(page, "timestamp,value,price\n" + "\n".join(rows))
    assert page.find("#result").is_displayed(), page.find("#api-error").text
    assert page.find("#covariates-result").is_displayed()
    assert "price" in page.find("#covariates-summary").text
    holidays = [item.text for item in page.all("#holidays-in-horizon li")]
    assert "2025-12-25: Christmas Day" in holidays, holidays
    # A bad covariate is the API's 422, shown in its words.
    page.fill("#csv", "timestamp,value,price\n" + "\n".join(rows[:-1]))
    page.click("#run-forecast")
    wait_for(lambda: page.find("#api-error").is_displayed(), timeout=90, message="the refusal")
    assert "series[0].covariates[0].future" in page.find("#api-error").text
