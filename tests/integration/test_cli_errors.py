"""What an operator sees when something outside the command stops it: one line that says what and
what to do, no traceback. The commands run as an operator's shell runs them (subprocesses)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from tests.conftest import EXAMPLE_TOOLS, RedisServer, as_published, free_port, other_protocol_server

FITTEST = Path(sys.executable).parent / "fittest"


def test_every_kind_of_command_says_at_once_that_redis_does_not_answer(model_path: Path) -> None:
    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    env = {**os.environ, "FITTEST_REDIS_URL": url, "FITTEST_EMBEDDING_MODEL_PATH": str(model_path)}
    env.pop("FITTEST_RESULT_BACKEND", None)
    commands = [["tools"], ["call", "sort these numbers", "--timeout", "2"], ["show", "sort_numbers"],
                ["feedback", "show", "sort_numbers"], ["weights"], ["metrics", "--once"]]
    running = [subprocess.Popen([str(FITTEST), *c], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for c in commands]
    for command, proc in zip(commands, running, strict=True):
        # not after the ~30 s of retries with which the clients ride out a restart
        output, _ = proc.communicate(timeout=25)
        said = " ".join(output.split())
        assert proc.returncode == 1, (command, output)
        assert "Traceback" not in output, (command, output)
        assert "error: Redis does not answer" in said and "Connection refused" in said, (command, output)
        assert "FITTEST_REDIS_URL is redis://:**@127.0.0.1" in said and "hunter2" not in said, (command, output)


def test_a_redis_that_refuses_the_password_or_the_database_is_named_as_such(
    model_path: Path, private_redis: RedisServer, tmp_path: Path
) -> None:
    redis.Redis.from_url(private_redis.url).config_set("requirepass", "sesame")
    port = private_redis.url.rsplit(":", 1)[1].split("/")[0]

    def tools(url: str) -> tuple[int, str]:
        env = {**os.environ, "FITTEST_REDIS_URL": url, "FITTEST_EMBEDDING_MODEL_PATH": str(model_path),
               "FITTEST_TOOLS_DIR": str(EXAMPLE_TOOLS), "FITTEST_DATA_DIR": str(tmp_path / "data")}
        env.pop("FITTEST_RESULT_BACKEND", None)
        done = subprocess.run([str(FITTEST), "tools"], env=env, capture_output=True, text=True, timeout=25)
        assert "Traceback" not in done.stderr, done.stderr
        return done.returncode, " ".join(done.stderr.split())

    code, said = tools(f"redis://:wrong@127.0.0.1:{port}/0")
    assert code == 1 and "error: Redis refuses the credentials" in said and "wrong" not in said, said
    code, said = tools(f"redis://:sesame@127.0.0.1:{port}/99")
    assert code == 1 and "error: Redis refuses the connection (DB index is out of range)" in said, said
    assert tools(f"redis://:sesame@127.0.0.1:{port}/0")[0] == 0


def said_of(greeting: bytes) -> str:
    """What the commands say of a server that greets so: one that closes at once may be a proxy whose
    Redis is away (QA 59f F4), and is not called another protocol outright."""
    if not greeting:
        return "error: Redis does not answer: what answers at that host and port closes the connection at once"
    if greeting.startswith(b"-LOADING"):  # QA 59e: "Is it running? `fittest up` starts one"
        return "error: Redis answers, but is still loading its data set into memory: try again once it has"
    return "error: Redis is not what answers there: a server of another protocol answers at that host and port"


@pytest.mark.parametrize("greeting", [b"<html>not redis</html>\r\n", b"+OK POP3 ready\r\n",
                                      b"",  # one that takes the connection and closes it, as PostgreSQL does
                                      b"-LOADING Redis is loading the dataset in memory\r\n"])
def test_a_url_where_another_kind_of_server_answers_is_named_as_such(model_path: Path, greeting: bytes) -> None:
    """QA 57a M1: a FITTEST_REDIS_URL naming an HTTP service's port ended every command with redis-py's
    InvalidResponse traceback; QA 57d L2: a server greeting with "+OK" ended it with an AttributeError;
    one that closes the connection was said not to answer, where `fittest up` told it apart (stop 58)."""
    with other_protocol_server(greeting) as port:
        env = {**os.environ, "FITTEST_REDIS_URL": f"redis://127.0.0.1:{port}/0",
               "FITTEST_EMBEDDING_MODEL_PATH": str(model_path)}
        env.pop("FITTEST_RESULT_BACKEND", None)
        for command in (["tools"], ["result", "abc"], ["metrics", "--once"]):
            done = subprocess.run([str(FITTEST), *command], env=env, capture_output=True, text=True, timeout=60)
            said = " ".join(done.stderr.split())
            assert done.returncode == 1 and "Traceback" not in done.stderr, (command, done.stderr)
            assert said_of(greeting) in said, (command, said)
        done = subprocess.run([str(FITTEST), "health", "--check", "redis", "--json"], env=env, capture_output=True,
                              text=True, timeout=60)
        redis_check = next(check for check in json.loads(done.stdout)["checks"] if check["name"] == "redis")
        assert done.returncode == 1 and redis_check["status"] == "fail", done.stdout
        assert redis_check["detail"].startswith(f"Redis at FITTEST_REDIS_URL {said_of(greeting).removeprefix('error: Redis ')}"), \
            redis_check


def test_a_command_no_worker_answers_says_so_and_a_tool_that_does_not_exist_is_refused_first(
    model_path: Path, private_redis: RedisServer, tmp_path: Path
) -> None:
    fittest = without_workers(model_path, private_redis.url, tmp_path)
    assert fittest("evolve", "nosuch")[:2] == (2, "error: no tool named 'nosuch'")  # refused: the caller's to mend
    code, said, _ = fittest("evolve", "sort_numbers", "--version", "9.9.9")
    assert code == 2 and "sort_numbers has no version '9.9.9' (it has 1.0.0)" in said
    code, said, _ = fittest("evolve", "sort_numbers", "--timeout", "4")
    # QA 49: it said "are they running?", and its request, left in the queue, was done once a worker
    # started, so that the retry the message asked for evolved twice: it now expires unapplied.
    assert code == 1, said
    assert ("no worker took the evolution of sort_numbers within 4 s: is the selection worker running (`fittest up`)? "
            "Nothing was evolved: send it again once one runs") in said, said
    # QA 57a M7: and that no worker takes that queue now, where it waited its 600 s without a word
    assert ("no worker takes the selection queue now (`fittest up` starts them); waiting for a worker of the "
            "selection queue to answer (up to 4 s") in said, said
    client = redis.Redis.from_url(private_redis.url)
    try:
        left = [json.loads(m) for m in client.lrange("selection", 0, -1)]
    finally:
        client.close()
    assert [m["headers"]["task"] for m in left] == ["fittest.prepare_evolution"]
    assert left[0]["headers"]["expires"] is not None  # a worker that takes it later drops it


def test_a_tool_whose_manifest_does_not_load_now_is_not_said_to_be_gone(model_path: Path, private_redis: RedisServer,
                                                                        tmp_path: Path) -> None:
    """QA new user: `fittest show upper_text` said "no tool named 'upper_text'" while its manifest
    was half-edited, and the workers served it in the same minute, as they last read it."""
    import shutil

    tools = tmp_path / "tools"
    shutil.copytree(EXAMPLE_TOOLS, tools)
    manifest = tools / "slugify" / "tool.yaml"
    text = manifest.read_text()
    assert "implementation:\n  kind: python\n  entrypoint: slug:run\n" in text
    manifest.write_text(text.replace("implementation:\n  kind: python\n  entrypoint: slug:run\n", ""))  # half-edited
    other = tools / "word_stats" / "tool.yaml"
    other.write_text(other.read_text() + "timeout_s: -1\n")  # another tool's, broken too
    fittest = without_workers(model_path, private_redis.url, tmp_path, tools)
    code, said, _ = fittest("show", "slugify")
    assert code == 2 and f"no tool named 'slugify'; these manifests do not load: {manifest}: field 'implementation'" in said, said
    assert "the workers serve it as they last read it" in said
    assert str(other) not in said  # QA 51c: every broken manifest of the folder was named
    for name in ("nosuch", tools.name, tmp_path.name):  # nor by a folder above the tools directory (QA 51d)
        code, said, _ = fittest("show", name)
        assert code == 2 and "these manifests do not load" not in said, said
    # NAME@VERSION, as `feedback show` takes it (QA 55b L6: "no tool named 'sort_numbers@1.0.0'")
    code, said, _ = fittest("show", "sort_numbers@1.0.0", "--json")
    assert code == 0, said
    code, said, _ = fittest("show", "sort_numbers@9.9.9")
    assert code == 2 and "sort_numbers has no version '9.9.9' (it has 1.0.0)" in said, said


def test_a_judgement_no_worker_took_in_time_is_never_recorded_so_it_can_be_sent_again(
    model_path: Path, private_redis: RedisServer, tmp_path: Path
) -> None:
    """QA AC: `feedback add` said no worker had answered, yet the judgement was applied once a
    worker started; sent again, as the message asked, it counted twice."""
    from tests.integration.conftest import pipeline_running

    with pipeline_running(tmp_path, private_redis.url, model_path, EXAMPLE_TOOLS, roles=("memory",)) as workers:
        workers.stack.stop("memory")
        fittest = without_workers(model_path, private_redis.url, tmp_path)
        judge = ("feedback", "add", "sort_numbers", "negative", "--scenario", "sort these numbers", "--reason", "sent twice")
        # 8 s: the notice comes at 3 s, after the workers were asked; at 4 s a loaded host's ask outlasted the wait
        code, said, _ = fittest(*judge, "--timeout", "8")
        assert code == 1 and "no worker answered" in said and "Nothing was done: send it again" in said, said
        # ...and, from 3 s on, that it waits (QA: it said nothing for its whole timeout)
        assert "no worker takes the feedback queue now (`fittest up` starts them); waiting for a worker of the feedback " \
            "queue to answer (up to 8 s; `fittest health` checks them)" in said, said
        # So does an evolution asked for by hand, which is no call that expired once a worker drops it.
        code, said, _ = fittest("evolve", "sort_numbers", "--timeout", "2")
        assert code == 1 and "Nothing was evolved" in said, said
        workers.stack.start_roles(["memory"])
        workers.stack.wait_for_workers(["memory"])
        code, said, _ = fittest(*judge, "--timeout", "60")  # sent again, once a worker runs
        assert code == 0, said
        workers.settled()  # every message taken and acknowledged: the first, had it not expired, is applied by now
        shown = subprocess.run([str(FITTEST), "feedback", "show", "sort_numbers", "--json"], env=workers.env,
                               capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        reasons = [e["reason"] for e in json.loads(shown.stdout)["entries"]]
        assert reasons.count("sent twice") == 1, reasons
        from workers.metrics import reader_for
        from workers.state.evolution import EvolutionState

        client = redis.Redis.from_url(private_redis.url)
        try:
            assert EvolutionState(client, workers.settings.key_prefix).changelog("sort_numbers") == []  # never evolved
        finally:
            client.close()
        calls = reader_for(workers.settings).counters().get("calls", [])
        assert not [n for labels, n in calls if labels.get("status") in ("expired", "revoked")], calls


def without_workers(model_path: Path, redis_url: str, tmp_path: Path,
                    tools: Path = EXAMPLE_TOOLS) -> Callable[..., tuple[int, str, float]]:
    """`fittest ARGS` on a Redis no worker serves, with the example tools (or `tools`): its exit
    code, what it said on stderr (one line) and how long it took; never a traceback."""
    env = {**os.environ, "FITTEST_REDIS_URL": redis_url, "FITTEST_EMBEDDING_MODEL_PATH": str(model_path),
           "FITTEST_TOOLS_DIR": str(tools), "FITTEST_DATA_DIR": str(tmp_path / "data"), "FITTEST_KEY_PREFIX": "cli:"}
    env.pop("FITTEST_RESULT_BACKEND", None)

    def fittest(*args: str) -> tuple[int, str, float]:
        started = time.monotonic()
        done = subprocess.run([str(FITTEST), *args], env=env, capture_output=True, text=True, timeout=120)
        assert "Traceback" not in done.stderr, done.stderr
        return done.returncode, " ".join(done.stderr.split()), time.monotonic() - started

    return fittest


def test_a_tools_dir_that_is_not_there_is_named_with_the_path_it_was_read_as(
    model_path: Path, private_redis: RedisServer, tmp_path: Path
) -> None:
    import redis

    from selection.models import Severity
    from workers.state.redis import RedisStateStore

    env = {**os.environ, "FITTEST_REDIS_URL": private_redis.url, "FITTEST_EMBEDDING_MODEL_PATH": str(model_path),
           "FITTEST_TOOLS_DIR": "mytools", "FITTEST_DATA_DIR": str(tmp_path / "data"), "FITTEST_KEY_PREFIX": "gone:"}
    env.pop("FITTEST_RESULT_BACKEND", None)
    done = subprocess.run([str(FITTEST), "tools", "--json"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert f"warning: FITTEST_TOOLS_DIR ({tmp_path / 'mytools'}) is not a directory" in said, said
    # The versions the workers keep (and count) meanwhile are listed with their counters (QA ops: an empty table).
    state = RedisStateStore(redis.Redis.from_url(private_redis.url), "gone:")
    state.mark_failure("slugify@1.0.0", "a1", Severity.high)
    done = subprocess.run([str(FITTEST), "tools", "--json"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    rows = json.loads(done.stdout)
    assert [(r["name"], r["version"], r["quality"], r["failures"]) for r in rows] == [("slugify", "1.0.0", 0.9, 1)], rows
    assert "its manifest is not read" in rows[0]["kind"]
    # ...and `show` of it says why it finds no manifest (QA 49: a bare "no tool named").
    done = subprocess.run([str(FITTEST), "show", "slugify"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    said = " ".join(done.stderr.split())
    assert done.returncode == 2 and (f"no tool named 'slugify'; FITTEST_TOOLS_DIR ({tmp_path / 'mytools'}) is not there: if "
                                     "the tool is in it, the workers keep it registered") in said, said
    state.clear()


def test_refused_manifests_are_listed_as_json_apart_from_the_versions_whose_list_keeps_its_shape(
    model_path: Path, private_redis: RedisServer, tmp_path: Path
) -> None:
    """QA onboarding M3: `tools --json` listed the versions served and nothing of the manifests
    refused (only stderr prose said so); a CI check of a team's onboarding never saw them, and
    should not need Redis to."""
    import shutil

    tools = tmp_path / "tools"
    shutil.copytree(EXAMPLE_TOOLS / "slugify", tools / "slugify")
    (tools / "bad_version").mkdir()
    (tools / "bad_version" / "tool.yaml").write_text(
        (EXAMPLE_TOOLS / "slugify" / "tool.yaml").read_text().replace("version: 1.0.0", "version: v1.0") + "timeout_s: -1\n")
    env = {**os.environ, "FITTEST_REDIS_URL": private_redis.url, "FITTEST_EMBEDDING_MODEL_PATH": str(model_path),
           "FITTEST_TOOLS_DIR": str(tools), "FITTEST_DATA_DIR": str(tmp_path / "data"), "FITTEST_KEY_PREFIX": "refused:"}
    env.pop("FITTEST_RESULT_BACKEND", None)
    run = lambda *args: subprocess.run([str(FITTEST), "tools", *args], env=env, capture_output=True, text=True, timeout=120)  # noqa: E731
    listed = run("--json")
    assert listed.returncode == 0 and [r["name"] for r in json.loads(listed.stdout)] == ["slugify"], listed.stderr
    assert "`fittest tools --refused --json` lists them" in " ".join(listed.stderr.split())
    refused = run("--refused", "--json")
    assert refused.returncode == 1, refused.stderr  # a CI check fails on it without parsing anything
    as_published(json.loads(refused.stdout), "tools_refused_output")
    # every field at fault is one (QA 51c: the second was only in the reason's words), the files its
    # implementation names too (QA 55b L9: its folder has no slug.py, which only a second load said)
    assert json.loads(refused.stdout) == [{"path": str(tools / "bad_version" / "tool.yaml"), "field": "version",
                                           "reason": "'v1.0' is not a semantic version (MAJOR.MINOR.PATCH); field "
                                                     "'timeout_s': Input should be greater than 0; field "
                                                     "'implementation.entrypoint': module 'slug' is neither slug.py in "
                                                     "the tool's folder nor a module Python can import",
                                           "fields": ["version", "timeout_s", "implementation.entrypoint"]}]
    # a CI check of the manifests needs no Redis
    env["FITTEST_REDIS_URL"] = f"redis://127.0.0.1:{free_port()}/0"
    offline = run("--refused", "--json")
    assert offline.returncode == 1 and json.loads(offline.stdout) == json.loads(refused.stdout), offline.stderr
    # a wrong path checks nothing, and does not pass (QA evolution M4)
    wrong = subprocess.run([str(FITTEST), "tools", "--refused"], env={**env, "FITTEST_TOOLS_DIR": str(tmp_path / "tols")},
                           capture_output=True, text=True, timeout=120)
    assert wrong.returncode == 2 and f"FITTEST_TOOLS_DIR ({tmp_path / 'tols'}) is not a directory: no manifest was checked" \
        in " ".join(wrong.stderr.split()), wrong.stderr
    (tools / "bad_version" / "tool.yaml").unlink()
    clean = run("--refused", "--json")
    assert clean.returncode == 0 and json.loads(clean.stdout) == [], clean.stderr
    # A declared language that is a typo of a known one matches no call's language: noted, not
    # refused (QA integration L1); a real language nothing detects (fsharp, like csharp) is no typo.
    manifest = tools / "slugify" / "tool.yaml"
    manifest.write_text(manifest.read_text().replace("  complexity_max: 0.4", "  complexity_max: 0.4\n  languages: [Pyton, fsharp]"))
    noted = run("--refused", "--json")
    said = " ".join(noted.stderr.split())
    assert noted.returncode == 0 and json.loads(noted.stdout) == [], noted.stderr
    assert f"note {manifest}: sparc.languages 'pyton' is not a language selection knows: did you mean 'python'?" in said, said
    assert "fsharp" not in said, said


def test_settings_the_commands_refuse_are_named_in_one_line(model_path: Path, tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text("max_candidates =\n")
    (tmp_path / "typo.toml").write_text("max_candidatse = 3\nFITTEST_POLICY = 'seed'\n")
    (tmp_path / "masked.toml").write_text("metrics_port = 99999\n")
    (tmp_path / "bounds.toml").write_text("max_timeout_s = 0.3\n")  # QA learning F6: the environment's port hid it
    cases = [
        # QA: each of these was taken (exit 0), or ended in a traceback at the first port bound.
        ({"FITTEST_METRICS_PORT": "99999"}, "FITTEST_METRICS_PORT: Input should be less than or equal to 65535"),
        ({"FITTEST_POLICY": "foo"}, "FITTEST_POLICY: unknown selection policy 'foo' (known: learned, seed)"),
        ({"FITTEST_MIN_TIMEOUT_S": "50", "FITTEST_MAX_TIMEOUT_S": "5"}, "FITTEST_MIN_TIMEOUT_S (50) exceeds FITTEST_MAX_TIMEOUT_S (5)"),
        ({"FITTEST_CONFIG": str(tmp_path / "typo.toml")},
         f"FITTEST_CONFIG {tmp_path / 'typo.toml'}: no such setting: 'max_candidatse' (did you mean max_candidates?), "
         "'FITTEST_POLICY' (write it as policy)"),
        ({"FITTEST_MAX_CANDIDATES": "abc"}, "FITTEST_MAX_CANDIDATES: Input should be a valid integer"),
        ({"FITTEST_REDIS_URL": "localhost:6379"}, "FITTEST_REDIS_URL: 'localhost:6379' is not a Redis URL"),
        # QA 57a L2: a traceback of Celery's at the first call, an error naming no setting
        ({"FITTEST_RESULT_BACKEND": "http://127.0.0.1:8765/"},
         "FITTEST_RESULT_BACKEND: 'http://127.0.0.1:8765/' is no result backend Celery can use: Unknown result backend: 'http'"),
        ({"FITTEST_QDRANT_URL": "notaurl"}, "FITTEST_QDRANT_URL: 'notaurl' is not a Qdrant server's URL"),
        ({"FITTEST_LLM_URL": "ftp://x"}, "FITTEST_LLM_URL: 'ftp://x' is not an OpenAI-compatible endpoint's URL"),  # QA 58c L7
        ({"FITTEST_TOOLS_RESCAN_S": "0.001"}, "FITTEST_TOOLS_RESCAN_S: 0.001 s is too often"),  # QA 58c L1
        ({"FITTEST_RESULT_BACKEND": "redis://127.0.0.1:notaport/0"},  # QA 57d: urllib's ValueError at the first call
         "FITTEST_RESULT_BACKEND: 'redis://127.0.0.1:notaport/0' has a port that is not a number from 0 to 65535"),
        # QA 57a M4: refused by the memory worker's store only, and every call then served degraded
        ({"FITTEST_COLLECTION_PREFIX": "../../evil/"},
         "FITTEST_COLLECTION_PREFIX: collection prefix '../../evil/' may use only letters, digits, '_', '.' and '-'"),
        ({"FITTEST_CONFIG": str(tmp_path / "none.toml")}, f"FITTEST_CONFIG names {tmp_path / 'none.toml'}, which is not a file"),
        ({"FITTEST_CONFIG": str(tmp_path / "bad.toml")}, f"FITTEST_CONFIG {tmp_path / 'bad.toml'} is not valid TOML"),
        ({"FITTEST_CONFIG": str(tmp_path / "masked.toml"), "FITTEST_METRICS_PORT": "9900"},
         f"FITTEST_CONFIG {tmp_path / 'masked.toml'}: metrics_port: Input should be less than or equal to 65535"),
        ({"FITTEST_CONFIG": str(tmp_path / "bounds.toml")},  # QA recheck F4: the 0.3 came from the file
         f"FITTEST_MIN_TIMEOUT_S (0.5) exceeds FITTEST_MAX_TIMEOUT_S (0.3) (as the environment, FITTEST_CONFIG "
         f"{tmp_path / 'bounds.toml'} and the defaults give them)"),
    ]
    for setting, says in cases:
        env = {**os.environ, "FITTEST_EMBEDDING_MODEL_PATH": str(model_path), **setting}
        done = subprocess.run([str(FITTEST), "tools"], env=env, capture_output=True, text=True, timeout=60)
        said = " ".join(done.stderr.split())
        assert done.returncode == 1 and "Traceback" not in done.stderr, (setting, done.stderr)
        assert said.startswith("error: the settings are refused:") and says in said, (setting, said)


def test_metrics_on_a_port_in_use_says_so(model_path: Path, private_redis: RedisServer) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "FITTEST_REDIS_URL": private_redis.url, "FITTEST_EMBEDDING_MODEL_PATH": str(model_path),
               "FITTEST_METRICS_ADDR": "127.0.0.1"}  # the address it listens on, as a setting (--addr overrides it)
        done = subprocess.run([str(FITTEST), "metrics", "--port", str(port)], env=env,
                              capture_output=True, text=True, timeout=60)
    said = " ".join(done.stderr.split())
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"cannot serve metrics on 127.0.0.1:{port}" in said and "FITTEST_METRICS_PORT" in said, said
    # An address not of this host is named as such, not blamed on the port (QA README L2).
    elsewhere = subprocess.run([str(FITTEST), "metrics", "--port", str(port)], env={**env, "FITTEST_METRICS_ADDR": "192.0.2.1"},
                               capture_output=True, text=True, timeout=60)
    said = " ".join(elsewhere.stderr.split())
    assert elsewhere.returncode == 1 and "FITTEST_METRICS_ADDR chooses an address" in said and "PORT" not in said, said
    # ...and given as --addr, it is a value refused: exit code 2 (QA 60d L6)
    given = subprocess.run([str(FITTEST), "metrics", "--port", str(port), "--addr", "192.0.2.1"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert given.returncode == 2 and "--addr or FITTEST_METRICS_ADDR" in " ".join(given.stderr.split()), given.stderr


def test_a_call_no_worker_can_take_and_a_result_nobody_sent_are_told_in_seconds(
    model_path: Path, private_redis: RedisServer, tmp_path: Path
) -> None:
    """Not after the whole --timeout: the command asks whether a result can come at all."""
    fittest = without_workers(model_path, private_redis.url, tmp_path)
    code, said, took = fittest("call", "sort these numbers", "--input", '{"numbers": [2, 1]}', "--namespace", "sort_numbrs",
                               "--timeout", "100")
    assert code == 1 and took < 60, (code, said, took)
    assert "no worker takes the selection queue" in said and "the call stays queued, and `fittest result" in said
    call_id = said.split("no result for call ")[1].split(":")[0]
    code, said, took = fittest("result", call_id, "--timeout", "8")  # queued: waited for, up to --timeout
    assert code == 1 and took > 8, (said, took)  # where the call is, rather than "is a selection worker running?"
    assert "within 8 s: it is waiting for a selection worker (fittest.resilient_tool_call) and goes on" in said, said
    # QA 57a M7: and that no worker takes that queue now
    assert "no worker takes the selection queue now (`fittest up` starts them)" in said, said
    code, said, took = fittest("result", "no-such-call", "--timeout", "100")
    assert code == 1 and took < 60 and "no call with this id is queued or running" in said, (said, took)


def test_a_call_a_worker_took_is_not_said_to_lack_one_when_the_workers_do_not_answer_a_ping(
    private_redis: RedisServer, monkeypatch
) -> None:
    """QA ops M2: after a Redis restart of 6 s, a running call's `fittest call` ended with "no worker
    takes the selection queue": its one ping went while the workers were still reconnecting."""
    from workers.cli.calls import no_selection_worker
    from workers.client import CallSender
    from workers.settings import Settings, get_settings
    from workers.state.inflight import HandedOnStep

    monkeypatch.setenv("FITTEST_REDIS_URL", private_redis.url)
    monkeypatch.setenv("FITTEST_KEY_PREFIX", "took:")
    get_settings.cache_clear()
    client = CallSender(Settings(redis_url=private_redis.url, key_prefix="took:"))
    try:
        client._inflight.handed_on(HandedOnStep(task_id="running-call", task="fittest.execute", hop=1), 60)
        client._inflight.sent(HandedOnStep(task_id="queued-call", task="fittest.resilient_tool_call"), 60)
        client._inflight.flush()
        assert no_selection_worker(client, "running-call", "stays") is None  # a worker took it: one runs
        said = no_selection_worker(client, "queued-call", "stays")  # no worker answers, and none took it
        assert said is not None and said.startswith("no worker takes the selection queue"), said
    finally:
        client.celery.close()
        get_settings.cache_clear()


