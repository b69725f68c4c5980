"""Rules about each GPU's health as NVML reports it: PCIe link, ECC, power cap, throttling,
temperature, MIG, memory already held by other processes, compute mode."""

from __future__ import annotations

from model_optimizer.environment.findings import Finding
from model_optimizer.environment.knowledge import cc_features, gpu_spec
from model_optimizer.environment.snapshot import Snapshot

GIB = 1 << 30
SLOWDOWN_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")
PCIE_REPLAY_WARN = 100
MEMORY_IN_USE_WARN = 0.05  # fraction of the card other processes hold before we warn


TENSOR_CORE_DTYPES = {
    "fp16_tensor_cores": "fp16",
    "int8_tensor_cores": "int8",
    "bf16": "bf16",
    "fp8": "fp8",
    "fp4": "fp4",
}


def rule_gpu_summary(snap: Snapshot) -> list[Finding]:
    """Per GPU, one line with what the health rules read (PCIe link, ECC, power limit, temperature) and the
    dtypes its tensor cores run, so a clean report shows these were checked rather than saying nothing."""
    findings = []
    for dev in snap.devices:
        if dev.get("error"):
            continue  # rule_unreachable_gpus reports it
        i, cc = dev["index"], dev.get("compute_capability")
        dtypes = [TENSOR_CORE_DTYPES[f] for f in cc_features(cc) if f in TENSOR_CORE_DTYPES]
        parts = [
            _pcie_text(dev.get("pcie") or {}),
            _ecc_text(dev.get("ecc") or {}),
            _power_text(dev.get("power") or {}),
        ]
        if dev.get("temperature_c") is not None:
            parts.append(f"{dev['temperature_c']} °C")
        sm = f"sm_{cc.replace('.', '')}" if cc else "compute capability unknown"
        findings.append(
            Finding(
                "gpu.summary",
                "ok",
                f"GPU {i} {dev.get('name') or '?'} ({sm}): {', '.join(parts)}; "
                f"tensor cores: {', '.join(dtypes) or 'none'}",
                details={"gpu": i, "compute_capability": cc, "tensor_core_dtypes": dtypes},
            )
        )
    return findings


def _pcie_text(pcie: dict) -> str:
    if not (pcie.get("current_gen") and pcie.get("current_width")):
        return "PCIe link not reported"
    link = f"PCIe gen {pcie['current_gen']} x{pcie['current_width']}"
    # an idle GPU lowers its link generation to save power: the width and the maximum are what matter
    return link + (f" (max gen {pcie['max_gen']} x{pcie['max_width']})" if pcie.get("max_gen") else "")


def _ecc_text(ecc: dict) -> str:
    if ecc.get("current") is None:
        return "ECC not reported"
    if not ecc["current"]:
        return "ECC off"
    return f"ECC on, {ecc.get('volatile_uncorrected') or 0} uncorrectable errors"


def _power_text(power: dict) -> str:
    limit, default = power.get("enforced_limit_w") or power.get("limit_w"), power.get("default_limit_w")
    if not limit:
        return "power limit not reported"
    return f"power limit {limit:g} W" + (f" (default {default:g} W)" if default else "")


def rule_pcie(snap: Snapshot) -> list[Finding]:
    """Link trained narrower than it can run, or a slot narrower/slower than the GPU."""
    findings = []
    for dev in snap.devices:
        pcie, i = dev.get("pcie") or {}, dev["index"]
        cur_w, max_w = pcie.get("current_width"), pcie.get("max_width")
        spec = gpu_spec(dev.get("name")) or {}
        spec_w = (spec.get("pcie") or {}).get("width")
        details = {"gpu": i, **pcie, "datasheet": spec.get("pcie")}
        if cur_w and max_w and cur_w < max_w:
            findings.append(
                Finding(
                    "pcie.width_reduced",
                    "warn",
                    f"GPU {i}: PCIe link runs at x{cur_w} of x{max_w}",
                    f"Host-device copies (loading weights, CPU offload, swapping KV cache) run at about {cur_w}/{max_w} of the speed the link allows. Usually a badly seated card, a riser, dirty contacts, or a slot shared with an NVMe drive.",
                    {
                        "any": [
                            "nvidia-smi -q -d PCIE   # current vs max link",
                            "sudo lspci -vv -s $(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | cut -c5-) | grep -E 'LnkCap|LnkSta'",
                            "Reseat the card in a CPU-attached x16 slot; check the BIOS lane split (bifurcation) and M.2 slots that share lanes; on laptops check the BIOS for a hybrid/Optimus setting and update it",
                        ]
                    },
                    details,
                )
            )
        elif max_w and spec_w and max_w < spec_w:
            findings.append(
                Finding(
                    "pcie.slot_narrower",
                    "warn",
                    f"GPU {i}: the slot gives x{max_w}, the GPU supports x{spec_w}",
                    "Host-device bandwidth is capped by the slot: weight loading and CPU offload are slower.",
                    {"any": ["Move the GPU to a full x16 slot wired to the CPU"]},
                    details,
                )
            )
        if pcie.get("gpu_max_gen") and pcie.get("max_gen") and pcie["max_gen"] < pcie["gpu_max_gen"]:
            findings.append(
                Finding(
                    "pcie.gen_limited",
                    "warn",
                    f"GPU {i}: the platform limits PCIe to gen {pcie['max_gen']}; the GPU supports gen {pcie['gpu_max_gen']}",
                    "Each generation step halves host-device bandwidth.",
                    {"any": ["Check the BIOS PCIe speed setting (Auto/GenN) and the riser's rating"]},
                    details,
                )
            )
        if (pcie.get("replay_counter") or 0) >= PCIE_REPLAY_WARN:
            findings.append(
                Finding(
                    "pcie.replays",
                    "warn",
                    f"GPU {i}: {pcie['replay_counter']} PCIe replays (retransmitted packets)",
                    "Replays mean signal errors on the link; they slow transfers and often precede 'GPU has fallen off the bus'.",
                    {"any": ["Reseat the card, replace the riser cable, check the slot"]},
                    details,
                )
            )
    return findings


