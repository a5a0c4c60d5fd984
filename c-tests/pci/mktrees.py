#!/usr/bin/env python3
"""Write fake sysfs trees modelled on real machines, for PCI discovery tests.

Usage: c-tests/pci/mktrees.py OUTDIR   (one tree per machine: OUTDIR/<name>)

Each tree is laid out as the kernel lays out /sys: functions under
devices/pciDDDD:BB/<port>/<function>, linked from bus/pci/devices/<address>;
`driver` links to bus/pci/drivers/<name>, `iommu_group` to
kernel/iommu_groups/<n>, a VF's `physfn` to its PF and the PF's `virtfnN` to
its VFs. Attribute values are written as the kernel writes them ("0x10de",
"0x030200", "32.0 GT/s PCIe", "16"). IDs are from the PCI ID repository
(pci.ids); addresses, NUMA nodes and links are those of the machines named.
probe/test_pci.sh says what the library and the probe must report on each.
"""
import os
import shutil
import sys

GEN = {1: "2.5 GT/s PCIe", 2: "5.0 GT/s PCIe", 3: "8.0 GT/s PCIe",
       4: "16.0 GT/s PCIe", 5: "32.0 GT/s PCIe"}


class Tree:
    def __init__(self, root):
        self.root = root
        self.iommu = 0
        shutil.rmtree(root, ignore_errors=True)
        os.makedirs(os.path.join(root, "bus/pci/devices"))

    def _link(self, target, name):
        os.symlink(os.path.relpath(target, os.path.dirname(name)), name)

    def fn(self, path, vendor, device, cls, driver=None, numa=-1, link=(0, 0),
           max_link=None, sriov=None, physfn=None):
        """One function. path: "pci0000:00/0000:00:01.0/0000:18:00.0"."""
        d = os.path.join(self.root, "devices", path)
        os.makedirs(d, exist_ok=True)
        gen, width = link
        mgen, mwidth = max_link or link
        attrs = {"vendor": "0x%04x" % vendor, "device": "0x%04x" % device,
                 "class": "0x%06x" % cls, "numa_node": str(numa)}
        if path.count("/") > 1:  # on a root bus: an integrated endpoint, no link
            attrs.update({"current_link_speed": GEN.get(gen, "Unknown"),
                          "current_link_width": str(width),
                          "max_link_speed": GEN.get(mgen, "Unknown"),
                          "max_link_width": str(mwidth)})
        if sriov:
            attrs.update({"sriov_totalvfs": str(sriov[0]), "sriov_numvfs": str(sriov[1])})
        for k, v in attrs.items():
            with open(os.path.join(d, k), "w") as f:
                f.write(v + "\n")
        if driver:
            drv = os.path.join(self.root, "bus/pci/drivers", driver)
            os.makedirs(drv, exist_ok=True)
            self._link(drv, os.path.join(d, "driver"))
        self.iommu += 1
        group = os.path.join(self.root, "kernel/iommu_groups", str(self.iommu))
        os.makedirs(group, exist_ok=True)
        self._link(group, os.path.join(d, "iommu_group"))
        if physfn:
            pf = os.path.join(os.path.dirname(d), physfn)
            self._link(pf, os.path.join(d, "physfn"))
            n = len([x for x in os.listdir(pf) if x.startswith("virtfn")])
            self._link(d, os.path.join(pf, "virtfn%d" % n))
        self._link(d, os.path.join(self.root, "bus/pci/devices", os.path.basename(path)))
        return path

    def bridge(self, path, vendor=0x1000, device=0xc030, numa=-1):
        """A PCIe switch port or root port (class 0x0604, pcieport)."""
        return self.fn(path, vendor, device, 0x060400, "pcieport", numa, (5, 16))


