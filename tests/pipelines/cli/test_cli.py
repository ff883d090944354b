"""The `lakehouse` console script, run as a real subprocess."""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conf.tables import TABLES
from pipelines.runtime.lock import run_lock
from tests.conftest import FIXTURES, make_settings

LAKEHOUSE = str(Path(sys.executable).with_name("lakehouse"))


def run_cli(
    *args: str, home: Path | None = None, env: dict | None = None, check: bool = True, timeout: float = 300
):
    """Run the installed `lakehouse` script and return the completed process.

    The child gets this process's environment without the lakehouse's own variables and without the
    Spark Connect ones: this process's Connect sessions set SPARK_CONNECT_MODE_ENABLED, which would
    turn a classic session in the child into a Connect one. `env` is added after.
    """
    command = [LAKEHOUSE, *(["--home", str(home)] if home else []), *args]
    full_env = {
        k: v for k, v in os.environ.items()
        if not k.startswith(("LAKEHOUSE_", "SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED"))
    }
    full_env.update(env or {})
    result = subprocess.run(command, capture_output=True, text=True, env=full_env, timeout=timeout, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"{command} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


@pytest.fixture(scope="module")
def cli_home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cli-home")


def test_tables_on_an_empty_home_lists_every_table_with_zero_rows(cli_home: Path):
    result = run_cli("tables", "--json", home=cli_home)
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["table"] for r in rows] == list(TABLES)
    assert all(r["rows"] == 0 and r["version"] == 0 for r in rows)
    assert all(Path(r["location"]).is_relative_to(cli_home) for r in rows)


def test_tables_prints_a_table(cli_home: Path):
    result = run_cli("tables", home=cli_home, env={"COLUMNS": "200"})
    for key in TABLES:
        assert key in result.stdout


def test_sql_prints_json_lines(cli_home: Path):
    result = run_cli("sql", "select 1 as one, 'a' as letter union all select 2, 'b' order by one", "--json", home=cli_home)
    assert [json.loads(line) for line in result.stdout.splitlines()] == [
        {"one": 1, "letter": "a"},
        {"one": 2, "letter": "b"},
    ]


def test_sql_reads_registered_tables(cli_home: Path):
    result = run_cli("sql", "select count(*) as n from silver.entity_change_events", "--json", home=cli_home)
    assert json.loads(result.stdout) == {"n": 0}


def test_bad_sql_is_a_clean_error(cli_home: Path):
    result = run_cli("sql", "select * from no_such_table", home=cli_home, check=False)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "no_such_table" in result.stderr


def test_bad_config_prints_every_problem_without_a_traceback(tmp_path: Path):
    config = tmp_path / "bad.yaml"
    config.write_text("engine:\n  kind: warp\nevents:\n  owner_category: BOSS\napi:\n  port: 0\n")
    result = run_cli("--config", str(config), "tables", home=tmp_path, check=False)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    for expected in ("engine.kind: 'warp'", "events.owner_category: 'BOSS'", "api.port: 0"):
        assert expected in result.stderr


def test_unknown_profile_is_a_clean_error(tmp_path: Path):
    result = run_cli("--profile", "mars", "tables", home=tmp_path, check=False)
    assert result.returncode == 2
    assert "unknown profile 'mars'" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("replay", "--from", "0"), "Missing option '--to'"),
        (("refine", "--max-batches", "0"), "Invalid value for '--max-batches'"),
        (("replay", "--frm", "0", "--to", "5"), "No such option: --frm"),
        (("export", "events", "--format", "ece-jsonl"), "Missing option '--out'"),
    ],
)
def test_usage_errors_name_the_option_without_a_traceback(cli_home: Path, args, expected):
    result = run_cli(*args, home=cli_home, check=False)
    assert result.returncode == 2
    assert expected in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--until", ""), "--until: '' is neither epoch milliseconds nor an ISO-8601 time"),
        (("--until", "99999999999999999999"), "--until: '99999999999999999999' is outside the years 0001-9999"),
    ],
)
def test_a_bad_export_bound_is_an_error_and_keeps_the_existing_file(cli_home: Path, tmp_path: Path, args, expected):
    out = tmp_path / "events.jsonl"
    out.write_text("kept\n")
    result = run_cli("export", "events", "--format", "ece-jsonl", "--out", str(out), *args, home=cli_home, check=False)
    assert result.returncode == 1 and expected in " ".join(result.stderr.split())
    assert out.read_text() == "kept\n"


def test_an_export_to_a_folder_names_the_option(cli_home: Path, tmp_path: Path):
    result = run_cli("export", "events", "--format", "ece-jsonl", "--out", str(tmp_path), home=cli_home, check=False)
    assert result.returncode == 1
    # The console wraps long lines: compare with the whitespace made single.
    assert f"--out: '{tmp_path}' cannot be written (Is a directory)" in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("refine",),
        ("publish-audit",),
        ("publish-openmetadata",),
        ("maintain", "--table", "bronze.quarantine", "--optimize"),
        ("land", str(FIXTURES / "history-small.mcl.jsonl")),
    ],
)
def test_commands_that_write_tables_refuse_while_another_run_holds_the_lock(tmp_path: Path, args):
    settings = make_settings(tmp_path)
    with run_lock(settings, owner="a test holding the lock"):
        refused = run_cli(*args, home=tmp_path, check=False)
        reading = run_cli("sql", "SELECT COUNT(*) AS n FROM bronze.quarantine", "--json", home=tmp_path, check=False)
    assert refused.returncode == 1
    assert "another run holds the lock" in refused.stderr and "a test holding the lock" in refused.stderr
    assert reading.returncode == 0, reading.stderr