def rule_ecc(snap: Snapshot) -> list[Finding]:
    """Uncorrectable memory errors, pending remaps or retirements."""
    findings = []
    for dev in snap.devices:
        ecc, i = dev.get("ecc") or {}, dev["index"]
        rows = ecc.get("remapped_rows") or {}
        details = {"gpu": i, **{k: v for k, v in ecc.items() if k != "remapped_rows"}, "remapped_rows": rows}
        reset = {
            "any": [
                f"sudo nvidia-smi -r -i {i}   # GPU reset, with no process using it (or reboot)",
                f"nvidia-smi -q -d ECC,ROW_REMAPPER -i {i}",
            ]
        }
        if (ecc.get("volatile_uncorrected") or 0) > 0 or rows.get("failure"):
            findings.append(
                Finding(
                    "ecc.uncorrected",
                    "error",
                    f"GPU {i}: {ecc.get('volatile_uncorrected') or 0} uncorrectable ECC errors since boot"
                    + (", row remapping failed" if rows.get("failure") else ""),
                    "Uncorrectable errors corrupt weights or activations silently or kill the process (Xid 48/63/94/95); results from this GPU cannot be trusted.",
                    {
                        "any": reset["any"]
                        + [
                            "If errors return after the reset, or remapping failed: take the GPU out of service and contact the vendor (sudo nvidia-bug-report.sh)"
                        ]
                    },
                    details,
                )
            )
        elif rows.get("pending") or ecc.get("retired_pages_pending"):
            findings.append(
                Finding(
                    "ecc.remap_pending",
                    "warn",
                    f"GPU {i}: a memory row remap / page retirement waits for a GPU reset",
                    "Until the reset, the faulty memory may still be used.",
                    reset,
                    details,
                )
            )
        elif (ecc.get("aggregate_uncorrected") or 0) > 0:
            findings.append(
                Finding(
                    "ecc.past_uncorrected",
                    "warn",
                    f"GPU {i}: {ecc['aggregate_uncorrected']} uncorrectable ECC errors over its lifetime",
                    "Past errors were handled, but a GPU that had them is more likely to have more.",
                    {"any": [f"nvidia-smi -q -d ECC,ROW_REMAPPER -i {i}"]},
                    details,
                )
            )
        if ecc.get("current") is not None and ecc.get("pending") is not None and ecc["current"] != ecc["pending"]:
            findings.append(
                Finding(
                    "ecc.mode_change_pending",
                    "warn",
                    f"GPU {i}: ECC mode change waits for a reboot/reset",
                    "Memory size and bandwidth change when it applies.",
                    reset,
                    details,
                )
            )
    return findings


