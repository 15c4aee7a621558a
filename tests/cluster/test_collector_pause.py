"""The cyclic collector is off while any list is read, back on after the last, and left off if it was off."""

from __future__ import annotations

import gc

from webhook.cluster.collector_pause import collector_paused


def test_paused_while_any_list_is_read_and_resumed_after_the_last() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():  # a second kind's list, on another thread in the source
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_turned_off_elsewhere_stays_off() -> None:
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_resumed_when_the_list_fails() -> None:
    try:
        with collector_paused():
            raise ConnectionError("the API server went away")
    except ConnectionError:
        pass
    assert gc.isenabled()