def test_maintain_requires_an_action(cli_home: Path):
    result = run_cli("maintain", home=cli_home, check=False)
    assert result.returncode == 1
    assert "choose at least one of --optimize, --vacuum, --history" in result.stderr


def test_maintain_history(cli_home: Path):
    result = run_cli("maintain", "--table", "bronze.quarantine", "--history", home=cli_home, env={"COLUMNS": "200"})
    assert "CREATE TABLE" in result.stdout or "CREATE" in result.stdout


def test_sql_headers_are_the_real_column_names(cli_home: Path):
    result = run_cli("sql", "select 1 as my_col, 'x' as event_id", home=cli_home)
    assert result.stdout.splitlines()[0].split() == ["my_col", "event_id"]


@pytest.mark.parametrize(
    ("query", "title", "column"),
    [
        ("describe gold.audit_events", "gold.audit_events (table): One audit event", "timestamp"),
        ("DESCRIBE TABLE silver.entity_change_events", "silver.entity_change_events (table)", "event_id"),
        ("desc gold.change_timeline", "gold.change_timeline (view): Every change event", "event_time"),
    ],
)
def test_describe_lists_the_columns_of_every_table_and_view(cli_home: Path, query, title, column):
    result = run_cli("sql", query, home=cli_home, env={"COLUMNS": "80"})
    assert title in " ".join(result.stdout.split())
    assert column in {line.split()[0] for line in result.stdout.splitlines() if len(line.split()) >= 2}
    assert max(len(line) for line in result.stdout.splitlines()) <= 80


def test_describe_names_the_unknown_table(cli_home: Path):
    result = run_cli("describe", "gold.nope", home=cli_home, check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "describe: 'gold.nope' is neither a table nor a view" in result.stderr


@pytest.mark.parametrize("args", [["--help"], ["sql", "--help"], ["run", "--help"], ["token", "create", "--help"]])
def test_help_shows_flags_without_value_types(args):
    result = run_cli(*args, env={"COLUMNS": "100"})
    assert "<bool>" not in result.stdout and "list[" not in result.stdout
    assert re.search(r"│ +--help +Show this message and exit", result.stdout)


def test_help_groups_the_commands_by_task():
    result = run_cli("--help", env={"COLUMNS": "100"})
    panels = re.findall(r"╭─ (\w+) ─", result.stdout)
    assert panels == ["Options", "Pipeline", "Query", "Serve", "Operate", "Bench"]
    assert "--set              <str>" in result.stdout
    assert result.stdout.index("│ run ") < result.stdout.index("│ sql ") < result.stdout.index("│ serve ")


# The benchmarks of `lakehouse bench`, in the order its help lists them.
BENCHMARKS = ("search", "verify", "erase", "watch", "silver", "subscriptions", "kafka", "backfill", "explorer", "impact",
              "generate", "anomalies", "metrics", "sql-server", "life", "plans")  # fmt: skip


def test_the_cli_starts_without_the_benchmarks_or_the_generator():
    # Their modules and libraries cost every command 0.3 CPU-seconds of imports: they load when named.
    program = "import sys, pipelines.cli.app; print(sorted(m for m in sys.modules if m.startswith(('pipelines.bench.', 'datagen.'))))"
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "['pipelines.bench.registry']"


def test_bench_lists_every_benchmark_and_answers_for_the_one_named():
    listed = run_cli("bench", "--help", env={"COLUMNS": "120"}).stdout
    assert [name for name in BENCHMARKS if f"│ {name} " in listed] == list(BENCHMARKS)
    assert listed.index("│ search ") < listed.index("│ plans ")
    assert "--versions" in run_cli("bench", "silver", "--help", env={"COLUMNS": "120"}).stdout


def test_an_empty_search_in_the_default_window_names_start_time(cli_home: Path):
    result = run_cli("search", home=cli_home)
    assert json.loads(result.stdout)["total"] == 0
    assert "no events in the default window" in result.stderr and "--start-time" in result.stderr
    assert "default window" not in run_cli("search", "--start-time", "2023-01-01", home=cli_home).stderr


def test_sql_names_limit_when_it_cuts_the_rows(cli_home: Path):
    result = run_cli("sql", "select id from range(5)", "--limit", "2", "--json", home=cli_home)
    assert [json.loads(line) for line in result.stdout.splitlines()] == [{"id": 0}, {"id": 1}]
    assert "(the first 2 rows; --limit N shows more)" in result.stderr
    assert "--limit" not in run_cli("sql", "select id from range(2)", "--limit", "2", home=cli_home).stderr


def test_quarantine_names_limit_when_there_are_more(tmp_path: Path):
    usage = tmp_path / "in" / "usage.jsonl"
    usage.parent.mkdir()
    usage.write_text("".join(
        json.dumps({"type": "LogInEvent", "actorUrn": f"urn:li:corpuser:u{n}", "timestamp": "yesterday"}) + "\n" for n in range(3)
    ))  # fmt: skip
    home = tmp_path / "home"
    run_cli("land", str(usage), "--no-progress", home=home)
    cut = run_cli("quarantine", "--limit", "2", home=home, env={"COLUMNS": "80"})
    title = " ".join(cut.stdout.split("batch_id")[0].split())
    assert title == ("Quarantined records: the first 2 (--limit N shows more); raw_text cut at 80 characters "
                     "(--json or --csv shows it whole)")  # fmt: skip
    whole = run_cli("quarantine", home=home, env={"COLUMNS": "80"})
    assert whole.stdout.startswith("Quarantined records (3);")
    # Lines fit the 80 columns, but for the file's path, which is never broken (its length is the test's).
    too_long = [line for line in whole.stdout.splitlines() if len(line) > 80 and not line.endswith(str(usage))]
    assert not too_long
    assert sum(line.endswith(str(usage)) for line in whole.stdout.splitlines()) == 3
