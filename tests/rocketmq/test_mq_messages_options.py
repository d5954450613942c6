"""``mq messages`` options as RocketMQ operators write them (issues 44 and 45): times that
are not numbers are usage errors; ``--msg-id`` takes the producer's id (UNIQ_KEY) as well
as the offset msgId and says which matched; csv writes properties as JSON; ``--topic``,
``--key`` and ``--tag`` repeat (any of them), and ``--tag`` takes consumers' tag
expressions (``tag1||tag2``, ``*``). Through the real CLI on stores tests/support/rmq_store.py
writes."""

from __future__ import annotations

import csv
import io
import json
import shutil

import pytest

from tests.support.commands import invoke
from tests.support.rmq_store import write_broker_store


def uniq(i: int) -> str:
    """A UNIQ_KEY as RocketMQ's MessageClientIDSetter makes one: 32 upper-case hex digits."""
    return f"7F000001{4242:04X}{0x1B6D3A2C:08X}{0x0A0B0C0D:08X}{i:04X}"


def spec(i: int, **kw) -> dict:
    tags = [f"tag{i % 4}", None][i == 9]
    props = {"KEYS": f"order-{i} user-{i % 5}", "UNIQ_KEY": uniq(i)}
    if tags:
        props["TAGS"] = tags
    out = dict(topic=f"Topic{i % 3}", queue_id=i % 2, body=b"body-%d" % i, store_timestamp=1_700_000_000_000 + i,
               properties=props)
    out.update(kw)
    return out


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("opts") / "store"
    specs = [spec(i) for i in range(24)]
    specs[5]["properties"]["TAGS"] = "中文||x"  # (a tag that holds the separator: only '*' names it)
    written = write_broker_store(str(root), specs)
    return root, specs, written


def picked(root, *args) -> list[int]:
    r = invoke("mq", "messages", root, "--format", "jsonl", *args)
    assert r.exit_code == 0, r.output
    return [json.loads(line)["index"] for line in r.stdout.splitlines()]


# --- 45.10: times -------------------------------------------------------------------------------

@pytest.mark.parametrize("opt, value", [("--since", "--5"), ("--until", "²"), ("--since", "1e5"), ("--until", "-"),
                                        ("--since", "٣"), ("--until", "99999-01-01")])
def test_a_time_that_is_not_one_is_a_usage_error(broker, opt, value):
    root, _specs, _written = broker
    r = invoke("mq", "messages", root, f"{opt}={value}")
    assert r.exit_code == 2, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    errors = [line for line in r.output.splitlines() if "Error" in line]
    assert len(errors) == 1 and "neither epoch milliseconds nor an ISO 8601 time" in errors[0], r.output


def test_times_that_are_times_still_work(broker):
    root, _specs, written = broker
    assert picked(root, "--since", "1700000000020") == [w["index"] for w in written[20:]]
    assert picked(root, "--since=-5", "--until", " 1700000000002 ") == [w["index"] for w in written[:3]]


# --- 44.5: --msg-id takes either id ---------------------------------------------------------------

def test_msg_id_takes_the_offset_id_and_the_uniq_key_and_says_which(broker):
    root, specs, written = broker
    r = invoke("mq", "messages", root, "--format", "jsonl", "--msg-id", uniq(7))
    assert r.exit_code == 0, r.output
    (row,) = [json.loads(line) for line in r.stdout.splitlines()]
    assert (row["index"], row["uniq_key"], row["matched"]) == (written[7]["index"], uniq(7), "uniq_key")
    r = invoke("mq", "messages", root, "--format", "jsonl", "--msg-id", uniq(8).lower())
    assert [json.loads(line)["index"] for line in r.stdout.splitlines()] == [written[8]["index"]]
    (row,) = [json.loads(line) for line in invoke("mq", "messages", root, "--format", "jsonl", "--msg-id",
                                                  row["msg_id"]).stdout.splitlines()]
    assert (row["index"], row["matched"]) == (written[7]["index"], "msg_id")
    table = invoke("mq", "messages", root, "--msg-id", uniq(3)).stdout
    assert "matched" in table.splitlines()[0] and "uniq_key" in table
    r = invoke("mq", "messages", root, "--format", "jsonl", "--msg-id", uniq(99))
    assert r.exit_code == 1 and r.stdout == "" and "no message matches" in r.stderr  # (as grep: issue 58)


# --- 44.12: csv properties ----------------------------------------------------------------------

def test_csv_writes_properties_as_json(broker):
    root, specs, _written = broker
    r = invoke("mq", "messages", root, "--format", "csv", "--topic", "Topic1")
    assert r.exit_code == 0, r.output
    got = list(csv.DictReader(io.StringIO(r.stdout)))
    want = [s["properties"] for s in specs if s["topic"] == "Topic1"]
    assert [json.loads(row["properties"]) for row in got] == want


# --- 44.15: several values, tag expressions -----------------------------------------------------

def test_repeated_topics_and_keys_are_any_of_them(broker):
    root, specs, written = broker
    idx = lambda pred: [w["index"] for s, w in zip(specs, written) if pred(s)]
    assert picked(root, "--topic", "Topic0", "--topic", "Topic2") == idx(lambda s: s["topic"] in ("Topic0", "Topic2"))
    assert picked(root, "--key", "order-3", "--key", "order-17", "--key", "nope") == \
        [written[3]["index"], written[17]["index"]]
    assert picked(root, "--key", "user-1", "--key", "user-2", "--topic", "Topic1") == \
        idx(lambda s: s["topic"] == "Topic1" and s["properties"]["KEYS"].split()[1] in ("user-1", "user-2"))


