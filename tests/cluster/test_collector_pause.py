"""The cyclic collector is off while any list is read, back on after the last, and left off if it was off."""

from __future__ import annotations

import gc

from webhook.cluster.collector_pause import collector_paused, freeze_what_was_loaded


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


def test_what_was_loaded_is_frozen_and_a_collector_turned_off_stays_off() -> None:
    loaded = [{"metadata": {"name": f"pod-{i}"}} for i in range(100)]
    frozen = gc.get_freeze_count()
    freeze_what_was_loaded()
    assert gc.get_freeze_count() >= frozen + len(loaded)
    gc.disable()
    try:
        freeze_what_was_loaded()
        assert not gc.isenabled()
    finally:
        gc.enable()
