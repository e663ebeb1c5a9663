#!/usr/bin/env python3
"""What QEMU command line a Kata release builds from one of our configurations.

The VM lab (tests/vm/attach_driver_vm_test.py) starts its nested guest with exactly these
arguments, so that what it proves is what the shipped configuration does under that release;
check-config.py uses the same table of releases to refuse a class a runtime cannot serve.

Only what decides where a vGPU's BARs land is modelled: machine type, firmware, the PCI bridges
and PCIe root ports and their window reservations, how VFIO devices are attached (cold at start,
hot through QMP) and the guest kernel's command line. Facts from Kata's source
(src/runtime/virtcontainers/qemu.go, qemu_arch_base.go, qemu_amd64.go, pkg/govmm/qemu/qemu.go):

- pcie-root-port devices: `pcie-root-port,id=rp<i>,bus=pcie.0,chassis=0,slot=<i>,
  multifunction=off`, as many as `pcie_root_port` (or the cold-plugged devices, if more).
- 3.2 to 3.27 add `pref64-reserve=<N>B,mem-reserve=<M>B` to each root port, sized from the
  host's NVIDIA GPUs (getBARsMaxAddressableMemory): M is twice the largest GPU's sum of 32-bit
  BARs, N its sum of 64-bit BARs, each at least 2 MiB. 3.28 removed that (commit eec397ac08).
- `default_bridges` pci-bridges on pcie.0 with io-reserve=4k, mem-reserve=1m, pref64-reserve=1m.
- cold plug (`cold_plug_vfio = "root-port"`): `-device vfio-pci,host=<BDF>,bus=rp<i>`. For a
  mediated device the BDF is its parent's (drivers.GetVFIODetails), so cold plug cannot attach
  an mdev; hot plug (`hot_plug_vfio = "root-port"`) sends QMP device_add with `sysfsdev=`.
- memory: `-m <default_memory>M,slots=<memory_slots>,maxmem=<default_maxmemory>M` (qemu_arch_base.go
  memoryTopology): the hot-plug memory region it reserves decides where 64-bit BARs can go.
- firmware: `-bios <firmware>` when set, else QEMU's default (SeaBIOS).
- the guest's kernel command line: Kata's own amd64 parameters, then `kernel_params`.
"""

import argparse
import json
import re
import sys
import tomllib

# Kata's amd64 kernel parameters (qemu_amd64.go kernelParams); pci=lastbus=0 is the one that
# touches PCI.
KATA_AMD64_KERNEL_PARAMS = [
    "tsc=reliable", "no_timer_check", "rcupdate.rcu_expedited=1", "i8042.direct=1",
    "i8042.dumbkbd=1", "i8042.nopnp=1", "i8042.noaux=1", "noreplace-smp", "reboot=k",
    "cryptomgr.notests", "net.ifnames=0", "pci=lastbus=0"
]

# Releases whose root ports carry BAR reservations sized from the host's GPUs.
RESERVE_SIZING = ((3, 2), (3, 27))
DEFAULT_RESERVE = 2 * 1024 * 1024

# The first release that has each attach mode the way our classes use it. hot_plug_vfio and
# cold_plug_vfio with "root-port" came with 3.2; cold plug of the devices kubelet assigned
# (PodResources / CDI) needs 3.24.
MINIMUM = {"hot": (3, 2), "cold": (3, 24)}
MINIMUM_WHY = {
    "hot": "hot plug onto PCIe root ports (hot_plug_vfio = \"root-port\")",
    "cold": "cold plug of the devices kubelet assigned (PodResources, commit 5aa184925a)",
}
# kubelet_root_dir came with 3.28 (commit 0a73638744); before, Kata used /var/lib/kubelet and
# ignored the key, so only another value needs 3.28.
KUBELET_ROOT_DIR = ((3, 28), "/var/lib/kubelet")
# The newest release the VM lab's attach test proves (tests/vm/attach_driver_vm_test.py).
NEWEST_PROVEN = (3, 32)


def required_release(config):
    """[(release, why)] a Kata runtime must be at least to serve this configuration."""
    qemu = config["hypervisor"]["qemu"]
    mode = attach_mode(qemu)
    needs = [(MINIMUM[mode], MINIMUM_WHY[mode])]
    root = config.get("runtime", {}).get("kubelet_root_dir", "")
    if root and root.rstrip("/") != KUBELET_ROOT_DIR[1]:
        needs.append((KUBELET_ROOT_DIR[0], f"kubelet_root_dir = {root!r} (commit 0a73638744)"))
    return needs


def parse_version(text):
    """'3.27.0' or 'v3.27' -> (3, 27)."""
    match = re.search(r"(\d+)\.(\d+)(?:\.\d+)?", text)
    if not match:
        raise ValueError(f"not a Kata version: {text!r}")
    return int(match.group(1)), int(match.group(2))


