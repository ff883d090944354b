"""The explorer's impact view in real headless Chromium over a real server, real lineage edges and change events."""

from __future__ import annotations

from urllib.parse import urlencode

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from pipelines.serving.impact import GRAPH_PATH
from tests.gold.test_openmetadata import ece
from tests.pipelines.batch.test_publish_lineage import A, ANN, B, BOB, CHART, JOB
from tests.pipelines.serving.test_explorer import IMAGES, _open, _wait, browser  # noqa: F401 (the browser fixture)
from tests.pipelines.serving.test_impact_api import served_lineage
from tests.silver.bronze_rows import mcl

pytestmark = pytest.mark.slow

# A dataset whose name is markup: it must show as text.
XSS = "urn:li:dataset:(urn:li:dataPlatform:hive,<svg onload=pwned=1>,PROD)"
LINEAGE = [
    mcl(JOB, "dataJobInputOutput", {"inputDatasets": [A, XSS], "outputDatasets": [B]}, version=1, time=1_000, actor=ANN),
    mcl(CHART, "chartInfo", {"title": "orders", "inputs": [{"string": B}]}, version=1, time=1_000, actor=ANN),
    # At 5000 the job stops reading XSS: the graph as of 6000 no longer holds it.
    mcl(JOB, "dataJobInputOutput", {"inputDatasets": [A], "outputDatasets": [B]}, version=2, time=5_000, actor=BOB),
]  # fmt: skip
EVENTS = [
    ece("a", 2_000, "TAG", "ADD", "urn:li:tag:PII", urn=A, actor=ANN),
    ece("x", 2_200, "OWNER", "ADD", "urn:li:corpuser:kim", urn=XSS, aspect="ownership", actor=BOB),
    ece("job", 2_500, "OWNER", "ADD", "urn:li:corpuser:kim", urn=JOB, entity_type="dataJob", aspect="ownership", actor=BOB),
    ece("chart", 3_000, "TAG", "ADD", "urn:li:tag:PII", urn=CHART, entity_type="chart", actor=BOB),
    ece("b", 4_000, "DOCUMENTATION", "ADD", urn=B, actor=ANN),
]  # fmt: skip


@pytest.fixture(scope="module")
def impact_site(spark, lakehouse):
    with served_lineage(spark, lakehouse, LINEAGE, EVENTS) as (base_url, tokens):
        yield {"url": base_url, "tokens": tokens}


def _show(driver, site, token: str, **query) -> None:
    driver.get(site["url"] + "/")
    driver.execute_script("sessionStorage.setItem('lakehouse.explorer.token', arguments[0])", site["tokens"][token])
    _open(driver, site["url"] + "/?" + urlencode({"view": "impact", **query}))
    _wait(driver, lambda d: d.find_element(By.ID, "impact-summary").text)


def _nodes(driver) -> dict[str, str]:
    """Each drawn entity's urn (blank when hidden) with its accessible label (its SVG title)."""
    return {
        node.get_attribute("data-urn"): node.find_element(By.TAG_NAME, "title").get_attribute("textContent")
        for node in driver.find_elements(By.CSS_SELECTOR, "#impact-graph svg g.node")
    }


def _hop_rows(driver) -> list[tuple[str, str, str]]:
    return [
        (table.find_element(By.XPATH, "preceding-sibling::h3").text.split(" (")[0], *[c.text for c in r.find_elements(By.TAG_NAME, "td")[1:3]])
        for table in driver.find_elements(By.CSS_SELECTOR, "#impact-hops table")
        for r in table.find_elements(By.CSS_SELECTOR, "tbody tr")
    ]


