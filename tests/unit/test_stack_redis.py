"""`fittest up` and `fittest demo` start Redis when none answers: where they start it decides
whether the other shells' commands, with the same settings, find it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import redis

from tests.conftest import free_port, other_protocol_server
from workers.settings import Settings
from workers.stack import Stack


def stack(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, url: str) -> Stack:
    monkeypatch.setenv("FITTEST_REDIS_URL", url)
    return Stack(Settings(redis_url=url, data_dir=tmp_path / "data"))


def test_a_private_redis_is_started_where_the_settings_say(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    url = f"redis://:s3cret%2Fpw@127.0.0.1:{free_port()}/3"
    with stack(monkeypatch, tmp_path, url) as s:
        assert s.ensure_redis() == url
        started = s.procs["redis"]
        client = redis.Redis.from_url(url)  # what a command in another shell opens
        client.set("k", "v")
        assert redis.Redis.from_url(url.replace("/3", "/0")).get("k") is None  # database 3, not 0
        with pytest.raises(redis.AuthenticationError):
            redis.Redis.from_url(url.replace(":s3cret%2Fpw@", "")).get("k")
        assert (tmp_path / "data" / "redis").is_dir()
    assert started.poll() is not None  # stopped with the stack


def test_a_port_something_else_holds_gets_a_free_one(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What takes the connection and answers no PING is waited for a while (a Redis slow to start:
    QA 59e), then taken for something else holding the port."""
    monkeypatch.setattr("workers.stack.LOADING_WAIT_S", 1.0)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        url = f"redis://127.0.0.1:{squatter.getsockname()[1]}/0"
        with stack(monkeypatch, tmp_path, url) as s:
            used = s.ensure_redis()
            assert used != url and used.endswith("/0") and s.env["FITTEST_REDIS_URL"] == used
            assert redis.Redis.from_url(used).ping()


def test_a_redis_that_answers_is_used_as_it_is(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, redis_url: str) -> None:
    with stack(monkeypatch, tmp_path, redis_url) as s:
        assert s.ensure_redis() == redis_url and "redis" not in s.procs


def test_a_redis_that_refuses_the_url_is_told_not_replaced(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                            redis_url: str) -> None:
    """QA 50e: a database out of range (or a wrong password) was taken for no Redis, and a private
    one was started on another port, where every other command said Redis refused the connection."""
    from workers.stack import StackError

    refused = redis_url.rpartition("/")[0] + "/99"
    with stack(monkeypatch, tmp_path, refused) as s:
        with pytest.raises(StackError) as told:
            s.ensure_redis()
        assert "refuses the connection (DB index is out of range): mend its password or database" in str(told.value)
        assert "redis" not in s.procs


def test_someone_elses_redis_with_a_password_on_the_default_url_gets_one_of_ours_beside_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, private_redis) -> None:
    """Review 51: with FITTEST_REDIS_URL unset, a Redis that wants a password on the default port
    stopped `fittest up` and `demo`, naming a setting nobody had set; they had started one of their
    own beside it before. A URL someone chose is still told, not replaced (above)."""
    port = int(private_redis.url.rpartition(":")[2].partition("/")[0])
    redis.Redis.from_url(private_redis.url).config_set("requirepass", "not-yours")
    monkeypatch.delenv("FITTEST_REDIS_URL", raising=False)
    with Stack(Settings(data_dir=tmp_path / "data")) as s:
        s.env["FITTEST_REDIS_URL"] = default = f"redis://127.0.0.1:{port}/0"  # as if it were the default
        used = s.ensure_redis()
        assert used != default and "redis" in s.procs and redis.Redis.from_url(used).ping()
    chosen = f"redis://127.0.0.1:{port}/0"
    with stack(monkeypatch, tmp_path, chosen) as s:
        from workers.stack import StackError

        with pytest.raises(StackError) as told:
            s.ensure_redis()
        assert "refuses the connection (it needs a password, or another one:" in str(told.value)


