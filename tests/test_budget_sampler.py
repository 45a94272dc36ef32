"""The VRAM rule: budget arithmetic, the NVML sampler (the gate) and the NVML adapter.

No GPU here: `tests/fake_nvml.FakeNvmlLib` stands in for pynvml, and the real
`kitctl.core.gpu.Nvml`, `NvmlSampler` and `check_idle` run against it.
"""
from __future__ import annotations

import threading
import time

import pytest

from fake_nvml import FakeDevice, FakeNvmlLib, FakeProcess, NVMLError
from kitctl.core.budget import BudgetError, Overhead, framework_budget, make_budget, overhead_from
from kitctl.core.gpu import GpuError, Nvml, check_idle
from kitctl.core.outcome import KilledBy, MemoryPeaks, Status, TrialOutcome
from kitctl.core.sampler import BASELINE_READS, NvmlSampler

H200_MIB = 143771.0


# -- make_budget --------------------------------------------------------------------------

def test_default_limit_is_the_card_total():
    b = make_budget(H200_MIB, None, 256)
    assert b.limit_mib == 143771 and b.reserve_mib == 256
    assert b.budget_mib == 143771 - 256
    assert b.limit_source == "card total (NVML)"
    assert not b.emulated


def test_default_limit_floors_a_fractional_total():
    b = make_budget(16375.6875, None, 256)
    assert b.limit_mib == 16375 and isinstance(b.limit_mib, int)
    assert not b.emulated


def test_emulating_a_smaller_card():
    b = make_budget(H200_MIB, 16376, 256)
    assert (b.limit_mib, b.reserve_mib, b.budget_mib) == (16376, 256, 16120)
    assert b.limit_source == "--vram-limit"
    assert b.emulated
    j = b.to_json()
    assert j["budget_mib"] == 16120 and j["emulated_smaller_card"] is True
    assert j["card_total_mib"] == H200_MIB


def test_limit_equal_to_the_card_is_not_emulated():
    assert not make_budget(16376.0, 16376, 256).emulated


def test_limit_above_the_card_is_refused():
    with pytest.raises(BudgetError, match="above this card") as ei:
        make_budget(16376.0, 24576, 256)
    assert "\n" not in str(ei.value)


@pytest.mark.parametrize("limit,reserve", [(256, 256), (256, 300), (1000, 1000)])
def test_reserve_at_or_above_the_limit_is_refused(limit, reserve):
    with pytest.raises(BudgetError, match="leaves no budget"):
        make_budget(H200_MIB, limit, reserve)


def test_reserve_at_or_above_the_card_total_is_refused():
    with pytest.raises(BudgetError):
        make_budget(1024.0, None, 1024)


def test_negative_reserve_or_nonpositive_limit_is_refused():
    with pytest.raises(BudgetError, match="--reserve"):
        make_budget(H200_MIB, None, -1)
    for bad in (0, -5):
        with pytest.raises(BudgetError, match="--vram-limit"):
            make_budget(H200_MIB, bad, 256)


def test_zero_reserve():
    b = make_budget(H200_MIB, 16376, 0)
    assert b.budget_mib == 16376


# -- overhead calibration -----------------------------------------------------------------

def calib(delta, fw, status=Status.OK) -> TrialOutcome:
    return TrialOutcome(batch=16, status=status, peaks=MemoryPeaks(device_delta_mib=delta, framework_mib=fw),
                        error=None if status is Status.OK else "boom")


def test_overhead_and_framework_budget():
    ov = overhead_from(calib(1400.0, 600.0))
    assert ov.overhead_mib == 800.0
    assert (ov.batch, ov.device_delta_peak_mib, ov.framework_peak_mib) == (16, 1400.0, 600.0)
    b = make_budget(H200_MIB, 16376, 256)
    assert b.budget_mib == 16120
    assert framework_budget(b, ov) == 15320


def test_fractional_overhead_rounds_down_the_framework_budget():
    ov = overhead_from(calib(1400.75, 600.5))
    assert ov.overhead_mib == pytest.approx(800.2, abs=0.1)
    fb = framework_budget(make_budget(H200_MIB, 16376, 256), ov)
    assert fb == 15319 and isinstance(fb, int)


def test_no_framework_peak_means_no_framework_cap():
    ov = overhead_from(calib(1400.0, None))
    assert ov.framework_peak_mib is None and ov.overhead_mib == 0.0
    assert ov.note
    assert framework_budget(make_budget(H200_MIB, 16376, 256), ov) is None
    assert framework_budget(make_budget(H200_MIB, 16376, 256), None) is None


