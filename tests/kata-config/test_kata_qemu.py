"""kata_qemu.py (the QEMU arguments a Kata release builds from our configurations) and the
qemu-vgpu.sh wrapper (root-port reserves sized from the host's GPUs).

The VM lab's attach test boots nested guests with these arguments; these tests pin the facts
taken from Kata's source so that a change to them is a visible decision, not drift."""

import os
import pathlib
import subprocess
import sys
import tempfile
import tomllib
import unittest

HERE = pathlib.Path(__file__).resolve().parent
KATA_CONFIG = HERE.parents[1] / "kata-config"
sys.path.insert(0, str(KATA_CONFIG))
import kata_qemu  # noqa: E402

MiB = 1024 * 1024
GiB = 1024 * MiB
KiB = 1024


def load(name):
    with open(KATA_CONFIG / name, "rb") as f:
        return tomllib.load(f)


def devices(args, driver):
    return [args[i + 1] for i, a in enumerate(args) if a == "-device"
            and args[i + 1].startswith(driver + ",")]


def fits(window_start, window_size, bars):
    """Whether naturally aligned BARs, placed largest first, fit in the window."""
    at = window_start
    for size in sorted(bars, reverse=True):
        at = (at + size - 1) // size * size
        at += size
    return at <= window_start + window_size


class KataCommandLine(unittest.TestCase):

    def test_hot_plug_class_on_3_27_reserves_windows_sized_from_the_hosts_gpu(self):
        # Kata 3.2-3.27 getBARsMaxAddressableMemory: 32-bit sum doubled, 64-bit sum, >= 2 MiB.
        bars = [(16 * MiB, False), (64 * GiB, True), (32 * MiB, True)]
        command = kata_qemu.qemu_command(load("configuration-kata-vgpu.toml"), (3, 27), bars)
        ports = devices(command["args"], "pcie-root-port")
        self.assertEqual(len(ports), 4)
        for port in ports:
            self.assertIn(f"pref64-reserve={64 * GiB + 32 * MiB}B", port)
            self.assertIn(f"mem-reserve={32 * MiB}B", port)
        self.assertEqual(command["mode"], "hot")

    def test_small_or_no_gpu_bars_still_reserve_the_2_mib_minimum(self):
        command = kata_qemu.qemu_command(load("configuration-kata-vgpu.toml"), (3, 2), [])
        port = devices(command["args"], "pcie-root-port")[0]
        self.assertIn(f"pref64-reserve={2 * MiB}B", port)
        self.assertIn(f"mem-reserve={4 * MiB}B", port)

    def test_releases_from_3_28_reserve_nothing_on_root_ports(self):
        command = kata_qemu.qemu_command(load("configuration-kata-vgpu.toml"), (3, 28),
                                         [(64 * GiB, True)])
        for port in devices(command["args"], "pcie-root-port"):
            self.assertNotIn("reserve", port)
            self.assertRegex(port, r"^pcie-root-port,id=rp\d,bus=pcie.0,chassis=0,slot=\d,"
                             r"multifunction=off$")

    def test_cold_plug_class_puts_each_device_on_its_own_root_port(self):
        command = kata_qemu.qemu_command(load("configuration-kata-vgpu-vf.toml"), (3, 32), [],
                                         ["vfio-pci,host=0000:3b:00.4", "vfio-pci,host=0000:3b:00.5"])
        self.assertEqual(command["mode"], "cold")
        self.assertEqual(devices(command["args"], "vfio-pci"),
                         ["vfio-pci,host=0000:3b:00.4,bus=rp0", "vfio-pci,host=0000:3b:00.5,bus=rp1"])

    def test_a_release_below_the_minimum_is_refused_naming_the_release_needed(self):
        with self.assertRaisesRegex(ValueError, r"needs 3\.24 or later"):
            kata_qemu.qemu_command(load("configuration-kata-vgpu-vf.toml"), (3, 23), [])
        with self.assertRaisesRegex(ValueError, r"needs 3\.2 or later"):
            kata_qemu.qemu_command(load("configuration-kata-vgpu.toml"), (3, 1), [])

    def test_memory_firmware_and_kernel_parameters_come_from_the_configuration(self):
        config = load("configuration-kata-vgpu.toml")
        qemu = config["hypervisor"]["qemu"]
        command = kata_qemu.qemu_command(config, (3, 32), [], firmware="/x/OVMF.fd")
        args = command["args"]
        self.assertEqual(args[args.index("-m") + 1],
                         f"{qemu['default_memory']}M,slots={qemu['memory_slots']},"
                         f"maxmem={qemu['default_maxmemory']}M")
        self.assertEqual(args[args.index("-bios") + 1], "/x/OVMF.fd")
        self.assertIn("pci=lastbus=0", command["kernel_params"])
        self.assertEqual(command["kernel_params"][-len(qemu["kernel_params"].split()):],
                         qemu["kernel_params"].split())
        self.assertNotIn("-bios", kata_qemu.qemu_command(config, (3, 32), [])["args"])

    def test_hot_and_cold_plug_together_are_refused(self):
        config = load("configuration-kata-vgpu.toml")
        config["hypervisor"]["qemu"]["cold_plug_vfio"] = "root-port"
        with self.assertRaisesRegex(ValueError, "unsupported attach"):
            kata_qemu.qemu_command(config, (3, 32), [])

    def test_version_text_in_the_forms_kata_prints(self):
        self.assertEqual(kata_qemu.parse_version("3.27.0"), (3, 27))
        self.assertEqual(kata_qemu.parse_version("kata-runtime  : 3.2.0-rc0"), (3, 2))
        with self.assertRaises(ValueError):
            kata_qemu.parse_version("unknown")


