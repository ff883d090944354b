"""`lakehouse bench explorer`: time to the first painted search results of the web page, in headless Chromium.

`lakehouse serve` runs on the home as its own process; Chromium (Debian's `chromium` and `chromium-driver`,
driven by Selenium) loads the page for a bookmarked search, once per run, and reads the page's own
`lakehouse:first-results` performance mark: milliseconds from the start of the navigation to the frame
after the first rows were put in the table (page, scripts, the API request and the rendering).
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import typer

from conf.errors import ConfigError
from pipelines.bench.harness import bench_settings, percentile, write_result
from pipelines.bench.processes import free_port, start_serve, stop

TOKEN_KEY = "lakehouse.explorer.token"
MARK = "lakehouse:first-results"


def open_browser(width: int = 1280, height: int = 900) -> Any:
    """Start headless Chromium through chromedriver.

    Raises:
        ConfigError: when Debian's chromium or chromium-driver is missing (`make browser` installs them).
    """
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not driver:
        raise ConfigError("chromium / chromedriver: not found on PATH; `make browser` installs Debian's packages")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     f"--window-size={width},{height}"):  # fmt: skip
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(driver), options=options)


def first_paint_ms(browser: Any, url: str, timeout: float = 60.0) -> tuple[float, int]:
    """Load `url` in a fresh navigation; return (ms to the first painted results, rows shown).

    Raises:
        RuntimeError: when no results are painted within `timeout` (with the page's message).
    """
    from selenium.webdriver.common.by import By

    browser.get(url)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        mark = browser.execute_script(f"const m = performance.getEntriesByName('{MARK}'); return m.length ? m[0].startTime : null")
        if mark is not None:
            return float(mark), len(browser.find_elements(By.CSS_SELECTOR, "#results tbody tr.event"))
        time.sleep(0.01)
    message = browser.find_element(By.ID, "message").text
    raise RuntimeError(f"no results painted within {timeout} s for {url}; page message: {message!r}")


def run_explorer_bench(base_url: str, token: str, searches: dict[str, dict[str, str]], runs: int) -> dict[str, Any]:
    """Time each bookmarked search `runs` times (the first load fetches the page's files, later ones use the cache).

    Args:
        base_url: where `lakehouse serve` answers.
        token: an audit-read token, put in the page's sessionStorage as the sign-in would.
        searches: name -> the search's URL parameters.
        runs: loads per search.
    """
    browser = open_browser()
    try:
        browser.get(base_url + "/")
        browser.execute_script(f"sessionStorage.setItem('{TOKEN_KEY}', arguments[0])", token)
        results = {}
        for name, params in searches.items():
            url = f"{base_url}/?{urlencode({'view': 'search', **params})}"
            timings, rows = [], 0
            for _ in range(runs):
                elapsed, rows = first_paint_ms(browser, url)
                timings.append(elapsed)
            results[name] = {
                "params": params,
                "rows_shown": rows,
                "first_paint_ms": {
                    "median": round(statistics.median(timings), 1),
                    "p95": round(percentile(timings, 95), 1),
                    "first_load": round(timings[0], 1),
                    "runs": [round(t, 1) for t in timings],
                },
            }
        return results
    finally:
        browser.quit()


def default_searches(actor: str | None) -> dict[str, dict[str, str]]:
    """The searches timed: everything (the page's default), the last week, and one actor over everything."""
    searches = {"all": {}, "last_week": {"preset": "week"}}
    if actor:
        searches["actor"] = {"actor": actor}
    return searches


def register(bench_app: typer.Typer) -> None:
    """Add `bench explorer` to the bench group."""

    @bench_app.command("explorer")
    def bench_explorer_command(
        home: Path = typer.Option(..., "--home", help="A home with published audit events (e.g. `bench search`'s)."),
        runs: int = typer.Option(5, "--runs", min=1, help="Page loads per search."),
        actor: str | None = typer.Option(None, "--actor", help="Also time a search for this actor URN."),
        out: Path = typer.Option(Path("bench-results"), "--out", help="Folder for the JSON result."),
    ) -> None:
        """Measure the web page's first painted search results in headless Chromium."""
        from pipelines.serving.tokens import create_token

        settings = bench_settings(home.resolve())
        token, _ = create_token(settings, "urn:li:corpuser:bench", ["audit-read"])
        port = free_port()
        log = Path(tempfile.mkdtemp(prefix="explorer-bench-")) / "serve.log"
        server = start_serve(home.resolve(), port, log)
        try:
            results = run_explorer_bench(f"http://127.0.0.1:{port}", token, default_searches(actor), runs)
        finally:
            stop(server)
        path = write_result(out, "explorer", {"home": str(home), "runs": runs, "searches": results})
        for name, result in results.items():
            paint = result["first_paint_ms"]
            typer.echo(f"{name}: first results painted, median {paint['median']} ms, first load {paint['first_load']} ms")
        typer.echo(f"-> {path}")