def test_tags_take_consumers_expressions(broker):
    root, specs, written = broker
    tags_of = lambda s: s["properties"].get("TAGS")
    idx = lambda pred: [w["index"] for s, w in zip(specs, written) if pred(tags_of(s))]
    assert picked(root, "--tag", "tag1||tag2") == idx(lambda t: t in ("tag1", "tag2"))
    assert picked(root, "--tag", " tag1 || tag3 ") == idx(lambda t: t in ("tag1", "tag3"))
    assert picked(root, "--tag", "tag0", "--tag", "tag3") == idx(lambda t: t in ("tag0", "tag3"))
    assert picked(root, "--tag", "*") == [w["index"] for w in written]  # (untagged ones too, as RocketMQ)
    assert picked(root, "--tag", "tag2||*") == idx(lambda t: t == "tag2")  # (RocketMQ: '*' alone is every tag)
    assert picked(root, "--tag", "tag1", "--tag", "*", "--topic", "Topic2") == \
        [w["index"] for s, w in zip(specs, written) if s["topic"] == "Topic2"]
    r = invoke("mq", "messages", root, "--tag", "||")
    assert r.exit_code == 2 and "names no tag" in r.output


# --- issue 44, also expected: --queue-offset through the consume queue ---------------------------

def test_queue_offset_reads_the_message_the_consume_queue_points_at(broker):
    root, specs, written = broker
    for i in (0, 4, 13, 23):
        s, w = specs[i], written[i]
        r = invoke("mq", "messages", root, "--format", "jsonl", "--topic", s["topic"], "--queue-id", s["queue_id"],
                   "--queue-offset", w["queue_offset"], "--body", "utf8")
        assert r.exit_code == 0, r.output
        (row,) = [json.loads(line) for line in r.stdout.splitlines()]
        assert (row["index"], row["topic"], row["queue_id"], row["queue_offset"], row["body"], row["note"]) == \
            (w["index"], s["topic"], s["queue_id"], w["queue_offset"], s["body"].decode(), "")


@pytest.mark.parametrize("args, words", [
    (["--topic", "Topic0", "--queue-id", "0", "--queue-offset", "999"], ["Topic0/0", "999", "not written"]),
    (["--topic", "NoSuch", "--queue-id", "0", "--queue-offset", "0"], ["NoSuch/0", "no such queue"]),
    (["--topic", "Topic0", "--queue-id", "7", "--queue-offset", "0"], ["Topic0/7", "no such queue"]),
])
def test_queue_offset_not_in_the_queue_is_one_error(broker, args, words):
    root, _specs, _written = broker
    r = invoke("mq", "messages", root, *args)
    assert r.exit_code == 1, r.output
    errors = [line for line in r.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and all(w in errors[0] for w in words), r.output


@pytest.mark.parametrize("args", [
    ["--queue-offset", "0"], ["--queue-offset", "0", "--topic", "Topic0"],
    ["--queue-offset", "0", "--queue-id", "0"],
    ["--queue-offset", "0", "--queue-id", "0", "--topic", "Topic0", "--topic", "Topic1"],
    ["--queue-offset", "0", "--queue-id", "0", "--topic", "Topic0", "--from-index", "0"],
    ["--queue-offset", "0", "--queue-id", "0", "--topic", "Topic0", "--key", "k"],
])
def test_queue_offset_needs_one_queue(broker, args):
    root, _specs, _written = broker
    r = invoke("mq", "messages", root, *args)
    assert r.exit_code == 2 and "--queue-offset" in r.output, r.output


def test_queue_offset_says_when_the_unit_points_elsewhere(tmp_path):
    from tests.support.rmq_encode import cq_unit
    from tests.support.rmq_store import write_queue

    root = tmp_path / "store"
    written = write_broker_store(str(root), [spec(i) for i in range(6)])
    # queue Topic0/0 holds messages 0 and 3 (queue offsets 0, 1); point its unit 1 at message 1 instead
    w = written[1]
    write_queue(str(root), "Topic0", 0, [cq_unit(written[0]["phy_offset"], written[0]["size"], 0),
                                         cq_unit(w["phy_offset"], w["size"], 0)], 1000)
    r = invoke("mq", "messages", root, "--format", "jsonl", "--topic", "Topic0", "--queue-id", "0",
               "--queue-offset", "1")
    assert r.exit_code == 0, r.output
    (row,) = [json.loads(line) for line in r.stdout.splitlines()]
    assert row["index"] == w["index"] and "points here, but this is a message Topic1/1 at queue offset 0" in \
        row["note"]
    r = invoke("mq", "messages", root / "dledger-n0", "--topic", "Topic0", "--queue-id", "0", "--queue-offset", "0",
               "--format", "jsonl")
    assert r.exit_code == 0 and json.loads(r.stdout)["index"] == written[0]["index"]  # (a node directory: beside)
    write_queue(str(root), "Topic0", 0, [cq_unit(w["phy_offset"] + 7, w["size"], 0)], 1000)
    r = invoke("mq", "messages", root, "--topic", "Topic0", "--queue-id", "0", "--queue-offset", "0")
    assert r.exit_code == 1 and "where the log holds no entry" in r.output, r.output
    shutil.rmtree(root / "consumequeue")
    r = invoke("mq", "messages", root, "--topic", "Topic0", "--queue-id", "0", "--queue-offset", "0")
    assert r.exit_code == 1 and "no consume queues" in r.output, r.output


def test_uniq_key_takes_lower_case_hex_as_msg_id_does(broker):
    root, specs, written = broker
    r = invoke("mq", "messages", root, "--format", "jsonl", "--uniq-key", uniq(8).lower())
    assert r.exit_code == 0, r.output
    assert [json.loads(line)["index"] for line in r.stdout.splitlines()] == [written[8]["index"]]
    r = invoke("mq", "messages", root, "--uniq-key", uniq(99))
    assert r.exit_code == 1 and "no message matches" in r.stderr