class WrapperReserves(unittest.TestCase):
    """qemu-vgpu.sh with a stand-in /sys and `echo` as the QEMU it runs."""

    def run_wrapper(self, gpus):
        with tempfile.TemporaryDirectory() as root:
            for bdf, (vendor, klass, bars) in gpus.items():
                dev = pathlib.Path(root, "bus/pci/devices", bdf)
                dev.mkdir(parents=True)
                (dev / "vendor").write_text(vendor + "\n")
                (dev / "class").write_text(klass + "\n")
                lines = [f"0x{0xe0000000:016x} 0x{0xe0000000 + size - 1:016x} 0x{flags:016x}"
                         for size, flags in bars]
                lines += ["0x0000000000000000 0x0000000000000000 0x0000000000000000"] * (
                    13 - len(lines))
                (dev / "resource").write_text("\n".join(lines) + "\n")
            env = dict(os.environ, KVGPU_QEMU="echo", KVGPU_SYSFS_ROOT=root)
            run = subprocess.run([str(KATA_CONFIG / "qemu-vgpu.sh"), "-machine", "q35"],
                                 capture_output=True, text=True, env=env, check=True)
            return run.stdout.split()

    MEM = 0x40200  # IORESOURCE_MEM | IORESOURCE_SIZEALIGN
    PREF64 = 0x14220C  # MEM | PREFETCH | MEM_64 | ...
    PREF32 = 0x42208  # MEM | PREFETCH, 32-bit

    def test_reserves_follow_the_largest_nvidia_gpu_and_keep_the_arguments(self):
        args = self.run_wrapper({
            "0000:3b:00.0": ("0x10de", "0x030200", [(16 * MiB, self.MEM), (64 * GiB, self.PREF64),
                                                    (32 * MiB, self.PREF64)]),
            "0000:af:00.0": ("0x10de", "0x030000", [(16 * MiB, self.MEM), (256 * MiB, self.PREF64)]),
        })
        # 16 MiB + 16 MiB - 1 MiB -> 32 MiB; 64 GiB + 32 MiB + 64 GiB - 1 MiB -> 256 GiB (the
        # other GPU's 256 MiB BAR needs only 512 MiB).
        self.assertEqual(args, ["-global", f"pcie-root-port.mem-reserve={32 * MiB}",
                                "-global", f"pcie-root-port.pref64-reserve={256 * GiB}",
                                "-machine", "q35"])

    def test_a_32_bit_prefetchable_bar_counts_towards_the_32_bit_window(self):
        args = self.run_wrapper({"0000:3b:00.0": ("0x10de", "0x030200", [(64 * MiB, self.PREF32)])})
        self.assertEqual(args, ["-global", f"pcie-root-port.mem-reserve={128 * MiB}",
                                "-machine", "q35"])

    def test_a_window_holds_its_bars_wherever_on_a_1_mib_boundary_it_lands(self):
        # Worst case the window starts 1 MiB past a multiple of the largest BAR: that BAR then
        # starts largest - 1 MiB in, and the rest follow it.
        for bars, want in [([(16 * MiB, self.MEM)], 32 * MiB),
                           ([(64 * MiB, self.PREF32), (4 * KiB, self.MEM)], 128 * MiB),
                           ([(4 * KiB, self.MEM)], 1 * MiB),
                           ([(1 * MiB, self.MEM), (1 * MiB, self.MEM)], 2 * MiB)]:
            with self.subTest(bars=bars):
                args = self.run_wrapper({"0000:3b:00.0": ("0x10de", "0x030200", bars)})
                self.assertEqual(args[:2], ["-global", f"pcie-root-port.mem-reserve={want}"])
                for start in range(0, 2 * want, MiB):
                    self.assertTrue(fits(start, want, [size for size, _ in bars]), (start, bars))

    def test_the_window_formula_fits_the_stand_ins_as_the_lab_attaches_them(self):
        args = self.run_wrapper({"0000:3b:00.0": ("0x10de", "0x030200", [(256 * MiB, self.PREF64),
                                                                         (16 * MiB, self.MEM)])})
        self.assertEqual(args, ["-global", f"pcie-root-port.mem-reserve={32 * MiB}",
                                "-global", f"pcie-root-port.pref64-reserve={512 * MiB}",
                                "-machine", "q35"])

    def test_no_nvidia_display_function_adds_nothing(self):
        args = self.run_wrapper({
            "0000:00:02.0": ("0x8086", "0x030000", [(256 * MiB, self.PREF64)]),
            "0000:3b:00.1": ("0x10de", "0x040300", [(16 * KiB, self.MEM)]),
        })
        self.assertEqual(args, ["-machine", "q35"])




if __name__ == "__main__":
    unittest.main()