def hgx_h100(t):
    """An 8-GPU HGX H100 node: each GPU and a ConnectX-7 behind a Broadcom
    PEX switch, four NVSwitches on the bus, an ASPEED BMC's VGA."""
    gpus = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]
    for i, bus in enumerate(gpus):
        numa = 0 if i < 4 else 1
        host = "00" if numa == 0 else "80"
        rp = t.bridge("pci0000:%s/0000:%s:0%d.0" % (host, host, i % 4 + 1), 0x8086, 0x352a, numa)
        up = t.bridge(rp + "/0000:%02x:00.0" % (int(bus, 16) - 2), numa=numa)
        down = t.bridge(up + "/0000:%02x:00.0" % (int(bus, 16) - 1), numa=numa)
        t.fn(down + "/0000:%s:00.0" % bus, 0x10de, 0x2330, 0x030200, "nvidia", numa, (5, 16))
        t.fn(down + "/0000:%02x:00.0" % (int(bus, 16) + 1), 0x15b3, 0x1021, 0x020700,
             "mlx5_core", numa, (5, 16))
    for i, bus in enumerate(["e4", "e5", "e6", "e7"]):
        rp = t.bridge("pci0000:e0/0000:e0:0%d.0" % (i + 1), 0x8086, 0x352a, 1)
        t.fn(rp + "/0000:%s:00.0" % bus, 0x10de, 0x22a3, 0x068000, "nvidia", 1, (4, 2))
    rp = t.bridge("pci0000:00/0000:00:1c.0", 0x8086, 0x7a38, 0)
    bmc = t.fn(rp + "/0000:02:00.0", 0x1a03, 0x1150, 0x060400, None, 0, (2, 1))
    t.fn(bmc + "/0000:03:00.0", 0x1a03, 0x2000, 0x030000, "ast", 0, (2, 1))


def fake_nvidia(t, vfio):
    """GPUs at the bus ids the fake NVML reports (H100 at 0000:18:00.0, A40
    at 0000:3b:00.0, both on nvidia). With vfio: a VM host where the A40 has
    two SR-IOV VFs and two more H100s are bound to vfio-pci."""
    rp = t.bridge("pci0000:00/0000:00:01.0", 0x8086, 0x352a, 0)
    t.fn(rp + "/0000:18:00.0", 0x10de, 0x2330, 0x030200, "nvidia", 0, (5, 16))
    rp = t.bridge("pci0000:00/0000:00:03.0", 0x8086, 0x352a, 0)
    a40 = t.fn(rp + "/0000:3b:00.0", 0x10de, 0x2235, 0x030200, "nvidia", 0, (4, 16),
               sriov=(32, 2) if vfio else None)
    if not vfio:
        return
    for vf in ["0000:3b:00.4", "0000:3b:00.5"]:
        t.fn(rp + "/" + vf, 0x10de, 0x2235, 0x030200, "vfio-pci", 0, (4, 16),
             physfn=os.path.basename(a40))
    for bus in ["86", "af"]:
        rp = t.bridge("pci0000:80/0000:80:0%s.0" % bus[0], 0x8086, 0x352a, 1)
        t.fn(rp + "/0000:%s:00.0" % bus, 0x10de, 0x2330, 0x030200, "vfio-pci", 1, (5, 16))


def two_h100(t, driver):
    """A host with two H100 PCIe GPUs, bound to `driver` (vfio-pci: a VM
    host; None: the NVIDIA driver not loaded yet)."""
    for bus, numa in [("3b", 0), ("86", 1)]:
        host = "00" if numa == 0 else "80"
        rp = t.bridge("pci0000:%s/0000:%s:01.0" % (host, host), 0x8086, 0x352a, numa)
        t.fn(rp + "/0000:%s:00.0" % bus, 0x10de, 0x2331, 0x030200, driver, numa, (5, 16))


