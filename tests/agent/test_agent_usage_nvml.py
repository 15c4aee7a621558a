"""The NVML usage reader over the fake driver: processes, their memory and SM utilisation, MIG devices, and
what a driver that lacks a feature, loses a GPU or sees processes come and go between calls answers."""

from __future__ import annotations

import ctypes
import time
from collections.abc import Iterator
from contextlib import contextmanager

import nvml_machines as machines
import pynvml
import pytest
from fake_nvml import FakeNvmlLibrary, FakeProcess, FakeSystem, installed

from agent.nvml_discovery import NvmlUnavailable
from agent.usage_nvml import DeviceUsage, UsageReader

MIB = 1024 * 1024
NOW = 1_800_000_000.0  # the reader's clock in these tests (unix seconds)
NOW_US = int(NOW * 1_000_000)


@contextmanager
def reading(system: FakeSystem, window: float = 30.0) -> Iterator[tuple[UsageReader, FakeNvmlLibrary]]:
    with installed(system) as library:
        reader = UsageReader(window=window, clock=lambda: NOW)
        reader.open()
        try:
            yield reader, library
        finally:
            reader.close()


def _by_key(devices: list[DeviceUsage]) -> dict[str, DeviceUsage]:
    return {d.key: d for d in devices}


def test_whole_gpus_report_processes_memory_and_utilisation() -> None:
    system = machines.dgx_h100()
    gpu = system.gpus[2]
    gpu.utilization_gpu = 87
    gpu.processes = [FakeProcess(4242, 30_000, [(NOW_US - 2_000_000, 60)]), FakeProcess(4243, 1_000)]
    with reading(system) as (reader, _):
        read = reader.read()
    assert read.driver_version == "550.90.07" and read.failed == []
    assert len(read.devices) == 8  # one per GPU: none is in MIG mode
    device = _by_key(read.devices)[gpu.uuid]
    assert (device.gpu_index, device.model_name, device.pci_bus_id) == (2, "NVIDIA H100 80GB HBM3", "00000000:3A:00.0")
    assert device.minor_number == 2 and device.mig_uuid is None and device.gpu_instance_id is None
    assert device.gpu_util_percent == 87
    assert device.memory_used_bytes == (512 + 31_000) * MIB
    assert device.process_utilization
    assert [(p.pid, p.memory_bytes, p.sm_percent) for p in device.processes] == [
        (4242, 30_000 * MIB, 60.0), (4243, 1_000 * MIB, 0.0),  # no sample since: idle
    ]
    idle = _by_key(read.devices)[system.gpus[0].uuid]
    assert idle.processes == [] and idle.memory_used_bytes == 512 * MIB


def test_mig_devices_are_read_one_by_one_with_their_instance_and_profile() -> None:
    system = machines.hgx_a100_80gb_mig_mixed()
    mig = system.gpus[0].mig[0]  # GI 2, 3g.40gb
    mig.processes = [FakeProcess(77, 20_000)]
    with reading(system) as (reader, library):
        read = reader.read()
    devices = _by_key(read.devices)
    # GPU 0 has 4 MIG devices, GPU 1 seven, GPUs 2-7 are whole: 4 + 7 + 6.
    assert len(read.devices) == 17
    assert system.gpus[0].uuid not in devices and system.gpus[1].uuid not in devices
    device = devices[mig.uuid]
    assert (device.gpu_uuid, device.gpu_index, device.gpu_instance_id, device.mig_profile) == (
        system.gpus[0].uuid, 0, 2, "3g.40gb")
    assert device.gpu_util_percent is None  # NVML (and DCGM) give none for a MIG device
    assert device.memory_used_bytes == (12 + 20_000) * MIB
    assert [(p.pid, p.memory_bytes) for p in device.processes] == [(77, 20_000 * MIB)]
    # The fake's MIG devices give no per-process utilisation (NOT_SUPPORTED): absent, not zero.
    assert not device.process_utilization and device.processes[0].sm_percent is None
    profiles = sorted(d.mig_profile or "" for d in read.devices if d.gpu_index == 0)
    assert profiles == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    # Processes were asked of the MIG device's own handle, never of its parent.
    assert library.calls["nvmlDeviceGetComputeRunningProcesses_v3"] >= 17


def test_mig_devices_with_per_process_utilisation() -> None:
    system = machines.hgx_a100_80gb_mig_mixed()
    mig = system.gpus[1].mig[3]
    mig.process_utilization = True
    mig.processes = [FakeProcess(9, 4_000, [(NOW_US - 1_000, 35)])]
    with reading(system) as (reader, _):
        device = _by_key(reader.read().devices)[mig.uuid]
    assert device.process_utilization and device.processes[0].sm_percent == 35.0