def test_framework_peak_above_delta_clamps_overhead_to_zero():
    ov = overhead_from(calib(500.0, 600.0))
    assert ov.overhead_mib == 0.0
    assert framework_budget(make_budget(H200_MIB, 16376, 256), ov) == 16120


def test_failed_calibration_is_a_budget_error():
    with pytest.raises(BudgetError, match="did not pass") as ei:
        overhead_from(calib(1400.0, 600.0, Status.OOM))
    assert "oom" in str(ei.value)


def test_calibration_without_a_device_delta_is_a_budget_error():
    with pytest.raises(BudgetError, match="device delta"):
        overhead_from(calib(None, 600.0))


def test_overhead_larger_than_the_budget_is_refused():
    b = make_budget(H200_MIB, 1256, 256)  # B = 1000
    with pytest.raises(BudgetError, match="leaves no"):
        framework_budget(b, Overhead(16, 1600.0, 500.0, 1100.0))
    with pytest.raises(BudgetError):
        framework_budget(b, Overhead(16, 1500.0, 500.0, 1000.0))  # exactly B: nothing left


# -- gpu.Nvml with the fake ---------------------------------------------------------------

UUIDS = ["GPU-aaaaaaaa-0000-1111-2222-333333333333", "GPU-aabbbbbb-4444-5555-6666-777777777777",
         "GPU-cccccccc-8888-9999-aaaa-bbbbbbbbbbbb"]


def three_gpus(**kw) -> FakeNvmlLib:
    return FakeNvmlLib([FakeDevice(u, name=f"NVIDIA H200 #{i}") for i, u in enumerate(UUIDS)], **kw)


def test_nvml_without_a_driver_is_one_line():
    lib = FakeNvmlLib(init_error=NVMLError("NVML Shared Library Not Found"))
    with pytest.raises(GpuError) as ei:
        Nvml(lib=lib)
    msg = str(ei.value)
    assert "no NVIDIA driver" in msg and "--device cpu" in msg
    assert "\n" not in msg
    assert ei.value.__cause__ is None and ei.value.__suppress_context__


def test_resolve_by_index():
    nv = Nvml(lib=three_gpus())
    i, h = nv.resolve("2")
    assert i == 2 and nv.uuid(h) == UUIDS[2]
    assert nv.resolve(1)[0] == 1
    assert nv.resolve(" 1 ")[0] == 1


def test_resolve_default_is_index_0():
    nv = Nvml(lib=three_gpus())
    i, h = nv.resolve(None)
    assert i == 0 and nv.uuid(h) == UUIDS[0]


def test_resolve_by_uuid_and_prefix():
    nv = Nvml(lib=three_gpus())
    assert nv.resolve(UUIDS[1])[0] == 1
    assert nv.resolve("GPU-cccc")[0] == 2
    assert nv.resolve("GPU-aaaaaaaa")[0] == 0  # unique although GPU-aa… is shared


def test_resolve_errors_are_one_line():
    nv = Nvml(lib=three_gpus())
    with pytest.raises(GpuError, match="no such GPU") as ei:
        nv.resolve("3")
    assert "0..2" in str(ei.value) and "\n" not in str(ei.value)
    with pytest.raises(GpuError, match="more than one") as ei:
        nv.resolve("GPU-aa")
    assert "\n" not in str(ei.value)
    with pytest.raises(GpuError, match="no GPU matches") as ei:
        nv.resolve("GPU-ffff")
    assert UUIDS[0] in str(ei.value)  # says which ones exist


def test_resolve_with_no_gpu():
    with pytest.raises(GpuError, match="no GPU"):
        Nvml(lib=FakeNvmlLib([])).resolve(None)


def test_bytes_strings_are_decoded():
    nv = Nvml(lib=three_gpus(as_bytes=True))
    i, h = nv.resolve("GPU-cccc")
    assert i == 2
    info = nv.info(i, h)
    assert info.uuid == UUIDS[2] and info.name == "NVIDIA H200 #2" and info.driver == "550.54.15"
    assert info.pci_bus_id == "00000000:18:00.0"


def test_info_fields():
    lib = FakeNvmlLib([FakeDevice(UUIDS[0], name="NVIDIA H200", total_mib=H200_MIB)], driver="570.86.15",
                      cuda_driver_version=12080)
    nv = Nvml(lib=lib)
    info = nv.info(*nv.resolve("0"))
    assert info.index == 0 and info.uuid == UUIDS[0] and info.name == "NVIDIA H200"
    assert info.driver == "570.86.15"
    assert info.total_mib == H200_MIB
    assert info.cuda_driver_version == "12.8"
    assert info.memory_info_version == 2
    assert info.mig_mode == "disabled"
    assert info.clocks_mhz == {"graphics": 1980, "sm": 1980, "memory": 3201}
    assert info.max_clocks_mhz["sm"] == 1980
    assert info.power_limit_w == 700.0
    assert info.persistence_mode == "enabled"
    assert info.compute_mode == "0"
    j = info.to_json()
    for k in ("index", "uuid", "name", "driver", "total_mib", "mig_mode", "clocks_mhz"):
        assert k in j  # the artifact schema requires these