def mi300x(t):
    """An 8 x MI300X node (class 0x1200, amdgpu), each OAM behind a switch,
    AMD host bridges (vendor 0x1022: not an accelerator vendor) on the bus."""
    for i, bus in enumerate(["05", "26", "46", "65", "85", "a6", "c6", "e5"]):
        numa = 0 if i < 4 else 1
        host = "pci0000:%02x" % (int(bus, 16) - 5)
        t.fn(host + "/0000:%02x:00.0" % (int(bus, 16) - 5), 0x1022, 0x14a4, 0x060000, None, numa)
        rp = t.bridge(host + "/0000:%02x:01.1" % (int(bus, 16) - 5), 0x1022, 0x14ab, numa)
        up = t.bridge(rp + "/0000:%02x:00.0" % (int(bus, 16) - 2), numa=numa)
        down = t.bridge(up + "/0000:%02x:00.0" % (int(bus, 16) - 1), numa=numa)
        t.fn(down + "/0000:%s:00.0" % bus, 0x1002, 0x74a1, 0x120000, "amdgpu", numa, (5, 16))


def ascend910(t):
    """A Kunpeng host with two Ascend 910 NPUs at the bus ids the fake DCMI
    reports, a Huawei NIC (hinic) and a HiSilicon ZIP engine (class 0x1200,
    on the SoC's own root bus): only the NPUs are accelerators."""
    for bus, numa in [("3b", 0), ("86", 1)]:
        host = "00" if numa == 0 else "80"
        rp = t.bridge("pci0000:%s/0000:%s:00.0" % (host, host), 0x19e5, 0xa120, numa)
        t.fn(rp + "/0000:%s:00.0" % bus, 0x19e5, 0xd801, 0x120000, "devdrv_device_driver", numa,
             (4, 16))
    rp = t.bridge("pci0000:00/0000:00:08.0", 0x19e5, 0xa120, 0)
    t.fn(rp + "/0000:05:00.0", 0x19e5, 0x1822, 0x020000, "hinic", 0, (3, 16))
    t.fn("pci0000:74/0000:75:00.0", 0x19e5, 0xa250, 0x120000, "hisi_zip", 0)


def gaudi2(t):
    """An 8 x Gaudi 2 node (HL-225, class 0x1200, habanalabs) at the buses
    the fake HLML reports, each OAM behind an Intel root port; HLML's index
    order is not this bus order."""
    for i, bus in enumerate(["19", "1a", "33", "34", "4d", "9a", "b3", "b4"]):
        numa = 0 if i < 4 else 1
        host = "pci0000:%02x" % (int(bus, 16) - 1)
        rp = t.bridge(host + "/0000:%02x:01.0" % (int(bus, 16) - 1), 0x8086, 0x352a, numa)
        t.fn(rp + "/0000:%s:00.0" % bus, 0x1da3, 0x1020, 0x120000, "habanalabs", numa, (4, 16))


def laptop(t):
    """A laptop: Raptor Lake-P integrated graphics on the root bus (i915),
    its audio, an NVMe drive. No accelerator."""
    t.fn("pci0000:00/0000:00:02.0", 0x8086, 0xa7a0, 0x030000, "i915")
    t.fn("pci0000:00/0000:00:1f.3", 0x8086, 0x51ca, 0x040100, "snd_hda_intel")
    rp = t.bridge("pci0000:00/0000:00:06.0", 0x8086, 0xa74d)
    t.fn(rp + "/0000:01:00.0", 0x144d, 0xa80a, 0x010802, "nvme", -1, (4, 4))


MACHINES = {
    "hgx-h100": hgx_h100,
    "nvidia-fake": lambda t: fake_nvidia(t, False),
    "vfio": lambda t: fake_nvidia(t, True),
    "vm-host": lambda t: two_h100(t, "vfio-pci"),
    "no-driver": lambda t: two_h100(t, None),
    "mi300x": mi300x,
    "ascend910": ascend910,
    "gaudi2": gaudi2,
    "laptop": laptop,
}

if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    for name, build in MACHINES.items():
        build(Tree(os.path.join(sys.argv[1], name)))