def test_last_seen_timestamp_is_kept_per_device_between_reads() -> None:
    system = machines.l4_mps()
    gpu = system.gpus[0]
    first, second = NOW_US - 20_000_000, NOW_US - 5_000_000
    gpu.processes = [FakeProcess(1, 100, [(first, 50)])]
    with reading(system) as (reader, library):
        library.log = []
        assert _by_key(reader.read().devices)[gpu.uuid].processes[0].sm_percent == 50.0
        gpu.processes[0].samples.append((second, 20))
        assert _by_key(reader.read().devices)[gpu.uuid].processes[0].sm_percent == 20.0
        # Nothing new: the newest sample still counts while it is younger than the window.
        assert _by_key(reader.read().devices)[gpu.uuid].processes[0].sm_percent == 20.0
        # The size queries of GPU 0 (its handle is the fake's cookie 0x100): each read passes the newest
        # timestamp the one before was given.
        asked = [int(args[3].value) for name, args in library.log
                 if name == "nvmlDeviceGetProcessUtilization" and args[1] is None
                 and ctypes.cast(args[0], ctypes.c_void_p).value == 0x100]
    assert asked == [0, first, second]


def test_a_sample_older_than_the_window_means_idle() -> None:
    system = machines.l4_mps()
    gpu = system.gpus[1]
    gpu.processes = [FakeProcess(5, 100, [(NOW_US - 31_000_000, 90)])]
    with reading(system, window=30.0) as (reader, _):
        assert _by_key(reader.read().devices)[gpu.uuid].processes[0].sm_percent == 0.0


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_NOT_FOUND, pynvml.NVML_SUCCESS])
def test_no_samples_to_size_is_an_idle_device_not_an_error(code: int) -> None:
    system = machines.l4_mps()
    system.no_samples_code = code
    system.gpus[0].processes = [FakeProcess(5, 100)]
    with reading(system) as (reader, _):
        read = reader.read()
    device = _by_key(read.devices)[system.gpus[0].uuid]
    assert read.failed == [] and device.process_utilization and device.processes[0].sm_percent == 0.0


def test_process_utilisation_not_supported_is_absent() -> None:
    system = machines.l4_mps()
    system.gpus[0].process_utilization = False
    system.gpus[0].processes = [FakeProcess(5, 100, [(NOW_US, 80)])]
    with reading(system) as (reader, _):
        read = reader.read()
    device = _by_key(read.devices)[system.gpus[0].uuid]
    assert read.failed == [] and not device.process_utilization
    assert [(p.pid, p.sm_percent) for p in device.processes] == [(5, None)]
    assert device.gpu_util_percent == 0 and device.memory_used_bytes == 612 * MIB


def test_a_driver_without_the_utilisation_call_is_the_same_as_not_supported() -> None:
    system = machines.l4_mps()
    with installed(system) as library:
        library.missing.add("nvmlDeviceGetProcessUtilization")
        reader = UsageReader(clock=lambda: NOW)
        reader.open()
        read = reader.read()
        reader.close()
    assert read.failed == [] and not any(d.process_utilization for d in read.devices)


def test_memory_not_available_is_none() -> None:
    system = machines.l4_mps()
    system.gpus[0].processes = [FakeProcess(5, None), FakeProcess(6, 300)]
    with reading(system) as (reader, _):
        device = _by_key(reader.read().devices)[system.gpus[0].uuid]
    assert [(p.pid, p.memory_bytes) for p in device.processes] == [(5, None), (6, 300 * MIB)]


def test_processes_that_vanish_between_the_two_calls_are_not_reported() -> None:
    system = machines.l4_mps()
    gpu = system.gpus[0]
    a, b, c = FakeProcess(1, 100), FakeProcess(2, 200), FakeProcess(3, 300)
    # The size query sees three processes, the fill call two: one ended in between.
    gpu.process_lists = [[a, b, c], [a, c]]
    gpu.processes = [a, c]
    with reading(system) as (reader, _):
        read = reader.read()
    device = _by_key(read.devices)[gpu.uuid]
    assert read.failed == [] and [p.pid for p in device.processes] == [1, 3]


def test_processes_that_vanish_between_reads_take_their_samples_along() -> None:
    system = machines.l4_mps()
    gpu = system.gpus[0]
    gpu.processes = [FakeProcess(1, 100, [(NOW_US - 1_000, 70)]), FakeProcess(2, 100, [(NOW_US - 1_000, 20)])]
    with reading(system) as (reader, _):
        assert sum(p.sm_percent or 0 for p in _by_key(reader.read().devices)[gpu.uuid].processes) == 90.0
        ended = gpu.processes.pop(0)
        device = _by_key(reader.read().devices)[gpu.uuid]
        assert [(p.pid, p.sm_percent) for p in device.processes] == [(2, 20.0)]
        # A sample of a process no longer listed (it ended between the two calls) is ignored.
        gpu.processes.append(FakeProcess(3, 50))
        gpu.process_lists = [[gpu.processes[0]], [gpu.processes[0]]]
        ended.samples.append((NOW_US, 99))
        device = _by_key(reader.read().devices)[gpu.uuid]
        assert [(p.pid, p.sm_percent) for p in device.processes] == [(2, 20.0)]