def test_info_with_optional_queries_unsupported():
    dev = FakeDevice(UUIDS[0], mig_mode=None, power_limit_mw=None, persistence_mode=None, compute_mode=None)
    nv = Nvml(lib=FakeNvmlLib([dev], cuda_driver_version=None))
    info = nv.info(0, nv.handle(0))
    assert info.mig_mode is None and info.power_limit_w is None
    assert info.persistence_mode is None and info.compute_mode is None
    assert info.cuda_driver_version is None


def test_mig_enabled():
    nv = Nvml(lib=FakeNvmlLib([FakeDevice(UUIDS[0], mig_mode=(1, 1))]))
    assert nv.info(0, nv.handle(0)).mig_mode == "enabled"


def test_used_memory_v2_excludes_reserved():
    dev = FakeDevice(UUIDS[0], used_mib=[1000.0], reserved_mib=450.0)
    nv = Nvml(lib=FakeNvmlLib([dev]))
    assert nv.used_mib(nv.handle(0)) == pytest.approx(1000.0)


def test_used_memory_v1_when_pynvml_has_no_v2():
    dev = FakeDevice(UUIDS[0], used_mib=[1000.0], reserved_mib=450.0)
    lib = FakeNvmlLib([dev], v2=False)
    assert not hasattr(lib, "nvmlMemory_v2")
    nv = Nvml(lib=lib)
    assert nv.used_mib(nv.handle(0)) == pytest.approx(1450.0)
    assert nv.info(0, nv.handle(0)).memory_info_version == 1


def test_used_memory_falls_back_to_v1_when_the_driver_refuses_v2():
    dev = FakeDevice(UUIDS[0], used_mib=[1000.0], reserved_mib=450.0)
    nv = Nvml(lib=FakeNvmlLib([dev], v2_raises=True))
    h = nv.handle(0)
    assert nv.used_mib(h) == pytest.approx(1450.0)
    assert nv.used_mib(h) == pytest.approx(1450.0)
    assert nv.info(0, h).memory_info_version == 1


def test_processes_merge_compute_and_graphics_and_name_them():
    dev = FakeDevice(UUIDS[0], compute_processes=[FakeProcess(10, 1024.0, "python3"), FakeProcess(11, None, "tf")],
                     graphics_processes=[FakeProcess(10, 1024.0, "python3"), FakeProcess(12, 64.0, "Xorg")])
    nv = Nvml(lib=FakeNvmlLib([dev]))
    procs = {p.pid: p for p in nv.processes(nv.handle(0))}
    assert sorted(procs) == [10, 11, 12]
    assert procs[10].used_mib == pytest.approx(1024.0) and procs[10].name == "python3"
    assert procs[11].used_mib is None and procs[11].name == "tf"
    assert procs[12].name == "Xorg"


def test_check_idle():
    busy = FakeDevice(UUIDS[0], used_mib=[3500.0],
                      compute_processes=[FakeProcess(4242, 3000.0, "python3"), FakeProcess(4343, None, "")])
    nv = Nvml(lib=FakeNvmlLib([busy]))
    line = check_idle(nv, nv.handle(0), 1024)
    assert line is not None and "\n" not in line
    assert line.startswith("GPU is not idle: 3500 MiB in use (threshold 1024 MiB)")
    assert "pid 4242 python3 (3000 MiB)" in line
    assert "pid 4343 ?" in line


def test_check_idle_idle_and_unnamed():
    nv = Nvml(lib=FakeNvmlLib([FakeDevice(UUIDS[0], used_mib=[600.0])]))
    assert check_idle(nv, nv.handle(0), 1024) is None
    nv = Nvml(lib=FakeNvmlLib([FakeDevice(UUIDS[0], used_mib=[2000.0])]))
    assert "no process NVML can name" in check_idle(nv, nv.handle(0), 1024)


# -- the sampler --------------------------------------------------------------------------

class Candidate:
    """What the sampler sees of a running candidate (runtimes.base.CandidateHandle)."""

    def __init__(self, pids=frozenset({100})) -> None:
        self._pids = set(pids)
        self.kills: list[KilledBy] = []
        self.killed = threading.Event()
        self.pid_calls = 0

    def pids(self) -> set[int]:
        self.pid_calls += 1
        return set(self._pids)

    def kill(self, reason: KilledBy) -> None:
        self.kills.append(reason)
        self.killed.set()


