"""The audit explorer page in real headless Chromium (Selenium), over a real server and a landed history."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait

from conf.tables import table_name
from pipelines.orchestration.jobs import run_job
from pipelines.bench.explorer import run_explorer_bench
from pipelines.serving.tokens import create_token
from tests.conftest import FIXTURES
from tests.pipelines.serving.explorer_inputs import (
    ALICE,
    BOB,
    DAY0,
    DAY_MS,
    ORDERS,
    ORDERS_TAGS_V1_AT,
    ORDERS_TAGS_V2_AT,
    XSS_ACTOR,
    XSS_DESCRIPTION,
    XSS_TAG,
    XSS_URN,
    write_inputs,
)

REPO = Path(__file__).resolve().parents[3]
# The screenshots the docs show are taken by these tests: into docs/images when UPDATE_DOC_IMAGES is set,
# otherwise into a scratch folder, so that a run of the suite leaves the checkout as it was.
IMAGES = REPO / "docs" / "images" if os.environ.get("UPDATE_DOC_IMAGES") else Path(tempfile.mkdtemp(prefix="explorer-images-"))
CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def explorer(spark, lakehouse, tmp_path_factory):
    """The shared small history plus the explorer inputs, run through the pipeline, served on loopback."""
    landing = tmp_path_factory.mktemp("explorer-landing")
    shutil.copy(FIXTURES / "history-small.mcl.jsonl", landing / "history-small.mcl.jsonl")
    write_inputs(landing)
    run_job(lakehouse, paths=[landing], spark=spark)
    # One flagged day of alice's, as the anomaly model writes it.
    spark.sql(
        f"INSERT INTO {table_name(lakehouse, 'gold.actor_anomalies')} VALUES ('{ALICE}', 'day', {DAY0}, {DAY0 + DAY_MS}, "
        "2.5, 'volume', true, '[]', 'actor-activity', '1', TIMESTAMP '2024-03-05 00:00:00', DATE '2024-03-01')"
    )
    reader, _ = create_token(lakehouse, ALICE, ["audit-read-sensitive"])  # the page shows raw events
    other, _ = create_token(lakehouse, ALICE, ["metrics-read"])
    with lakehouse_serve(lakehouse.home) as base_url:
        yield {"url": base_url, "reader": reader, "other": other}


@contextlib.contextmanager
def lakehouse_serve(home: Path):
    """Run `lakehouse serve` as a subprocess on a free loopback port until the block ends."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "pipelines.cli", "--home", str(home), "serve", "--host", "127.0.0.1", "--port", str(port)]
    server = subprocess.Popen(command, cwd=REPO, env={**os.environ, "RUST_LOG": "error"}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)  # fmt: skip
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, f"lakehouse serve exited: {server.stdout.read()}"
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(base_url + "/health", timeout=5).status_code == 200:
                    break
            assert time.monotonic() < deadline, "lakehouse serve did not answer within 120 s"
            time.sleep(0.2)
        yield base_url
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Headless Chromium at 1280 px, downloading into a temporary folder."""
    assert CHROMIUM and CHROMEDRIVER, "needs Debian's chromium and chromium-driver: `make test` installs them"
    downloads = tmp_path_factory.mktemp("downloads")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,900"):
        options.add_argument(argument)
    options.add_experimental_option("prefs", {"download.default_directory": str(downloads), "download.prompt_for_download": False})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.downloads = downloads
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver, condition, timeout=30):
    try:
        return WebDriverWait(driver, timeout).until(lambda d: condition(d))
    except TimeoutException:
        message = driver.find_element(By.ID, "message").text
        raise AssertionError(f"timed out; page message: {message!r}") from None


def _downloaded_csv(driver, button_id: str, name: str) -> list[dict[str, str]]:
    """Click the export button `button_id` and return the rows of the CSV file `name` it downloads."""
    driver.find_element(By.ID, button_id).click()
    target = driver.downloads / name
    deadline = time.monotonic() + 15
    while not target.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return list(csv.DictReader(io.StringIO(target.read_text())))


def _open(driver, url):
    """Load `url` and wait until the page has routed and finished its requests."""
    driver.get(url)
    _wait(driver, lambda d: d.execute_script("return document.body.dataset.ready || ''"))


def _sign_in(driver, explorer):
    driver.get(explorer["url"] + "/")
    driver.execute_script("sessionStorage.setItem('lakehouse.explorer.token', arguments[0])", explorer["reader"])


# The words of the cells under a CSS selector that the browser broke across lines (urns may break).
_BROKEN_WORDS = """
const broken = [];
for (const cell of document.querySelectorAll(arguments[0])) {
  const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.parentElement.closest("pre, button.link, td.urn")) continue;
    for (const match of node.data.matchAll(/\\S+/g)) {
      const range = document.createRange();
      range.setStart(node, match.index);
      range.setEnd(node, match.index + match[0].length);
      if (new Set([...range.getClientRects()].map((rect) => Math.round(rect.top))).size > 1) broken.push(match[0]);
    }
  }
}
return broken;
"""


def _broken_words(driver, selector):
    return driver.execute_script(_BROKEN_WORDS, selector)


def _rows(driver):
    return driver.find_elements(By.CSS_SELECTOR, "#results tbody tr.event")


def _cells(row):
    return [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]


def test_unknown_token_shows_sign_in_then_the_right_token_searches(browser, explorer):
    browser.get(explorer["url"] + "/")
    browser.execute_script("sessionStorage.clear()")
    _open(browser, explorer["url"] + f"/?view=search&actor={ALICE}")
    assert browser.find_element(By.ID, "signin").is_displayed()
    # Nothing to sign out of, nor to navigate to, before signing in.
    assert not browser.find_element(By.ID, "sign-out").is_displayed()
    assert not browser.find_element(By.ID, "nav-search").is_displayed()
    IMAGES.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(IMAGES / "explorer-sign-in.png"))
    token = browser.find_element(By.ID, "token")
    token.send_keys("not-a-token")
    token.submit()
    _wait(browser, lambda d: "Sign in again" in d.find_element(By.ID, "signin-reason").text)
    assert browser.find_element(By.ID, "signin").is_displayed()
    assert not browser.find_element(By.ID, "view-search").is_displayed()
    assert browser.execute_script("return sessionStorage.getItem('lakehouse.explorer.token')") is None
    token = browser.find_element(By.ID, "token")
    token.send_keys(explorer["reader"])
    token.submit()
    _wait(browser, lambda d: "matching events" in d.find_element(By.ID, "search-total").text)
    assert browser.find_element(By.ID, "search-total").text.startswith("7 matching events")
    assert browser.find_element(By.ID, "sign-out").is_displayed()


def test_a_token_without_audit_read_shows_the_api_message(browser, explorer):
    browser.get(explorer["url"] + "/")
    browser.execute_script("sessionStorage.setItem('lakehouse.explorer.token', arguments[0])", explorer["other"])
    _open(browser, explorer["url"] + "/?view=search")
    message = browser.find_element(By.ID, "message")
    assert message.is_displayed() and message.text.startswith("Error: 403")


def test_search_by_actor_pages_through_every_row_and_exports_them(browser, explorer):
    _sign_in(browser, explorer)
    _open(browser, explorer["url"] + "/?view=search")
    browser.find_element(By.ID, "f-actor").send_keys(ALICE)
    browser.find_element(By.ID, "f-size").clear()
    browser.find_element(By.ID, "f-size").send_keys("3")
    browser.find_element(By.ID, "f-actor").submit()
    _wait(browser, lambda d: len(_rows(d)) == 3)
    # The URL holds the query: a bookmark reproduces the search.
    assert "actor=urn%3Ali%3Acorpuser%3Aexplorer.alice" in browser.current_url and "size=3" in browser.current_url
    assert browser.find_element(By.ID, "search-total").text == "7 matching events, 3 shown"
    browser.find_element(By.ID, "load-more").click()
    _wait(browser, lambda d: len(_rows(d)) == 6)
    browser.find_element(By.ID, "load-more").click()
    _wait(browser, lambda d: len(_rows(d)) == 7)
    assert not browser.find_element(By.ID, "load-more").is_displayed()
    assert browser.find_element(By.ID, "search-total").text == "7 matching events, 7 shown"
    rows = [_cells(r) for r in _rows(browser)]
    assert {r[1] for r in rows} == {ALICE}
    # Newest first, hand-listed: day 3, day 2, day 1.
    assert [r[2] for r in rows] == ["EntityEvent", "LogInEvent", "CreateAccessTokenEvent", "LogInEvent",
                                    "UpdateAspectEvent", "EntityEvent", "LogInEvent"]  # fmt: skip
    assert rows[0][3:6] == ["schemaMetadata", ORDERS, "dataset"]
    # Every row says what happened in words; an aspect write names the aspect and the entity's name.
    assert all(r[6] for r in rows)
    assert rows[4][6].startswith("changed ") and "appdb" not in rows[4][6]
    assert [r[6] for r in rows if r[2] == "LogInEvent"][0].startswith("logged in")
    assert _broken_words(browser, "#results th, #results td") == []
    IMAGES.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(IMAGES / "explorer-search.png"))

    browser.find_element(By.CSS_SELECTOR, "#results tbody tr.event button").click()
    raw = browser.find_element(By.CSS_SELECTOR, "#results tbody tr.raw pre")
    assert raw.is_displayed()
    document = json.loads(raw.text)
    assert document["actorUrn"] == ALICE and document["entityUrn"] == ORDERS and document["aspectName"] == "schemaMetadata"

    exported = _downloaded_csv(browser, "export-csv", "audit-events.csv")
    assert [r["eventType"] for r in exported] == [r[2] for r in rows]
    assert {r["actorUrn"] for r in exported} == {ALICE}
    assert exported[-1]["timeUtc"] == "2024-03-01T08:00:00.000Z"


def test_bookmarked_search_at_phone_width_is_readable(browser, explorer):
    _sign_in(browser, explorer)
    browser.set_window_size(390, 844)
    try:
        _open(browser, explorer["url"] + f"/?view=search&actor={ALICE}&eventType=LogInEvent")
        assert browser.find_element(By.ID, "search-total").text == "3 matching events, 3 shown"
        # No horizontal scrolling of the page itself: wide tables scroll inside their own box.
        assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth + 1")
        assert _broken_words(browser, "#results th, #results td") == []
        browser.execute_script("document.getElementById('search-total').scrollIntoView()")
        browser.save_screenshot(str(IMAGES / "explorer-search-390.png"))
    finally:
        browser.set_window_size(1280, 900)


def test_timeline_lists_changes_and_diffs_two_versions(browser, explorer):
    _sign_in(browser, explorer)
    _open(browser, explorer["url"] + f"/?view=timeline&urn={ORDERS}")
    rows = [_cells(r) for r in browser.find_elements(By.CSS_SELECTOR, "#timeline-events tbody tr")]
    tags = [(r[1], r[2], r[3], r[4]) for r in rows if r[2] == "TAG"]
    assert tags == [(BOB, "TAG", "ADD", "urn:li:tag:Alpha"), (BOB, "TAG", "ADD", "urn:li:tag:Beta")]
    assert any(r[2] == "DOCUMENTATION" for r in rows)
    # The Version column is the aspect's version, as the timeline endpoint has it (not ECE's format version).
    events = httpx.get(explorer["url"] + "/api/v1/timeline", params={"urn": ORDERS},
                       headers={"Authorization": f"Bearer {explorer['reader']}"}).json()["events"]  # fmt: skip
    assert [r[6] for r in rows] == [str(e["source_version"]) for e in events]
    assert {r[6] for r in rows} != {"0"}
    assert _broken_words(browser, "#timeline-events th, #timeline-events td") == []
    Select(browser.find_element(By.ID, "asof-a")).select_by_value(str(ORDERS_TAGS_V1_AT))
    Select(browser.find_element(By.ID, "asof-b")).select_by_value(str(ORDERS_TAGS_V2_AT))
    browser.find_element(By.ID, "asof-form").submit()
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#diff .aspect-diff"))
    assert f"a={ORDERS_TAGS_V1_AT}" in browser.current_url
    sections = {s.find_element(By.TAG_NAME, "h3").text: s for s in browser.find_elements(By.CSS_SELECTOR, "#diff .aspect-diff")}
    # As of the first version only globalTags existed; the description came after the second.
    assert set(sections) == {"globalTags (changed)"}
    table = sections["globalTags (changed)"]
    left = " ".join(c.text for c in table.find_elements(By.CSS_SELECTOR, "tbody td:nth-child(1)"))
    added = [c.text for c in table.find_elements(By.CSS_SELECTOR, "tbody td.added")]
    assert "urn:li:tag:Alpha" in left and "urn:li:tag:Beta" not in left
    assert any("urn:li:tag:Beta" in line for line in added)
    browser.save_screenshot(str(IMAGES / "explorer-timeline.png"))


def test_activity_charts_days_and_opens_an_actor(browser, explorer):
    _sign_in(browser, explorer)
    _open(browser, explorer["url"] + "/?view=activity&since=2024-03-01&until=2024-03-04")
    points = browser.execute_script("return Chart.getChart(document.getElementById('chart-daily')).data.labels")
    assert points == ["2024-03-01", "2024-03-02", "2024-03-03"]
    actors = [li.find_element(By.TAG_NAME, "button").text for li in browser.find_elements(By.CSS_SELECTOR, "#top-actors li")]
    assert actors[0] == ALICE and set(actors) >= {ALICE, BOB, XSS_ACTOR}
    alice = browser.find_elements(By.CSS_SELECTOR, "#top-actors li")[0]
    assert alice.find_element(By.CLASS_NAME, "count").text == "7 events"
    browser.save_screenshot(str(IMAGES / "explorer-activity.png"))

    alice.find_element(By.TAG_NAME, "button").click()
    _wait(browser, lambda d: d.find_element(By.ID, "actor-name").text == ALICE)
    _wait(browser, lambda d: d.execute_script("return document.body.dataset.view") == "actor")
    labels = browser.execute_script("return Chart.getChart(document.getElementById('chart-actor')).data.labels")
    assert labels == ["2024-03-01", "2024-03-02", "2024-03-03"]
    touched = [li.find_element(By.TAG_NAME, "button").text for li in browser.find_elements(By.CSS_SELECTOR, "#actor-entities li")]
    assert touched == [ORDERS]
    anomalies = [_cells(r) for r in browser.find_elements(By.CSS_SELECTOR, "#actor-anomalies tbody tr")]
    assert [r[1:] for r in anomalies] == [["day", "volume", "2.50"]]
    browser.save_screenshot(str(IMAGES / "explorer-actor.png"))


def test_hostile_values_show_as_text_and_never_run(browser, explorer):
    _sign_in(browser, explorer)
    pages = [
        {"view": "search", "actor": XSS_ACTOR},
        {"view": "timeline", "urn": XSS_URN},
        {"view": "activity", "since": "2024-03-01", "until": "2024-03-04"},
        {"view": "changes", "entity": "urn:li:dataset:(urn:li:dataPlatform:hive,<*"},
        {"view": "search", "preset": "custom", "from": "2024-03-03T00:00:00", "to": "2024-03-04T00:00:00"},
    ]
    for query in pages:
        _open(browser, explorer["url"] + "/?" + urlencode(query))
        assert browser.execute_script("return window.__xss === undefined")
        assert not browser.find_elements(By.CSS_SELECTOR, "main img, main script, a[href^='javascript']")
        text = browser.find_element(By.TAG_NAME, "main").text
        assert XSS_ACTOR in text
    _open(browser, explorer["url"] + "/?" + urlencode({"view": "timeline", "urn": XSS_URN}))
    browser.find_element(By.ID, "asof-form").submit()
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#diff .aspect-diff"))
    text = browser.find_element(By.TAG_NAME, "main").text
    assert XSS_TAG in text and XSS_DESCRIPTION in text and XSS_URN in text
    assert browser.execute_script("return window.__xss === undefined")


def test_security_and_cache_headers(explorer):
    page = httpx.get(explorer["url"] + "/")
    policy = page.headers["content-security-policy"]
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
    assert "frame-ancestors 'none'" in policy and "script-src 'self'" in policy
    assert page.headers["x-content-type-options"] == "nosniff"
    chart = httpx.get(explorer["url"] + "/static/vendor/chart.umd.min.js")
    assert chart.status_code == 200 and "max-age=3600" in chart.headers["cache-control"]
    assert chart.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize(
    ("path", "params", "message"),
    [
        ("/api/v1/timeline", {}, "urn: '' is not a DataHub urn"),
        ("/api/v1/timeline/as-of", {"urn": ORDERS}, "at: missing"),
        ("/api/v1/timeline/as-of", {"urn": ORDERS, "at": "yesterday"}, "at: 'yesterday'"),
        ("/api/v1/activity", {"since": "2024-03-02", "until": "2024-03-01"}, "since: '2024-03-02' is not before until"),
        ("/api/v1/activity", {"limit": "0"}, "limit: '0' is not a whole number from 1 to 100"),
        ("/api/v1/activity", {"actor": ALICE}, "actor: unknown parameter"),
        ("/api/v1/activity/actor", {}, "actor: missing"),
        ("/api/v1/changes", {"size": "1001"}, "size: '1001' is not a whole number from 1 to 1000"),
        ("/api/v1/changes", {"after": "yesterday"}, "after: 'yesterday' is not a cursor"),
        ("/api/v1/changes", {"size": "\u00b2"}, "size: '\u00b2' is not a whole number from 1 to 1000"),
        ("/api/v1/changes", {"after": "\u00b2:e1"}, "after: '\u00b2:e1' is not a cursor"),
    ],
)
def test_bad_parameters_are_400_naming_the_parameter(explorer, path, params, message):
    response = httpx.get(explorer["url"] + path, params=params, headers={"Authorization": f"Bearer {explorer['reader']}"})
    assert response.status_code == 400
    assert response.json()["error"].startswith(message)


def test_the_favicon_is_served(explorer):
    icon = httpx.get(explorer["url"] + "/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
    assert icon.text.startswith("<svg")


def test_the_json_endpoints_need_an_audit_read_token(explorer):
    for path in ("/api/v1/timeline", "/api/v1/activity", "/api/v1/activity/actor", "/api/v1/changes"):
        assert httpx.get(explorer["url"] + path).status_code == 401
        assert httpx.get(explorer["url"] + path, headers={"Authorization": f"Bearer {explorer['other']}"}).status_code == 403


def test_activity_endpoint_counts_by_hand(explorer):
    headers = {"Authorization": f"Bearer {explorer['reader']}"}
    body = httpx.get(explorer["url"] + "/api/v1/activity", params={"since": "2024-03-01", "until": "2024-03-04"}, headers=headers).json()
    assert [d["date"] for d in body["days"]] == ["2024-03-01", "2024-03-02", "2024-03-03"]
    assert body["topActors"][0] == {"actor": ALICE, "events": 7}
    assert {"actor": BOB, "events": body["topActors"][1]["events"]} in body["topActors"]


def test_every_control_is_labelled_and_a_search_works_from_the_keyboard(browser, explorer):
    _sign_in(browser, explorer)
    _open(browser, explorer["url"] + "/?view=search")
    unlabelled = browser.execute_script(
        "return [...document.querySelectorAll('input, select')].filter((c) => c.labels.length === 0).map((c) => c.id)"
    )
    assert unlabelled == []
    actor = browser.find_element(By.ID, "f-actor")
    actor.send_keys(ALICE, Keys.ENTER)
    _wait(browser, lambda d: d.find_element(By.ID, "search-total").text == "7 matching events, 7 shown")
    # Tab from the last filter reaches the search button, then the first row's "Show JSON".
    first_toggle = browser.find_element(By.CSS_SELECTOR, "#results tbody tr.event button")
    browser.find_element(By.ID, "f-size").click()
    for _ in range(10):
        browser.switch_to.active_element.send_keys(Keys.TAB)
        if browser.switch_to.active_element == first_toggle:
            break
    assert browser.switch_to.active_element == first_toggle
    browser.switch_to.active_element.send_keys(Keys.ENTER)
    assert browser.find_element(By.CSS_SELECTOR, "#results tbody tr.raw pre").is_displayed()
    assert first_toggle.get_attribute("aria-expanded") == "true"


def test_change_search_by_urn_prefix_and_category_pages_newest_first(browser, explorer):
    _sign_in(browser, explorer)
    query = {"view": "changes", "entity": "urn:li:dataset:(urn:li:dataPlatform:hive,explorer.*", "category": "TAG", "size": "1"}
    _open(browser, explorer["url"] + "/?" + urlencode(query))
    rows = lambda d: d.find_elements(By.CSS_SELECTOR, "#changes tbody tr.event")  # noqa: E731
    assert browser.find_element(By.ID, "changes-total").text == "2 matching change events, 1 shown"
    browser.find_element(By.ID, "changes-more").click()
    _wait(browser, lambda d: len(rows(d)) == 2)
    assert not browser.find_element(By.ID, "changes-more").is_displayed()
    cells = [_cells(r) for r in rows(browser)]
    assert [(c[1], c[2], c[3], c[4], c[5]) for c in cells] == [
        (BOB, "ADD", "TAG", ORDERS, "urn:li:tag:Beta"),
        (BOB, "ADD", "TAG", ORDERS, "urn:li:tag:Alpha"),
    ]
    assert cells[0][6] == "tagUrn=urn:li:tag:Beta"
    rows(browser)[0].find_element(By.TAG_NAME, "button").click()
    event = json.loads(browser.find_element(By.CSS_SELECTOR, "#changes tbody tr.raw pre").text)
    assert event["modifier"] == "urn:li:tag:Beta" and event["timestamp"] == ORDERS_TAGS_V2_AT
    # Every hive dataset change since the first day: the three of the orders table, two of the hostile one.
    _open(browser, explorer["url"] + "/?" + urlencode({"view": "changes", "entity": "urn:li:dataset:(urn:li:dataPlatform:hive,*", "since": "2024-03-01"}))
    assert browser.find_element(By.ID, "changes-total").text == "5 matching change events, 5 shown"
    exported = _downloaded_csv(browser, "changes-csv", "change-events.csv")
    assert [r["category"] for r in exported].count("TAG") == 3 and len(exported) == 5
    browser.save_screenshot(str(IMAGES / "explorer-changes.png"))


def test_the_regulator_report_downloads_for_the_form_s_window_and_entity(browser, explorer):
    _sign_in(browser, explorer)
    query = {"view": "changes", "entity": "urn:li:dataset:(urn:li:dataPlatform:hive,*", "since": "2024-03-01", "until": "2024-03-10"}
    _open(browser, explorer["url"] + "/?" + urlencode(query))
    # A prefix is refused: the report names one entity.
    browser.find_element(By.ID, "changes-report").click()
    _wait(browser, lambda d: "whole URN" in d.find_element(By.ID, "message").text)
    entity = browser.find_element(By.ID, "c-entity")
    entity.clear()
    entity.send_keys(ORDERS)
    browser.find_element(By.ID, "changes-report").click()
    target = browser.downloads / "audit-report-2024-03-01-2024-03-10.csv"
    _wait(browser, lambda d: target.exists() and "Downloaded" in d.find_element(By.ID, "report-status").text)
    text = target.read_text(encoding="utf-8")
    header = [line for line in text.splitlines() if line.startswith("# ")]
    rows = list(csv.DictReader(io.StringIO("\n".join(line for line in text.splitlines() if not line.startswith("# ")))))
    assert f"# entity_filter: {ORDERS}" in header and any(line.startswith("# chain_head_digest: ") for line in header)
    # The orders table's three changes (hand-listed above): two tags and its description, all by bob.
    assert [(r["actor"], r["category"], r["operation"]) for r in rows] == [
        (BOB, "TAG", "ADD"), (BOB, "TAG", "ADD"), (BOB, "DOCUMENTATION", "ADD"),
    ]  # fmt: skip


def test_the_html_report_prints_on_a4_with_its_header_and_row_count(browser, explorer, tmp_path):
    params = {"from": "2023-01-01", "to": "2025-01-01", "format": "html"}
    response = httpx.get(explorer["url"] + "/openapi/v1/audit/report", params=params,
                         headers={"Authorization": f"Bearer {explorer['reader']}"}, timeout=60)  # fmt: skip
    assert response.status_code == 200
    page = tmp_path / "report.html"
    page.write_bytes(response.content)
    pdf = tmp_path / "report.pdf"
    subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-pdf-header-footer",
                    f"--print-to-pdf={pdf}", page.as_uri()], capture_output=True, timeout=120, check=True)  # fmt: skip
    boxes = re.findall(rb"/MediaBox \[0 0 ([\d.]+) ([\d.]+)\]", pdf.read_bytes())
    # A4 landscape (297 x 210 mm in points), several pages.
    assert len(boxes) > 1 and all((round(float(w)), round(float(h))) == (842, 595) for w, h in boxes)
    browser.get(page.as_uri())
    rows = browser.find_elements(By.CSS_SELECTOR, "#changes tbody tr")
    count = browser.find_element(By.ID, "row-count")
    assert count.text == f"{len(rows)} changes in this report" and len(rows) > 300
    # Streamed after the rows, shown in the header above the table.
    assert count.location["y"] < browser.find_element(By.ID, "changes").location["y"]
    header = browser.find_element(By.TAG_NAME, "header").text
    for label in ("Window from (UTC)", "Reader's scope", "Chain head digest"):
        assert label in header
    assert [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#changes th")][:3] == ["Time (UTC)", "Actor", "Entity"]
    assert _broken_words(browser, "#changes th, #changes td:nth-child(6)") == []


def test_the_bench_reads_the_first_painted_results_of_a_bookmarked_search(explorer):
    results = run_explorer_bench(explorer["url"], explorer["reader"], {"alice": {"actor": ALICE}}, runs=2)
    # alice's seven events (hand-counted above) fit the default page.
    assert results["alice"]["rows_shown"] == 7
    paint = results["alice"]["first_paint_ms"]
    assert len(paint["runs"]) == 2 and all(0 < t < 30_000 for t in paint["runs"])