def test_more_processes_than_the_buffer_holds_is_read_again() -> None:
    system = machines.l4_mps()
    gpu = system.gpus[0]
    crowd = [FakeProcess(100 + n, 10) for n in range(20)]
    # One process at the size query; twenty at the fill (more than pynvml's 2n+5): INSUFFICIENT_SIZE, again.
    gpu.process_lists = [[crowd[0]], crowd]
    gpu.processes = crowd
    with reading(system) as (reader, _):
        read = reader.read()
    assert read.failed == [] and len(_by_key(read.devices)[gpu.uuid].processes) == 20


def test_a_lost_gpu_is_left_out_and_the_others_are_read() -> None:
    system = machines.dgx_h100_failing_gpu(index=3)
    with reading(system) as (reader, _):
        read = reader.read()
    assert len(read.devices) == 7 and system.gpus[3].uuid not in _by_key(read.devices)
    assert len(read.failed) == 1 and read.failed[0].startswith("GPU 3: ") and "lost" in read.failed[0]


def test_a_failing_process_query_leaves_that_gpu_out() -> None:
    system = machines.dgx_h100_failing_gpu(index=5, call="nvmlDeviceGetComputeRunningProcesses_v3", code=999)
    with reading(system) as (reader, _):
        read = reader.read()
    assert len(read.devices) == 7 and read.failed[0].startswith("GPU 5: nvmlDeviceGetComputeRunningProcesses")


def test_minor_numbers_name_the_device_file() -> None:
    system = machines.l4_mps()
    system.gpus[0].minor_number, system.gpus[1].minor_number = 4, 1
    with reading(system) as (reader, _):
        assert [d.minor_number for d in reader.read().devices] == [4, 1]


def test_the_reader_holds_nvml_open_across_scans() -> None:
    from agent.nvml_discovery import scan

    with reading(machines.l4_mps()) as (reader, library):
        scan()  # the topology scan's own init and shutdown must not close NVML under the reader
        assert len(reader.read().devices) == 2
        assert library.initialised == 1
    assert library.initialised == 0


def test_no_nvml_raises_unavailable() -> None:
    system = machines.l4_mps()
    system.init_error = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    with installed(system), pytest.raises(NvmlUnavailable):
        UsageReader().open()
    with pytest.raises(NvmlUnavailable):
        UsageReader().read()  # never opened


def test_reads_are_cheap_enough_for_every_scrape() -> None:
    system = machines.hgx_a100_80gb_mig_mixed()
    for gpu in system.gpus:
        gpu.processes = [FakeProcess(1000 + n, 100, [(NOW_US, 10)]) for n in range(8)]
    with reading(system) as (reader, _):
        reader.read()
        # CPU time of this thread (the reads run on it), not the wall clock: other work on a busy machine
        # stretches the wall time of a read, not what the read itself computes.
        start = time.thread_time()
        for _ in range(20):
            reader.read()
        per_read = (time.thread_time() - start) / 20
    assert per_read < 0.05, f"one read of 17 devices took {per_read * 1000:.1f} ms of CPU"


def test_a_driver_before_r510_lists_processes_through_v2() -> None:
    system = machines.l4_mps()
    system.gpus[0].processes = [FakeProcess(5, 700)]
    with installed(system) as library:
        library.missing.add("nvmlDeviceGetComputeRunningProcesses_v3")
        reader = UsageReader(clock=lambda: NOW)
        reader.open()
        read = reader.read()
        reader.close()
    device = _by_key(read.devices)[system.gpus[0].uuid]
    assert read.failed == [] and device.processes_known
    assert [(p.pid, p.memory_bytes) for p in device.processes] == [(5, 700 * MIB)]
    assert library.calls["nvmlDeviceGetComputeRunningProcesses_v2"] >= 1


def test_no_process_list_at_all_is_unknown_not_empty() -> None:
    system = machines.l4_mps()
    system.gpus[1].failures["nvmlDeviceGetComputeRunningProcesses_v3"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    with installed(system) as library:
        library.missing.update({"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"})
        reader = UsageReader(clock=lambda: NOW)
        reader.open()
        without = reader.read()
        library.missing.clear()
        not_supported = reader.read()
        reader.close()
    for read in (without, not_supported):
        device = _by_key(read.devices)[system.gpus[1].uuid]
        assert read.failed == [] and not device.processes_known and not device.process_utilization
        assert device.memory_used_bytes == 512 * MIB and device.gpu_util_percent == 0
    assert _by_key(not_supported.devices)[system.gpus[0].uuid].processes_known