def sampler_for(used, budget=None, release_wait_s=0.2, **dev_kw):
    dev = FakeDevice(UUIDS[0], used_mib=used, **dev_kw)
    lib = FakeNvmlLib([dev])
    nv = Nvml(lib=lib)
    return NvmlSampler(nv, nv.handle(0), budget, release_wait_s=release_wait_s), dev


def wait_for(cond, timeout=5.0):
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError("timed out")
        time.sleep(0.002)


def test_baseline_is_the_median_of_the_pre_start_reads():
    assert BASELINE_READS == 5
    s, dev = sampler_for([1000.0, 9000.0, 1010.0, 990.0, 1005.0, 1000.0])
    s.prepare()
    assert s.baseline_mib == pytest.approx(1005.0)  # a one-off spike does not move it
    assert dev.memory_calls == BASELINE_READS


def test_baseline_taken_at_start_if_not_prepared():
    s, dev = sampler_for([700.0] * 5 + [900.0])
    c = Candidate()
    s.start(c)
    wait_for(lambda: s.samples > 0)
    peaks = s.stop()
    assert peaks.baseline_mib == pytest.approx(700.0)
    assert peaks.device_delta_mib == pytest.approx(200.0)


def ramp(baseline: float, top: float, steps: int):
    def used(n: int) -> float:
        if n < BASELINE_READS:
            return baseline
        k = n - BASELINE_READS
        return baseline + min(k, steps) * (top - baseline) / steps
    return used


def test_gate_kills_exactly_once_when_the_delta_goes_over_budget():
    budget = 16120.0
    s, dev = sampler_for(ramp(800.0, 800.0 + budget + 2000.0, 200), budget)
    c = Candidate()
    s.prepare()
    s.start(c)
    assert c.killed.wait(5.0)
    # keep sampling well over the budget for a while: still one kill
    n = s.samples
    wait_for(lambda: s.samples > n + 200)
    peaks = s.stop()
    assert c.kills == [KilledBy.KIT_VRAM_GATE]
    assert s.over_budget is True
    step = (budget + 2000.0) / 200
    assert s.tripped_at_mib is not None and budget < s.tripped_at_mib <= budget + step + 1e-6
    assert peaks.baseline_mib == pytest.approx(800.0)
    assert peaks.device_delta_mib == pytest.approx(budget + 2000.0, abs=0.1)


def test_release_after_a_gate_kill_is_timed_until_the_card_is_back_at_the_baseline():
    # 800 idle, the candidate climbs over the budget, is killed, and its memory comes back
    # 0.3 s after the kill (the card freeing a dead process's allocations).
    state = {"killed_at": None}
    budget = 1000.0

    def used(n: int) -> float:
        if n < BASELINE_READS:
            return 800.0
        if state["killed_at"] is not None and time.monotonic() - state["killed_at"] > 0.3:
            return 810.0  # back within the slack
        return 800.0 + 2000.0

    s, _ = sampler_for(used, budget, release_wait_s=5.0)
    c = Candidate()
    s.prepare()
    s.start(c)
    assert c.killed.wait(5.0)
    state["killed_at"] = time.monotonic()
    peaks = s.stop()
    assert peaks.release_s is not None and 0.25 <= peaks.release_s < 3.0


def test_release_is_none_when_the_memory_does_not_come_back_and_no_kill_means_no_wait():
    s, _ = sampler_for([800.0] * 5 + [2800.0], 1000.0, release_wait_s=0.2)
    c = Candidate()
    s.prepare()
    s.start(c)
    assert c.killed.wait(5.0)
    t0 = time.monotonic()
    assert s.stop().release_s is None
    assert time.monotonic() - t0 >= 0.2  # it did wait, for release_wait_s
    s2, _ = sampler_for([800.0] * 5 + [1500.0], 1000.0, release_wait_s=5.0)
    s2.prepare()
    s2.start(Candidate())
    wait_for(lambda: s2.samples > 20)
    t0 = time.monotonic()
    assert s2.stop().release_s is None and time.monotonic() - t0 < 1.0


def test_delta_exactly_at_budget_passes():
    budget = 1000.0
    s, _ = sampler_for([500.0] * 5 + [1500.0], budget)
    c = Candidate()
    s.prepare()
    s.start(c)
    wait_for(lambda: s.samples > 50)
    peaks = s.stop()
    assert c.kills == [] and not s.over_budget
    assert peaks.device_delta_mib == pytest.approx(1000.0)