def version_text(version):
    return f"{version[0]}.{version[1]}"


def sizes_reserved(gpu_bars):
    """Kata 3.2-3.27's (mem-reserve, pref64-reserve) for a host whose largest GPU has these BARs,
    each given as (size in bytes, is_64bit). Kata classifies by address width, not by the
    prefetchable flag, and doubles the 32-bit sum for headroom."""
    sum32 = sum(size for size, is64 in gpu_bars if not is64)
    sum64 = sum(size for size, is64 in gpu_bars if is64)
    return max(DEFAULT_RESERVE, sum32) * 2, max(DEFAULT_RESERVE, sum64)


def memory_option(qemu):
    """Kata's -m value. default_maxmemory 0 means the host's memory, which Kata also uses to cap
    a larger setting; the configured value stands for a host at least that large."""
    size = int(qemu.get("default_memory", 2048))
    option = f"{size}M"
    slots = int(qemu.get("memory_slots", 10))
    if slots > 0:
        option += f",slots={slots}"
    maxmem = int(qemu.get("default_maxmemory", 0))
    return option + f",maxmem={maxmem if maxmem > 0 else size}M"


def attach_mode(qemu):
    """'hot' or 'cold': how the class hands a VFIO device to the VM, from its configuration."""
    hot = qemu.get("hot_plug_vfio", "no-port")
    cold = qemu.get("cold_plug_vfio", "no-port")
    if hot == "root-port" and cold == "no-port":
        return "hot"
    if cold == "root-port" and hot == "no-port":
        return "cold"
    raise ValueError(f"unsupported attach: hot_plug_vfio={hot!r} cold_plug_vfio={cold!r}")


def qemu_command(config, version, gpu_bars, cold_devices=(), firmware=None):
    """The QEMU arguments (after the binary) and guest kernel parameters Kata `version` builds for
    this configuration. `cold_devices` are the vfio-pci device options for what Kata cold-plugs
    (their bus is filled in); `firmware` overrides the configured firmware path ('' = SeaBIOS)."""
    qemu = config["hypervisor"]["qemu"]
    mode = attach_mode(qemu)
    if version < MINIMUM[mode]:
        raise ValueError(f"Kata {version_text(version)} cannot {mode}-plug onto root ports; "
                         f"this class needs {version_text(MINIMUM[mode])} or later")
    machine = qemu.get("machine_type", "q35")
    if machine != "q35":
        raise ValueError(f"machine_type {machine!r}: only q35 has PCIe root ports")
    args = ["-machine", machine, "-m", memory_option(qemu)]
    bios = qemu.get("firmware", "") if firmware is None else firmware
    if bios:
        args += ["-bios", bios]
    for i in range(int(qemu.get("default_bridges", 0))):
        args += ["-device", f"pci-bridge,bus=pcie.0,id=pci-bridge-{i},chassis_nr={i + 1},"
                 f"shpc=off,addr={i + 2},io-reserve=4k,mem-reserve=1m,pref64-reserve=1m"]
    ports = max(int(qemu.get("pcie_root_port", 0)), len(cold_devices))
    reserve = ""
    if RESERVE_SIZING[0] <= version <= RESERVE_SIZING[1]:
        mem, pref64 = sizes_reserved(gpu_bars)
        reserve = f",pref64-reserve={pref64}B,mem-reserve={mem}B"
    for i in range(ports):
        args += ["-device", f"pcie-root-port,id=rp{i},bus=pcie.0,chassis=0,slot={i},"
                 f"multifunction=off{reserve}"]
    if mode == "cold":
        for i, device in enumerate(cold_devices):
            args += ["-device", f"{device},bus=rp{i}"]
    params = KATA_AMD64_KERNEL_PARAMS + qemu.get("kernel_params", "").split()
    return {"mode": mode, "args": args, "kernel_params": params, "hotplug_bus": "rp0"}


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", help="a Kata configuration .toml")
    parser.add_argument("--kata-version", required=True, help="e.g. 3.27.0")
    parser.add_argument("--gpu-bar", action="append", default=[], metavar="SIZE:32|64",
                        help="a BAR of the host's largest GPU, for releases that size reserves")
    parser.add_argument("--cold-device", action="append", default=[],
                        help="vfio-pci options of a device Kata cold-plugs")
    parser.add_argument("--firmware", help="instead of the configured firmware ('' = SeaBIOS)")
    args = parser.parse_args(argv)
    with open(args.config, "rb") as f:
        config = tomllib.load(f)
    bars = []
    for bar in args.gpu_bar:
        size, _, width = bar.partition(":")
        bars.append((int(size, 0), width == "64"))
    try:
        result = qemu_command(config, parse_version(args.kata_version), bars, args.cold_device,
                              args.firmware)
    except ValueError as error:
        print(f"kata_qemu: {error}", file=sys.stderr)
        return 1
    json.dump(result, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