def test_a_call_without_a_result_says_so_as_json_on_stdout_with_json(model_path: Path, private_redis: RedisServer, tmp_path: Path) -> None:
    """QA ops: with --json, a call that timed out printed nothing on stdout; its id, which a script
    needs to ask for the result later, was only in the error line on stderr."""
    env = {**os.environ, "FITTEST_REDIS_URL": private_redis.url, "FITTEST_EMBEDDING_MODEL_PATH": str(model_path),
           "FITTEST_TOOLS_DIR": str(EXAMPLE_TOOLS), "FITTEST_DATA_DIR": str(tmp_path / "data"), "FITTEST_KEY_PREFIX": "cli:"}
    env.pop("FITTEST_RESULT_BACKEND", None)
    done = subprocess.run([str(FITTEST), "call", "sort these numbers", "--input", '{"numbers": [2, 1]}', "--json",
                           "--timeout", "100"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    said = json.loads(done.stdout)
    assert said["status"] == "pending" and said["call_id"] in done.stderr and "no worker takes the selection queue" in said["message"]
    # A call nobody sent is "unknown", which a script reading `status` does not poll (QA 49: "pending").
    done = subprocess.run([str(FITTEST), "result", "never-sent-call", "--json"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    said = json.loads(done.stdout)
    assert said["status"] == "unknown" and "no call with this id is queued or running" in said["message"], said


def test_a_data_dir_that_cannot_be_made_is_named_by_up_and_demo(model_path: Path) -> None:
    """QA 57a M8: NotADirectoryError's traceback, of FITTEST_DATA_DIR=/dev/null/data."""
    env = {**os.environ, "FITTEST_EMBEDDING_MODEL_PATH": str(model_path), "FITTEST_DATA_DIR": "/dev/null/data",
           "FITTEST_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    for command, where in ((["up", "--without", "toolserver"], "/dev/null/data"), (["demo", "--calls", "1"], "/dev/null/data/demo")):
        done = subprocess.run([str(FITTEST), *command], env=env, capture_output=True, text=True, timeout=120)
        said = " ".join(done.stderr.split())
        assert done.returncode == 1 and "Traceback" not in done.stderr, (command, done.stderr)
        assert f"error: FITTEST_DATA_DIR ({where}) cannot hold the stack's data: Not a directory" in said, (command, said)
