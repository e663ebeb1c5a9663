#!/usr/bin/env python3
"""`vgpuctl doctor --json` against the real 6.1 kernel in the VM lab: it must report the lab
VM's state as it is (tests/vm/run-in-vm.sh boots it; tests/vm/setup-lab.sh picks its modules):

- QEMU q35 without an IOMMU device: no unit in /sys/class/iommu -> iommu.off, and interrupt
  remapping not judged (an info "skipped" finding, no irq-remap.* finding);
- TCG, no KVM in the lab VM, and vhost_vsock not among setup-lab.sh's GUEST_MODULES: no /dev/kvm
  and no /dev/vhost-vsock -> a kvm.device-missing for each;
- the lab loads vfio, vfio_iommu_type1 and mdev but not vfio_pci -> one vfio.module-missing,
  for vfio_pci alone, and no vfio.mdev-missing;
- the mdev parents are the kernel's samples (mtty, mdpy, mbochs), no NVIDIA driver ->
  nvidia.driver-missing;
- errors -> exit 4 and status "error".
The software checks (Kata, containerd, the QEMU wrapper, the guest bundle, the licence) read the
build machine's / as the guest sees it over 9p; what they find depends on that machine, so they
are not asserted here (tests/mdev covers them on planted trees).

Each expectation is also checked against the kernel itself, so a lab that changes (an IOMMU
added, vfio_pci loaded) fails here with the reason rather than passing on a stale belief.
usage: doctor_vm_test.py VGPUCTL   (through tests/vm/run-in-vm.sh)
"""
import json
import os
import subprocess
import sys


def main():
    vgpuctl = sys.argv[1]
    if not os.path.isdir("/sys/class/mdev_bus/mtty"):
        print("no mtty parent: run me inside the VM lab (tests/vm/run-in-vm.sh)")
        return 1
    run = subprocess.run([vgpuctl, "doctor", "--json"], capture_output=True, text=True)
    report = json.loads(run.stdout)
    ids = {}
    for check in report["checks"]:
        for finding in check["findings"]:
            ids.setdefault(finding["id"], []).append(finding)
    failures = []

    def expect(ok, what):
        print(("ok:   " if ok else "FAIL: ") + what)
        if not ok:
            failures.append(what)

    # The lab as booted, and the kernel agreeing with it.
    expect(not os.path.isdir("/sys/class/iommu") or not os.listdir("/sys/class/iommu"),
           "the lab VM has no IOMMU unit (q35, no -device intel-iommu)")
    expect("iommu.off" in ids, "the doctor reports iommu.off")
    expect(not os.path.exists("/dev/kvm"), "the lab VM has no /dev/kvm (TCG)")
    expect(any("/dev/kvm" in f["seen"] for f in ids.get("kvm.device-missing", [])),
           "the doctor reports kvm.device-missing for /dev/kvm")
    expect(not os.path.exists("/dev/vhost-vsock"), "the lab VM has no /dev/vhost-vsock (vhost_vsock not loaded)")
    expect(any("/dev/vhost-vsock" in f["seen"] for f in ids.get("kvm.device-missing", [])),
           "the doctor reports kvm.device-missing for /dev/vhost-vsock")
    remap = [f for c in report["checks"] if c["check"] == "interrupt-remapping" for f in c["findings"]]
    expect([f["id"] for f in remap] == ["skipped"] and remap[0]["severity"] == "info",
           "interrupt remapping is not judged without an IOMMU: %s" % [f["id"] for f in remap])
    loaded = {m for m in ("vfio", "vfio_pci", "vfio_iommu_type1", "mdev") if os.path.isdir("/sys/module/" + m)}
    expect(loaded == {"vfio", "vfio_iommu_type1", "mdev"}, "the lab loads vfio, vfio_iommu_type1, mdev, not vfio_pci")
    missing = ids.get("vfio.module-missing", [])
    expect(len(missing) == 1 and missing[0]["seen"].startswith("vfio_pci "),
           "exactly one vfio.module-missing, for vfio_pci: %s" % [f["seen"] for f in missing])
    expect("vfio.mdev-missing" not in ids, "no vfio.mdev-missing: the mdev core is loaded")
    expect(not os.path.exists("/sys/module/nvidia"), "no NVIDIA driver in the lab")
    expect("nvidia.driver-missing" in ids, "the doctor reports nvidia.driver-missing")
    # Info findings ("skipped": a check that depends on one that failed) carry neither.
    expect(all(f["fix"] and f["why"] for fs in ids.values() for f in fs if f["severity"] != "info"),
           "every warning and error says why and the fix")
    expect(run.returncode == 4 and report["status"] == "error",
           "exit 4 and status error (got %d, %s)" % (run.returncode, report["status"]))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