def test_no_budget_never_kills():
    s, _ = sampler_for([500.0] * 5 + [100000.0], None)
    c = Candidate()
    s.prepare()
    s.start(c)
    wait_for(lambda: s.samples > 50)
    peaks = s.stop()
    assert c.kills == [] and not s.over_budget
    assert peaks.device_delta_mib == pytest.approx(99500.0)


def test_peak_is_the_device_delta_not_the_absolute_used():
    seq = [2000.0] * 5 + [2100.0, 5000.0, 3000.0, 2500.0]
    s, _ = sampler_for(seq, 10000.0)
    c = Candidate()
    s.prepare()
    s.start(c)
    wait_for(lambda: s.samples > 20)
    peaks = s.stop()
    assert peaks.baseline_mib == pytest.approx(2000.0)
    assert peaks.device_delta_mib == pytest.approx(3000.0)
    assert not s.over_budget


def test_transient_nvml_errors_do_not_stop_sampling_or_count():
    seq = [1000.0] * 5 + [NVMLError("GPU is lost"), NVMLError("Unknown"), 1200.0, NVMLError("x"), 1300.0]
    s, _ = sampler_for(seq, 5000.0)
    s.prepare()
    s.start(Candidate())
    wait_for(lambda: s.samples > 20)
    peaks = s.stop()
    assert peaks.device_delta_mib == pytest.approx(300.0)


def test_per_process_sums_only_the_candidates_pids():
    procs = [FakeProcess(100, 3000.0), FakeProcess(101, 1500.0),  # the candidate and its worker
             FakeProcess(555, 40000.0, "someone-else"), FakeProcess(102, None)]
    s, _ = sampler_for([500.0] * 5 + [5200.0], 100000.0, compute_processes=procs)
    c = Candidate(pids={100, 101, 102})
    s.prepare()
    s.start(c)
    wait_for(lambda: s.peak_process is not None)
    wait_for(lambda: s.samples > 20)
    peaks = s.stop()
    assert peaks.process_mib == pytest.approx(4500.0)
    assert c.pid_calls >= 1


def test_per_process_none_when_no_pid_matches():
    s, _ = sampler_for([500.0] * 5 + [800.0], 100000.0,
                       compute_processes=[FakeProcess(555, 4000.0, "someone-else")])
    s.prepare()
    s.start(Candidate(pids={100}))
    wait_for(lambda: s.samples > 100)
    assert s.stop().process_mib is None


def test_sample_rate_is_reported_and_meets_the_target():
    s, _ = sampler_for([500.0] * 5 + [600.0], 10000.0)
    s.prepare()
    s.start(Candidate())
    time.sleep(0.3)
    peaks = s.stop()
    assert peaks.samples == s.samples > 0
    assert peaks.sample_rate_hz is not None
    assert peaks.sample_rate_hz >= 500, peaks
    # the reported rate is samples over the sampling window
    assert peaks.sample_rate_hz <= peaks.samples / 0.29


def test_thread_stops_on_stop():
    s, dev = sampler_for([500.0] * 5 + [600.0], 10000.0)
    s.prepare()
    s.start(Candidate())
    wait_for(lambda: s.samples > 10)
    s.stop()
    assert s._thread is not None and not s._thread.is_alive()
    n, calls = s.samples, dev.memory_calls
    time.sleep(0.05)
    assert s.samples == n and dev.memory_calls == calls


def test_prepare_resets_between_candidates():
    seq = [500.0] * 5 + [3000.0] * 50
    s, dev = sampler_for(seq + [500.0] * 5 + [700.0], 1000.0)
    c1 = Candidate()
    s.prepare()
    s.start(c1)
    assert c1.killed.wait(5.0)
    s.stop()
    assert s.over_budget
    # the same sampler, reused: the script now idles at 500 then 700
    dev.used_mib = [500.0] * 5 + [700.0]
    dev.memory_calls = 0
    c2 = Candidate()
    s.prepare()
    s.start(c2)
    wait_for(lambda: s.samples > 20)
    peaks = s.stop()
    assert not s.over_budget and c2.kills == []
    assert peaks.device_delta_mib == pytest.approx(200.0)


def test_stopped_sampler_peaks_are_plain_memory_peaks():
    s, _ = sampler_for([500.0] * 5 + [600.0], 10000.0)
    s.prepare()
    s.start(Candidate())
    wait_for(lambda: s.samples > 5)
    peaks = s.stop()
    assert isinstance(peaks, MemoryPeaks)
    assert peaks.framework_mib is None and peaks.host_rss_mib is None