def rule_power(snap: Snapshot) -> list[Finding]:
    """Power limit set below the default, or clocks held down by power, heat or hardware signals."""
    findings = []
    for dev in snap.devices:
        power, i = dev.get("power") or {}, dev["index"]
        limit, default = power.get("limit_w"), power.get("default_limit_w")
        enforced = power.get("enforced_limit_w")
        capped_to = min(x for x in (limit, enforced) if x) if (limit or enforced) else None
        if capped_to and default and capped_to < 0.95 * default:
            findings.append(
                Finding(
                    "power.capped",
                    "warn",
                    f"GPU {i}: power limit {capped_to:g} W, below its default {default:g} W",
                    "Under load the GPU lowers its clocks to stay under the cap: matmul-heavy prefill slows roughly in proportion.",
                    {
                        "any": [
                            f"sudo nvidia-smi -i {i} -pl {default:g}   # restore the default (lasts until reboot; persistence mode on)",
                            "Check for a data-center power policy (DCGM, BMC) that sets the cap deliberately",
                        ]
                    },
                    {"gpu": i, **power},
                )
            )
        reasons = [r for r in dev.get("clock_event_reasons") or [] if r in SLOWDOWN_REASONS]
        if reasons:
            findings.append(
                Finding(
                    "clocks.slowdown",
                    "warn",
                    f"GPU {i}: clocks held down by {', '.join(reasons)}",
                    "The GPU runs below its rated clocks now: thermal or power-delivery problems make every kernel slower.",
                    {
                        "any": [
                            f"nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER -i {i}",
                            "Check cooling (fans, airflow, dust) and the power cables/PSU",
                        ]
                    },
                    {"gpu": i, "reasons": dev.get("clock_event_reasons"), "temperature_c": dev.get("temperature_c")},
                )
            )
        temp, slow = dev.get("temperature_c"), dev.get("temperature_slowdown_c")
        if temp and slow and temp >= slow - 5 and "hw_thermal_slowdown" not in reasons:
            findings.append(
                Finding(
                    "thermal.near_slowdown",
                    "warn",
                    f"GPU {i}: {temp} °C, slowdown starts at {slow} °C",
                    "A few degrees more and the GPU throttles.",
                    {"any": ["Improve airflow; check fans with nvidia-smi -q -d TEMPERATURE"]},
                    {"gpu": i},
                )
            )
    return findings


def rule_memory_in_use(snap: Snapshot) -> list[Finding]:
    """Memory other processes already hold shrinks what mopt can use for the KV cache."""
    findings = []
    for dev in snap.devices:
        mem, i = dev.get("memory") or {}, dev["index"]
        total, used = mem.get("total"), mem.get("used")
        if not total or used is None or used / total < MEMORY_IN_USE_WARN:
            continue
        procs = ", ".join(
            f"{p.get('name') or '?'} (pid {p['pid']}, {(p.get('used_bytes') or 0) / GIB:.1f} GiB)"
            for p in dev.get("processes") or []
        )
        findings.append(
            Finding(
                "gpu.memory_in_use",
                "warn",
                f"GPU {i}: {used / GIB:.1f} of {total / GIB:.1f} GiB already in use"
                + (f" by {procs}" if procs else ""),
                "mopt sizes its KV cache as gpu_memory_utilization x total; if that is more than is free, startup fails with out-of-memory. The recommended settings below lower it to fit.",
                {
                    "any": [
                        f"nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv -i {i}",
                        "Stop the other processes, or run with the recommended --gpu-memory-utilization",
                    ]
                },
                {"gpu": i, "used_bytes": used, "total_bytes": total, "processes": dev.get("processes")},
            )
        )
    return findings


def rule_mig_and_mode(snap: Snapshot) -> list[Finding]:
    """MIG state and compute mode."""
    findings = []
    for dev in snap.devices:
        mig, i = dev.get("mig") or {}, dev["index"]
        if mig.get("current") is not None and mig.get("pending") is not None and mig["current"] != mig["pending"]:
            findings.append(
                Finding(
                    "mig.change_pending",
                    "warn",
                    f"GPU {i}: a MIG mode change waits for a GPU reset",
                    "Until the reset the GPU may refuse CUDA work.",
                    {"any": [f"sudo nvidia-smi -r -i {i}"]},
                    {"gpu": i, **mig},
                )
            )
        elif mig.get("current"):
            findings.append(
                Finding(
                    "mig.enabled",
                    "ok",
                    f"GPU {i} is in MIG mode: programs see GPU instances, each a slice of its memory and SMs",
                    "Pick an instance by its MIG UUID (nvidia-smi -L) in CUDA_VISIBLE_DEVICES; mopt sees only that slice.",
                    details={"gpu": i},
                )
            )
        if dev.get("compute_mode") == 2:
            findings.append(
                Finding(
                    "gpu.compute_prohibited",
                    "error",
                    f"GPU {i}: compute mode is 'Prohibited'",
                    "No CUDA program may use this GPU.",
                    {"any": [f"sudo nvidia-smi -i {i} -c DEFAULT"]},
                    {"gpu": i},
                )
            )
    return findings


def rule_unreachable_gpus(snap: Snapshot) -> list[Finding]:
    """A GPU NVML lists but cannot open: lost from the bus, or waiting for a reset."""
    lost = [d for d in snap.devices if d.get("error")]
    if not lost:
        return []
    return [
        Finding(
            "gpu.unreachable",
            "error",
            "NVML cannot open GPU " + ", ".join(f"{d['index']} ({d['error']})" for d in lost),
            "A GPU in this state runs nothing, and programs that enumerate all GPUs (torch, NCCL) can fail on the others too.",
            {
                "any": [
                    "sudo dmesg -T | grep -iE 'xid|nvrm' | tail   # Xid 79: fallen off the bus; 48/95: memory errors",
                    "sudo nvidia-smi -r -i <index>   # reset it when nothing uses it; otherwise reboot",
                    "Meanwhile hide it: export CUDA_VISIBLE_DEVICES=<the healthy indices>",
                ]
            },
            {"gpus": lost},
        )
    ]