def test_the_graph_as_of_a_time_is_drawn_with_each_nodes_changes_and_the_changes_listed_by_hop(browser, impact_site):
    _show(browser, impact_site, "all", urn=B, direction="upstream", depth="3", since="0", until="10000", at="4500")
    svg = browser.find_element(By.CSS_SELECTOR, "#impact-graph svg")
    assert svg.get_attribute("role") == "group"
    assert "Upstream lineage of " + B in browser.find_element(By.ID, "impact-svg-title").get_attribute("textContent")
    nodes = _nodes(browser)
    assert set(nodes) == {B, JOB, A, XSS}
    assert nodes[JOB].startswith(f"{JOB}, hop 1, 1 changes in the window: OWNER ADD by {BOB}")
    assert nodes[XSS].startswith(f"{XSS}, hop 2, 1 changes")
    # The markup in the urn is text: drawn as its characters, never run.
    assert browser.execute_script("return typeof window.pwned") == "undefined"
    labels = [t.get_attribute("textContent") for t in browser.find_elements(By.CSS_SELECTOR, "#impact-graph text.name")]
    assert "<svg onload=pwned=1>" in labels
    assert len(browser.find_elements(By.CSS_SELECTOR, "#view-impact svg")) == 1
    # Every node is reachable with the keyboard, in drawing order.
    for node in browser.find_elements(By.CSS_SELECTOR, "#impact-graph svg g.node"):
        assert node.get_attribute("tabindex") == "0"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#impact-graph path.edge")) == 3
    assert _hop_rows(browser) == [
        ("Hop 0: the entity itself", B, "DOCUMENTATION"),
        ("Hop 1", JOB, "OWNER"),
        ("Hop 2", A, "TAG"),
        ("Hop 2", XSS, "OWNER"),
    ]
    IMAGES.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(IMAGES / "explorer-impact.png"))
    # After the job stopped reading it, the graph no longer holds the dataset.
    _show(browser, impact_site, "all", urn=B, direction="upstream", depth="3", since="0", until="10000", at="6000")
    assert set(_nodes(browser)) == {B, JOB, A}


def test_a_change_opens_what_it_reached_downstream_and_a_node_opens_with_the_keyboard(browser, impact_site):
    _show(browser, impact_site, "all", urn=B, direction="upstream", depth="3", since="0", until="10000", at="4500")
    row = next(r for r in browser.find_elements(By.CSS_SELECTOR, "#impact-hops tbody tr") if A in r.text)
    row.find_element(By.CSS_SELECTOR, "button.link").click()
    _wait(browser, lambda d: "downstream of " + A in d.find_element(By.ID, "impact-summary").text)
    assert browser.find_element(By.ID, "i-direction").get_attribute("value") == "downstream"
    assert browser.find_element(By.ID, "i-since").get_attribute("value") == "2000"
    assert set(_nodes(browser)) == {A, JOB, B, CHART}
    assert [(hop, urn) for hop, urn, _ in _hop_rows(browser)] == [
        ("Hop 0: the entity itself", A), ("Hop 1", JOB), ("Hop 2", B), ("Hop 3", CHART),
    ]  # fmt: skip
    chart = browser.find_element(By.CSS_SELECTOR, f"#impact-graph g.node[data-urn='{CHART}']")
    browser.execute_script("arguments[0].focus()", chart)
    assert browser.switch_to.active_element == chart
    chart.send_keys(Keys.ENTER)
    _wait(browser, lambda d: "downstream of " + CHART in d.find_element(By.ID, "impact-summary").text)


def test_a_scoped_reader_sees_hidden_nodes_and_only_its_changes(browser, impact_site):
    _show(browser, impact_site, "datasets", urn=B, direction="upstream", depth="3", since="0", until="10000", at="4500")
    nodes = _nodes(browser)
    assert set(nodes) == {B, A, XSS, ""}
    assert nodes[""] == "An entity outside your scope, hop 1"
    assert JOB not in browser.find_element(By.ID, "view-impact").text
    assert [urn for _, urn, _ in _hop_rows(browser)] == [B, A, XSS]


def test_the_graph_endpoint_names_a_bad_parameter(impact_site):
    headers = {"Authorization": f"Bearer {impact_site['tokens']['all']}"}
    response = httpx.get(impact_site["url"] + GRAPH_PATH, params={"urn": B, "at": "yesterday"}, headers=headers)
    assert response.status_code == 400 and "at: 'yesterday'" in response.text
    outside = httpx.get(impact_site["url"] + GRAPH_PATH, params={"urn": CHART},
                        headers={"Authorization": f"Bearer {impact_site['tokens']['datasets']}"})  # fmt: skip
    assert outside.status_code == 404