@pytest.mark.parametrize("greeting", [b"HTTP/1.0 400 Bad Request\r\n\r\n", b"+OK POP3 ready\r\n",
                                      b""])  # QA 58d N2: one that closes the connection (PostgreSQL, an MQTT broker)
def test_a_url_where_another_kind_of_server_answers_is_told_not_replaced(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, greeting: bytes) -> None:
    """QA 57d L4: `fittest up` pointed at an HTTP service's port took it for no Redis, and started one
    of its own on another port, where the workers served and the other shells' commands, with the
    same settings, said Redis was not what answered."""
    from workers.stack import StackError

    with other_protocol_server(greeting) as port, stack(monkeypatch, tmp_path, f"redis://127.0.0.1:{port}/0") as s:
        with pytest.raises(StackError) as told:
            s.ensure_redis()
        if greeting:
            assert "Redis is not what answers at FITTEST_REDIS_URL" in str(told.value)
            assert "a server of another protocol answers at that host and port" in str(told.value)
        else:  # one that closes at once: another protocol's, or a proxy whose Redis is away (QA 59f F4)
            assert "Redis does not answer at FITTEST_REDIS_URL" in str(told.value)
            assert "closes the connection at once: a server of another protocol (PostgreSQL), or a proxy" in str(told.value)
        assert "redis" not in s.procs


