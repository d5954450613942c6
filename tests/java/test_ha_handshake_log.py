"""How the Java HA tests read a replica's handshakes from its log (no Java needed): only the
current run counts, a reconnect's repeat handshake stays in its run, and a handshake that
found the epoch cache empty is None."""
from tests.support.javarocketmq5ha import last_run_handshakes

START = "[dledgerctl-test] start replica 1 at {}\n"
EMPTY = "19:41:18.001 [AutoSwitchHAClient] INFO RocketmqStore - Slave local epochCache is empty, skip truncate log\n"


def point(n: int) -> str:
    return (f"19:41:37.980 [AutoSwitchHAClient] INFO RocketmqStore - local epoch entries is []\n"
            f"19:41:37.981 [AutoSwitchHAClient] INFO RocketmqStore - truncateOffset is {n}\n"
            f"19:41:37.990 [AutoSwitchHAClient] INFO RocketmqStore - Truncate slave log to {n} success\n")


def test_only_the_last_run_counts_with_its_reconnects():
    # (the CI run that failed: two handshakes at A in the first slave run, then B after the restart)
    log = START.format(1) + EMPTY + START.format(2) + point(19590) + point(19590) + START.format(3) + point(31340)
    assert last_run_handshakes(log) == [31340]
    assert last_run_handshakes(log[:log.rindex("[dledgerctl-test]")]) == [19590, 19590]
    assert last_run_handshakes(START.format(4) + EMPTY + point(0) + EMPTY) == [None, 0, None]
    assert last_run_handshakes(START.format(5)) == []


def test_a_log_without_a_start_marker_is_read_whole():
    assert last_run_handshakes(point(-1) + EMPTY) == [-1, None]
    assert last_run_handshakes("") == []