def test_a_blank_redis_url_is_the_default_one(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """QA 58d N1: `FITTEST_REDIS_URL= fittest up` looked for a Redis at "" and refused to start,
    where every other command read the default URL."""
    monkeypatch.setenv("FITTEST_REDIS_URL", " ")
    with Stack(Settings(data_dir=tmp_path / "data")) as s:
        assert s.redis_url == Settings.model_fields["redis_url"].default and not s.chosen_url


def test_a_redis_loading_its_data_is_waited_for_and_told_as_loading(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A Redis restarted a moment ago answers LOADING until its data set is read back: `up` took it
    for a server of another protocol, and refused it (or, at the default URL, started a Redis of its
    own beside it). It waits for it, and says so when it does not end."""
    from workers.redis_connection import LOADING, SLOW, redis_refusal
    from workers.stack import StackError

    loading = b"-LOADING Redis is loading the dataset in memory\r\n"
    with other_protocol_server(loading) as port:
        url = f"redis://127.0.0.1:{port}/0"
        assert redis_refusal(url) == LOADING
        monkeypatch.setattr("workers.stack.LOADING_WAIT_S", 1.0)
        with stack(monkeypatch, tmp_path, url) as s, pytest.raises(StackError) as told:
            s.ensure_redis()
        assert "was still loading its data set into memory after 1 s" in str(told.value)
        assert "redis" not in s.procs

    answers = [LOADING, LOADING, None]
    monkeypatch.setattr("workers.stack.redis_refusal", lambda url, tls=None: answers.pop(0))
    with stack(monkeypatch, tmp_path, "redis://127.0.0.1:6399/0") as s:
        assert s.ensure_redis() == "redis://127.0.0.1:6399/0"  # the Redis that answered, once loaded
        assert answers == [] and "redis" not in s.procs
    with socket.create_server(("127.0.0.1", 0)) as silent:  # takes the connection, answers nothing
        assert redis_refusal(f"redis://127.0.0.1:{silent.getsockname()[1]}/0", timeout=0.3) == SLOW
    answers = [SLOW, SLOW, None]  # QA 59e: one slow to answer its first PING was taken for nothing there
    with stack(monkeypatch, tmp_path, "redis://127.0.0.1:6399/0") as s:
        assert s.ensure_redis() == "redis://127.0.0.1:6399/0" and answers == [] and "redis" not in s.procs


def test_a_redis_that_refuses_writes_is_said_before_anything_starts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                     private_redis) -> None:
    """QA 59d H1: `fittest up` on a Redis past its maxmemory started every role, each ended on its
    first write, and `up` gave up a minute later, its last line naming the beat, not Redis."""
    from workers.stack import StackError

    client = redis.Redis.from_url(private_redis.url)
    client.config_set("maxmemory", max(int(client.info("memory")["used_memory"]) - 100_000, 1))
    try:
        with stack(monkeypatch, tmp_path, private_redis.url) as s, pytest.raises(StackError) as told:
            s.ensure_redis()
        assert str(told.value).startswith("Redis refuses writes: ") and "raise its maxmemory or free memory" in str(told.value)
        assert "nothing was started" in str(told.value) and "redis" not in s.procs
    finally:
        client.config_set("maxmemory", 0)
    with stack(monkeypatch, tmp_path, private_redis.url) as s:
        assert s.ensure_redis() == private_redis.url  # with room again


def test_up_learns_of_another_stack_served_on_its_database_and_of_a_redis_another_up_started(tmp_path: Path) -> None:
    """QA 60a F1: with another stack's workers stopped, `up` on its database found no worker and
    said nothing, and its workers ran the other stack's queued calls on their tools. F2: a second
    stack on the Redis the first `up` started lost it when the first stopped, untold."""
    from tests.conftest import start_redis

    theirs = tmp_path / "theirs"
    proc, url = start_redis(theirs / "redis")  # where the `up` of data dir `theirs` keeps its Redis
    try:
        mine = Stack(Settings(redis_url=url, key_prefix="mine:", data_dir=tmp_path / "mine"))
        client = redis.Redis.from_url(url)
        assert mine.others_served_here() == []
        client.sadd("k8s:namespaces", "default")  # another program's key that ends so
        client.sadd("mine:demo:namespaces", "word_stats")  # this stack's demo, a state apart
        client.set("mine:demo:state:epoch", "e1")
        assert mine.others_served_here() == []  # review 60f: both were taken for stacks
        client.sadd("theirs:namespaces", "word_stats")  # what their memory worker marks as it starts
        client.set("theirs:state:epoch", "e2")  # and their selection's state
        assert mine.others_served_here() == ["theirs:"]
        client.sadd("mine:namespaces", "word_stats")  # served here before: the stack itself, starting again
        assert mine.others_served_here() == []
        client.close()

        assert mine.redis_of_another_up() is None  # no stack holds that directory
        (theirs / "up.lock").touch()
        assert mine.redis_of_another_up() == theirs
        assert Stack(Settings(redis_url=url, data_dir=theirs)).redis_of_another_up() is None  # its own

        # QA 60c F6: a restored data directory holding its own Redis's data, where another Redis answers
        assert mine.own_redis_data_unused() is None
        (tmp_path / "mine" / "redis" / "appendonlydir").mkdir(parents=True)
        assert mine.own_redis_data_unused() == (tmp_path / "mine" / "redis").resolve()
        (theirs / "redis" / "appendonlydir").mkdir()
        assert Stack(Settings(redis_url=url, data_dir=theirs)).own_redis_data_unused() is None  # the one answering
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize(("url", "shown", "credentials"), [
    ("redis://localhost:6379/0", "redis://localhost:6379/0", {}),
    ("redis://:p%40ss@localhost:6391/0", "redis://localhost:6391/0", {"password": "p@ss"}),
    ("rediss://user:pw@h:1/2?ssl_cert_reqs=none", "rediss://h:1/2?ssl_cert_reqs=none", {"username": "user", "password": "pw"}),
    ("unix:///tmp/r.sock?password=x&db=2", "unix:///tmp/r.sock?db=2", {"password": "x"}),
])
def test_the_beat_url_celery_shows_holds_no_credentials(url: str, shown: str, credentials: dict[str, str]) -> None:
    """QA 61a-1: redbeat's URL is shown as it is by `inspect conf` (Flower); its credentials go in
    redbeat's options, whose "password" Celery masks, and redis-py takes them from there."""
    from workers.redis_connection import without_credentials

    assert without_credentials(url) == (shown, credentials)
